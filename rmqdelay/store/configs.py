"""The config source of a store whose configs are files: ``config/*.json`` read as the
broker's ConfigManager.load reads them (layout.py has the contract every config source keeps).

``config/delayOffset.json`` is a file in every layout and is read by ``Store.delay_offsets``
through ``load_config_file`` too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rmqdelay.errors import ConfigFallbackWarning, NotRegularFileError, StoreError
from rmqdelay.formats.delayoffset import parse_fastjson_object
from rmqdelay.formats.errors import FormatError
from rmqdelay.store.fileio import read_file

T = TypeVar("T")

# The config documents a store keeps (the JSON files' names without ".json").
CONSUMER_OFFSETS = "consumerOffset"
TOPICS = "topics"
SUBSCRIPTION_GROUPS = "subscriptionGroup"


class JsonConfigs:
    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir

    def path(self, name: str) -> Path:
        return self.config_dir / f"{name}.json"

    def describe(self, name: str) -> str:
        return f"config/{name}.json"

    def load(self, name: str, build: Callable[[dict], T]) -> T | None:
        """``build`` of the document of config/NAME.json (the .bak as the broker falls back);
        None when neither exists. A FormatError of ``build`` names the file."""
        return load_config_file(self.path(name), lambda text: build(parse_fastjson_object(text)))

    def close(self) -> None:
        pass  # nothing held open


def load_config_file(path: Path, parse: Callable[[str], T], *, fallback: bool = True) -> T | None:
    """A broker config file read as ConfigManager.load does: the ``.bak`` when the file is
    missing, empty or unparsable; None when neither exists. When both are unusable, the error
    names the first file that was.

    Using the ``.bak`` for a file that is there but unusable is never silent: a
    ``ConfigFallbackWarning`` names the file and what was wrong with it. A FIFO or a
    directory in its place is refused at once. ``fallback=False``
    raises that problem instead (a missing file still falls back, as the broker's does):
    what a writer wants, since an older ``.bak`` means work done again."""
    error: StoreError | None = None
    missing: StoreError | None = None
    for candidate in (path, path.with_name(path.name + ".bak")):
        problem: StoreError | None = None
        try:
            data = read_file(candidate)
            if data is None:
                if candidate == path:
                    missing = StoreError(path, None, "missing")
                continue
            text = data.decode("utf-8")
        except NotRegularFileError:
            raise  # a FIFO or a directory here is no file to fall back from: refused at once
        except StoreError as exc:
            problem = exc
        except UnicodeDecodeError as exc:
            problem = StoreError(candidate, exc.start, "UTF-8 text")
        else:
            if not text.strip():
                problem = StoreError(candidate, 0, "a JSON object; the file is empty")
            else:
                try:
                    value = parse(text)
                except FormatError as exc:
                    problem = StoreError(candidate, exc.offset, exc.expected)
                else:
                    if candidate != path:
                        warnings.warn(ConfigFallbackWarning(
                            f"{error or missing}; read {candidate.name} instead, as the broker would"), stacklevel=2)
                    return value
        if candidate == path and not fallback:
            raise StoreError(problem.path, problem.offset,
                             f"{problem.expected} (the broker would fall back to {path.name}.bak, an older "
                             f"state; repair or remove the file first)")
        error = error or problem
    if error is not None:
        raise error
    return None
