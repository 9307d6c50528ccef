"""How a store lays out its log, its queues and its configs: found once, where a store is
opened, and the three sources everything above reads through.

Real clusters lay a store out in three ways (DESIGN.md, "Store layouts"):

- plain: ``commitlog/`` and consume-queue files ``consumequeue/TOPIC/QID/``;
- DLedger (``enableDLegerCommitLog=true``): the records inside DLedger entries in
  ``dledger-<selfId>/data/`` (a record's physical offset = its entry's pos + 48); a store
  migrated from a plain one keeps its old ``commitlog/`` files below ``dividedCommitlogOffset``;
- RocksDB (5.x ``storeType=defaultRocksDB``): the plain commit log, the consume queues in a
  RocksDB database at ``consumequeue/``, the consumer offsets, topics and subscription groups in
  RocksDB databases at ``config/consumerOffsets/``, ``config/topics/``, ``config/subscriptionGroups/``.

``find_layout`` tells them apart from the names in the directory (reading no data), and
``Store`` (directory.py) opens one source of each kind from the ``Layout`` it returns:

``store.commitlog`` -- the log source. ``CommitLog`` (commitlog.py) over ``commitlog/``, or
``DLedgerCommitLog`` over the DLedger data files (and the old files below the divide). One
offset space, whatever the framing; every reader above uses only this:
  ``files``: every file holding records, in offset order, as ``LogFile`` (logfile.py: path,
  start, size, ``framing``, ``served``); ``min_offset``; ``end_offset(hint)`` (where the data
  the broker serves ends); ``file_index(offset)``; ``view(index)`` (the file's bytes, mapped);
  ``read_record(offset)`` / ``read_message(offset, size)``; ``records(start)`` (every record
  from a record's offset or a file's start); ``message_spots(offsets, sizes)``. A scan of one
  file goes through ``store.scan.scan_commitlog_file(log_file, ...)``, which follows the file's
  framing: nothing above looks at ``commitlog/`` paths or at record framing of its own.

``store.queues`` -- the queue source. ``FileQueues`` (queues.py) over ``consumequeue/``, or
``RocksQueues`` (rocksqueues.py) over the RocksDB queue table. ``topics()`` -> {topic: [queue ids]}; ``queue(topic, qid)``;
``has_queue(topic, qid)``; ``close()``. A queue (``ConsumeQueue`` is the file one) offers
``topic``, ``queue_id``, ``min_offset``, ``max_offset``, ``max_physic_offset``,
``units(start, stop)`` (a numpy array of ``formats.consumequeue`` units), ``unit(offset)``,
``check_deliver_times(units, first, ext_ok=)``, ``locate(logical)`` -> (path, byte) for
messages, ``release(stop)``, ``runs()`` -> [(first, stop)] logical ranges of units that
follow each other, and ``byte_size`` (what a verify's progress counts). ``store.topics()``,
``store.consume_queue()``, ``store.has_queue()`` go through it.

``store.configs`` -- the config source. ``JsonConfigs`` (configs.py) over
``config/*.json`` (with the broker's ``.bak`` fallback), or the RocksDB config databases.
``load(name, build)`` -> ``build(document)`` or None when the store has none, where name is
``CONSUMER_OFFSETS``, ``TOPICS`` or ``SUBSCRIPTION_GROUPS`` and the document is what the JSON
file holds (``{"offsetTable": ...}``, ``{"topicConfigTable": ...}``,
``{"subscriptionGroupTable": ...}``, and ``dataVersion`` where there is one); ``describe(name)``
names where it is read from, for the screen; ``close()``. ``RocksConfigs`` (rocksconfigs.py)
reads the RocksDB databases. A RocksDB source opens each database from a private snapshot
(rocksdatabase.py), never where the broker keeps it, and names its databases (``databases()``). ``config/delayOffset.json`` is a file in every
layout (``store.delay_offsets()``).

Writers append to a plain log and files of units only: ``refuse_unwritable`` is called at
every writer's door (the lock, before anything is created or changed), and refuses the other
layouts in one line naming the layout and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError, UnwritableLayoutError

# Log sources.
PLAIN = "plain"
DLEDGER = "dledger"
# Queue and config sources.
FILES = "files"
JSON = "json"
ROCKSDB = "rocksdb"

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
DLEDGER_PREFIX = "dledger-"  # DLedgerConfig: storeBaseDir/dledger-<selfId>/{data,index,checkpoint,currterm}
# The RocksDB config databases of storeType=defaultRocksDB (5.3.3, configManagerVersion v1).
ROCKSDB_CONFIG_DIRS = {"consumerOffset": "consumerOffsets", "topics": "topics",
                       "subscriptionGroup": "subscriptionGroups"}

# Files a RocksDB database always has.
_ROCKSDB_MARKERS = ("CURRENT", "IDENTITY", "LOCK")
_ROCKSDB_PREFIXES = ("MANIFEST-", "OPTIONS-")


@dataclass(slots=True, frozen=True)
class Layout:
    log: str  # PLAIN | DLEDGER
    queues: str  # FILES | ROCKSDB
    configs: str  # JSON | ROCKSDB
    dledger_dir: Path | None = None  # dledger-<selfId>/ of a DLedger store

    @property
    def self_id(self) -> str | None:
        return self.dledger_dir.name[len(DLEDGER_PREFIX):] if self.dledger_dir is not None else None

    @property
    def name(self) -> str:
        """How `inspect store` names it: "plain", "DLedger", "RocksDB" (or both)."""
        parts = (["DLedger"] if self.log == DLEDGER else []) + (["RocksDB"] if ROCKSDB in (self.queues, self.configs) else [])
        return " + ".join(parts) or "plain"

    def as_json(self) -> dict:
        return {"name": self.name, "log": self.log, "queues": self.queues, "configs": self.configs,
                "selfId": self.self_id}

    def unwritable(self) -> str | None:
        """Why no offline writer may append to this layout (None: the plain one)."""
        if self.log == DLEDGER:
            return (f"a DLedger store ({self.dledger_dir.name}/data/): rmqdelay does not write to one, as an "
                    f"offline append to one replica forks the group's Raft log (an entry no other node has, "
                    f"outside the term and index the group agreed on); let the group's leader broker write it")
        if ROCKSDB in (self.queues, self.configs):
            where = "consumequeue/" if self.queues == ROCKSDB else "config/"
            return (f"a RocksDB store (storeType=defaultRocksDB, {where} is a RocksDB database): rmqdelay "
                    f"does not write to one, as only the broker's own RocksDB may write its databases (its "
                    f"WAL, memtables and manifest are one state); let the broker write it")
        return None


def is_rocksdb(directory: Path) -> bool:
    """Whether ``directory`` holds a RocksDB database (its CURRENT/IDENTITY/LOCK beside a
    MANIFEST, OPTIONS or SST file)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    return any(n in _ROCKSDB_MARKERS for n in names) and \
        any(n.startswith(_ROCKSDB_PREFIXES) or n.endswith(".sst") for n in names)


