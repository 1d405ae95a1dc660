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

LEDGER_ENV = "PATE_LEDGER_DIR"
_KEY_FILE = ".key"


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
    state = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "pate" / "ledgers"


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


def data_identity(data, directory: str | Path | None = None) -> str:
    """The *source* of the private data behind a `[data]` section: the data set's name and
    the sha256 of its training split's content (`pate.data.training_digest`), as
    ``"<name>:sha256:<digest>"``. A copy of the same files under another path, gzipped or
    not, has the same source. The public pool and the evaluation split do not enter: they
    are not private. A plain fingerprint of the private data: it goes into private files
    only (votes.npz, teachers.json, the ledger folder's cache); `Ledger` names its ledger
    by a keyed digest of it (`ledger_name`), which may be published.

    The digest is cached by the training files' stat (path, size, inode, times) in the
    ledger directory (owner-only), so a command reads the data once per change."""
    directory = Path(directory) if directory is not None else default_directory()
    from pate import data as data_mod

    files = data_mod.training_files(data)
    stats = [[str(Path(f).expanduser().resolve()), *_stat(f)] for f in files]
    cache_key = hashlib.sha256(json.dumps([data.name, stats, legacy_identity(data) if not files else ""])
                               .encode("utf-8")).hexdigest()
    source = _IDENTITIES.get((str(directory), cache_key)) or _cached_identity(directory, cache_key)
    if source is None or _SOURCE.fullmatch(source) is None or not source.startswith(f"{data.name}:sha256:"):
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
    if data.name == "synthetic":
        return (f"synthetic(train={data.synthetic_train_size}, shape={list(data.synthetic_shape)}, "
                f"classes={data.synthetic_classes}, noise={data.synthetic_noise:g}, "
                f"seed={data.synthetic_seed})")
    from pate import data as data_mod

    where = data_mod.source_location(data.name, data.path)
    return f"{data.name}:{Path(where).expanduser().resolve()}"


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
    path = directory / _KEY_FILE
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


def run_source(workdir, config=None) -> Source:
    """The data set a run directory's releases belong to: the one its votes.npz names
    (`votes_identity`), else its config's data set (`data_identity`), else the ledger its
    labels.npz names, else the run directory itself. The other names the run's releases
    may have been charged under by an older pate count as ``legacy``."""
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
