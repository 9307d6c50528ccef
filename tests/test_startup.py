"""The CLI answers at once: `--version` and every `--help` load none of the core, and a store
read loads only what it reads. Proved by what a fresh interpreter has imported when the command
is done, never by timing it (benchmarks/bench_startup.py times it)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
import typer
from conftest import SAMPLES

from rmqdelay.commands.main import COMMANDS, app

STORE = SAMPLES / "delay-partial" / "store"

# What the CLI must not load to show help: the decoders, the compiled scans, Arrow, Spark and
# the analysis engine.
CORE = ("numpy", "numba", "llvmlite", "pyarrow", "pyspark", "pandas", "construct",
        "rmqdelay.store", "rmqdelay.schedule", "rmqdelay.timer", "rmqdelay.analysis", "rmqdelay.spark")
# Nor, to draw the help page (Typer's plain page), a Markdown parser or Pygments.
NOT_FOR_HELP = ("markdown_it", "pygments")
# What a store read that needs no compiled scan, no Arrow and no Spark must not load.
NOT_FOR_A_READ = ("numba", "llvmlite", "pyarrow", "pyspark", "pandas", "rmqdelay.analysis", "rmqdelay.spark",
                  # The timer store's modules (their structs built at import): STORE is 4.x.
                  "rmqdelay.timer", "rmqdelay.formats.timerlog", "rmqdelay.formats.timerwheel")

EVERY_COMMAND = ["run", "analyze", "send", "trace", "serve",
                 "inspect", "inspect store", "inspect cq", "inspect commitlog", "inspect message",
                 "inspect delay", "inspect index", "inspect timer", "inspect consumers", "inspect dlq",
                 "offsets", "offsets show", "offsets reset",
                 "samples", "samples generate", "samples unpack",
                 "timer", "timer repair"]

# Runs the entry point the console script runs, then prints what is imported, as JSON, last.
_PROBE = """
import json, sys
sys.argv = ["rmqdelay", *sys.argv[1:]]
from rmqdelay.commands.entry import main
try:
    main()
except SystemExit as exc:
    code = exc.code
sys.stdout.write("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}) + "\\n")
"""


def loaded_by(*args: str) -> tuple[int, set[str], str]:
    """Exit code, imported modules and output of `rmqdelay ARGS` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, COLUMNS="100"))
    output, _, last = proc.stdout.rstrip("\n").rpartition("\n")
    assert proc.returncode == 0 and last.startswith("{"), proc.stderr
    result = json.loads(last)
    return result["code"], set(result["modules"]), output


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def test_version_loads_no_command_and_not_even_importlib_metadata():
    code, modules, output = loaded_by("--version")
    assert code == 0 and output.strip().startswith("rmqdelay ")
    assert heavy(modules, CORE) == []
    assert "importlib.metadata" not in modules
    # Not even the command-line library: the version is answered before it loads.
    assert heavy(modules, ("rich", "typer", "click")) == []
    assert sorted(m for m in modules if m.startswith("rmqdelay.commands.")) == ["rmqdelay.commands.entry"]


def test_the_root_help_lists_every_command_without_importing_one():
    code, modules, output = loaded_by("--help")
    assert code == 0
    assert heavy(modules, CORE + NOT_FOR_HELP) == []
    assert not set(f"rmqdelay.commands.{lazy.module}" for lazy in COMMANDS.values()) & modules
    for name in COMMANDS:
        assert f" {name} " in output


@pytest.mark.parametrize("command", EVERY_COMMAND)
def test_the_help_of_a_command_loads_none_of_the_core(command):
    code, modules, output = loaded_by(*command.split(), "--help")
    assert code == 0 and f"Usage: rmqdelay {command}" in output
    assert heavy(modules, CORE + NOT_FOR_HELP) == []


@pytest.mark.parametrize("what", ["delay", "store"])
def test_inspect_loads_no_compiled_scan_no_arrow_no_spark(what):
    code, modules, output = loaded_by("inspect", what, STORE)
    assert code == 0 and output
    assert heavy(modules, NOT_FOR_A_READ) == []


def test_the_prometheus_metrics_load_no_analysis_for_the_store_label():
    code, modules, output = loaded_by("inspect", "delay", STORE, "--format", "prometheus")
    assert code == 0 and 'store="delay-partial"' in output
    assert heavy(modules, NOT_FOR_A_READ) == []


def test_the_root_lists_each_command_with_the_commands_own_help():
    # The root's --help shows COMMANDS' lines without importing a command: they must be the
    # commands' own (the first paragraph of a command's docstring, a group's help).
    root = typer.main.get_command(app)
    assert root.list_commands(typer.Context(root)) == list(COMMANDS)
    for name, lazy in COMMANDS.items():
        _, command, _ = root.resolve_command(typer.Context(root), [name])
        first = inspect.cleandoc(command.help).split("\n\n")[0]
        assert " ".join(first.split()) == lazy.help, name
        assert command.name == name