def dledger_dirs(store_path: Path) -> list[Path]:
    """The ``dledger-<selfId>/`` directories of a store that hold a ``data/`` directory."""
    try:
        names = sorted(os.listdir(store_path))
    except OSError:
        return []
    return [Path(store_path) / n for n in names
            if n.startswith(DLEDGER_PREFIX) and len(n) > len(DLEDGER_PREFIX) and (Path(store_path) / n / "data").is_dir()]


def find_layout(store_path: Path | str) -> Layout:
    """The layout of the store at ``store_path``, from the names of what is there. Several
    nodes' DLedger directories in one store are told apart by ``dLegerSelfId`` in the store's
    ``broker.conf``, or refused (a store is one node's)."""
    path = Path(store_path)
    nodes = dledger_dirs(path)
    dledger_dir = None
    if len(nodes) == 1:
        dledger_dir = nodes[0]
    elif nodes:
        self_id = _broker_conf_self_id(path)
        chosen = [n for n in nodes if self_id is not None and n.name == DLEDGER_PREFIX + self_id]
        if not chosen:
            names = ", ".join(n.name + "/" for n in nodes)
            raise StoreError(path, None, f"one node's DLedger directory; found {names} and no broker.conf in the "
                                         f"store naming this node (dLegerSelfId)")
        dledger_dir = chosen[0]
    queues = ROCKSDB if is_rocksdb(path / CONSUMEQUEUE_DIR) else FILES
    configs = ROCKSDB if any(is_rocksdb(path / "config" / d) for d in ROCKSDB_CONFIG_DIRS.values()) else JSON
    return Layout(DLEDGER if dledger_dir is not None else PLAIN, queues, configs, dledger_dir)


def _broker_conf_self_id(path: Path) -> str | None:
    from rmqdelay.store.brokerprops import read_broker_properties

    conf = path / "broker.conf"
    if not conf.is_file():
        return None
    try:
        return read_broker_properties(conf).get("dLegerSelfId")
    except Exception:  # an unreadable broker.conf names no node
        return None


def refuse_unwritable(store_path: Path | str) -> None:
    """UnwritableLayoutError (one line, exit 2) when a writer must not append to the store at
    ``store_path``: called before the writer creates or changes anything. A path that is no
    store yet passes (the writer says what it is)."""
    path = Path(store_path)
    if not path.is_dir():
        return
    try:
        layout = find_layout(path)
    except StoreError as exc:
        raise UnwritableLayoutError(path, exc.expected) from None
    why = layout.unwritable()
    if why is not None:
        raise UnwritableLayoutError(path, why)
