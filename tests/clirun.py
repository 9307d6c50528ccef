"""Run the `rmqdelay` entry point in this process, exactly as the console script does
(same error handling and exit codes), capturing what it writes."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from rmqdelay.commands import main as cli_main


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def run_cli(capsys, *args: str) -> CliResult:
    capsys.readouterr()  # drop anything written before
    saved = sys.argv
    sys.argv = ["rmqdelay", *map(str, args)]
    try:
        cli_main.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)
