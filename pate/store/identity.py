"""Which private data set a release belongs to, and where its ledger lives
(`pate.store.ledger` keeps the ledger itself).

A data set is its *content*: the data set's name and the sha256 of its training split
(`data_identity`), so a copy of the files under another path is the same data set. Private
files record that source (teachers.json, votes.npz: `votes_identity`); a ledger is named by a
keyed digest of it under the ledger folder's key (`ledger_name`: publishable, the same for
every copy). A run directory's releases belong to the data set its votes or config name
(`run_source`); external votes to the data set their file names, else a name the user gives
(`votes_source`); never to one shared bucket. An older pate named ledgers by the files'
location (`legacy_identity`); those still count.

Where: ``[privacy] ledger``, else ``$PATE_LEDGER_DIR``, else ``$XDG_STATE_HOME/pate/ledgers``
or ``~/.local/state/pate/ledgers`` (`directory_for`), always absolute; the folder holds the
32-byte key (owner-only) that names data sets and keys digests (`keyed`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from analysis.core.errors import PateError
from pate.store.ledger_home import KEY_FILE, LEDGER_ENV, state_directory


class Source(NamedTuple):
    """Which data set's ledger a release is charged to: its source (`data_identity`) or a
    user's name, the ledger folder, and the names an older pate gave it (``legacy``)."""

    name: str
    directory: Path
    legacy: tuple = ()


def default_directory() -> Path:
    """Where ledgers live when no config names a place (module docstring): ``$PATE_LEDGER_DIR``
    (absolute, or ``~/...``), else ``$XDG_STATE_HOME/pate/ledgers`` when that is absolute (a
    relative one is ignored, as the XDG Base Directory specification says), else
    ``~/.local/state/pate/ledgers``.

    Raises:
      PateError: ``$PATE_LEDGER_DIR`` blank or relative: the ledger would follow the working
        directory, so a command run from another folder would start an empty ledger and
        escape ``total_budget``.
    """
    env = os.environ.get(LEDGER_ENV)
    if env is not None and env != "":
        return _absolute(env, f"${LEDGER_ENV}")
    return state_directory()


def _absolute(where: str, source: str) -> Path:
    """``where`` as an absolute folder (``~`` expanded), or a one-line refusal naming ``source``."""
    path = Path(where.strip()).expanduser() if where.strip() else None
    if path is None or not path.is_absolute():
        raise PateError(f"{source} = {where!r} is not an absolute folder: a ledger there would move with the "
                        "working directory (and a budget with it); give an absolute path such as ~/pate-ledgers")
    return path


def directory_for(privacy=None) -> Path:
    """The ledger directory of a `[privacy]` section (its ``ledger`` key, absolute or
    ``~/...``), else the default."""
    where = getattr(privacy, "ledger", "") if privacy is not None else ""
    return _absolute(where, "privacy.ledger") if where else default_directory()


