"""The help's Markdown (commands/helpmarkdown.py) looks exactly as rich's Markdown renders it:
every help text of the CLI, segment for segment and byte for byte in colour, without the
Markdown parser; and any text beyond paragraphs and `code` through rich's own Markdown."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest
from clirun import console
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.markdown import Markdown as RichMarkdown
from test_startup import EVERY_COMMAND

from rmqdelay.commands import helpmarkdown
from rmqdelay.commands.helpmarkdown import Markdown, load_rich_utils, parse


def rendered(renderable, width: int, color: bool) -> tuple[list, str]:
    """The segments and the terminal output of RENDERABLE at WIDTH columns (a link's id,
    random, left out)."""
    out = Console(file=io.StringIO(), width=width, force_terminal=color, color_system="truecolor" if color else None,
                  legacy_windows=False)
    segments = list(out.render(renderable, out.options))
    out.print(renderable)
    return segments, re.sub(r"\x1b]8;id=\d+;", "\x1b]8;id=;", out.file.getvalue())


def assert_as_rich_renders(markup: str, style: str = "") -> None:
    for width in (100, 23):
        for color in (True, False):
            assert rendered(Markdown(markup, style=style), width, color) == \
                rendered(RichMarkdown(markup, style=style), width, color), (markup, width, color)


@pytest.fixture
def help_texts(monkeypatch):
    """Every text the help of every command hands to Markdown, with its style."""
    seen: list[tuple[str, str]] = []

    class Recorded(Markdown):
        def __init__(self, markup: str, style="none") -> None:
            super().__init__(markup, style)
            seen.append((markup, style))

    monkeypatch.setattr(load_rich_utils(), "Markdown", Recorded)
    for command in ["", *EVERY_COMMAND]:
        proc = console(*command.split(), "--help")
        assert proc.returncode == 0 and "Usage: rmqdelay" in proc.stdout, proc.stderr
    return seen


def test_every_help_text_is_rendered_as_rich_markdown_renders_it_without_the_parser(help_texts):
    assert len({markup for markup, _ in help_texts}) > 150  # the commands' and their options' help
    for markup, style in help_texts:
        assert parse(markup) is not None, markup  # no help needs the parser
        assert_as_rich_renders(markup, style)


def test_paragraphs_line_breaks_and_code_spans_are_split_as_the_parser_splits_them():
    assert parse("One\nline `a b` end.\n\n  \n\nTwo: `x`") == [
        [("text", "One"), ("softbreak", " "), ("text", "line "), ("code", "a b"), ("text", " end.")],
        [("text", "Two: "), ("code", "x")]]


# Texts that use Markdown beyond paragraphs and code spans (rich's Markdown renders them),
# and texts that only look as if they did (rendered here).
BEYOND = ["*em* and **strong**", "_em_", "- a\n- b", "1. first", "# Title", "> quoted", "[a link](http://x)",
          "a &amp; b", "a <b>c</b>", "a\\*b", "~~gone~~", "a  \nhard break", "``double``", "` padded `",
          "a\n---", "a\n===", "    indented code", "```\nfenced\n```", "a | b\n--|--\n1 | 2", "***",
          "[ref]\n\n[ref]: http://x", "an `open span", "tab\there"]
PLAIN = ["SCHEDULE_TOPIC_XXXX and rmq_sys_wheel_timer", "local[N], local-cluster[W,C,MB], local[*]",
         "A dry run unless\n--execute: it shows", "the\n16-retry path", "%RETRY% and %DLQ% topics",
         "a=b; c:d / e", "one _ alone", "code `*x*` and `_y_` spans", "", "\n\n"]


@pytest.mark.parametrize("markup", BEYOND)
def test_markdown_beyond_paragraphs_and_code_is_left_to_rich(markup):
    assert parse(markup) is None
    assert_as_rich_renders(markup, "dim")


@pytest.mark.parametrize("markup", PLAIN)
def test_text_that_only_looks_like_markdown_is_rendered_here(markup):
    assert parse(markup) is not None
    assert_as_rich_renders(markup, "dim")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["word", "x_y", " ", "  ", "\n", "\n\n", "`", "*", "_", "-", "--", "[", "]", "(",
                                 ")", "#", "1.", ">", "|", "=", ":", "&", "<", "\\", "~", "!", "    "]),
                max_size=14).map("".join))
@example("a `b` c\n`d`")
def test_any_text_renders_as_rich_markdown_renders_it(markup):
    assert_as_rich_renders(markup)


def test_only_typer_rich_utils_sees_the_stand_ins():
    # In a fresh interpreter: the help's import of typer.rich_utils loads no Markdown parser,
    # no Pygments, and leaves rich.markdown and rich.traceback to be imported as they are.
    probe = (
        "import sys\n"
        "from rmqdelay.commands.helpmarkdown import Markdown, load_rich_utils\n"
        "utils = load_rich_utils()\n"
        "assert utils.Markdown is Markdown\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('markdown_it', 'pygments')\n"
        "            or m in ('rich.markdown', 'rich.traceback', 'rich.syntax')], sorted(sys.modules)\n"
        "import rich.markdown, rich.traceback\n"
        "assert rich.markdown.Markdown is not Markdown and 'markdown_it' in sys.modules\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError as exc:\n"
        "    assert isinstance(utils.get_traceback(exc, utils.DeveloperExceptionConfig(), []),\n"
        "                      rich.traceback.Traceback)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert helpmarkdown.load_rich_utils() is sys.modules["typer.rich_utils"]
