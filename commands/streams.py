"""What stdout and stderr do with text their encoding cannot hold: escape it, never fail.
Apart from common.py (and rich) so that `rmqdelay --version` sets it up without them."""

from __future__ import annotations

import codecs
import sys


def _escape_unencodable(exc: UnicodeEncodeError) -> tuple[str, int]:
    """An output error handler: a byte that was not UTF-8 in the store shows as \\xNN,
    any other character the output encoding lacks as \\uNNNN -- never an exception."""
    out = []
    for ch in exc.object[exc.start:exc.end]:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out), exc.end


codecs.register_error("rmqdelay.escape", _escape_unencodable)


def configure_streams() -> None:
    """Writing text the terminal's (or PYTHONIOENCODING's) encoding cannot hold escapes it
    instead of failing: on stdout and stderr alike."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="rmqdelay.escape")
            except (ValueError, OSError):
                pass  # a closed or special stream: leave it as it is

