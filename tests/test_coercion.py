"""A parameter's value, coerced without pydantic (commands/coercion.py), is what Typer's own
coercion makes of it: the same value of the same type, or the same error, worded the same,
for every parameter of every command."""

from __future__ import annotations

import pytest
import typer
from conftest import SAMPLES
from typer import _click
from typer._coercion import build_runtime_param

from rmqdelay.commands.coercion import runtime_param
from rmqdelay.commands.main import app

STORE = SAMPLES / "delay-partial" / "store"
A_FILE = STORE / "config" / "delayOffset.json"

# What a user may give any parameter, as the command line gives it: text, paths that are and
# are not there, choices in and out of their case, numbers and not-numbers, repeated values.
VALUES = ["x", "", " 2 ", "7", "1.5", "-1", "nan", "1_000", "-", "table", "JSON", "backlog", "a=b",
          str(STORE), str(STORE) + "/", str(A_FILE), "/nonexistent/path", "a//b/./c", ("a", "b"), (), None]


def every_parameter():
    root = typer.main.get_command(app)
    found = []
    for name in list(root.commands):
        command = root._load(name)
        for sub_name in getattr(command, "commands", {}):  # a group's commands are built when given
            command.resolve_command(_click.Context(command), [sub_name])
        for sub in [command, *getattr(command, "commands", {}).values()]:
            found += [(f"{name} {sub.name} {param.name}", sub, param) for param in sub.params
                      if hasattr(param, "type_descriptor")]
    return found


PARAMETERS = every_parameter()


def outcome(runtime, value, param, ctx):
    try:
        result = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        cause = exc.__cause__
        errors = [(e["type"], e.get("input"), e["msg"]) for e in cause.errors()] if hasattr(cause, "errors") else None
        return "error", type(exc), str(exc), getattr(exc, "param", None) is param, type(cause), errors
    return "value", type(result), repr(result)  # repr: nan is a value too


def test_every_kind_of_parameter_is_covered():
    kinds = {repr(param.type_descriptor.annotation) for _, _, param in PARAMETERS}
    assert {"<class 'str'>", "<class 'pathlib.Path'>", "<class 'int'>", "<class 'float'>", "<class 'bool'>",
            "list[str]", "<enum 'Format'>", "<enum 'Kind'>"} <= kinds


@pytest.mark.parametrize("where, command, param", PARAMETERS, ids=[where for where, _, _ in PARAMETERS])
def test_a_value_is_coerced_as_typer_coerces_it(where, command, param):
    ctx = _click.Context(command)
    values = [*VALUES, param.default]
    if param.multiple or param.nargs == -1:
        values = [v if isinstance(v, tuple) or v is None else (v,) for v in values]
    for value in values:
        ours = outcome(runtime_param(param.type_descriptor), value, param, ctx)
        typers = outcome(build_runtime_param(param.type_descriptor), value, param, ctx)
        assert ours == typers, (where, value)


def test_a_path_is_a_path_and_a_choice_its_member():
    # The values a read takes, coerced directly (these are what pydantic is spared).
    by_name = {where: (command, param) for where, command, param in PARAMETERS}
    command, param = by_name["inspect delay store_dir"]
    assert runtime_param(param.type_descriptor).coerce(str(STORE), param=param, ctx=_click.Context(command)) == STORE
    command, param = by_name["inspect delay output_format_"]
    chosen = runtime_param(param.type_descriptor).coerce("json", param=param, ctx=_click.Context(command))
    assert chosen.value == "json" and isinstance(chosen, param.type_descriptor.annotation)