def votes_folder(path) -> Path | None:
    """The ledger folder a votes file was labelled under (its private ``meta.ledger_directory``,
    written by `pate label` and `label --votes`), or None when it names none (an older pate's,
    votes made elsewhere, a damaged file: its reader refuses that in its own words)."""
    from analysis.core.files import open_plain

    if not os.fspath(path).endswith(".npz"):
        return None
    try:
        with open_plain(path) as fh, np.load(fh, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"])) if "meta" in f.files else {}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, PateError):
        return None
    where = meta.get("ledger_directory") if isinstance(meta, dict) else None
    return Path(where) if isinstance(where, str) and os.path.isabs(where) else None


def labelled_under(workdir) -> Path | None:
    """The ledger folder a run's votes were labelled under (votes.npz's, else round 2's votes'
    private ``meta.ledger_directory``), or None when no votes file names one (labelled by
    an older pate, or damaged: the command's own reading refuses that)."""
    from pate.store import rundir

    run = rundir.RunDir(workdir)
    for name in (rundir.VOTES_NPZ, rundir.VOTES_ROUND2_NPZ):
        try:
            meta = run.read_npz(name).get("meta") if run.exists(name) else None
        except PateError:
            continue
        where = meta.get("ledger_directory") if isinstance(meta, dict) else None
        if isinstance(where, str) and os.path.isabs(where):
            return Path(where)
    return None


def visible_directories(workdir=None, config=None) -> list[Path]:
    """Every ledger folder a command on a run can see, for the "once" guard of a sanitised
    draw (`pate.store.ledger.Ledger.refuse_drawn_elsewhere`): the config's ``[privacy]
    ledger``, the one the run was labelled under (`labelled_under`), ``$PATE_LEDGER_DIR``,
    and the default without it (``$XDG_STATE_HOME/pate/ledgers`` when that is absolute, else
    ``~/.local/state/pate/ledgers``, as `default_directory` picks); those that exist, each once."""
    found: list[Path] = []

    def add(where) -> None:
        try:
            path = Path(where).expanduser()
            if path.is_absolute() and path.is_dir() and path.resolve() not in [p.resolve() for p in found]:
                found.append(path)
        except (TypeError, ValueError, OSError):
            return

    privacy = getattr(config, "privacy", None)
    if getattr(privacy, "ledger", ""):
        add(privacy.ledger)
    if workdir is not None:
        where = labelled_under(workdir)
        if where is not None:
            add(where)
    if os.environ.get(LEDGER_ENV):
        add(os.environ[LEDGER_ENV])
    add(state_directory())
    return found


def data_identity(data, directory: str | Path | None = None, *, new: bool = False) -> str:
    """The *source* of the private data behind a `[data]` section: the data set's name and a
    sha256 of the multiset of its training records, as ``"<name>:sha256:<digest>"``: the
    sorted per-record sha256s (`record_digests`; with the npz's ``ids``, each record's id
    too) hashed together, so a copy under another path, gzipped or not, or with its records
    in another order, has the same source. The public pool and the evaluation split do not
    enter: they are not private. A plain fingerprint of the private data: it goes into
    private files only (votes.npz, teachers.json, the ledger folder's cache); `Ledger` names
    its ledger by a keyed digest of it (`ledger_name`), which may be published.

    A data set is its people, not its file (`_place`): a split that shares most of its
    records with a data set the ledger folder knows, or most of that data set's records
    (`SAME_SHARE`, counted against each side), is that data set — the same people, records
    added, changed or removed, a data set grown step by step — and that data set's source
    is returned. A record is known by its input alone (classes renamed are the same
    people), or by its id (``ids`` in the npz: the same people re-encoded or as
    embeddings); a split declaring ``[data] dataset`` is the data set of that name. Every
    other data set of the folder holding one of its records is *linked* to it (`linked`):
    each one's releases count against the other's budget. ``new`` (``[privacy]
    new_data_set``): the user names the split a new data set on purpose. The folder keeps
    only keyed 8-byte digests of each split's records and ids (owner-only, ``.records/``)
    and keyed declared names.

    The source is cached by the training files' stat (path, size, inode, times) in the
    ledger directory (owner-only), so a command reads the data once per change.

    Raises:
      PateError: ``[data] dataset`` with ``[privacy] new_data_set`` (they contradict), or
        the npz's ``ids`` are not one integer or string per record."""
    directory = Path(directory) if directory is not None else default_directory()
    from pate import data as data_mod

    declared = getattr(data, "dataset", "") or ""
    if declared and new:
        raise PateError(f"[data] dataset = {declared!r} names the data set these records belong to, and [privacy] "
                        "new_data_set = true names them a new data set: give one or the other")
    files = data_mod.training_files(data)
    stats = [[str(Path(f).expanduser().resolve()), *_stat(f)] for f in files]
    cache_key = hashlib.sha256(json.dumps(["v2", data.name, stats, legacy_identity(data) if not files else ""])
                               .encode("utf-8")).hexdigest()
    source = _IDENTITIES.get((str(directory), cache_key)) or _cached_identity(directory, cache_key)
    if (source is None or _SOURCE.fullmatch(source) is None or not source.startswith(f"{data.name}:sha256:")
            or not _known(directory, source, new)):
        ids = data_mod.train_ids(data)
        digests, inputs = [], []
        for x, y in data_mod.train_chunks(data):
            digests += record_digests(x, y)
            inputs += input_digests(x)
        named = digests if ids is None else [hashlib.sha256(d + b"id" + i).digest() for d, i in zip(digests, ids)]
        source = f"{data.name}:sha256:{_multiset_digest(named)}"
        prepare(directory)
        with _placing(directory):
            _remember(directory, source, _Split(digests, inputs, ids), new, declared)
        _cache_identity(directory, cache_key, source)
    _IDENTITIES[(str(directory), cache_key)] = source
    if new or _records_path(directory, source).is_file():
        root = source
    else:
        root = _aliases(directory).get(source, {}).get("data_set", source)
    if declared:
        with _placing(directory):
            _declare(directory, root, declared)
    return root


@contextlib.contextmanager
def _placing(directory: Path):
    """The ledger folder's lock for placing a split (`_remember`, `_declare`): two commands
    placing splits at once each see the other's records and links, and lose none."""
    import filelock

    lock = directory / ".records.lock"
    try:
        with filelock.FileLock(str(lock), timeout=60, thread_local=False):
            yield
    except filelock.Timeout:
        raise PateError(f"the ledger folder {directory} stayed locked ({lock}) by another pate process for 60 s; "
                        "try again when it has finished") from None


#: The share of a new training split's records that another data set of the ledger folder
#: must hold, or the share of that data set's records the split must hold, for the split
#: to be that data set (`data_identity`): most of them, counted against either side.
SAME_SHARE = 0.5
_RECORDS = ".records"
_MEMBERS = "members"
_ALIASES = ".aliases.json"
_LINKS = ".links.json"


class _Split(NamedTuple):
    """A training split's per-record digests, in its order: input and label
    (`record_digests`), input alone (`input_digests`), and ids (sha256, or None)."""

    records: list
    inputs: list
    ids: list | None


def record_digests(x_train: np.ndarray, y_train: np.ndarray) -> list[bytes]:
    """sha256 of each training record (its image as loaded, float32, and its label, int32),
    in the split's order: the multiset a data set is (read in chunks, `pate.data.train_chunks`:
    32 bytes a record are kept, never the split)."""
    x = np.ascontiguousarray(x_train, dtype=np.float32)
    y = np.ascontiguousarray(y_train, dtype=np.int32)
    head = b"pate-record-v1" + repr(x.shape[1:]).encode("ascii")
    return [hashlib.sha256(head + x[i].tobytes() + y[i].tobytes()).digest() for i in range(x.shape[0])]


def input_digests(x_train: np.ndarray) -> list[bytes]:
    """sha256 of each training record's input alone (as loaded, float32), in order: what says
    two splits hold the same people whatever their labels (classes renamed, labels fixed)."""
    x = np.ascontiguousarray(x_train, dtype=np.float32)
    head = b"pate-input-v1" + repr(x.shape[1:]).encode("ascii")
    return [hashlib.sha256(head + x[i].tobytes()).digest() for i in range(x.shape[0])]


def _multiset_digest(digests: list[bytes]) -> str:
    h = hashlib.sha256(b"pate-training-split-v2")
    h.update(len(digests).to_bytes(8, "little"))
    for d in sorted(digests):
        h.update(d)
    return h.hexdigest()


def _keyed_records(directory: Path, digests: list[bytes], sort: bool = True) -> np.ndarray:
    """The records' 8-byte digests under a key derived from the folder's secret key (blake2b
    keyed): they say whether two splits share a record, and reveal no record without the key."""
    key = bytes.fromhex(keyed(directory, b"record-digests"))
    out = np.array([int.from_bytes(hashlib.blake2b(d, key=key, digest_size=8).digest(), "little")
                    for d in digests], dtype=np.uint64)
    return np.sort(out) if sort else out


def _records_path(directory: Path, source: str) -> Path:
    return directory / _RECORDS / f"{keyed(directory, b'records-file', source.encode('utf-8'))[:32]}.npz"


def _member_path(directory: Path, source: str) -> Path:
    """Where an alias keeps its records (apart from the data sets' own: an older pate reads
    ``.records/*.npz`` as data sets)."""
    return directory / _RECORDS / _MEMBERS / f"{keyed(directory, b'member-file', source.encode('utf-8'))[:32]}.npz"


def _aliases(directory: Path) -> dict:
    try:
        doc = json.loads((directory / _ALIASES).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _links(directory: Path) -> dict:
    """``.links.json``: ``links`` (pairs of data sets sharing records, with how many) and
    ``declared`` (a declared name's keyed digest -> its data set)."""
    try:
        doc = json.loads((Path(directory) / _LINKS).read_text())
    except (OSError, ValueError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    links = [x for x in doc.get("links", []) if isinstance(x, dict) and isinstance(x.get("data_sets"), list)]
    declared = doc.get("declared") if isinstance(doc.get("declared"), dict) else {}
    return {"links": links, "declared": declared}


def _write_links(directory: Path, doc: dict) -> None:
    from analysis.core.files import write_atomic

    write_atomic(directory / _LINKS, json.dumps(doc).encode("utf-8"), private=True)


def linked(directory: str | Path, source: str) -> list[tuple[str, int]]:
    """The other data sets of the ledger folder that share records (or a declared name) with
    data set ``source``, each with how many records it shares (0: a declared name): a release
    of either counts against the other's budget (`pate.store.ledger.Ledger`)."""
    out: dict[str, int] = {}
    for link in _links(Path(directory))["links"]:
        pair = [s for s in link["data_sets"] if isinstance(s, str)]
        if len(pair) == 2 and source in pair and pair[0] != pair[1]:
            other = pair[1] if pair[0] == source else pair[0]
            out[other] = max(out.get(other, 0), int(link.get("shared", 0) or 0))
    return sorted(out.items())


def _link(directory: Path, pairs: list[tuple[str, str, int]]) -> None:
    """Records that each pair of data sets shares ``shared`` records (both ways)."""
    doc = _links(directory)
    changed = False
    for a, b, shared in pairs:
        if a == b:
            continue
        for link in doc["links"]:
            if sorted(link["data_sets"]) == sorted([a, b]):
                if shared > int(link.get("shared", 0) or 0):
                    link["shared"], changed = shared, True
                break
        else:
            doc["links"].append({"data_sets": sorted([a, b]), "shared": shared, "time": _now()})
            changed = True
    if changed:
        _write_links(directory, doc)


def _declare(directory: Path, root: str, name: str) -> None:
    """A declared data-set name (``[data] dataset``, kept keyed): the first data set to declare
    it owns it; another data set declaring it later is linked to that one."""
    key = keyed(directory, b"declared-data-set", name.encode("utf-8"))[:32]
    doc = _links(directory)
    owner = doc["declared"].get(key)
    if owner is None:
        doc["declared"][key] = root
        _write_links(directory, doc)
    elif owner != root:
        _link(directory, [(owner, root, 0)])


def _declared_owner(directory: Path, name: str) -> str | None:
    if not name:
        return None
    owner = _links(directory)["declared"].get(keyed(directory, b"declared-data-set", name.encode("utf-8"))[:32])
    return owner if isinstance(owner, str) else None


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _known(directory: Path, source: str, new: bool) -> bool:
    """Whether the folder has already placed `source`: its own records (kept as this pate
    keeps them: an older pate's lack the inputs' digests, read again once), or (unless
    `new`) an alias."""
    own = _records_path(directory, source)
    if own.is_file():
        try:
            with zipfile.ZipFile(own) as z:
                return "inputs.npy" in z.namelist()
        except (OSError, zipfile.BadZipFile):
            return True  # damaged: still found by its exact source
    return not new and source in _aliases(directory)


class _Member(NamedTuple):
    source: str
    data_set: str
    records: np.ndarray
    inputs: np.ndarray | None
    ids: np.ndarray


def _members(directory: Path) -> list[_Member]:
    """Every split the folder keeps records of: the data sets' own and their aliases'."""
    found = []
    folder = directory / _RECORDS
    paths = sorted(folder.glob("*.npz")) + sorted((folder / _MEMBERS).glob("*.npz")) if folder.is_dir() else []
    for path in paths:
        try:
            with np.load(path, allow_pickle=False) as f:
                source = str(f["source"])
                data_set = str(f["data_set"]) if "data_set" in f.files else source
                found.append(_Member(source, data_set, f["records"],
                                     f["inputs"] if "inputs" in f.files else None,
                                     f["ids"] if "ids" in f.files else np.zeros(0, np.uint64)))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            continue  # damaged: that data set is still found by its exact source
    return found


def _place(directory: Path, source: str, mine: dict, declared: str) -> tuple[str | None, float, dict[str, int]]:
    """Which data set a new split is (None: its own), the share that says so, and how many of
    its records every known data set holds (`data_identity`)."""
    held: dict[str, np.ndarray] = {}
    best: dict[str, float] = {}
    size = max(mine["records"].size, 1)
    for m in _members(directory):
        if m.source == source:
            continue
        if m.inputs is not None:
            hit = np.isin(mine["inputs"], m.inputs)
        else:  # kept by an older pate: input and label
            hit = np.isin(mine["records"], m.records)
        if mine["ids"].size and m.ids.size:
            hit |= np.isin(mine["ids"], m.ids)
        shared = int(hit.sum())
        if not shared:
            continue
        held[m.data_set] = hit if m.data_set not in held else held[m.data_set] | hit
        share = max(shared / size, shared / max(m.records.size, 1))
        best[m.data_set] = max(best.get(m.data_set, 0.0), share)
    counts = {d: int(h.sum()) for d, h in held.items()}
    owner = _declared_owner(directory, declared)
    if owner is not None and owner != source:
        return owner, -1.0, counts  # -1: by its declared name
    same = [d for d in counts if best[d] >= SAME_SHARE]
    if not same:
        return None, 0.0, counts
    root = max(same, key=lambda d: (counts[d], best[d], d))
    return root, best[root], counts


def _remember(directory: Path, source: str, split: _Split, new: bool, declared: str = "") -> None:
    """Places a source the folder has not seen (`_place`): the alias of the data set it is,
    whose records it keeps (so growth step by step stays one data set), else (or when
    `new`) a data set of its own; every other data set holding one of its records is linked
    to the one it is, `new` or not: a name chosen on purpose does not make shared people new. Only keyed digests are kept (owner-only)."""
    from analysis.core.files import write_atomic

    mine = {"records": _keyed_records(directory, split.records, sort=False),
            "inputs": _keyed_records(directory, split.inputs, sort=False),
            "ids": (_keyed_records(directory, [b"pate-id-v1" + i for i in split.ids], sort=False)
                    if split.ids is not None else np.zeros(0, np.uint64))}
    root, share, counts = (None, 0.0, {}) if not mine["records"].size else _place(directory, source, mine, declared)
    if new:  # a data set of its own on purpose; the people it shares still count both ways (linked below)
        root, share = None, 0.0
    if _records_path(directory, source).is_file():
        root = None  # a data set of its own, placed by an older pate: its records are kept again, whole
    folder = directory / _RECORDS
    for where in (folder, folder / _MEMBERS) if root is not None else (folder,):
        if not where.is_dir():
            where.mkdir(mode=0o700, exist_ok=True)
            os.chmod(where, 0o700)
    import io

    buf = io.BytesIO()
    np.savez(buf, records=np.sort(mine["records"]), inputs=np.sort(mine["inputs"]), ids=np.sort(mine["ids"]),
             source=np.array(source), data_set=np.array(root or source))
    if root is not None:
        doc = _aliases(directory)
        doc[source] = ({"data_set": root, "declared": True, "shared": 0.0, "time": _now()} if share < 0 else
                       {"data_set": root, "shared": share, "time": _now()})
        write_atomic(directory / _ALIASES, json.dumps(doc).encode("utf-8"), private=True)
        write_atomic(_member_path(directory, source), buf.getvalue(), private=True)
    else:
        write_atomic(_records_path(directory, source), buf.getvalue(), private=True)
    here = root or source
    _link(directory, [(here, other, n) for other, n in counts.items() if other != here])


def same_data_set_notes(directory: Path, source: str) -> list[str]:
    """`pate ledger`'s words for the training splits charged to `source`'s ledger because
    they share most of its records (`data_identity`), and for the data sets that share
    some of its records (`linked`)."""
    notes = [(f"same data set: a training split declaring this data set's [data] dataset name is charged here "
              f"(since {a.get('time', '?')})") if a.get("declared") else
             (f"same data set: a training split that shares {a.get('shared', 0):.1%} of its records with this data "
              f"set (or holds that share of this data set's records) is charged here (since {a.get('time', '?')}); "
              "a split meant as another data set is named so on purpose with [privacy] new_data_set = true")
             for a in _aliases(Path(directory)).values()
             if isinstance(a, dict) and a.get("data_set") == source]
    for other, shared in linked(directory, source):
        how = f"shares {shared} records" if shared else "declares the same [data] dataset name"
        notes.append(f"warning: the data set {ledger_name(other, directory)} {how} with this one: the releases of "
                     "each count against the other's budget (+ below: its releases, counted here)")
    return notes


def previous_identity(data, directory: Path) -> str:
    """The source an older pate gave the same split: the sha256 of its records in file order
    (`pate.data.training_digest`); its ledger still counts (`Ledger.for_config`). Cached as
    `data_identity` is."""
    from pate import data as data_mod

    files = data_mod.training_files(data)
    stats = [[str(Path(f).expanduser().resolve()), *_stat(f)] for f in files]
    cache_key = hashlib.sha256(json.dumps(["v1", data.name, stats, legacy_identity(data) if not files else ""])
                               .encode("utf-8")).hexdigest()
    source = _IDENTITIES.get((str(directory), cache_key)) or _cached_identity(directory, cache_key)
    if source is None or _SOURCE.fullmatch(source) is None:
        source = f"{data.name}:sha256:{data_mod.training_digest(data)}"
        prepare(directory)
        _cache_identity(directory, cache_key, source)
    _IDENTITIES[(str(directory), cache_key)] = source
    return source


#: A data source (`data_identity`): the data set's name and the sha256 of its training split.
_SOURCE = re.compile(r"(.+):sha256:([0-9a-f]{64})")


def ledger_name(source: str, directory: str | Path) -> str:
    """The ledger name of a data `source`: its data set's name and the first 128 bits of
    an HMAC of its digest under the ledger directory's key — publishable, and the same for
    every copy of the data; any other name (a user's ``--ledger NAME``) is itself."""
    match = _SOURCE.fullmatch(source.strip())
    if match is None:
        return source.strip()
    return f"{match[1]}:{keyed(Path(directory), b'data-set', match[2].encode('ascii'))[:32]}"


#: In-process cache of `data_identity` (ledger directory, stat key) -> name.
_IDENTITIES: dict[tuple[str, str], str] = {}
_IDENTITY_CACHE = ".identities.json"


def _stat(path) -> list[int]:
    try:
        st = os.stat(path)
    except OSError as err:
        raise PateError(f"cannot read the data file {path}: {err.strerror or err}") from None
    return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns]


def _cached_identity(directory: Path, cache_key: str) -> str | None:
    try:
        doc = json.loads((directory / _IDENTITY_CACHE).read_text())
    except (OSError, ValueError):
        return None  # missing or damaged: computed again (it is only a cache)
    name = doc.get(cache_key) if isinstance(doc, dict) else None
    return name if isinstance(name, str) else None


def _cache_identity(directory: Path, cache_key: str, name: str) -> None:
    from analysis.core.files import write_atomic

    path = directory / _IDENTITY_CACHE
    try:
        doc = json.loads(path.read_text()) if path.is_file() else {}
        doc = doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        doc = {}
    doc[cache_key] = name
    try:
        write_atomic(path, json.dumps(doc).encode("utf-8"), private=True)
    except OSError:
        pass  # only a cache


def legacy_identity(data) -> str:
    """The name an older pate gave the same `[data]` section's ledger: the data set and the
    resolved location of its files (synthetic data: its generating parameters). Such a
    ledger's releases still count (`Ledger`'s ``legacy``)."""
    from pate import data as data_mod

    return data_mod.legacy_identity(data)


def votes_identity(path) -> str | None:
    """The data set a votes file (votes.npz written by pate) says its votes come from
    (``meta.data_set``), else None (an older pate's, or votes made elsewhere)."""
    from analysis.core.files import open_plain

    if not os.fspath(path).endswith(".npz"):
        return None
    try:
        with open_plain(path) as fh, np.load(fh, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"])) if "meta" in f.files else {}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None  # the votes reader refuses a damaged file in its own words
    name = meta.get("data_set") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name.strip():
        return None
    if not name.isprintable():
        raise PateError(f"{path} names its data set {name!r}, which pate never writes (not one line of printable "
                        "text): the file was edited or damaged; label from the run's own votes again")
    return name


def _key(directory: Path) -> bytes:
    """The secret key of a ledger directory's keyed digests (32 random bytes, owner-only).
    Data-set names are keyed by it: a lost key renames every data set, so it is never
    replaced silently. A new key is written whole to a temp file and linked into place, so
    the key file is either absent or complete: a full disk leaves no empty key behind (which
    every later command would refuse as damaged), and of two processes making it, one wins."""
    path = directory / KEY_FILE
    if not os.path.lexists(path):
        _make_key(directory, path)
    if path.is_symlink() or not path.is_file():
        raise PateError(f"the ledger's key {path} is not a plain file; move it aside (pate then makes a new "
                        "key, and every data set's ledger name and keyed digest changes with it)")
    try:
        key = path.read_bytes()
    except OSError as err:
        raise PateError(f"cannot read the ledger key {path}: {err.strerror or err}") from None
    if len(key) != 32:
        raise PateError(f"{path} is damaged (not a 32-byte key); restore it from a backup: data-set names "
                        "and keyed digests are made with it, and a new key would start new ledgers")
    return key


def _make_key(directory: Path, path: Path) -> None:
    import errno
    import tempfile

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".key.", suffix=".tmp")  # 0600
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: that key is the one
    except OSError as err:
        why = ("no space left on the device; free space on it, then run the command again"
               if err.errno == errno.ENOSPC else
               f"{err.strerror or err}; set [privacy] ledger or ${LEDGER_ENV} to a writable folder")
        raise PateError(f"cannot make the ledger's key {path}: {why}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def prepare(directory: Path) -> None:
    """Makes the ledger folder when it is missing (owner-only); a folder given is left as it is."""
    try:
        if not directory.is_dir():  # made here: owner-only; a folder given is left as it is
            directory.mkdir(parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
    except OSError as err:
        import errno

        why = ("it, or a folder above it, is a file, not a folder" if err.errno in (errno.EEXIST, errno.ENOTDIR)
               else err.strerror or str(err))
        raise PateError(f"cannot use the ledger directory {directory}: {why}; "
                        f"set [privacy] ledger or ${LEDGER_ENV} to a writable folder") from None


def keyed(directory: Path, *parts: bytes) -> str:
    """HMAC-SHA256 of `parts` under the key of the ledger directory `directory`."""
    prepare(directory)
    mac = hmac.new(_key(directory), digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "little"))
        mac.update(part)
    return mac.hexdigest()


def keyed_split(directory: Path, data) -> str:
    """`keyed` of a `[data]` section's whole private train split as ``(train_x.tobytes(),
    train_y.tobytes())`` (float32 records, int32 labels) without holding it: the records are
    read as a stream (`pate.data.train_chunks`), the labels (four bytes a record) kept until
    the records are hashed. The same value as `keyed` of the bytes in memory."""
    import numpy as np

    from pate import data as data_mod

    prepare(directory)
    mac = hmac.new(_key(directory), digestmod=hashlib.sha256)
    chunks = data_mod.train_chunks(data)
    total = data_mod.train_count(data)
    labels, started = [], False
    for x, y in chunks:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if not started:
            mac.update((total * (x.nbytes // max(x.shape[0], 1))).to_bytes(8, "little"))
            started = True
        mac.update(memoryview(x).cast("B"))
        labels.append(np.ascontiguousarray(y, dtype=np.int32))
    if not started:  # an empty split: no record bytes
        mac.update((0).to_bytes(8, "little"))
    y = np.concatenate(labels) if labels else np.zeros(0, np.int32)
    mac.update(y.nbytes.to_bytes(8, "little"))
    mac.update(memoryview(y).cast("B"))
    return mac.hexdigest()


#: labels.npz's meta key of a release across silos (`pate silos run`): its coordinator holds no
#: record, so the ledger it names is the data set's (`run_source`).
SILOS_META = "silos"


def run_source(workdir, config=None) -> Source:
    """The data set a run directory's releases belong to: the one its votes.npz names
    (`votes_identity`), else the ledger a release across silos named (`SILOS_META`: the
    coordinator held no record; its config's `[data]` is the public pool's), else its config's
    data set (`data_identity`), else the ledger its labels.npz names, else the run directory
    itself. The other names the run's releases may have been charged under by an older pate
    count as ``legacy``."""
    from pate.store import rundir

    run = rundir.RunDir(workdir)
    config = run.stored_config() if config is None else config
    directory = directory_for(config.privacy if config is not None else None)
    named = votes_identity(run / rundir.VOTES_NPZ) if run.exists(rundir.VOTES_NPZ) else None
    meta = {}
    if run.exists(rundir.LABELS_NPZ):
        try:
            meta = run.read_npz(rundir.LABELS_NPZ).get("meta") or {}
        except PateError:
            meta = {}
    labelled = str(meta["ledger"]) if isinstance(meta, dict) and meta.get("ledger") else None
    if named is None and labelled and meta.get(SILOS_META):
        return Source(labelled, directory, ())
    legacy = [labelled] if labelled else []
    if config is not None:
        legacy.append(legacy_identity(config.data))
        if named is None:
            try:
                named = data_identity(config.data, directory)
            except PateError:
                named = None  # the data is gone: the labels' own record still names the ledger
    name = named or labelled or "run:" + os.path.abspath(os.fspath(workdir))
    return Source(name, directory, tuple(legacy))


def votes_source(votes, name: str | None = None, directory: str | Path | None = None) -> Source:
    """The data set a release from external votes belongs to: the one the votes file names
    (`votes_identity`: votes.npz written by pate), else the run directory it sits in
    (`run_source`), else ``name`` (``--ledger NAME``). In-memory votes need ``name``.

    Raises:
      PateError: the votes name no data set and no ``name`` is given (all such votes would
        otherwise share one ledger), or ``name`` contradicts the data set they name.
    """
    from pate.store import rundir

    directory = default_directory() if directory is None else Path(directory)
    if not isinstance(votes, (str, os.PathLike)):
        if not name:
            raise PateError("in-memory votes need the name of the private data set they come from (ledger=NAME, "
                            "the same for every release from it): pate cannot tell two arrays' data sets apart")
        return Source(name, directory)
    path = Path(votes)
    named = votes_identity(path)
    if named is None and path.name in (rundir.VOTES_NPZ, rundir.VOTES_ROUND2_NPZ) and (
            path.parent / rundir.CONFIG_TOML).is_file():
        named = run_source(path.parent).name  # an older pate's run: its config names the data set
    if named is not None and name and name.strip() not in (named, ledger_name(named, directory)):
        raise PateError(f"{path} holds votes on the data set {named!r}; --ledger {name!r} would charge another "
                        "ledger: drop --ledger (or give that name)")
    if named is None and not name:
        raise PateError(f"{path} does not say which private data set its votes come from (made elsewhere or by an "
                        "older pate): pass --ledger NAME, the same name for every release from that data set")
    return Source(named or name, directory)
