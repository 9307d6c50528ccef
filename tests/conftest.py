import base64
import gzip
import json
import shutil
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
REAL_BROKER_SAMPLES = ["delay-fresh", "delay-partial", "retry"]


def load_expected(name: str) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    with gzip.open(SAMPLES / name / "expected.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            by_kind.setdefault(obj["kind"], []).append(obj)
    return by_kind


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(params=REAL_BROKER_SAMPLES)
def real_sample(request):
    """(name, read-only store path, expected records by kind) of each real-broker sample."""
    name = request.param
    return name, SAMPLES / name / "store", load_expected(name)


@pytest.fixture
def store_copy(tmp_path):
    """A writable copy of a sample store: store_copy('delay-fresh') -> Path."""

    def make(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(SAMPLES / name / "store", dest)
        return dest

    return make
