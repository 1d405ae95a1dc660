"""The privacy ledger of a private data set: every release made from it, in any run
directory, and the cumulative ε they spend together.

A guarantee is about the data, not a run directory: labelling the same teachers twice
(``--overwrite`` or a second run directory), drawing a sanitised ε, training DP-SGD on
the same train split all draw on one budget. Each such release is charged here once its
artifacts are written and right before they are put in place (`pate.store.door.publish`;
withdrawn when that commit puts nothing in place), with its data-independent cost (`analysis.composition.Cost`);
`total` composes them (`analysis.composition.compose`, replace-one neighbours).

Identity: a ledger is named by the private data's *source* — the config's data set and
the resolved location of its files (`data_identity`), or a name the user gives
(``--ledger NAME``; external votes) — never by a content digest, which one changed byte
would reset. A keyed digest of the training split's content is recorded per entry, to
say when the data changed; its key lives owner-only beside the ledgers.

Storage: one JSON-lines file per data set in the ledger directory (``[privacy] ledger``,
else ``$PATE_LEDGER_DIR``, else ``$XDG_STATE_HOME/pate/ledgers`` or
``~/.local/state/pate/ledgers``), owner-only (0700 folder, 0600 files), append-only:
each charge rewrites the file atomically (temp file, fsync, rename) under an OS file lock
after checking that the old lines are unchanged. It never holds votes, labels, seeds or
any private value: only public parameters, public digests (of the labels' content,
`pate.release.labels.content_digest`) and keyed digests.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from analysis import composition
from analysis.errors import PateError

LEDGER_ENV = "PATE_LEDGER_DIR"
_KEY_FILE = ".key"
_FORMAT = 1

#: Entry kinds, each a release made from the private data.
KINDS = ("labels", "sanitised-eps", "dpsgd", "fedavg", "synth", "imported")


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


def data_identity(data) -> str:
    """The name of the private data behind a `[data]` section: the data set and where its
    training split comes from (the resolved folder or file), or for synthetic data the
    parameters that generate it. The public pool and the evaluation split do not enter:
    they are not private."""
    if data.name == "synthetic":
        return (f"synthetic(train={data.synthetic_train_size}, shape={list(data.synthetic_shape)}, "
                f"classes={data.synthetic_classes}, noise={data.synthetic_noise:g}, "
                f"seed={data.synthetic_seed})")
    from pate import data as data_mod

    where = data_mod.source_location(data.name, data.path)
    return f"{data.name}:{Path(where).expanduser().resolve()}"


def _slug(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:48] or "ledger"
    return f"{stem}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:12]}"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """The ledger of one private data set.

    Args:
      name: its identity (`data_identity`, or a user's name for external votes).
      directory: the ledger directory (`directory_for`).
    """

    def __init__(self, name: str, directory: str | Path | None = None):
        if not isinstance(name, str) or not name.strip():
            raise PateError("a ledger needs a non-empty name (--ledger NAME)")
        self.name = name.strip()
        self.directory = Path(directory) if directory is not None else default_directory()
        self.path = self.directory / f"{_slug(self.name)}.jsonl"

    @classmethod
    def for_config(cls, config) -> "Ledger":
        return cls(data_identity(config.data), directory_for(config.privacy))

    # ------------------------------------------------------------------ storage

    def _prepare_directory(self) -> None:
        try:
            if not self.directory.is_dir():  # made here: owner-only; a folder given is left as it is
                self.directory.mkdir(parents=True, exist_ok=True)
                os.chmod(self.directory, 0o700)
        except OSError as err:
            raise PateError(f"cannot use the ledger directory {self.directory}: {err.strerror or err}; "
                            f"set [privacy] ledger or ${LEDGER_ENV} to a writable folder") from None
        if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
            raise PateError(f"the ledger {self.path} is not a plain file; move it aside (the ledger "
                            "is never written through a link)")

    @contextlib.contextmanager
    def _lock(self):
        """The ledger's OS file lock, held for the block; refused in one line when it cannot
        be taken (held by another process for 60 s, or its file cannot be made)."""
        import filelock

        lock = Path(str(self.path) + ".lock")
        try:
            with filelock.FileLock(str(lock), timeout=60, thread_local=False):
                yield
        except filelock.Timeout:
            raise PateError(f"the ledger {self.path} stayed locked by another pate process for 60 s; "
                            "try again when it has finished") from None
        except OSError as err:
            if err.filename is None or os.path.abspath(err.filename) != os.path.abspath(lock):
                raise
            raise PateError(f"cannot take the ledger's lock {lock}: {_why(err, lock)}") from None

    def _read_raw(self) -> bytes:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return b""
        except OSError as err:
            raise PateError(f"cannot read the ledger {self.path}: {err.strerror or err}") from None
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def _parse(self, raw: bytes) -> tuple[dict | None, list[dict]]:
        if not raw and self.path.exists():  # written atomically: an empty file is a lost ledger, not a new one
            raise PateError(f"the ledger {self.path} is empty, though pate never writes an empty ledger; it is "
                            "never reset by pate: restore it from a backup, or move it aside knowing that the "
                            "releases it recorded still count")
        header, entries = None, []
        for k, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
            try:
                doc = json.loads(line)
                if not isinstance(doc, dict):
                    raise ValueError
            except ValueError:
                raise PateError(f"the ledger {self.path} is damaged at line {k}; it is never reset "
                                "by pate: restore it from a backup, or move it aside knowing that the "
                                "releases it recorded still count") from None
            if k == 1:
                header = doc
            else:
                self._check_entry(doc, k)
                entries.append(doc)
        if header is not None and header.get("ledger") != self.name:
            raise PateError(f"{self.path} is the ledger of {header.get('ledger')!r}, not {self.name!r}")
        return header, entries

    def _check_entry(self, doc: dict, line: int) -> None:
        """Refuses, naming the file and line, an entry whose kind or cost pate cannot read (a
        cost it cannot compose would otherwise be dropped from the total, or crash it)."""
        try:
            if doc.get("kind") not in KINDS:
                raise PateError(f"unknown entry kind {doc.get('kind')!r}")
            composition.Cost.from_json(doc.get("cost"))
        except PateError as err:
            raise PateError(f"the ledger {self.path} is damaged at line {line} ({err}); it is never reset by "
                            "pate: restore it from a backup, or move it aside knowing that the releases it "
                            "recorded still count") from None

    def entries(self) -> list[dict]:
        """The recorded releases, oldest first ([] for a new ledger)."""
        return self._parse(self._read_raw())[1]

    def exists(self) -> bool:
        return self.path.exists()

    def _key(self) -> bytes:
        """The secret key of keyed digests (32 random bytes, owner-only)."""
        path = self.directory / _KEY_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            if path.is_symlink() or not path.is_file():
                raise PateError(f"the ledger's key {path} is not a plain file; move it aside (pate then makes a "
                                "new key, and older keyed digests no longer match)") from None
            key = path.read_bytes()
            if len(key) != 32:
                raise PateError(f"{path} is damaged (not a 32-byte key); remove it to make a new one "
                                "(old keyed digests then no longer match)") from None
            return key
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
            f.flush()
            os.fsync(f.fileno())
        return path.read_bytes()

    def keyed_digest(self, *parts: bytes) -> str:
        """HMAC-SHA256 of private bytes under the ledger directory's secret key: it says
        whether two inputs are the same without being a public fingerprint of either."""
        self._prepare_directory()
        mac = hmac.new(self._key(), digestmod=hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "little"))
            mac.update(part)
        return mac.hexdigest()

    # ------------------------------------------------------------------ accounting

    def costs(self, extra: Iterable[composition.Cost] = ()) -> list[composition.Cost]:
        return [composition.Cost.from_json(e["cost"]) for e in self.entries()] + list(extra)

    def total(self, delta: float, *, extra: Iterable[composition.Cost] = (),
              conversion: str = "improved") -> composition.Total:
        """The cumulative guarantee of every recorded release (and `extra` ones)."""
        return composition.compose(self.costs(extra), delta, conversion=conversion)

    def check_budget(self, costs: Iterable[composition.Cost], budget: float | None, delta: float,
                     what: str) -> None:
        """Refuses `what` when its costs would take the cumulative ε over ``budget``
        (None or 0: no limit). Writes nothing."""
        _refuse_over_budget(self.name, self.costs(), list(costs), budget, delta, what)

    def find(self, kind: str, subject: str, entries: list[dict] | None = None) -> dict | None:
        """The first entry of `kind` about `subject` (a labels digest, a keyed votes digest)."""
        for entry in self.entries() if entries is None else entries:
            if entry.get("kind") == kind and entry.get("subject") == subject:
                return entry
        return None

    def refuse_repeat(self, kind: str, subject: str, entries: list[dict] | None = None) -> None:
        """Refuses a second release of `kind` about `subject` (a second sanitised draw of the
        same private value: averaging draws removes the noise)."""
        e = self.find(kind, subject, entries)
        if e is not None:
            raise PateError(f"the ledger of {self.name!r} already records a {kind.replace('-', ' ')} release of this "
                            f"private value (entry {e.get('seq')}, {e.get('time')}, run {e.get('run')}); "
                            "a second noisy draw would let an attacker average the noise away. Publish "
                            "the first one; for a new release, label again")

    def charge(self, kind: str, cost: composition.Cost, *, run: str | Path | None = None,
               mechanism: dict | None = None, subject: str | None = None, once: bool = False,
               budget: float | None = None, delta: float = 1e-5, data_digest: str | None = None,
               note: str = "") -> dict:
        """Records a release, under the ledger's lock, once its artifacts are written and right
        before they are put in place (`pate.store.door.publish`).

        Args:
          kind: one of `KINDS`.
          cost: its data-independent cost.
          run: the run directory it was made in.
          mechanism: its public parameters (a mechanism record's ``params`` and name...).
          subject: what it releases about (labels.npz sha256, keyed votes digest).
          once: refuse when an entry of this kind about `subject` exists (a second
            sanitised draw of the same private value).
          budget, delta: refuse when the cumulative ε at δ would exceed ``budget``.
          data_digest: keyed digest of the private data's content.
          note: a few public words.

        Returns:
          The entry written.

        Raises:
          PateError: refused (budget, once), or the ledger cannot be written.
        """
        if kind not in KINDS:
            raise PateError(f"unknown ledger entry kind {kind!r}")
        self._prepare_directory()
        import filelock

        try:
            with self._lock():
                raw = self._read_raw()
                header, entries = self._parse(raw)
                if once and subject is not None:
                    self.refuse_repeat(kind, subject, entries)
                _refuse_over_budget(self.name, [composition.Cost.from_json(e["cost"]) for e in entries],
                                    [cost], budget, delta, f"this {kind} release")
                entry = {"seq": len(entries) + 1, "time": _now(), "kind": kind,
                         "run": None if run is None else str(Path(run).resolve()),
                         "mechanism": mechanism, "cost": cost.to_json(), "subject": subject,
                         "data_digest": data_digest, "note": note}
                if header is None:
                    header = {"ledger": self.name, "format": _FORMAT, "relation": composition.RELATION,
                              "created": _now()}
                    raw = (json.dumps(header) + "\n").encode("utf-8")
                self._write(raw + (json.dumps(entry) + "\n").encode("utf-8"))
                return entry
        except filelock.Timeout:
            raise PateError(f"the ledger {self.path} stayed locked by another pate process for 60 s; "
                            "try again when it has finished") from None

    def withdraw(self, entry: dict) -> None:
        """Removes `entry`, which `charge` wrote in this process, because its release was never
        put in place: its commit failed and put every file back (`pate.store.door.publish`).
        The one exception to append-only: nothing was released, so nothing was spent. Under
        the ledger's lock; an entry no longer there is left alone.

        Raises:
          PateError: the ledger cannot be locked, read or written.
        """
        line = json.dumps(entry)
        with self._lock():
            lines = self._read_raw().decode("utf-8", errors="replace").splitlines(keepends=True)
            keep = [ln for ln in lines if ln.rstrip("\n") != line]
            if len(keep) == len(lines) - 1:
                self._write("".join(keep).encode("utf-8"))

    def check_usable(self) -> None:
        """Refuses, before any work, a ledger no release could be charged to: a folder that
        cannot be made or written, a lock that cannot be taken, a ledger that cannot be read.
        Makes the folder (owner-only) when missing; writes nothing else.

        Raises:
          PateError: one line naming what is wrong.
        """
        import tempfile

        self._prepare_directory()
        with self._lock():
            self.entries()
            try:
                fd, probe = tempfile.mkstemp(dir=self.directory, prefix=f".{self.path.name}.", suffix=".tmp")
            except OSError as err:
                raise PateError(f"cannot write in the ledger directory {self.directory}: "
                                f"{_why(err, self.directory)}") from None
            os.close(fd)
            os.unlink(probe)

    def _write(self, data: bytes) -> None:
        from analysis.report_io import write_atomic

        for tmp in self.directory.glob(f".{self.path.name}.*.tmp"):  # a killed charge's (under the lock)
            tmp.unlink(missing_ok=True)
        try:
            write_atomic(self.path, data, private=True)
        except OSError as err:
            raise PateError(f"cannot write the ledger {self.path}: {err.strerror or err}; nothing was "
                            "released") from None
        os.chmod(self.path, 0o600)

    def summary(self, delta: float, *, extra: Iterable[composition.Cost] = ()) -> dict[str, Any]:
        """The public figures of the ledger (with `extra` releases not yet charged), for
        release.json / dpsgd.json."""
        total = self.total(delta, extra=extra)
        return {"data_set": self.name, "releases": total.count, "cumulative_eps": total.eps,
                "delta": total.delta, "route": total.route, "relation": composition.RELATION,
                "what": "composition of the data-independent cost of every release recorded for this "
                        "data set (pate ledger)"}


def _why(err: OSError, path) -> str:
    """What an OSError on a ledger file or folder means, and what to do."""
    import errno

    if err.errno == errno.EISDIR:
        return "it is a folder, not the file pate makes there; move it aside"
    if err.errno == errno.ENOSPC:
        return "no space left on the device; free space on it"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{err.strerror}; make the ledger folder writable, or set [privacy] ledger or ${LEDGER_ENV}"
    return err.strerror or str(err)


def _refuse_over_budget(name: str, spent: list, new: list, budget: float | None, delta: float,
                        what: str) -> None:
    if not budget:
        return
    total = composition.compose(spent + new, delta)
    if total.eps > budget:
        before = composition.compose(spent, delta).eps
        raise PateError(f"{what} would take the cumulative eps of data set {name!r} to {total.eps:.4g} "
                        f"(delta {total.delta:.3g}; {before:.4g} already spent), over [privacy] "
                        f"total_budget = {budget:g}; nothing was written (`pate ledger` lists what was spent)")


def cumulative_line(book: Ledger, delta: float) -> str:
    """The line every release prints: what its data set has spent in all."""
    total = book.total(delta)
    return (f"ledger of {book.name}: {total.count} release(s), cumulative data-independent eps "
            f"{total.eps:.4g} at delta {total.delta:.3g} (`pate ledger` lists them)")


def render(ledger: Ledger, delta: float) -> str:
    """`pate ledger`'s table: one line per release with its own ε, then the cumulative ε."""
    entries = ledger.entries()
    lines = [f"ledger: {ledger.name}", f"file: {ledger.path}",
             f"neighbouring relation: {composition.RELATION_TEXT}"]
    if not entries:
        lines.append("no release recorded")
        return "\n".join(lines)
    lines.append(f"{'#':>3}  {'when':<25} {'kind':<13} {'own eps':>8}  what / run")
    data_digests = set()
    for e in entries:
        cost = composition.Cost.from_json(e["cost"])
        own = composition.single_eps(cost, delta)
        mech = e.get("mechanism") or {}
        what = mech.get("describe") or cost.describe()
        lines.append(f"{e.get('seq', '?'):>3}  {e.get('time', ''):<25} {e.get('kind', ''):<13} "
                     f"{own:>8.4g}  {what}" + (f"  [{e['run']}]" if e.get("run") else ""))
        if e.get("data_digest"):
            data_digests.add(e["data_digest"])
    total = ledger.total(delta)
    lines.append(f"cumulative eps {total.eps:.4g} at delta {total.delta:.3g} "
                 f"({total.route}; rdp {total.routes['rdp']:.4g}, pld {total.routes['pld']:.4g}) "
                 f"over {total.count} releases")
    if len(data_digests) > 1:
        lines.append("note: the data's content changed between releases (keyed digests differ); they "
                     "are still composed, as releases of one data set")
    lines.append("data-dependent (sanitised) eps values are not composed: ex-post guarantees do not add")
    return "\n".join(lines)


def for_run(workdir, config=None) -> Ledger:
    """The ledger a run directory's releases belong to: named in its labels.npz's meta,
    else by its config's data set, else by the run directory itself."""
    from pate.store import rundir

    run = rundir.RunDir(workdir)
    config = run.stored_config() if config is None else config
    directory = directory_for(config.privacy if config is not None else None)
    if run.exists(rundir.LABELS_NPZ):
        try:
            meta = run.read_npz(rundir.LABELS_NPZ).get("meta") or {}
        except PateError:
            meta = {}
        if isinstance(meta, dict) and meta.get("ledger"):
            return Ledger(str(meta["ledger"]), directory)
    if config is not None:
        return Ledger(data_identity(config.data), directory)
    return Ledger("run:" + os.path.abspath(os.fspath(workdir)), directory)


def import_run(workdir, *, name: str | None = None, echo=print) -> list[dict]:
    """Charges the releases of a run directory made before the ledger existed, once each:
    its labels (labels.npz), its sanitised ε (release.json) and its DP-SGD model
    (dpsgd.json). A release already recorded (same labels digest / same dpsgd.json) is
    skipped, so importing twice charges nothing more.

    Returns:
      The entries written.
    """
    from analysis import mechanisms
    from pate.store import digests, rundir
    from pate.release import fine_grained_release
    from pate.release.labels import content_digest, read_run_labels

    run = rundir.RunDir(workdir)
    if not run.path.is_dir():
        raise PateError(f"run directory {run.path} does not exist")
    config = run.own_config()
    book = for_run(workdir, config) if name is None else Ledger(name, directory_for(
        config.privacy if config is not None else None))
    privacy = config.privacy if config is not None else None
    release_cost = privacy.release_cost if privacy is not None else 0.2
    written = []

    def charge_once(kind, cost, subject, describe, older=None):
        if book.find(kind, subject) is not None or (older is not None and book.find(kind, older) is not None):
            echo(f"already in the ledger: {describe}")
            return
        written.append(book.charge(kind, cost, run=run.path, subject=subject, once=True,
                                   mechanism={"describe": describe}, note="imported"))
        echo(f"charged: {describe}")

    if run.exists(rundir.LABELS_NPZ) and fine_grained_release.is_fine_grained(labels := read_run_labels(run.path)):
        noise = fine_grained_release.noise_from(labels, rundir.LABELS_NPZ)  # one release, no sanitised draw
        charge_once("labels", noise.cost(), content_digest(labels),
                    f"labels: every pool point from one fine-grained release ({noise.kind} noise)",
                    digests.file_digest(run / rundir.LABELS_NPZ))
    elif run.exists(rundir.LABELS_NPZ):
        labels = read_run_labels(run.path)
        record = mechanisms.from_arrays(labels, rundir.LABELS_NPZ)
        cap = int(float(labels["max_answers"])) if "max_answers" in labels else None
        n = int(labels["indices"].size)
        subject = content_digest(labels)
        older = digests.file_digest(run / rundir.LABELS_NPZ)  # what an older version keyed on
        charge_once("labels", composition.labels_cost(record, n, max_answers=cap), subject,
                    f"labels: {n} queries of {record.describe()}", older)
        if run.exists(rundir.RELEASE_JSON):
            doc = run.read_json(rundir.RELEASE_JSON)
            details = doc.get("details") or {}
            try:
                cost = record.sanitised_cost(details, release_cost)
            except (KeyError, TypeError, ValueError):
                raise PateError(f"{run / rundir.RELEASE_JSON} lacks the release's parameters "
                                "(release_order, beta / eps_release_cost); it was not written by pate "
                                "analyze or is damaged") from None
            charge_once("sanitised-eps", cost, subject, f"sanitised eps of {record.name}: {cost.describe()}", older)
    if run.exists(rundir.DPSGD_JSON):
        doc = run.read_json(rundir.DPSGD_JSON)
        try:
            cost = composition.dpsgd_cost(doc["sampling_rate"], doc["noise_multiplier"], doc["steps"])
        except (KeyError, TypeError, ValueError):
            raise PateError(f"{run / rundir.DPSGD_JSON} lacks sampling_rate, noise_multiplier or steps; "
                            "it was not written by pate dpsgd or is damaged") from None
        charge_once("dpsgd", cost, "dpsgd:" + digests.file_digest(run / rundir.DPSGD_JSON),
                    f"DP-SGD {doc.get('model', '?')}: {cost.describe()}")
    if not written and not (run.exists(rundir.LABELS_NPZ) or run.exists(rundir.DPSGD_JSON)):
        raise PateError(f"{run.path} holds no release (labels.npz, dpsgd.json) to import")
    return written
