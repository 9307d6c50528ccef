"""The small things users trip on: usage errors in one line, help that reads well, --version,
shell completion, refused arguments that would mislead, progress on a terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
from pathlib import Path

import pytest
from clirun import CONSOLE_SCRIPT, assert_one_line, console
from conftest import SAMPLES

import rmqdelay

STORE = SAMPLES / "delay-partial" / "store"


@pytest.mark.parametrize("args,fragments", [
    (["inspect", "cq", STORE, "--topic", "TopicTest", "--queue", "x"],
     ["rmqdelay: inspect cq: --queue: an integer >= 0, found 'x' (see 'rmqdelay inspect cq --help')"]),
    (["inspect", "cq"], ["rmqdelay: inspect cq: STORE: required"]),
    (["inspect", "bogus"], ["rmqdelay: inspect: COMMAND: one of store|cq|commitlog", "found 'bogus'"]),
    (["run", STORE, "--no-such-flag"], ["rmqdelay: run: --no-such-flag: no such option"]),
    (["analyze", "sideways", STORE], ["rmqdelay: analyze: COMMAND: one of backlog|lateness|retries|all, found 'sideways'"]),
    (["inspect", "delay", STORE, "--format", "xml"],
     ["rmqdelay: inspect delay: --format: one of table|json|prometheus, found 'xml'"]),
    (["run", STORE, "--flush-interval", "soon"], ["rmqdelay: run: --flush-interval: a duration such as 90s, 10m, 1h30m, 2d or ISO 8601 PT30M, found 'soon'"]),
    (["offsets", "reset", STORE, "--levels", "4", "--shift-by", "x"], ["rmqdelay: offsets reset: --shift-by: an integer"]),
    (["inspect", "timer", STORE, "--units", "--since", "yesterday"],
     ["rmqdelay: inspect timer: --since: a time as ISO 8601 or epoch milliseconds, found 'yesterday'"]),
])
def test_usage_errors_are_one_line(args, fragments):
    assert_one_line(console(*args, env={"COLUMNS": "80"}), 2, *fragments)


def test_help_shows_flags_without_a_type_and_text_unwrapped():
    proc = console("run", "--help", env={"COLUMNS": "200"})
    assert proc.returncode == 0
    assert "<bool>" not in proc.stdout
    once = [line for line in proc.stdout.splitlines() if "--once" in line]
    assert once and "Deliver what is due now, then exit." in once[0]
    # The docstring's source line breaks are gone: the sentence flows on one line at this width.
    assert ("Deliver due delay messages of SCHEDULE_TOPIC_XXXX to their real topics, as the broker's "
            "ScheduleMessageService does") in proc.stdout
    assert "Usage: rmqdelay run [OPTIONS] STORE" in proc.stdout.replace("{STORE}", "STORE")


def test_version():
    proc = console("--version")
    assert proc.returncode == 0 and proc.stdout == f"rmqdelay {rmqdelay.__version__}\n"


def test_the_version_printed_is_the_one_in_pyproject():
    # --version prints rmqdelay.__version__ (no importlib.metadata at start-up): the two must agree.
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8")
    project = pyproject.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^version = "([^"]+)"$', project, re.M).group(1) == rmqdelay.__version__


def test_shell_completion():
    proc = console(env={"_RMQDELAY_COMPLETE": "complete_bash", "COMP_WORDS": "rmqdelay inspect c", "COMP_CWORD": "2"})
    assert proc.returncode == 0 and proc.stdout.split() == ["cq", "commitlog", "consumers"]
    script = console("--show-completion", "bash")
    assert script.returncode == 0 and "_RMQDELAY_COMPLETE=complete_bash" in script.stdout


def test_an_empty_key_is_refused():
    # The broker indexes no empty KEYS token: '' would otherwise match every message without KEYS.
    for key in ("", "two words"):
        assert_one_line(console("inspect", "message", STORE, "--key", key), 2, "--key: one key")


def test_a_batch_size_of_zero_is_refused():
    assert_one_line(console("run", STORE, "--dry-run", "--batch-size", "0", timeout=30), 2,
                    "--batch-size: at least 1, found 0")


def test_send_shows_progress_on_a_terminal(tmp_path):
    main, secondary = pty.openpty()
    store = tmp_path / "s"
    proc = subprocess.Popen([CONSOLE_SCRIPT, "send", str(store), "--create", "--topic", "TopicTest", "--count", "3000",
                             "--commitlog-file-size", str(1 << 22)], stdout=subprocess.DEVNULL, stderr=secondary,
                            env=dict(os.environ, COLUMNS="100", TERM="xterm"))
    os.close(secondary)
    seen = b""
    while True:
        ready, _, _ = select.select([main], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the other end closed: the command is done
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=120) == 0
    os.close(main)
    assert b"sending" in seen and b"%" in seen


def test_send_prints_nothing_extra_in_a_pipe(tmp_path):
    proc = console("send", tmp_path / "s", "--create", "--topic", "TopicTest", "--count", "5")
    assert proc.returncode == 0 and proc.stderr == "" and len(proc.stdout.splitlines()) == 5
    assert Path(tmp_path / "s" / "commitlog").is_dir()
