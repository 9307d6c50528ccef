"""The help page (commands/helppage.py) is the page Typer's rich help draws: every command's,
character for character at any width and in the same colours, without importing rich; and a
page it does not draw is drawn by Typer's rich help."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import typer
import typer.rich_utils as rich_utils
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich._emoji_codes import EMOJI
from rich.console import Console
from test_startup import EVERY_COMMAND

from rmqdelay.commands import helppage, main
from rmqdelay.commands.helppage import EMOJI_NAME, parse

_TERMINAL_ENV = ("TERMINAL_WIDTH", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "PY_COLORS",
                 "GITHUB_ACTIONS", "_TYPER_FORCE_DISABLE_TERMINAL", "TERM", "COLORTERM")


@pytest.fixture
def terminal(monkeypatch):
    """A clean terminal environment, with Typer's rich help adapted as rmqdelay adapts it."""
    for name in _TERMINAL_ENV:
        monkeypatch.delenv(name, raising=False)
    main.adapt_typer()
    return monkeypatch


def command_and_context(path: str):
    """The CLI's command at PATH ("" the root, "inspect store") and its context, as --help gets them."""
    command = typer.main.get_command(main.app)
    ctx = command.make_context("rmqdelay", [], resilient_parsing=True)
    for name in path.split():
        _, command, _ = command.resolve_command(ctx, [name])
        ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
    return command, ctx


def typers_page(command, ctx, width: int, colour: bool, monkeypatch, no_color: bool = False) -> str:
    """What Typer's rich help prints for COMMAND at WIDTH columns."""
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", width)
    monkeypatch.setattr(rich_utils, "FORCE_TERMINAL", colour)
    monkeypatch.setattr(rich_utils, "COLOR_SYSTEM", "standard" if colour else None)
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    with redirect_stdout(out):
        rich_utils.rich_format_help(obj=command, ctx=ctx, markup_mode="markdown")
    monkeypatch.delenv("NO_COLOR", raising=False)
    return out.getvalue()


def our_page(command, ctx, width: int, colour: bool, monkeypatch, no_color: bool = False) -> str:
    """What helppage.py prints for COMMAND at WIDTH columns (a pipe, coloured if FORCE_COLOR).
    Typer's rich help, which draws what helppage.py does not, reads the same settings (when it
    is first imported, in a process of the CLI)."""
    monkeypatch.setenv("TERMINAL_WIDTH", str(width))
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", width)
    monkeypatch.setattr(rich_utils, "FORCE_TERMINAL", True if colour else None)
    monkeypatch.setattr(rich_utils, "COLOR_SYSTEM", "auto")
    if colour:
        monkeypatch.setenv("FORCE_COLOR", "1")
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    with redirect_stdout(out):
        helppage.write_help(command, ctx, "markdown")
    for name in ("TERMINAL_WIDTH", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    return out.getvalue()


_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_LINK = re.compile(r"\x1b\]8;[^\x1b]*\x1b\\")  # a Markdown link's hyperlink (its id is random)


def seen(page: str) -> list[list[tuple[str, frozenset]]]:
    """What a terminal shows of PAGE: each line's characters with the SGR codes in force (a
    space's bold, dim or foreground shows nothing: only its background is kept)."""
    lines = []
    for line in _LINK.sub("", page).split("\n"):
        codes: frozenset = frozenset()
        shown = []
        pos = 0
        for match in [*_SGR.finditer(line), None]:
            end = match.start() if match else len(line)
            for ch in line[pos:end]:
                shown.append((ch, frozenset(c for c in codes if c.startswith("4")) if ch == " " else codes))
            if match:
                given = match.group(1)
                codes = frozenset() if given in ("", "0") else frozenset(given.split(";"))
                pos = match.end()
        lines.append(shown)
    return lines


def assert_same_page(command, ctx, width: int, monkeypatch, colour: bool = False, no_color: bool = False) -> None:
    ours = our_page(command, ctx, width, colour, monkeypatch, no_color)
    typers = typers_page(command, ctx, width, colour, monkeypatch, no_color)
    if colour:
        assert "\x1b[" in ours
        assert seen(ours) == seen(typers)
    else:
        assert ours == typers


@pytest.mark.parametrize("path", ["", *EVERY_COMMAND])
def test_every_commands_page_is_typers_at_any_width(path, terminal):
    command, ctx = command_and_context(path)
    for width in (20, 33, 47, 60, 80, 100, 137, 200):
        assert_same_page(command, ctx, width, terminal)
    for width in (47, 80):
        assert_same_page(command, ctx, width, terminal, colour=True)
    assert_same_page(command, ctx, 80, terminal, colour=True, no_color=True)


def test_every_commands_page_is_drawn_here_not_by_rich(terminal):
    def refused(**kwargs):
        raise AssertionError("drawn by Typer's rich help")

    terminal.setattr(rich_utils, "rich_format_help", refused)
    for path in ["", *EVERY_COMMAND]:
        command, ctx = command_and_context(path)
        page = our_page(command, ctx, 80, False, terminal)
        assert page.startswith(" " * 80 + "\n Usage: rmqdelay") and "╰" in page, path


def test_a_page_narrower_than_20_columns_or_beyond_paragraphs_is_typers(terminal):
    command, ctx = command_and_context("inspect store")
    assert our_page(command, ctx, 19, False, terminal) == typers_page(command, ctx, 19, False, terminal)
    listed = build("Lists:\n\n- one\n- two", "an *emphasised* option")
    assert our_page(*listed, 80, False, terminal) == typers_page(*listed, 80, False, terminal)
    assert "• one" in typers_page(*listed, 80, False, terminal)


def build(command_help: str, option_help: str, argument_help: str = "The store.", default: int = 3,
          required: bool = True):
    """A one-command Typer app of these texts, and its context."""
    app = typer.Typer(rich_markup_mode="markdown", add_completion=False)

    def command(store: Path = typer.Argument(... if required else None, help=argument_help or None),
                level: int = typer.Option(default, "--level", "-l", help=option_help or None),
                flag: bool = typer.Option(False, "--flag/--no-flag", help="A flag and its negation."),
                name: str = typer.Option("x", show_default=False)) -> None:
        pass

    command.__doc__ = command_help
    app.command()(command)
    click_command = typer.main.get_command(app)
    return click_command, click_command.make_context("prog", [], resilient_parsing=True)


WORDS = ["word", "x_y", "a-b", "--opt", "-o", "<N>", "`code`", "`a b`", " ", "  ", "\n", "\n\n", "*", "_", "#",
         "1.", ">", "|", ":", "12:00:00", ":smile:", "(x)", "[default]", "averyveryveryverylongwordthatneverends",
         "é", "→", "漢字", "`", "\\"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(WORDS), max_size=24).map("".join),
       st.lists(st.sampled_from(WORDS), max_size=12).map("".join),
       st.lists(st.sampled_from(WORDS), max_size=6).map("".join),
       st.integers(20, 130), st.booleans(), st.booleans())
