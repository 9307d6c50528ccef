"""The config source of a store whose consumer offsets, topics and subscription groups are
RocksDB databases (5.x ``storeType=defaultRocksDB``, configManagerVersion v1; layout.py has
the contract every config source keeps).

``config/consumerOffsets/``, ``config/topics/``, ``config/subscriptionGroups/`` each hold, in
column family ``default``, one entry per name (``TOPIC@GROUP``, a topic, a group) whose value
is the JSON the broker's fastjson wrote (RocksDBOffsetSerializeWrapper ``{"offsetTable":
{qid: offset}}``, TopicConfig, SubscriptionGroupConfig), and in column family
``kvDataVersion`` the key ``kvDataVersionKey`` with the DataVersion. They are read back as
the document the JSON file would hold. As the broker's RocksDB*Manager.merge does, a JSON
file beside the database whose dataVersion counter is higher wins.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rmqdelay.errors import StoreError
from rmqdelay.formats.delayoffset import parse_fastjson_object
from rmqdelay.formats.errors import FormatError
from rmqdelay.store.configs import CONSUMER_OFFSETS, SUBSCRIPTION_GROUPS, TOPICS, JsonConfigs
from rmqdelay.store.layout import ROCKSDB_CONFIG_DIRS, is_rocksdb
from rmqdelay.store.rocksdatabase import RocksDatabase, database_facts

T = TypeVar("T")

DATA_VERSION_CF = "kvDataVersion"
DATA_VERSION_KEY = b"kvDataVersionKey"
# The document's table of each config, as its JSON file names it.
_TABLES = {CONSUMER_OFFSETS: "offsetTable", TOPICS: "topicConfigTable",
           SUBSCRIPTION_GROUPS: "subscriptionGroupTable"}


class RocksConfigs:
    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir
        self.files = JsonConfigs(config_dir)
        self._databases: dict[str, RocksDatabase] = {}
        self._from_file: dict[str, bool] = {}

    def database_path(self, name: str) -> Path:
        return self.config_dir / ROCKSDB_CONFIG_DIRS[name]

    def has_database(self, name: str) -> bool:
        return is_rocksdb(self.database_path(name))

    def databases(self) -> list:
        """What `inspect store` says of each database (rocksdatabase.DatabaseFacts)."""
        return [database_facts(self.database_path(n)) for n in ROCKSDB_CONFIG_DIRS if self.has_database(n)]

    def describe(self, name: str) -> str:
        if self._from_file.get(name) or not self.has_database(name):
            return self.files.describe(name)
        return f"config/{ROCKSDB_CONFIG_DIRS[name]}/ (RocksDB)"

    def _database(self, name: str) -> RocksDatabase:
        db = self._databases.get(name)
        if db is None:
            db = self._databases[name] = RocksDatabase(self.database_path(name))
        return db

    def document(self, name: str) -> dict:
        """The database of ``name`` as its JSON file's document."""
        db = self._database(name)
        path = self.database_path(name)
        table: dict = {}
        for key, value in db.items("default"):
            try:
                entry = key.decode("utf-8")
            except UnicodeDecodeError:
                raise StoreError(path, None, f"UTF-8 keys in column family default, found {key.hex()}") from None
            table[entry] = _json(path, value, f"the value of {entry!r}")
        if name == CONSUMER_OFFSETS:
            offsets = {}
            for entry, wrapper in table.items():
                inner = wrapper.get("offsetTable") if isinstance(wrapper, dict) else None
                if not isinstance(inner, dict):
                    raise StoreError(path, None, f'{{"offsetTable": {{queueId: offset}}}} as the value of {entry!r}')
                offsets[entry] = inner
            table = offsets
        doc: dict = {}
        version = db.get(DATA_VERSION_CF, DATA_VERSION_KEY)
        if version:
            doc["dataVersion"] = _json(path, version, f"the {DATA_VERSION_KEY.decode()} of column family "
                                                      f"{DATA_VERSION_CF}")
        doc[_TABLES.get(name, "table")] = table
        return doc

    def load(self, name: str, build: Callable[[dict], T]) -> T | None:
        """``build`` of the document of the database of NAME (None when the store has neither
        it nor the JSON file); the JSON file instead when its dataVersion counter is higher."""
        if not self.has_database(name):
            self._from_file[name] = True
            return self.files.load(name, build)
        doc = self.document(name)
        newer = self._newer_file(name, _counter(doc))
        if newer is not None:
            self._from_file[name] = True
            return build(newer)
        self._from_file[name] = False
        try:
            return build(doc)
        except FormatError as exc:
            raise StoreError(self.database_path(name), None, exc.expected) from None

    def _newer_file(self, name: str, counter: int) -> dict | None:
        """The JSON file's document when the broker would merge it over the database."""
        path = self.files.path(name)
        if not (path.exists() or path.with_name(path.name + ".bak").exists()):
            return None
        doc = self.files.load(name, lambda d: d)
        if doc is not None and _counter(doc) > counter:
            return doc
        return None

    def close(self) -> None:
        for db in self._databases.values():
            db.close()
        self._databases.clear()


def _counter(doc: dict) -> int:
    version = doc.get("dataVersion")
    counter = version.get("counter") if isinstance(version, dict) else None
    return counter if isinstance(counter, int) and not isinstance(counter, bool) else 0


def _json(path: Path, value: bytes, what: str) -> dict:
    try:
        return parse_fastjson_object(value.decode("utf-8"))
    except UnicodeDecodeError:
        raise StoreError(path, None, f"UTF-8 JSON as {what}") from None
    except FormatError as exc:
        raise StoreError(path, None, f"{exc.expected} in {what}") from None
