"""The help's Markdown, rendered without a Markdown parser when the text needs none.

The commands' help is Markdown (rich_markup_mode="markdown"): Typer renders each help text
with rich.markdown.Markdown, whose import (markdown-it and, through rich.syntax, Pygments)
and the rich.traceback import beside it in typer.rich_utils were most of a --help's time.
What rmqdelay's help texts use of Markdown is paragraphs, their single line breaks and
`code` spans; for such a text ``Markdown`` here yields what rich's Markdown yields, segment
for segment, and it hands any other text to rich's Markdown, imported then
(tests/test_helpmarkdown.py holds the two equal on every help text of the CLI).

``load_rich_utils`` imports typer.rich_utils with this Markdown in place of rich's, and
rich.traceback's Traceback (for Typer's pretty exceptions, which rmqdelay turns off)
imported only when one is built. Only that import sees the stand-ins: sys.modules is
restored at once, so whatever else imports rich.markdown or rich.traceback gets rich's.
"""

from __future__ import annotations

import re
import sys
import types

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style, StyleStack
from rich.text import Text

# A line that could start or underline a block other than a paragraph: a heading, a quote,
# a list item, a fence, an HTML block, a link definition, a thematic break, a setext
# underline, a table's delimiter row, or an indented code block.
_BLOCK_LINE = re.compile(r"""
    \ {4}                       # indented code
  | \ {0,3}(?: [#>|<\[`~]       # heading, quote, table, HTML, link definition, fence
            | [-+*](?:\ |$)     # bullet
            | \d{1,9}[.)](?:\ |$)  # ordered item
            | [-=*_:|\ ]+$      # thematic break, setext underline, table delimiter row
            )""", re.VERBOSE)
# What means something inline besides a `code` span: escapes, entities, HTML and autolinks,
# strikethrough, inline links and images; tabs, CR and NUL, which the parser rewrites.
_INLINE_SYNTAX = re.compile(r"[\\&<~\t\r\0]|\]\(|``")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _emphasis_free(text: str) -> bool:
    """No emphasis can be made of the ``*`` and ``_`` in TEXT (a paragraph outside its code
    spans): at most one ``*``, and at most one ``_`` that is not inside a word (an
    intraword ``_`` neither opens nor closes)."""
    if text.count("*") > 1:
        return False
    loose = [i for i, ch in enumerate(text) if ch == "_"
             and not (0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum())]
    return len(loose) <= 1


def parse(markup: str) -> list[list[tuple[str, str]]] | None:
    """MARKUP's paragraphs as the parser would give them: each a list of ("text", s),
    ("softbreak", " ") and ("code", s) in order; None when MARKUP holds anything else."""
    if _INLINE_SYNTAX.search(markup):
        return None
    paragraphs: list[list[tuple[str, str]]] = []
    blocks: list[list[str]] = [[]]
    for line in markup.split("\n"):
        if line.strip(" "):
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])  # a blank line ends a paragraph
    for lines in blocks:
        if any(_BLOCK_LINE.match(line) or line.endswith("  ") for line in lines):
            return None
        pieces: list[tuple[str, str]] = []
        for number, line in enumerate(lines):
            line = line.strip(" ")
            if number:
                pieces.append(("softbreak", " "))
            start = 0
            for span in _CODE_SPAN.finditer(line):
                code = span.group(1)
                if code.startswith(" ") or code.endswith(" "):
                    return None  # the parser trims one space off each end
                if span.start() > start:
                    pieces.append(("text", line[start:span.start()]))
                pieces.append(("code", code))
                start = span.end()
            if start < len(line):
                pieces.append(("text", line[start:]))
        prose = "".join(s if kind != "code" else " " for kind, s in pieces)
        if "`" in prose or not _emphasis_free(prose):
            return None
        if pieces:
            paragraphs.append(pieces)
    return paragraphs


class Markdown:
    """rich.markdown.Markdown(markup, style=style) as Typer builds it for a help text."""

    def __init__(self, markup: str, style: str | Style = "none") -> None:
        self.markup = markup
        self.style = style
        self.paragraphs = parse(markup)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.paragraphs is None:
            from rich.markdown import Markdown as Full

            yield Full(self.markup, style=self.style)
            return
        # As rich.markdown.Markdown.__rich_console__ renders paragraphs: the style of each
        # piece is the stack's (the text's style, markdown.paragraph, markdown.code), each
        # piece is appended on its own, and a blank line separates the paragraphs.
        options = options.update(height=None)
        stack = StyleStack(console.get_style(self.style, default="none"))
        for number, pieces in enumerate(self.paragraphs):
            stack.push(console.get_style("markdown.paragraph", default="none"))
            text = Text(justify="left")
            for kind, piece in pieces:
                if kind == "code":
                    stack.push(console.get_style("markdown.code", default="none"))
                    text.append(piece, stack.current)
                    stack.pop()
                else:
                    text.append(piece, stack.current)
            stack.pop()
            if number:
                yield Segment.line()
            yield from console.render(text, options)


class _Traceback:
    """rich.traceback.Traceback, imported when Typer first builds one."""

    @staticmethod
    def from_exception(*args, **kwargs):
        from rich.traceback import Traceback

        return Traceback.from_exception(*args, **kwargs)


def load_rich_utils() -> types.ModuleType:
    """typer.rich_utils, imported (once) with this module's Markdown and a Traceback that
    imports rich.traceback when used: not rich.markdown, markdown-it, rich.syntax, Pygments."""
    if "typer.rich_utils" in sys.modules:
        return sys.modules["typer.rich_utils"]
    stand_ins = {"rich.markdown": types.ModuleType("rich.markdown"), "rich.traceback": types.ModuleType("rich.traceback")}
    stand_ins["rich.markdown"].Markdown = Markdown
    stand_ins["rich.traceback"].Traceback = _Traceback
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        import typer.rich_utils as rich_utils
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return rich_utils
