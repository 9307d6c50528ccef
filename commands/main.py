"""The `rmqdelay` command: one sub-app per command group, on Typer's public API only.

The root knows each command's name and the line its --help lists; a command's module is
imported when the command is asked for (group.py's LazyGroup), and no command module loads
the core at its top (tests/test_startup.py). `rmqdelay --version` is answered in entry.py,
before any of this is imported. The help pages are Typer's own (its plain page: no Markdown,
no boxes; the option text flows at the terminal's width).
"""

from __future__ import annotations

import re
import sys
import warnings

import typer

from rmqdelay.errors import EXIT_BAD_INPUT, ConfigFallbackWarning, RmqDelayError, UsageError

from .entry import print_version
from .group import Invocation, LazyCommand, LazyGroup
from .streams import configure_streams

# In the order the root's --help lists them: the commands, then the command groups.
COMMANDS = {
    "run": LazyCommand("run", "run",
                       "Deliver due delay messages of SCHEDULE_TOPIC_XXXX to their real topics, as the broker's "
                       "ScheduleMessageService does, and on a 5.x store the timer wheel as its TimerMessageStore "
                       "does (cancellations honoured, rolls re-put) - exactly once, even after kill -9."),
    "trace": LazyCommand("trace", "trace",
                         "Follow one message through its whole life: sent, parked (delay level or timer), rolled, "
                         "cancelled, delivered, consumed or not, each send-back and redelivery, the DLQ."),
    "analyze": LazyCommand("analyze", "app",
                           "Backlog (what waits, when it falls due), lateness (delivered vs due) and retries (the "
                           "16-retry path into the DLQ) over one store or many."),
    "send": LazyCommand("send", "send",
                        "Put messages into STORE as a producer and the broker would (UNIQ_KEY, CLUSTER, the delay "
                        "rewrite into SCHEDULE_TOPIC_XXXX, on a 5.x store the timer rewrite into "
                        "rmq_sys_wheel_timer); adds the topic to config/topics.json; a new store only with "
                        "--create. Refused while a broker holds STORE/lock."),
    "serve": LazyCommand("serve", "serve",
                         "Serve the metrics of `--format prometheus` for each STORE over HTTP at /metrics, for "
                         "Prometheus to scrape: read-only and without the lock (safe beside the running broker), "
                         "each scrape bounded by --scrape-timeout, a reading reused for --cache. Runs until SIGTERM "
                         "or Ctrl-C, then exits 0."),
    "inspect": LazyCommand("inspect", "app", "Read-only views of a broker store."),
    "offsets": LazyCommand("offsets", "app", "Read and move the delay offsets (config/delayOffset.json)."),
    "consumers": LazyCommand("consumers", "app",
                             "Read and move a consumer group's offsets (config/consumerOffset.json)."),
    "dlq": LazyCommand("dlq", "app", "A consumer group's dead letters (%DLQ%GROUP): export them, put them back."),
    "samples": LazyCommand("samples", "app", "Sample stores."),
    "timer": LazyCommand("timer", "app", "The 5.x timer store: repair it offline."),
}



LazyGroup.commands_table = COMMANDS

app = typer.Typer(
    name="rmqdelay",
    cls=LazyGroup,
    help="Inspect and operate the delay machinery of a RocketMQ broker store, offline.\n\n"
         "Example: rmqdelay inspect delay /data/broker-a/store; every command has an example in its -h, and "
         "docs/cli.md is the contract they all follow.",
    no_args_is_help=True,
    # -h as --help, in every command (a context inherits its parent's help option names); the
    # help text as wide as the terminal (click's formatter stops at 80 otherwise).
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 200},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _show_version(value: bool) -> None:
    if value:
        print_version()
        raise typer.Exit(0)


@app.callback()
def _root(version_flag: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_show_version)) -> None:
    """Inspect and operate the delay machinery of a RocketMQ broker store, offline."""


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _typed(name: str) -> str:
    """An option's name as the user typed it (an old spelling when one was used)."""
    return Invocation.renamed.get(name, name)


def _usage_message(exc: Exception) -> str:
    """A usage error as rmqdelay says every one: ``OPTION: what it takes, found what was
    given``, naming the option as typed; never a library's wording. The kinds of error are
    told by what they carry (Typer's exceptions are its click's)."""
    kind = type(exc).__name__
    ctx = getattr(exc, "ctx", None)
    unknown = re.fullmatch(r"No such command '(.*)'\.", getattr(exc, "message", "") or "")
    if unknown and ctx is not None and hasattr(ctx.command, "list_commands"):
        return f"COMMAND: one of {'|'.join(ctx.command.list_commands(ctx))}, found {unknown.group(1)!r}"
    if kind == "NoSuchOption":
        maybe = sorted(getattr(exc, "possibilities", None) or ())
        return f"{exc.option_name}: no such option" + (f"; did you mean {' or '.join(maybe)}?" if maybe else "")
    param = getattr(exc, "param", None)
    if param is not None:
        is_option = getattr(param, "param_type_name", "") == "option"
        name = _typed(param.opts[0]) if is_option else (param.metavar or param.name.upper())
        if kind == "MissingParameter":
            return f"{name}: required"
        if isinstance(exc, typer.BadParameter):
            cause = exc.__cause__
            errors = cause.errors() if hasattr(cause, "errors") else []
            if errors:
                return f"{name}: {_expected(errors[0], param)}, found {errors[0].get('input')!r}"
            return f"{name}: {_one_line(exc.message)}"
    return _one_line(exc.format_message())


def _expected(error: dict, param) -> str:
    """What a value had to be, from the parameter and the validation error Typer's coercion raised."""
    desc = getattr(param, "type_descriptor", None)
    if desc is not None and desc.is_choice and desc.choices:
        return "one of " + "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    kind = error.get("type", "")
    if kind.startswith("int_") or kind == "int_type":
        return "an integer"
    if kind.startswith("float_"):
        return "a number"
    if kind.startswith("bool_"):
        return "true or false"
    return "a valid value"


def _say(line: str) -> None:
    """One line on stderr, through the console the commands write theirs with."""
    from .common import err_console

    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, ConfigFallbackWarning):
        _say(f"rmqdelay: warning: {message}")
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


_default_show_warning = warnings.showwarning


def _in_command(message: str, hint: bool = True) -> str:
    """An error of the command given: its path first, and (a usage error) where to read its help."""
    command = Invocation.command
    for new, old in Invocation.renamed.items():
        message = message.replace(f"{new}:", f"{old}:").replace(f"{new} ", f"{old} ")
    if not command:
        return f"rmqdelay: {message}"
    return f"rmqdelay: {command}: {message}" + (f" (see 'rmqdelay {command} --help')" if hint else "")


def main() -> None:
    configure_streams()
    warnings.showwarning = _show_warning
    Invocation.reset()
    try:
        code = app(prog_name="rmqdelay", standalone_mode=False)
    except typer.TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help was shown; no command was given
            sys.exit(EXIT_BAD_INPUT)  # a usage error: one line, and where to look
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path.partition(" ")[2] if ctx is not None else Invocation.command
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _say(f"rmqdelay: {command + ': ' if command else ''}{_usage_message(exc)}{hint}")
        code = exc.exit_code
    except typer.Abort:
        code = 1
    except UsageError as exc:
        _say(_in_command(str(exc)))
        code = exc.exit_code
    except RmqDelayError as exc:
        # A store's error names its file; one of the command's own setting (Spark's) the command.
        from .repairs import repair_hint

        _say(_in_command(str(exc), hint=False) if getattr(exc, "in_command", False)
             else f"rmqdelay: {exc}{repair_hint(exc)}")
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
