"""A command's --help page, drawn without rich: the page Typer's rich help draws (the usage
line, the help text, the panels of arguments, options and commands), character for
character and in the same colours, at the terminal's width.

Importing rich and laying the page out with its tables and panels was most of a --help's
time; the page is a few boxes of wrapped text, drawn here from the same parameters in a
fraction of it. tests/test_helppage.py holds every command's page equal to Typer's, at
several widths, in plain text and in colour. A page this module does not draw (a deprecated
command, an epilog, an environment variable shown, help that is Markdown beyond paragraphs
and `code` spans) is drawn by Typer's rich help, imported then.

The help texts are Markdown (rich_markup_mode="markdown"): paragraphs, whose single line
breaks join into one, and `code` spans.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import unicodedata
from collections import defaultdict

from typer.core import TyperArgument, TyperGroup, TyperOption

# A style: (bold, dim, foreground, background), the colours as ANSI's standard colour numbers.
Style = tuple[bool, bool, "int | None", "int | None"]
PLAIN: Style = (False, False, None, None)
BOLD: Style = (True, False, None, None)
DIM: Style = (False, True, None, None)
_RED, _GREEN, _YELLOW, _MAGENTA, _CYAN, _BLACK = 31, 32, 33, 35, 36, 30

# Typer's theme (typer.rich_utils): what each highlighted part and each element is drawn in.
_THEME: dict[str, Style] = {
    "option": (True, False, _CYAN, None), "switch": (True, False, _GREEN, None),
    "negative_option": (True, False, _MAGENTA, None), "negative_switch": (True, False, _RED, None),
    "types": (True, False, _YELLOW, None), "types_sep": DIM, "usage": (False, False, _YELLOW, None),
}
_TYPES: Style = (True, False, _YELLOW, None)
_REQUIRED_SHORT: Style = (False, False, _RED, None)
_REQUIRED_LONG: Style = (False, True, _RED, None)
_COMMAND_NAME: Style = (True, False, _CYAN, None)
_CODE: Style = (True, False, _CYAN, _BLACK)  # rich's markdown.code

# Typer's highlighters, in their order (a later match's style wins where two overlap).
_OPTIONS = [re.compile(r"(^|\W)(?P<switch>\-\w+)(?![a-zA-Z0-9])"),
            re.compile(r"(^|\W)(?P<option>\-\-[\w\-]+)(?![a-zA-Z0-9])"),
            re.compile(r"(?P<types>\<[^\>]+\>)"), re.compile(r"(?P<usage>Usage: )")]
_NEGATIVE = [re.compile(r"(^|\W)(?P<negative_switch>\-\w+)(?![a-zA-Z0-9])"),
             re.compile(r"(^|\W)(?P<negative_option>\-\-[\w\-]+)(?![a-zA-Z0-9])")]
_TYPE_SEPARATORS = [re.compile(r"^(?P<types_sep>(\[|<))"), re.compile(r"(?P<types_sep>\|)"),
                    re.compile(r"(?P<types_sep>(\]|>))(\.\.\.)?$")]

_ROUNDED = ("╭", "─", "╮", "│", "╰", "╯")
_ASCII = ("+", "-", "+", "|", "+", "+")

# A Markdown line that could start or underline a block other than a paragraph: a heading, a
# quote, a list item, a fence, an HTML block, a link definition, a thematic break, a setext
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
# What could be one of rich's emoji codes (:name:, :name-emoji:, :name-text:), which Typer
# replaces in Markdown help: a name of the characters rich's names are made of, and not two
# digits (a time's 12:00:00; no name is). rich's own table (imported then) decides which are.
EMOJI_NAME = r"[a-z0-9_+\-.!#&()*\u2019\u00e3\u00e5\u00e7\u00e9\u00ed\u00f4]+"
_EMOJI_CODE = re.compile(rf":(?!\d\d:){EMOJI_NAME}?:", re.IGNORECASE)


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
    """MARKUP's paragraphs as a Markdown parser gives them: each a list of ("text", s),
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


class Unsupported(Exception):
    """A page this module does not draw: Typer's rich help draws it."""


# ---- styled text: a string and a style per character ----

