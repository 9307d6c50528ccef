"""The options every command spells the same way (docs/cli.md, "One name per concept"): the
store, the clock, time ranges, offsets, limits, the delay levels, the output. A command takes
them from here, so one concept has one name, one metavar and one help text everywhere.
Light: typer only, imported before the arguments are parsed."""

from __future__ import annotations

import re

import typer

from rmqdelay.errors import UsageError

TIME = "TIME"  # ISO 8601 (no zone: UTC) or epoch milliseconds
_TIME_HELP = "ISO 8601 such as 2026-11-23T16:00:00Z (no zone: UTC), or epoch milliseconds"
DURATION = "DURATION"
DURATION_HELP = "a duration such as 90s, 10m, 1h30m, 2d or ISO 8601 PT30M"

# The one duration dialect (docs/cli.md): numbers with units, largest first, or ISO 8601's
# days and time.
_UNITS = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_ISO = re.compile(r"P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?=\d)(?:(?P<h>\d+(?:\.\d+)?)H)?"
                  r"(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?")


def store(help: str = "The broker store directory (storePathRootDir).") -> typer.models.ArgumentInfo:
    return typer.Argument(..., metavar="STORE", help=help, show_default=False)


def now(what: str = "'due' is judged at") -> typer.models.OptionInfo:
    return typer.Option(None, "--now", metavar=TIME, show_default=False,
                        help=f"The clock: the instant {what} ({_TIME_HELP}). Default: the wall clock.")


def since(what: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--since", metavar=TIME, show_default=False,
                        help=f"Only {what} at or after this instant ({_TIME_HELP}).")


def until(what: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--until", metavar=TIME, show_default=False,
                        help=f"Only {what} before this instant.")


def limit(what: str, default: str = "all") -> typer.models.OptionInfo:
    return typer.Option(None, "--limit", metavar="N", show_default=False,
                        help=f"At most N {what}. Default: {default}.")


def levels(help: str = "Only these delay levels: 1,3,5 or 3-18 (repeatable). Default: every level."
           ) -> typer.models.OptionInfo:
    return typer.Option([], "--levels", metavar="LIST", show_default=False, help=help)


def message_delay_level() -> typer.models.OptionInfo:
    return typer.Option(None, "--message-delay-level", metavar="DELAYS", show_default=False,
                        help="The broker's messageDelayLevel, e.g. \"1s 5s 10s 30s 1m\". Default: the broker's 18 "
                             "levels, 1s to 2h.")


def broker_config(reads: str = "messageDelayLevel") -> typer.models.OptionInfo:
    return typer.Option(None, "--broker-config", metavar="FILE", show_default=False,
                        help=f"Read {reads} from this broker.conf.")


def json_out(what: str = "One JSON object per line, for scripts (docs/cli.md lists the fields).") -> typer.models.OptionInfo:
    return typer.Option(False, "--json", help=what)


def wide() -> typer.models.OptionInfo:
    return typer.Option(False, "--wide", help="Show every column at its full width, even where the terminal "
                                               "is narrower (it wraps the lines).")


def delay_level_table(message_delay_level: str | None, broker_config) -> dict[int, int]:
    """The level table: --message-delay-level, else broker.conf's messageDelayLevel, else the
    broker's default 18 levels."""
    from rmqdelay.store.levels import delay_levels_from_broker_config, parse_delay_levels

    if message_delay_level and broker_config:
        raise UsageError("--message-delay-level and --broker-config: give one of them")
    if broker_config:
        return delay_levels_from_broker_config(broker_config)
    return parse_delay_levels(message_delay_level) if message_delay_level else parse_delay_levels()


def parse_levels(values: list[str] | None, option: str = "--levels",
                 what: str = "level numbers such as 1,3,5 or 3-18") -> list[int] | None:
    """``--levels 1,3,5 --levels 7-9``: the levels (or queue ids) named, in order, each once;
    None for none."""
    from rmqdelay.formats.javanum import java_parse_int

    found: list[int] = []
    for text in values or ():
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            lo, dash, hi = part.partition("-")
            first, last = java_parse_int(lo), java_parse_int(hi) if dash else java_parse_int(lo)
            if first is None or last is None or last < first:
                raise UsageError(f"{option}: {what}, found {text!r}")
            found += [n for n in range(first, last + 1) if n not in found]
    return found or None


def parse_count(text: str | None, option: str, *, minimum: int = 0) -> int | None:
    """A count option (``--limit``, ``--offset``): an integer >= ``minimum``, or None."""
    if text is None:
        return None
    from rmqdelay.formats.javanum import java_parse_long

    value = java_parse_long(text.strip())
    if value is None or value < minimum:
        raise UsageError(f"{option}: an integer >= {minimum}, found {text!r}")
    return value


def parse_duration_ms(text: str, option: str) -> int:
    """``500ms``, ``90s``, ``10m``, ``1h30m``, ``2d``, ``1.5s``, or ISO 8601 ``PT30M``,
    ``P1DT2H``: milliseconds. Each unit once, largest first; anything else is a usage error
    naming ``option``."""
    raw = text.strip()
    iso = _ISO.fullmatch(raw.upper()) if raw[:1] in "Pp" else None
    if iso is not None and any(iso.groupdict().values()):
        parts = {k: float(v) if v else 0.0 for k, v in iso.groupdict().items()}
        return int(round((parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]) * 1000))
    pos, total, last = 0, 0.0, None
    for match in _UNITS.finditer(raw):
        unit = _UNIT_MS[match.group(2)]
        if match.start() != pos or (last is not None and unit >= last):
            break
        total += float(match.group(1)) * unit
        pos, last = match.end(), unit
    if not raw or pos != len(raw):
        raise UsageError(f"{option}: {DURATION_HELP}, found {text!r}")
    return int(round(total))


def duration(name: str, help: str, default: str | None = None) -> typer.models.OptionInfo:
    """An option that takes a DURATION."""
    return typer.Option(default, name, metavar=DURATION, show_default=default is not None,
                        help=f"{help} ({DURATION_HELP}).")
