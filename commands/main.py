"""The `rmqdelay` command: one sub-app per command group."""

from __future__ import annotations

import sys
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Optional

import typer
from typer._click.exceptions import NoArgsIsHelpError
from typer.core import TyperOption

from rmqdelay.errors import EXIT_BAD_INPUT, RmqDelayError
from rmqdelay.store.directory import ConfigFallbackWarning

from .common import configure_streams, err_console

app = typer.Typer(
    name="rmqdelay",
    help="Inspect and operate the delay machinery of a RocketMQ broker store, offline.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Markdown: a docstring's single line breaks join into one paragraph, so help text flows
    # to the terminal's width instead of keeping the source's wrapping.
    rich_markup_mode="markdown",
)


def _version() -> str:
    try:
        return version("rmqdelay")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"rmqdelay {_version()}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version_flag: Optional[bool] = typer.Option(
        None, "--version", help="Print the version and exit.", is_eager=True, callback=_show_version)) -> None:
    """Inspect and operate the delay machinery of a RocketMQ broker store, offline."""


def _register() -> None:
    from . import inspect

    app.add_typer(inspect.app, name="inspect")

    from . import offsets, run

    app.command("run")(run.run)
    app.add_typer(offsets.app, name="offsets")

    from . import analyze

    app.command("analyze")(analyze.analyze)

    from . import samples, send

    app.command("send")(send.send)
    app.add_typer(samples.app, name="samples")

    from . import timer

    app.add_typer(timer.app, name="timer")


_flag_type = TyperOption.display_type_rich


def _flag_type_hidden(self: TyperOption, ctx) -> str | None:
    # Typer shows a flag's type as "<bool>"; a flag takes no value, so it shows none.
    return None if self.is_flag else _flag_type(self, ctx)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, ConfigFallbackWarning):
        err_console.print(f"rmqdelay: warning: {message}", markup=False, highlight=False, soft_wrap=True)
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


_default_show_warning = warnings.showwarning


def main() -> None:
    configure_streams()
    TyperOption.display_type_rich = _flag_type_hidden
    _register()
    warnings.showwarning = _show_warning
    try:
        code = app(prog_name="rmqdelay", standalone_mode=False)
    except NoArgsIsHelpError:
        code = EXIT_BAD_INPUT  # the help was shown; no command was given
    except typer.TyperException as exc:  # a usage error: one line, and where to look
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path.partition(" ")[2] if ctx is not None else ""
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        err_console.print(f"rmqdelay: {command + ': ' if command else ''}{_one_line(exc.format_message())}{hint}",
                          markup=False, highlight=False, soft_wrap=True)
        code = exc.exit_code
    except typer.Abort:
        code = 1
    except RmqDelayError as exc:
        err_console.print(f"rmqdelay: {exc}", markup=False, highlight=False, soft_wrap=True)
        code = exc.exit_code
    except BrokenPipeError:
        sys.stderr.close()  # a pipe reader went away (| head): not an error
        code = 0
    except KeyboardInterrupt:
        code = 130
    except OSError as exc:
        # What the commands did not foresee about files: still one line, naming the file.
        where = f"{exc.filename}: " if exc.filename else ""
        err_console.print(f"rmqdelay: {where}{exc.strerror or exc}", markup=False, highlight=False, soft_wrap=True)
        code = EXIT_BAD_INPUT
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
