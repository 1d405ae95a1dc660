"""Digests of run artifacts: plain sha256 of public files and checkpoint trees (what the
records of a training command hold, `check_recorded`), and HMAC-SHA256 under the run's
secret key for what a world-readable record may say of a private file (`keyed_digest`).
Every file is read through `pate.store.rundir.open_artifact` (never a link, a FIFO or a device).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from analysis.core.errors import PateError
from pate.store.rundir import PIPELINE_KEY, atomic_write_bytes, open_artifact


def file_digest(path: str | Path) -> str:
    """sha256 hex digest of a file's bytes (what records such as student.json's
    ``labels_sha256`` hold). Never for a world-readable record of a private file: whoever
    can rebuild that file for a neighbouring data set (all votes but one teacher's are
    enough for privacy.json) tells the two apart by its digest; see `keyed_digest`."""
    import hashlib

    h = hashlib.sha256()
    with open_artifact(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_digest(path: str | Path) -> str:
    """sha256 over every file under `path` (relative names and bytes, in sorted order)."""
    import hashlib

    path = Path(path)
    h = hashlib.sha256()
    if path.is_dir() and not path.is_symlink():
        entries = sorted(path.rglob("*"))
        for p in entries:  # a link, FIFO or device inside a checkpoint is damage (`open_artifact`)
            if p.is_symlink() or not (p.is_dir() or p.is_file()):
                open_artifact(p).close()
        files = [p for p in entries if p.is_file()]
    else:
        files = [path]
    for p in files:
        h.update(p.relative_to(path).as_posix().encode() + b"\0" if p != path else b"\0")
        with open_artifact(p) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def check_recorded(kind: str, path: Path, recorded: Any, remake: str) -> None:
    """Refuses a checkpoint whose content is not the one its producer recorded.

    Args:
      kind: what it is, for the message ("teacher checkpoint").
      path: the checkpoint folder (or file).
      recorded: the sha256 its producer wrote, or None for an old run without a record.
      remake: the command that makes it again.
    """
    if recorded is None:
        return
    if not path.exists():
        raise PateError(f"{path} is missing: the {kind} recorded by the run is gone; {remake}")
    if tree_digest(path) != recorded:
        raise PateError(f"{path} is not the {kind} recorded by the run (its content changed or is "
                        f"damaged); {remake}")


# --------------------------------------------------------------------------- keyed digests

DIGEST_KEY_BYTES = 32


def digest_key(run_path: str | Path) -> bytes:
    """The run directory's secret key for `keyed_digest`: ``pipeline.key``, 32 bytes from
    ``secrets.token_bytes`` (the OS CSPRNG), owner-only (0600), made on first use.

    A key file that is not a plain file, not 32 bytes long, or readable by anyone but its
    owner is no secret and is replaced by a fresh key: digests made with the old one then
    match nothing (`pate run` falls back to the artifacts' own config hashes).
    """
    import secrets
    import stat

    path = Path(run_path) / PIPELINE_KEY
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and not st.st_mode & 0o077:
            key = path.read_bytes()
            if len(key) == DIGEST_KEY_BYTES:
                return key
    except OSError:
        pass
    key = secrets.token_bytes(DIGEST_KEY_BYTES)
    atomic_write_bytes(path, key)
    return key


def keyed_digest(path: str | Path, key: bytes) -> str:
    """HMAC-SHA256 (RFC 2104) of a file's bytes under `key`, hex.

    What a world-readable record may hold of a private file (pipeline.json does): under a
    secret uniformly random 256-bit key HMAC-SHA256 is a pseudorandom function (Bellare,
    "New Proofs for NMAC and HMAC: Security without Collision-Resistance", CRYPTO 2006,
    main theorem: HMAC is a PRF when the compression function is a (dual) PRF), so
    without the key the digest of a file the reader can rebuild byte for byte is
    indistinguishable from random: it tells neighbouring data sets apart no better than
    guessing. Equal files still give equal digests, which is all that
    up-to-date detection needs.
    """
    import hashlib
    import hmac

    h = hmac.new(key, digestmod=hashlib.sha256)
    with open_artifact(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def damaged(run_path: str | Path, artifacts, readers: dict | None = None) -> str | None:
    """Why a step's finished `artifacts` in a run directory are not what their records
    say, or None when they are intact: each present file must be a readable plain file
    (.npz readable, .json an object), each folder a folder (never a link, a FIFO or a
    file in its place), and a checkpoint the one its record's sha256 names (teachers.json:
    ``checkpoint.sha256`` of ``teachers/<step>``; student.json and student-round1.json:
    ``checkpoint_sha256`` of ``student/`` and ``student-round1/``). `readers` (name -> function
    of the path) read a file in full (`pate.release.labels.read_labels`). What `pate run` checks before it skips a step."""
    from pate.store import rundir

    run = Path(run_path)
    for name in artifacts:
        path = run / name
        if not os.path.lexists(path):
            continue
        try:
            if name in rundir.ARTIFACT_DIRS:
                if path.is_symlink() or not path.is_dir():
                    return f"{path} is not a folder"
            elif readers and name in readers:
                readers[name](path)
            elif name.endswith(".npz"):
                rundir.read_npz(path)
            elif name.endswith(".json"):
                _check_checkpoint(run, name, rundir.read_json(path))
            else:
                open_artifact(path).close()
        except PateError as err:
            return str(err).split(";")[0]
    return None


def _check_checkpoint(run: Path, record: str, info: dict) -> None:
    """Refuses a checkpoint that is not the one `record` names (`check_recorded`)."""
    from pate.store import rundir

    if record == rundir.TEACHERS_JSON and isinstance(info.get("checkpoint"), dict):
        folder = run / rundir.TEACHERS_DIR / str(info["checkpoint"].get("step"))
        check_recorded("teacher checkpoint", folder, info["checkpoint"].get("sha256"), "train again")
    elif record in (rundir.STUDENT_JSON, rundir.STUDENT_ROUND1_JSON):  # round 2 keeps a byte copy of both
        folder = rundir.STUDENT_DIR if record == rundir.STUDENT_JSON else rundir.STUDENT_ROUND1_DIR
        check_recorded("student checkpoint", run / folder, info.get("checkpoint_sha256"), "train again")