class Text:
    __slots__ = ("plain", "styles")

    def __init__(self, plain: str = "", style: Style = PLAIN) -> None:
        self.plain = plain
        self.styles = [style] * len(plain)

    def append(self, plain: str, style: Style = PLAIN) -> None:
        self.plain += plain
        self.styles += [style] * len(plain)

    def extend(self, other: Text) -> Text:
        self.plain += other.plain
        self.styles += other.styles
        return self

    def slice(self, start: int, end: int) -> Text:
        part = Text()
        part.plain, part.styles = self.plain[start:end], self.styles[start:end]
        return part

    def over(self, base: Style) -> Text:
        """This text drawn over BASE: BASE where the text sets nothing."""
        part = Text()
        part.plain, part.styles = self.plain, [_combine(base, s) for s in self.styles]
        return part

    def padded(self, width: int) -> Text:
        """This text with plain spaces after it up to WIDTH cells."""
        missing = width - cell_len(self.plain)
        if missing > 0:
            part = self.slice(0, len(self.plain))
            part.append(" " * missing)
            return part
        return self

    def highlighted(self, patterns: list[re.Pattern]) -> Text:
        """This text, each pattern's named groups styled as the theme says, in order."""
        for pattern in patterns:
            for match in pattern.finditer(self.plain):
                for name in match.groupdict():
                    start, end = match.span(name)
                    if start != -1 and end > start:
                        style = _THEME[name]
                        self.styles[start:end] = [_combine(s, style) for s in self.styles[start:end]]
        return self


def _combine(base: Style, over: Style) -> Style:
    return (base[0] or over[0], base[1] or over[1],
            base[2] if over[2] is None else over[2], base[3] if over[3] is None else over[3])


def cell_len(text: str) -> int:
    """How many terminal cells TEXT takes (East Asian wide characters two, combining none)."""
    if text.isascii():
        return len(text)
    return sum(_char_cells(ch) for ch in text)