@example("Say `x` to :smile: at 12:00:00.\n\nMore words here.", "Level: `3`", "", 80, True, True)
@example("A long one " * 30, "x" * 90, "y", 21, False, False)
@example("", ":smile:`a b`", "", 26, False, False)  # a wide character where a cell's line is cut
@example("", ":smile:`code`", "", 20, True, False)  # the ellipsis takes the style of what it replaces
def test_any_page_is_typers(terminal, command_help, option_help, argument_help, width, colour, required):
    command, ctx = build(command_help, option_help, argument_help, required=required)
    assert_same_page(command, ctx, width, terminal, colour=colour)


def test_the_emoji_codes_looked_for_are_every_name_rich_has():
    name = re.compile(EMOJI_NAME, re.IGNORECASE)
    assert all(name.fullmatch(code) for code in EMOJI)
    assert not [code for code in EMOJI if re.fullmatch(r"\d\d", code)]  # a time's :00: is none


def test_the_terminal_is_judged_as_typers_console_judges_it(terminal):
    cases = [{}, {"COLUMNS": "123"}, {"TERMINAL_WIDTH": "90", "COLUMNS": "50"}, {"FORCE_COLOR": "1"},
             {"FORCE_COLOR": "1", "NO_COLOR": "1"}, {"FORCE_COLOR": "1", "TERM": "dumb"}, {"TTY_COMPATIBLE": "1"},
             {"TTY_COMPATIBLE": "0"}, {"PY_COLORS": "1"}, {"FORCE_COLOR": "1", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}]
    for env in cases:
        for name in _TERMINAL_ENV:
            terminal.delenv(name, raising=False)
        for name, value in env.items():
            terminal.setenv(name, value)
        stream = io.StringIO()
        force = (False if env.get("_TYPER_FORCE_DISABLE_TERMINAL") else
                 True if env.get("FORCE_COLOR") or env.get("PY_COLORS") else None)
        width = int(env["TERMINAL_WIDTH"]) if "TERMINAL_WIDTH" in env else None
        console = Console(file=stream, force_terminal=force, width=width, color_system="auto")
        assert helppage._terminal(stream) == (console.width, console.color_system is not None, console.no_color), env


def test_paragraphs_line_breaks_and_code_spans_are_split_as_the_parser_splits_them():
    assert parse("One\nline `a b` end.\n\n  \n\nTwo: `x`") == [
        [("text", "One"), ("softbreak", " "), ("text", "line "), ("code", "a b"), ("text", " end.")],
        [("text", "Two: "), ("code", "x")]]


# Texts that use Markdown beyond paragraphs and code spans, and texts that only look as if they did.
BEYOND = ["*em* and **strong**", "_em_", "- a\n- b", "1. first", "# Title", "> quoted", "[a link](http://x)",
          "a &amp; b", "a <b>c</b>", "a\\*b", "~~gone~~", "a  \nhard break", "``double``", "` padded `",
          "a\n---", "a\n===", "    indented code", "```\nfenced\n```", "a | b\n--|--\n1 | 2", "***",
          "[ref]\n\n[ref]: http://x", "an `open span", "tab\there"]
PLAIN = ["SCHEDULE_TOPIC_XXXX and rmq_sys_wheel_timer", "local[N], local-cluster[W,C,MB], local[*]",
         "A dry run unless\n--execute: it shows", "the\n16-retry path", "%RETRY% and %DLQ% topics",
         "a=b; c:d / e", "one _ alone", "code `*x*` and `_y_` spans", "", "\n\n"]


@pytest.mark.parametrize("markup", BEYOND)
def test_markdown_beyond_paragraphs_and_code_is_left_to_typer(markup, terminal):
    assert parse(markup) is None
    command, ctx = build(markup, markup)
    assert_same_page(command, ctx, 80, terminal)
    assert_same_page(command, ctx, 60, terminal, colour=True)


@pytest.mark.parametrize("markup", PLAIN)
def test_text_that_only_looks_like_markdown_is_drawn_here(markup, terminal):
    assert parse(markup) is not None
    command, ctx = build(markup or "Help.", markup)
    assert_same_page(command, ctx, 80, terminal)
    assert_same_page(command, ctx, 60, terminal, colour=True)
