"""Old option spellings that still work, hidden, for one minor version (docs/cli.md, "Old
spellings"): each is rewritten to its new name before the command parses its arguments, with
a one-line note on stderr. Pure data and string work: the root imports it before any command.
"""

from __future__ import annotations

# The release that drops them.
REMOVED_IN = "0.3"

_TIME_RANGE = {"--begin": "--since", "--end": "--until"}
_DELAY_TABLE = {"--delay-levels": "--message-delay-level"}

# Per command path (as `rmqdelay <path>` is typed): old spelling -> new spelling.
DEPRECATED: dict[str, dict[str, str]] = {
    "run": dict(_DELAY_TABLE),
    "analyze": {"--at": "--now", **_DELAY_TABLE},
    "inspect cq": {"--from": "--offset"},
    "inspect commitlog": {"--from": "--offset"},
    "inspect delay": dict(_DELAY_TABLE),
    "inspect index": {**_TIME_RANGE, "--max": "--limit"},
    "inspect timer": {"--from": "--since", "--to": "--until", "--key": "--uniq-key"},
    "offsets show": dict(_DELAY_TABLE),
    "offsets reset": {"--level": "--levels", **_DELAY_TABLE},
}


def rewrite(command: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """``args`` with the old spellings of ``command`` replaced (``--old V`` and ``--old=V``
    alike, never after ``--``), and {new: old} for each one used."""
    # A group's entry holds for each of its commands (`analyze` for `analyze backlog`).
    table = DEPRECATED.get(command) or DEPRECATED.get(command.partition(" ")[0])
    if not table:
        return args, {}
    out: list[str] = []
    used: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg == "--":
            out += args[i:]
            break
        name, eq, value = arg.partition("=")
        new = table.get(name)
        if new is not None:
            used[new] = name
            arg = new + eq + value
        out.append(arg)
    return out, used


def note(old: str, new: str) -> str:
    return f"rmqdelay: note: {old} is now {new} (the old name goes in {REMOVED_IN})"
