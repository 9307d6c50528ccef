"""Tables that fit the terminal (docs/cli.md, "Output that fits").

A command declares its columns once: which never go, which go first when the terminal is
narrow (``drop``: the higher, the sooner), which may fold onto more lines (``fold``: free
text such as keys or a topic). ``fit`` keeps every column at its natural width when they fit,
drops the low-value ones when they do not, then folds the foldable ones down to a floor; a
column is never squeezed to nothing and a number is never cut. ``--wide`` keeps them all at
their natural width and lets the terminal wrap the lines, as `kubectl -o wide` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where a table is drawn, not for a command's --help
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    Cell = str | Text


FOLD_FLOOR = 12  # a foldable column keeps at least this many characters (or its header's)


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    justify: str = "right"
    drop: int = 0  # 0: always shown; otherwise dropped to fit, the highest first
    fold: bool = False  # free text: may wrap onto more lines
    floor: int = FOLD_FLOOR  # a foldable column keeps at least this many characters (or its header's)



@dataclass(slots=True)
class Fitted:
    table: Table
    width: int  # what the table needs
    hidden: list[str]  # headers of the columns dropped to fit


def table_width(widths: Sequence[int]) -> int:
    """What a rich table without edges takes: each column padded by one space either side,
    one rule between columns."""
    return sum(w + 2 for w in widths) + max(len(widths) - 1, 0)


def fit(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int, *, wide: bool = False,
        header_style: str = "bold") -> Fitted:
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    def cell_width(cell: Cell) -> int:
        text = cell.plain if isinstance(cell, Text) else cell
        return max((cell_len(line) for line in text.split("\n")), default=0)

    natural = [max([cell_len(c.header)] + [cell_width(r[i]) for r in rows]) for i, c in enumerate(columns)]
    # The least a column can take: a foldable one its floor (or less when it needs less).
    least = [min(natural[i], max(c.floor, cell_len(c.header))) if c.fold else natural[i]
             for i, c in enumerate(columns)]
    keep = list(range(len(columns)))
    if not wide:
        droppable = sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: (-columns[i].drop, -i))
        while table_width([least[i] for i in keep]) > width and droppable:
            keep.remove(droppable.pop(0))
    widths = {i: natural[i] for i in keep}
    if not wide and table_width(list(widths.values())) > width:
        # Fold: each foldable column at its least, then the room left shared out, narrowest first.
        folding = sorted((i for i in keep if columns[i].fold), key=lambda i: natural[i])
        for i in folding:
            widths[i] = least[i]
        room = width - table_width(list(widths.values()))
        for n, i in enumerate(folding):
            share = max(room // (len(folding) - n), 0)
            grow = min(share, natural[i] - widths[i])
            widths[i] += grow
            room -= grow
    table = Table(show_edge=False, header_style=header_style)
    for i in keep:
        c = columns[i]
        table.add_column(c.header, justify=c.justify, no_wrap=not c.fold, overflow="fold",
                         min_width=widths[i], max_width=widths[i] if c.fold else None)
    for row in rows:
        table.add_row(*(row[i] if isinstance(row[i], Text) else Text(str(row[i])) for i in keep))
    return Fitted(table, table_width(list(widths.values())), [columns[i].header for i in range(len(columns))
                                                               if i not in keep])


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *,
                wide: bool = False) -> list[str]:
    """Print the rows as a table that fits ``console``; returns the headers dropped to fit
    (the caller says so, once, under its last table: ``hidden_note``)."""
    fitted = fit(columns, rows, console.width, wide=wide)
    # A table wider than the terminal (--wide, or columns that cannot fold) is printed whole:
    # the terminal wraps its lines, nothing is cut.
    if fitted.width > console.width:
        console.print(fitted.table, width=fitted.width, crop=False)
    else:
        console.print(fitted.table)
    return fitted.hidden


def hidden_note(hidden: Sequence[str]) -> str | None:
    names = list(dict.fromkeys(hidden))
    if not names:
        return None
    return f"not shown at this width: {', '.join(names)} (--wide shows every column)"
