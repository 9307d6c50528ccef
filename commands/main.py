"""The `rmqdelay` command: one sub-app per command group.

The root answers at once: it knows each command's name and the line its --help lists
without importing the command, and imports a command's module only when that command is
given (to run it or show its own help). So `rmqdelay --version` and `rmqdelay --help` load
no command module, and no command module loads the core at its top (tests/test_startup.py).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import dataclass

import typer
from typer import _click
from typer._click.exceptions import NoArgsIsHelpError
from typer.core import TyperCommand, TyperGroup, TyperOption

import rmqdelay
from rmqdelay.errors import EXIT_BAD_INPUT, ConfigFallbackWarning, RmqDelayError

from .streams import configure_streams


@dataclass(frozen=True, slots=True)
class LazyCommand:
    module: str  # in rmqdelay.commands
    attr: str  # a command function, or the Typer app of a command group
    help: str  # what the root's --help lists: the command's first paragraph (a test holds them equal)


# In the order the root's --help lists them: the commands, then the command groups.
COMMANDS = {
    "run": LazyCommand("run", "run",
                       "Deliver due delay messages of SCHEDULE_TOPIC_XXXX to their real topics, as the broker's "
                       "ScheduleMessageService does, and on a 5.x store the timer wheel as its TimerMessageStore "
                       "does (cancellations honoured, rolls re-put) - exactly once, even after kill -9."),
    "analyze": LazyCommand("analyze", "analyze",
                           "Backlog (what waits, when it falls due), lateness (delivered vs due) and retries (the "
                           "16-retry path into the DLQ) over one store or many."),
    "send": LazyCommand("send", "send",
                        "Put messages into STORE as a producer and the broker would (UNIQ_KEY, CLUSTER, the delay "
                        "rewrite into SCHEDULE_TOPIC_XXXX, on a 5.x store the timer rewrite into "
                        "rmq_sys_wheel_timer); creates the store if missing; adds the topic to config/topics.json. "
                        "Refused while a broker holds STORE/lock."),
    "inspect": LazyCommand("inspect", "app", "Read-only views of a broker store."),
    "offsets": LazyCommand("offsets", "app", "Read and move the delay offsets (config/delayOffset.json)."),
    "samples": LazyCommand("samples", "app", "Sample stores."),
    "timer": LazyCommand("timer", "app", "The 5.x timer store: repair it offline."),
}


class _Unloaded(TyperCommand):
    """A command not imported yet: its name and help line, all that the root's --help and
    the shell completion of command names read."""


class Group(TyperGroup):
    """A command group whose flags left unset are False, as a flag means. Typer (0.29) leaves
    them None, and turns None into None only after building the flag's pydantic adapter:
    importing pydantic for the --help and completion flags of the groups a command passes
    through would be the slowest part of `rmqdelay inspect delay --help`."""

    def get_params(self, ctx: _click.Context) -> list[_click.Parameter]:
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.default is None:
                param.default = False
        return params


class LazyGroup(Group):
    """The root group: every command of ``COMMANDS`` stands unloaded until it is resolved
    (given on the command line, or completed past), then is imported and built exactly as
    ``app.command`` / ``app.add_typer`` would have built it (a command group as a ``Group``)."""

    def __init__(self, **attrs) -> None:
        super().__init__(**attrs)
        for name, lazy in COMMANDS.items():
            self.commands[name] = _Unloaded(name, help=lazy.help)

    def resolve_command(self, ctx: _click.Context,
                        args: list[str]) -> tuple[str | None, _click.Command | None, list[str]]:
        if args and isinstance(self.commands.get(args[0]), _Unloaded):
            self.commands[args[0]] = self._load(args[0])
        return super().resolve_command(ctx, args)

    def _load(self, name: str) -> _click.Command:
        lazy = COMMANDS[name]
        target = getattr(importlib.import_module(f"{__package__}.{lazy.module}"), lazy.attr)
        # A root of the same settings holding only this command: what typer builds under it
        # is what it would have built under the real root.
        holder = typer.Typer(rich_markup_mode=self.rich_markup_mode, pretty_exceptions_enable=False,
                             add_completion=False)
        holder.callback()(_no_options)  # a callback makes it a group, as the root is
        if isinstance(target, typer.Typer):
            holder.add_typer(target, name=name, cls=Group)
        else:
            holder.command(name)(target)
        return typer.main.get_command(holder).commands[name]


def _no_options() -> None:
    pass


app = typer.Typer(
    name="rmqdelay",
    cls=LazyGroup,
    help="Inspect and operate the delay machinery of a RocketMQ broker store, offline.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Markdown: a docstring's single line breaks join into one paragraph, so help text flows
    # to the terminal's width instead of keeping the source's wrapping.
    rich_markup_mode="markdown",
)


def _show_version(value: bool) -> None:
    if value:
        # rmqdelay.__version__, not importlib.metadata, whose import alone would slow --version
        # down by a good part: tests/test_cli_usage.py holds the two to pyproject.toml's.
        sys.stdout.write(f"rmqdelay {rmqdelay.__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version_flag: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_show_version)) -> None:
    """Inspect and operate the delay machinery of a RocketMQ broker store, offline."""


_flag_type = TyperOption.display_type_rich


def _flag_type_hidden(self: TyperOption, ctx) -> str | None:
    # Typer shows a flag's type as "<bool>"; a flag takes no value, so it shows none.
    return None if self.is_flag else _flag_type(self, ctx)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _say(line: str) -> None:
    """One line on stderr, through the console the commands write theirs with (rich: imported
    here, when there is something to say, so that --version does without it)."""
    from .common import err_console

    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, ConfigFallbackWarning):
        _say(f"rmqdelay: warning: {message}")
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


_default_show_warning = warnings.showwarning


def main() -> None:
    configure_streams()
    TyperOption.display_type_rich = _flag_type_hidden
    warnings.showwarning = _show_warning
    try:
        code = app(prog_name="rmqdelay", standalone_mode=False)
    except NoArgsIsHelpError:
        code = EXIT_BAD_INPUT  # the help was shown; no command was given
    except typer.TyperException as exc:  # a usage error: one line, and where to look
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path.partition(" ")[2] if ctx is not None else ""
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _say(f"rmqdelay: {command + ': ' if command else ''}{_one_line(exc.format_message())}{hint}")
        code = exc.exit_code
    except typer.Abort:
        code = 1
    except RmqDelayError as exc:
        _say(f"rmqdelay: {exc}")
        code = exc.exit_code
    except BrokenPipeError:
        sys.stderr.close()  # a pipe reader went away (| head): not an error
        code = 0
    except KeyboardInterrupt:
        code = 130
    except OSError as exc:
        # What the commands did not foresee about files: still one line, naming the file.
        where = f"{exc.filename}: " if exc.filename else ""
        _say(f"rmqdelay: {where}{exc.strerror or exc}")
        code = EXIT_BAD_INPUT
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