def _char_cells(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _chop(word: str, width: int) -> list[str]:
    """WORD cut into pieces of at most WIDTH cells."""
    pieces, piece, used = [], "", 0
    for ch in word:
        size = _char_cells(ch)
        if piece and used + size > width:
            pieces.append(piece)
            piece, used = "", 0
        piece += ch
        used += size
    pieces.append(piece)
    return pieces


_WORD = re.compile(r"\s*\S+\s*")


def _break_points(plain: str, width: int, fold: bool) -> list[int]:
    """Where a line breaks: before each word that does not fit what is left of the line (its
    trailing spaces may), and inside a word wider than a line if FOLD (else the word is cut
    short when the line is)."""
    breaks: list[int] = []
    used = 0
    for match in _WORD.finditer(plain):
        start, word = match.start(), match.group()
        size = cell_len(word.rstrip())
        if width - used >= size:
            used += cell_len(word)
        elif size > width and not fold:
            if start:
                breaks.append(start)
            used = cell_len(word)
        elif size > width:
            pieces = _chop(word, width)
            for number, piece in enumerate(pieces):
                if start:
                    breaks.append(start)
                if number == len(pieces) - 1:
                    used = cell_len(piece)
                else:
                    start += len(piece)
        elif used and start:
            breaks.append(start)
            used = cell_len(word)
    return breaks


def wrap(text: Text, width: int, pad: bool = False, fold: bool = True) -> list[Text]:
    """TEXT's lines wrapped at WIDTH cells; each padded to WIDTH with plain spaces if PAD. A
    word wider than a line is folded onto the next if FOLD, else cut short with an ellipsis
    (as rich cuts what a table's cell cannot hold)."""
    lines: list[Text] = []
    start = 0
    for end in [*(i for i, ch in enumerate(text.plain) if ch == "\n"), len(text.plain)]:
        line = text.slice(start, end)
        start = end + 1
        cuts = [0, *_break_points(line.plain, width, fold), len(line.plain)]
        for a, b in zip(cuts, cuts[1:]):
            part = line.slice(a, b)
            excess = len(part.plain) - width  # in characters, as rich counts it here
            if excess > 0:  # trailing spaces beyond the width go
                spaces = len(part.plain) - len(part.plain.rstrip())
                part = part.slice(0, len(part.plain) - min(spaces, excess))
            if cell_len(part.plain) > width:
                part = _cut(part, width, fold)
            lines.append(part.padded(width) if pad else part)
    return lines


def _cut(text: Text, width: int, fold: bool) -> Text:
    """TEXT cut to WIDTH cells, its last one an ellipsis unless FOLD. Each character of the
    cut text keeps the style of the one it stands in place of (rich trims the styles to the
    new length)."""
    keep = width if fold else width - 1
    end, used = 0, 0
    while end < len(text.plain) and used + _char_cells(text.plain[end]) <= keep:
        used += _char_cells(text.plain[end])
        end += 1
    # A wide character that does not fit leaves its cell blank.
    plain = text.plain[:end] + " " * (keep - used) + ("…" if not fold and width > 0 else "")
    part = Text()
    part.plain = plain
    part.styles = [text.styles[i] if i < len(text.styles) else PLAIN for i in range(len(plain))]
    return part


# ---- the help text's Markdown ----

def markdown_lines(markup: str, style: Style, width: int, fold: bool = True) -> list[Text]:
    """MARKUP's paragraphs in STYLE, wrapped at WIDTH and padded to it, a blank line between."""
    if ":" in markup and _EMOJI_CODE.search(markup):
        from rich._emoji_replace import _emoji_replace

        markup = _emoji_replace(markup)
    paragraphs = parse(markup)
    if paragraphs is None:
        raise Unsupported(markup)
    lines: list[Text] = []
    for number, pieces in enumerate(paragraphs):
        if number:
            lines.append(Text(" " * width))
        text = Text()
        for kind, piece in pieces:
            text.append(piece, _combine(style, _CODE) if kind == "code" else style)
        lines += wrap(text, width, pad=True, fold=fold)
    return lines


# ---- tables and panels ----

class _Cell:
    """What a table cell holds: texts, each on lines of its own; MEASURE is its widest line
    (None: as wide as it is given, as a help text is)."""

    def __init__(self, texts: list, measure: int | None, style: Style = PLAIN, fold: bool = False) -> None:
        self.texts = texts  # Text (wrapped) or a function of the width giving lines (Markdown)
        self.measure = measure
        self.style = style
        self.fold = fold  # a word wider than the cell folds (else it is cut with an ellipsis)

    def lines(self, width: int) -> list[Text]:
        if all(isinstance(t, Text) for t in self.texts) and len(self.texts) > 1:
            # Short texts side by side when they fit one line, a space between (rich's Columns).
            row = Text()
            for number, text in enumerate(self.texts):
                if number:
                    row.append(" ")
                row.extend(text)
            if cell_len(row.plain) <= width:
                return [row]
        out: list[Text] = []
        for text in self.texts:  # one under another, each on a line at least (a row of rich's grid)
            out += (wrap(text, width, fold=self.fold) if isinstance(text, Text) else text(width)) or [Text()]
        return out


def _text_cell(text: Text, fold: bool = False) -> _Cell:
    return _Cell([text] if text.plain else [], max((cell_len(line) for line in text.plain.split("\n")), default=0),
                 fold=fold)


def _ratio_reduce(total: int, ratios: list[int], maximums: list[int], values: list[int]) -> list[int]:
    """TOTAL taken off VALUES in proportion to RATIOS, at most MAXIMUMS each (as rich's tables)."""
    ratios = [ratio if limit else 0 for ratio, limit in zip(ratios, maximums)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    remaining = total
    result = []
    for ratio, limit, value in zip(ratios, maximums, values):
        if ratio and total_ratio > 0:
            distributed = min(limit, round(ratio * remaining / total_ratio))
            result.append(value - distributed)
            remaining -= distributed
            total_ratio -= ratio
        else:
            result.append(value)
    return result


def _ratio_distribute(total: int, ratios: list[int], minimums: list[int] | None = None) -> list[int]:
    """TOTAL shared in proportion to RATIOS, at least MINIMUMS each (as rich's tables)."""
    if minimums:
        ratios = [ratio if minimum else 0 for ratio, minimum in zip(ratios, minimums)]
    total_ratio = sum(ratios)
    remaining = total
    shares = []
    for ratio, minimum in zip(ratios, minimums or [0] * len(ratios)):
        if total_ratio > 0:
            share = max(minimum, int(-(-(ratio * remaining) // total_ratio)))
        else:
            share = remaining
        shares.append(share)
        total_ratio -= ratio
        remaining -= share
    return shares


def _collapse(widths: list[int], max_width: int) -> list[int]:
    """Widths narrowed, widest first, until they fit MAX_WIDTH (every column may wrap)."""
    total = sum(widths)
    excess = total - max_width
    while total and excess > 0:
        widest = max(widths)
        second = max((w for w in widths if w != widest), default=0)
        ratios = [1 if w == widest else 0 for w in widths]
        if widest == second:
            break
        widths = _ratio_reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
        total = sum(widths)
        excess = total - max_width
    return widths


def _table(rows: list[list[_Cell]], width: int, fixed: dict[int, int] | None = None) -> list[Text]:
    """ROWS as a borderless table WIDTH cells wide: columns a space apart, each as wide as its
    widest cell, the last (or a column of FIXED width's neighbour) taking what is left."""
    columns = len(rows[0])
    pads = [((1 if i else 0), (1 if i < columns - 1 else 0)) for i in range(columns)]
    fixed = fixed or {}
    if fixed:  # a fixed first column and the rest flexible (the commands' table)
        widths = [fixed[i] + sum(pads[i]) if i in fixed else 0 for i in range(columns)]
        free = [i for i in range(columns) if i not in fixed]
        for i, share in zip(free, _ratio_distribute(width - sum(widths), [10] * len(free),
                                                    [1 + sum(pads[i]) for i in free])):
            widths[i] = share
    else:
        widths = []
        for i in range(columns):
            measured = [width if cell.measure is None else _padded_measure(cell.measure, sum(pads[i]), width)
                        for cell in (row[i] for row in rows)]
            widths.append(max(measured) or 1)
        total = sum(widths)
        if total > width:
            widths = _collapse(widths, width)
            if sum(widths) > width:
                widths = _ratio_reduce(sum(widths) - width, [1] * columns, widths, widths)
            total = sum(widths)
            # Each column measured again at its new width; the total stays the one above.
            widths = [max(_padded_measure(cell.measure, sum(pads[i]), w) if cell.measure is not None else w
                          for cell in (row[i] for row in rows)) if w > 0 else 0
                      for i, w in enumerate(widths)]
        if total < width:
            widths = [w + extra for w, extra in zip(widths, _ratio_distribute(width - total, widths))]
    lines: list[Text] = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            left, right = pads[i]
            inner = max(widths[i] - left - right, 0)
            # Nothing at all is drawn in less than a cell (rich renders nothing there).
            cells.append([(Text(" " * left) if left else Text()), cell.lines(inner) if inner >= 1 else [],
                          Text(" " * right), cell.style, inner])
        height = max(len(c[1]) for c in cells) or 1
        for n in range(height):
            line = Text()
            for left, body, right, style, inner in cells:
                part = body[n] if n < len(body) else Text()
                part = part.padded(inner).over(style)
                line.extend(left).extend(part).extend(right)
            lines.append(line)
    return lines


def _padded_measure(measure: int, pad: int, width: int) -> int:
    if width - pad < 1:
        return width
    return min(measure, width - pad) + pad if measure else pad


def _panel(title: str, body: list[Text], width: int, box: tuple[str, ...]) -> list[Text]:
    top_left, edge, top_right, side, bottom_left, bottom_right = box
    name = f" {title} "[:max(width - 4, 0)]
    top = Text(top_left + edge + name + edge * max(width - 4 - cell_len(name), 0) + edge + top_right, DIM)
    lines = [top]
    for line in body:
        row = Text(side, DIM)
        row.append(" ")
        row.extend(line)
        row.append(" ")
        row.append(side, DIM)
        lines.append(row)
    lines.append(Text(bottom_left + edge * (width - 2) + bottom_right, DIM))
    return lines


# ---- the page ----

def _help_cell(param, ctx) -> _Cell:
    """The help column of a parameter: its help, then its default and [required]."""
    texts: list = []
    envvar = getattr(param, "envvar", None) or (
        getattr(param, "allow_from_autoenv", None) and getattr(ctx, "auto_envvar_prefix", None) is not None
        and param.name)
    if envvar and getattr(param, "show_envvar", None):
        raise Unsupported("an environment variable shown")
    help_value = getattr(param, "help", None)
    if help_value:
        markup = inspect.cleandoc("\n".join(help_value.split("\n\n")).strip())
        texts.append(lambda width, markup=markup: markdown_lines(markup, PLAIN, width, fold=False))
    if isinstance(param, (TyperOption, TyperArgument)):
        default = param._extract_default_help_str(ctx=ctx)
        given = isinstance(param.show_default, str)
        if given or (default is not None and (param.show_default or ctx.show_default)):
            shown = param._get_default_string(ctx=ctx, show_default_is_str=given, default_value=default)
            if shown:
                texts.append(Text(f"[default: {shown}]", DIM))
    if param.required:
        texts.append(Text("[required]", _REQUIRED_LONG))
    return _Cell(texts, None)  # rich's Columns: as wide as it is given


def _params_panel(title: str, params: list, ctx, width: int, box) -> list[Text]:
    rows: list[list[_Cell]] = []
    required: list[Text] = []
    for param in params:
        long, short, second_long, second_short = [], [], [], []
        shown_name = None
        if isinstance(param, TyperArgument):
            shown_name = param.display_name_raw
            if param.metavar is None and param.nargs != 1:
                shown_name += "..."
        for opt in param.opts:
            (long if "--" in opt else short).append(opt if "--" in opt or not shown_name else shown_name)
        for opt in param.secondary_opts:
            (second_long if "--" in opt else second_short).append(opt if "--" in opt or not shown_name else shown_name)
        kind = Text("", _TYPES)
        shown_type = param.display_type_rich(ctx=ctx)
        if shown_type is not None:
            kind.append(shown_type, _TYPES)
        numbers = param._get_number_range_help_str()
        if numbers:
            kind.append(f" [{numbers}]", _TYPES)
        required.append(Text("*", _REQUIRED_SHORT) if param.required else Text())
        rows.append([_text_cell(Text(",".join(long)).highlighted(_OPTIONS)),
                     _text_cell(Text(",".join(short)).highlighted(_OPTIONS)),
                     _text_cell(Text(",".join(second_long)).highlighted(_NEGATIVE)),
                     _text_cell(Text(",".join(second_short)).highlighted(_NEGATIVE)),
                     _text_cell(kind.highlighted(_TYPE_SEPARATORS), fold=True),
                     _help_cell(param, ctx)])
    if not rows:
        return []
    if any(r.plain for r in required):
        rows = [[_text_cell(mark), *row] for mark, row in zip(required, rows)]
    return _panel(title, _table(rows, width - 4), width, box)


def _commands_panel(title: str, commands: list, width: int, name_width: int, box) -> list[Text]:
    rows = []
    for command in commands:
        if command.deprecated:
            raise Unsupported("a deprecated command")
        paragraphs = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")
        if paragraphs[0].startswith("\b"):
            raise Unsupported("a \\b paragraph")
        markup = paragraphs[0].replace("\n", " ").strip()
        rows.append([_Cell([Text(command.name or "")], name_width, _COMMAND_NAME),
                     _Cell([lambda w, markup=markup: markdown_lines(markup, PLAIN, w, fold=False)], None)])
    if not rows:
        return []
    return _panel(title, _table(rows, width - 4, fixed={0: name_width}), width, box)


def page_lines(obj, ctx, width: int, ascii_only: bool = False) -> list[Text]:
    """The lines of OBJ's help page at WIDTH cells, as Typer's rich help draws it."""
    if obj.deprecated or obj.epilog:
        raise Unsupported("a deprecated command or an epilog")
    box = _ASCII if ascii_only else _ROUNDED
    blank = Text(" " * width)
    lines = [blank]
    for line in wrap(Text(obj.get_usage(ctx)).highlighted(_OPTIONS), max(width - 2, 1)):
        row = Text(" ")
        row.extend(line)
        lines.append(row.padded(width))
    lines.append(blank)
    lines = [line.over(BOLD) for line in lines]
    if obj.help:
        text = inspect.cleandoc(obj.help).partition("\f")[0]
        first, *rest = text.split("\n\n")
        inner = max(width - 2, 1)
        body = markdown_lines(inspect.cleandoc(first.strip()), PLAIN, inner)
        if rest:
            body.append(Text(" " * inner))
            body += markdown_lines(inspect.cleandoc("\n\n".join(rest)), DIM, inner)
        for line in body:
            row = Text(" ")
            row.extend(line)
            row.append(" ")
            lines.append(row)
        lines.append(blank)
    arguments: dict[str, list] = defaultdict(list)
    options: dict[str, list] = defaultdict(list)
    for param in obj.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        if isinstance(param, TyperArgument):
            arguments[getattr(param, "rich_help_panel", None) or "Arguments"].append(param)
        elif isinstance(param, TyperOption):
            options[getattr(param, "rich_help_panel", None) or "Options"].append(param)
    for default, panels in (("Arguments", arguments), ("Options", options)):
        lines += _params_panel(default, panels.get(default, []), ctx, width, box)
        for name, params in panels.items():
            if name != default:
                lines += _params_panel(name, params, ctx, width, box)
    if isinstance(obj, TyperGroup):
        panels: dict[str, list] = defaultdict(list)
        for name in obj.list_commands(ctx):
            command = obj.get_command(ctx, name)
            if command and not command.hidden:
                panels[getattr(command, "rich_help_panel", None) or "Commands"].append(command)
        name_width = max((len(c.name or "") for group in panels.values() for c in group), default=0)
        lines += _commands_panel("Commands", panels.get("Commands", []), width, name_width, box)
        for name, commands in panels.items():
            if name != "Commands":
                lines += _commands_panel(name, commands, width, name_width, box)
    return lines


# ---- the terminal ----

def _terminal(stream) -> tuple[int, bool, bool]:
    """(width, colours, no_color) of STREAM as Typer's rich console judges them: the width
    from TERMINAL_WIDTH, COLUMNS or the terminal (80 when none); colours on a terminal
    (FORCE_COLOR, TTY_COMPATIBLE and Typer's own switches say otherwise) that is not dumb;
    NO_COLOR keeps bold and dim and drops the colours."""
    env = os.environ
    if env.get("_TYPER_FORCE_DISABLE_TERMINAL"):
        terminal = False
    elif env.get("GITHUB_ACTIONS") or env.get("FORCE_COLOR") or env.get("PY_COLORS"):
        terminal = True
    elif env.get("TTY_COMPATIBLE", "") in ("0", "1"):
        terminal = env["TTY_COMPATIBLE"] == "1"
    elif env.get("FORCE_COLOR") is not None:
        terminal = False  # set but empty
    else:
        try:
            terminal = bool(stream.isatty())
        except (AttributeError, ValueError):
            terminal = False
    dumb = terminal and env.get("TERM", "").lower() in ("dumb", "unknown")
    fixed = env.get("TERMINAL_WIDTH")
    columns = env.get("COLUMNS")
    if fixed:
        width = int(fixed)
    elif columns is not None and columns.isdigit():
        width = int(columns)
    elif dumb:
        width = 80
    else:
        width = 0
        for fd in (0, 1, 2):
            try:
                width = os.get_terminal_size(fd).columns
                break
            except (AttributeError, ValueError, OSError):
                pass
        width = width or 80
    return width, terminal and not dumb, env.get("NO_COLOR", "") != ""


def _ansi(style: Style, no_color: bool) -> str:
    codes = [code for on, code in ((style[0], "1"), (style[1], "2")) if on]
    if not no_color:
        if style[2] is not None:
            codes.append(str(style[2]))
        if style[3] is not None:
            codes.append(str(style[3] + 10))
    return ";".join(codes)


def render(lines: list[Text], colours: bool, no_color: bool = False) -> str:
    """LINES as the terminal is sent them: each run of one style in its ANSI codes."""
    if not colours:
        return "".join(line.plain + "\n" for line in lines)
    out: list[str] = []
    for line in lines:
        start = 0
        styles = line.styles
        for i in range(1, len(styles) + 1):
            if i == len(styles) or styles[i] != styles[start]:
                piece = line.plain[start:i]
                codes = _ansi(styles[start], no_color)
                out.append(f"\x1b[{codes}m{piece}\x1b[0m" if codes else piece)
                start = i
        out.append("\n")
    return "".join(out)


def write_help(obj, ctx, markup_mode: str | None) -> None:
    """OBJ's help page on stdout; Typer's rich help draws what this module does not."""
    stream = sys.stdout
    width, colours, no_color = _terminal(stream)
    encoding = (getattr(stream, "encoding", "utf-8") or "utf-8").lower()
    try:
        if markup_mode != "markdown" or width < 20:
            raise Unsupported(f"markup mode {markup_mode}, {width} columns")  # rich's own layout below 20
        page = render(page_lines(obj, ctx, width, ascii_only=not encoding.startswith("utf")), colours, no_color)
    except Unsupported:
        from typer import rich_utils

        rich_utils.rich_format_help(obj=obj, ctx=ctx, markup_mode=markup_mode)
        return
    stream.write(page)
