"""The `rmqdelay` command: one sub-app per command group."""

from __future__ import annotations

import sys

import typer

from rmqdelay.errors import RmqDelayError

from .common import err_console

app = typer.Typer(
    name="rmqdelay",
    help="Inspect and operate the delay machinery of a RocketMQ broker store, offline.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


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


def main() -> None:
    _register()
    try:
        app()
    except RmqDelayError as exc:
        err_console.print(f"rmqdelay: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.stderr.close()  # a pipe reader went away (| head): not an error
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
