"""The `rmqdelay` command: one sub-app per command group.

The root answers at once: it knows each command's name and the line its --help lists
without importing the command, and imports a command's module only when that command is
given (to run it or show its own help). So `rmqdelay --version` and `rmqdelay --help` load
no command module, and no command module loads the core at its top (tests/test_startup.py).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import sys
import warnings
from dataclasses import dataclass

import typer
from typer import _click
from typer._click.exceptions import BadParameter, MissingParameter, NoArgsIsHelpError, NoSuchOption
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption, _TyperParameter
from typer.models import CommandInfo

from rmqdelay.errors import EXIT_BAD_INPUT, ConfigFallbackWarning, RmqDelayError, UsageError

from .entry import print_version
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
    "trace": LazyCommand("trace", "trace",
                         "Follow one message through its whole life: sent, parked (delay level or timer), rolled, "
                         "cancelled, delivered, consumed or not, each send-back and redelivery, the DLQ."),
    "analyze": LazyCommand("analyze", "analyze",
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


class _Unloaded(TyperCommand):
    """A command not imported yet: its name and help line, all that the root's --help and
    the shell completion of command names read."""


class _Unbuilt(TyperCommand):
    """A command of a command group, imported but not built yet: its name, help and panel,
    all that the group's --help and the completion of command names read. Building a
    command (its parameters, from the function's signature) is most of a --help's own work:
    only the one given is built."""

    def __init__(self, info: CommandInfo, rich_markup_mode: str, pretty_exceptions_short: bool) -> None:
        self.info = info
        self.pretty_exceptions_short = pretty_exceptions_short
        # What typer.main.get_command_from_info gives the built command.
        given = info.help
        super().__init__(info.name or typer.main.get_command_name(info.callback.__name__),
                         help=inspect.getdoc(info.callback) if given is None else inspect.cleandoc(given),
                         short_help=info.short_help, hidden=info.hidden, deprecated=info.deprecated,
                         rich_markup_mode=rich_markup_mode, rich_help_panel=info.rich_help_panel)

    def build(self) -> _click.Command:
        return typer.main.get_command_from_info(self.info, pretty_exceptions_short=self.pretty_exceptions_short,
                                                rich_markup_mode=self.rich_markup_mode)


class _Invocation:
    """What this run of the CLI was asked: the command's path (``inspect cq``) once resolved,
    and the old option spellings it used ({new: old}), for the one-line messages of main()."""

    command = ""
    renamed: dict[str, str] = {}


class Group(TyperGroup):
    """A command group whose flags left unset are False, as a flag means. Typer (0.29) leaves
    them None, and turns None into None only after building the flag's pydantic adapter:
    importing pydantic for the --help and completion flags of the groups a command passes
    through would be the slowest part of `rmqdelay inspect delay --help`.

    It also resolves the command given: records its path, and rewrites the old spellings of
    its options (aliases.py) with a note on stderr, before the command parses them."""

    def get_params(self, ctx: _click.Context) -> list[_click.Parameter]:
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.default is None:
                param.default = False
        return params

    def resolve_command(self, ctx: _click.Context,
                        args: list[str]) -> tuple[str | None, _click.Command | None, list[str]]:
        unbuilt = self.commands.get(args[0]) if args else None
        if isinstance(unbuilt, _Unbuilt):
            self.commands[args[0]] = unbuilt.build()
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not isinstance(command, TyperGroup) and not ctx.resilient_parsing:
            from . import aliases

            path = f"{ctx.command_path} {name}".partition(" ")[2]
            _Invocation.command = path
            rest, used = aliases.rewrite(path, rest)
            for new, old in used.items():
                if new not in _Invocation.renamed:
                    _say(aliases.note(old, new))
            _Invocation.renamed.update(used)
        elif command is not None:
            _Invocation.command = f"{ctx.command_path} {name}".partition(" ")[2]
        return name, command, rest


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
        if not isinstance(target, typer.Typer):
            holder.command(name)(target)
            return typer.main.get_command(holder).commands[name]
        # The group without its commands, then each command unbuilt (built when given).
        shell = copy.copy(target)
        shell.registered_commands = []
        holder.add_typer(shell, name=name, cls=Group)
        group = typer.main.get_command(holder).commands[name]
        for info in target.registered_commands:
            unbuilt = _Unbuilt(info, self.rich_markup_mode, holder.pretty_exceptions_short)
            group.commands[unbuilt.name] = unbuilt
        return group


def _no_options() -> None:
    pass


app = typer.Typer(
    name="rmqdelay",
    cls=LazyGroup,
    help="Inspect and operate the delay machinery of a RocketMQ broker store, offline.\n\n"
         "Example: `rmqdelay inspect delay /data/broker-a/store`; every command has an example in its -h, and "
         "docs/cli.md is the contract they all follow.",
    no_args_is_help=True,
    # -h as --help, in every command (a context inherits its parent's help option names).
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    # Markdown: a docstring's single line breaks join into one paragraph, so help text flows
    # to the terminal's width instead of keeping the source's wrapping.
    rich_markup_mode="markdown",
)


def _show_version(value: bool) -> None:
    if value:
        print_version()
        raise typer.Exit(0)


@app.callback()
def _root(version_flag: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_show_version)) -> None:
    """Inspect and operate the delay machinery of a RocketMQ broker store, offline."""


_flag_type = TyperOption.display_type_rich

# What an option's value is, in the help, when the option names no metavar of its own: words
# an operator reads, never Python's type names.
_VALUE_WORDS = {"<str>": "TEXT", "<int>": "N", "<integer>": "N", "<float>": "NUMBER", "<path>": "PATH",
                "<bool>": None}


def _option_value_hint(self: TyperOption, ctx) -> str | None:
    # Typer shows a flag's type as "<bool>"; a flag takes no value, so it shows none.
    if self.is_flag:
        return None
    if self.metavar is not None:
        return self.metavar
    shown = _flag_type(self, ctx)
    if shown is None:
        return None
    repeat = shown.endswith("...")
    shown = shown.removesuffix("...")
    if shown.startswith("<list[") and shown.endswith("]>"):
        shown, repeat = "<" + shown[6:-2] + ">", True
    word = _VALUE_WORDS.get(shown, shown.strip("<>").upper().replace("|", "|"))
    return None if word is None else word + ("..." if repeat else "")


def _argument_usage(self: TyperArgument) -> str:
    # Typer 0.29 writes a required argument as {STORE} in the usage line; the convention every
    # other tool follows is STORE, and [STORE] when it may be left out.
    name = self.metavar or self.name.upper()
    name = name if self.required else f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


def _argument_type(self: TyperArgument, ctx) -> str | None:
    return None  # an argument's metavar says what it is; its help says the rest


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _typed(name: str) -> str:
    """An option's name as the user typed it (an old spelling when one was used)."""
    return _Invocation.renamed.get(name, name)


def _usage_message(exc: Exception) -> str:
    """A usage error as rmqdelay says every one: ``OPTION: what it takes, found what was
    given``, naming the option as typed; never a library's wording."""
    if isinstance(exc, NoSuchOption):
        maybe = sorted(exc.possibilities or ())
        return f"{exc.option_name}: no such option" + (f"; did you mean {' or '.join(maybe)}?" if maybe else "")
    param = getattr(exc, "param", None)
    if param is not None:
        name = _typed(param.opts[0]) if isinstance(param, TyperOption) else (param.metavar or param.name.upper())
        if isinstance(exc, MissingParameter):
            return f"{name}: required"
        if isinstance(exc, BadParameter):
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


def _in_command(message: str, hint: bool = True) -> str:
    """An error of the command given: its path first, and (a usage error) where to read its help."""
    command = _Invocation.command
    for new, old in _Invocation.renamed.items():
        message = message.replace(f"{new}:", f"{old}:").replace(f"{new} ", f"{old} ")
    if not command:
        return f"rmqdelay: {message}"
    return f"rmqdelay: {command}: {message}" + (f" (see 'rmqdelay {command} --help')" if hint else "")


def _format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
    """A command's or group's help page, drawn by helppage.py as Typer's rich help draws it."""
    from .helppage import write_help

    write_help(self, ctx, self.rich_markup_mode)


def _runtime_param(self: _TyperParameter):
    # Typer's coercion of this parameter's values, without importing pydantic for the values
    # that need none of it (coercion.py).
    if self._runtime_param is None:
        from .coercion import runtime_param

        self._runtime_param = runtime_param(self.type_descriptor)
    return self._runtime_param


def adapt_typer() -> None:
    """What rmqdelay changes in Typer: coercion without pydantic where none is needed, the help
    page drawn by helppage.py, and how options' values and arguments read in it."""
    _TyperParameter.get_runtime_param = _runtime_param
    TyperCommand.format_help = _format_help
    TyperGroup.format_help = _format_help
    TyperOption.display_type_rich = _option_value_hint
    TyperArgument._usage_display_name = _argument_usage
    TyperArgument.display_type_rich = _argument_type


def main() -> None:
    configure_streams()
    adapt_typer()
    warnings.showwarning = _show_warning
    _Invocation.command, _Invocation.renamed = "", {}
    try:
        code = app(prog_name="rmqdelay", standalone_mode=False)
    except NoArgsIsHelpError:
        code = EXIT_BAD_INPUT  # the help was shown; no command was given
    except typer.TyperException as exc:  # a usage error: one line, and where to look
        ctx = getattr(exc, "ctx", None)
        command = ctx.command_path.partition(" ")[2] if ctx is not None else _Invocation.command
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
        _say(_in_command(str(exc), hint=False) if getattr(exc, "in_command", False) else f"rmqdelay: {exc}")
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
