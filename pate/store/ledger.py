"""The privacy ledger of a private data set: every release made from it, in any run
directory, the cumulative ε they spend together, and the data set's budget.

A guarantee is about the data, not a run directory: labelling the same teachers twice
(``--overwrite`` or a second run directory), drawing a sanitised ε, training DP-SGD on
the same train split all draw on one budget. Each such release is charged here once its
artifacts are written and right before they are put in place (`pate.store.door.publish`;
withdrawn when that commit puts nothing in place), with its data-independent cost
(`analysis.mechanisms.composition.Cost`); `total` composes them (`analysis.mechanisms.composition.compose`,
replace-one neighbours) and adds the float64 label samplers' δ of every label release
(`analysis.core.noise.sampling_tv`).

Identity (`pate.store.identity`): a ledger is named by the private data's *content*, or by
a name the user gives for votes made elsewhere; `Ledger.for_config`, `Ledger.for_run` and
`Ledger.for_votes` find it. Votes with no recorded data set and no name are refused.

Budget: the first ``[privacy] total_budget`` a command brings is recorded in the ledger
(a ``budget`` entry, ε at δ) and holds for every later command, ``--votes`` ones
included; a config's lower budget tightens it, only ``pate ledger --set-budget`` raises it.

Storage: one JSON-lines file per data set in the ledger directory
(`pate.store.identity.directory_for`), owner-only (0700 folder, 0600 files), append-only:
each charge rewrites the file atomically (temp file, fsync, rename) under an OS file lock
after checking that the old lines are unchanged. It never holds votes, labels, seeds or
any private value: only public parameters, public digests (of the labels' content,
`pate.release.labels.content_digest`) and keyed digests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from analysis.mechanisms import composition
from analysis.core.errors import PateError
from pate.store.ledger_home import LEDGER_ENV
from pate.store.identity import (data_identity, default_directory, directory_for, keyed, keyed_split,
                                  ledger_name, legacy_identity, linked, prepare, previous_identity, run_source,
                                  same_data_set_notes, votes_source)

_FORMAT = 1

#: Entry kinds that are releases made from the private data (each with a cost).
RELEASE_KINDS = ("labels", "sanitised-eps", "dpsgd", "fedavg", "synth", "imported")
#: Entry kinds that release nothing: the data set's budget, and a mark that some release
#: parameters were chosen on the private votes (`pate plan --votes --on-private-votes`).
MARK_KINDS = ("budget", "private-tuning")
KINDS = RELEASE_KINDS + MARK_KINDS


def _slug(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:48] or "ledger"
    return f"{stem}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:12]}"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """The ledger of one private data set.

    Args:
      name: its data source (`data_identity`: named then by `ledger_name`), or a user's
        name for external votes.
      directory: the ledger directory (`directory_for`).
      legacy: names an older pate gave the same data set (`legacy_identity`): their
        releases are read with this ledger's and count in every total and check; new
        entries go to this ledger only.
    """

    def __init__(self, name: str, directory: str | Path | None = None, *, legacy: Iterable[str] = ()):
        if not isinstance(name, str) or not name.strip():
            raise PateError("a ledger needs a non-empty name (--ledger NAME)")
        if not name.isprintable():  # a newline would split every line that names it
            raise PateError(f"a ledger name must be one line of printable text, got {name!r}; give another "
                            "(--ledger NAME)")
        self.directory = Path(directory) if directory is not None else default_directory()
        #: What private files record (votes.npz, teachers.json): a data source, or the name.
        self.source = name.strip()
        self.name = ledger_name(self.source, self.directory)
        self.path = self.directory / f"{_slug(self.name)}.jsonl"
        self.legacy = tuple(n for n in legacy if n and n != self.name)

    @classmethod
    def for_config(cls, config, rows: range | None = None) -> "Ledger":
        """The ledger of a config's private data set (`pate.store.identity.data_identity`: the
        multiset of its records, or the data set a split sharing most of them belongs to,
        unless ``[privacy] new_data_set``); the ledgers an older pate named by the files'
        location or by the records in file order still count. ``rows`` (``range(start,
        stop)``): the ledger of that block of the split's records alone (a silo's slice, read
        alone; no older pate named a block)."""
        directory = directory_for(config.privacy)
        source = data_identity(config.data, directory, new=bool(getattr(config.privacy, "new_data_set", False)),
                               rows=rows)
        if rows is not None:
            return cls(source, directory)
        return cls(source, directory, legacy=(legacy_identity(config.data), previous_identity(config.data, directory)))

    @classmethod
    def for_teachers(cls, workdir, config) -> "Ledger":
        """The ledger of the data set a run's teachers were trained on (the ``data_set``
        teachers.json records), whatever the data file has become since: their votes are
        made from that data. A run whose teachers.json records none: `for_config`."""
        from pate.store import rundir

        run = rundir.RunDir(workdir)
        named = None
        if run.exists(rundir.TEACHERS_JSON):
            try:
                named = run.read_json(rundir.TEACHERS_JSON).get("data_set")
            except (PateError, AttributeError):
                named = None
        if not isinstance(named, str) or not named.strip():
            return cls.for_config(config)
        directory = directory_for(config.privacy)
        return cls(named, directory, legacy=(legacy_identity(config.data),))

    @classmethod
    def for_run(cls, workdir, config=None) -> "Ledger":
        """The ledger a run directory's releases belong to (`pate.store.identity.run_source`)."""
        source = run_source(workdir, config)
        return cls(source.name, source.directory, legacy=source.legacy)

    @classmethod
    def for_votes(cls, votes, name: str | None = None, directory: str | Path | None = None) -> "Ledger":
        """The ledger a release from external votes is charged to
        (`pate.store.identity.votes_source`; in-memory votes need ``name``).

        Raises:
          PateError: the votes name no data set and no ``name`` is given, or ``name``
            contradicts the data set they name.
        """
        source = votes_source(votes, name, directory)
        return cls(source.name, source.directory)

    # ------------------------------------------------------------------ storage

    def _prepare_directory(self) -> None:
        prepare(self.directory)
        if self.path.is_symlink() or (self.path.exists() and not self.path.is_file()):
            raise PateError(f"the ledger {self.path} is not a plain file; move it aside (the ledger "
                            "is never written through a link)")

    @contextlib.contextmanager
    def _lock(self, suffix: str = ".lock", timeout: float = 60):
        """The ledger's OS file lock (``suffix``: another lock beside it), held for the block;
        refused in one line when it cannot be taken (held by another process for ``timeout``
        seconds, or its file cannot be made)."""
        import filelock

        lock = Path(str(self.path) + suffix)
        try:
            with filelock.FileLock(str(lock), timeout=timeout, thread_local=False):
                yield
        except filelock.Timeout:
            raise PateError(f"the ledger {self.path} stayed locked by another pate process for {timeout:g} s; "
                            "try again when it has finished") from None
        except OSError as err:
            if err.filename is None or os.path.realpath(err.filename) != os.path.realpath(lock):
                raise  # (filelock names the lock by its real path: the ledger folder may be a link)
            raise PateError(f"cannot take the ledger's lock {lock}: {_why(err, lock)}") from None

    @contextlib.contextmanager
    def importing(self):
        """Held by `pate ledger --import` from its first look-up to its last charge (a lock of
        its own beside the ledger's, which each charge takes inside it): two imports of one
        run at the same time are one after the other, so the second finds the first's
        charges and charges nothing again."""
        self._prepare_directory()
        with self._lock(".import.lock", timeout=600):
            yield self

    def _read_raw(self) -> bytes:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return b""
        except OSError as err:
            raise PateError(f"cannot read the ledger {self.path}: {_why(err, self.path)}") from None
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
            raise PateError(f"{self.path} is the ledger of {header.get('ledger')!r}, not {self.name!r} (a file copied "
                            "or renamed over it); put it back under its own name, or move it aside knowing that "
                            "the releases it recorded still count")
        return header, entries

    def _check_entry(self, doc: dict, line: int) -> None:
        """Refuses, naming the file and line, an entry whose kind, cost or budget pate cannot
        read (a cost it cannot compose would otherwise be dropped from the total, or crash it)."""
        try:
            kind = doc.get("kind")
            if kind not in KINDS:
                raise PateError(f"unknown entry kind {kind!r}")
            if kind in RELEASE_KINDS:
                composition.Cost.from_json(doc.get("cost"))
                tv = doc.get("sampling_tv", 0.0)
                if isinstance(tv, bool) or not isinstance(tv, (int, float)) or not 0 <= tv < math.inf:
                    raise PateError(f"sampling_tv must be a number >= 0, got {tv!r}")
            elif kind == "budget":
                _budget_values(doc)
        except PateError as err:
            raise PateError(f"the ledger {self.path} is damaged at line {line} ({err}); it is never reset by "
                            "pate: restore it from a backup, or move it aside knowing that the releases it "
                            "recorded still count") from None

    def _legacy_entries(self) -> list[dict]:
        out = []
        for name in self.legacy:
            old = Ledger(name, self.directory)
            if old.path.exists():
                out += [{**e, "ledger": name} for e in old._parse(old._read_raw())[1]]
        return out

    def linked(self) -> list["Ledger"]:
        """The ledgers of the other data sets of this folder that share records with this one
        (or its declared name; `pate.store.identity.linked`): the same people, so each one's
        releases count in the other's total and against the other's budget."""
        return [Ledger(other, self.directory) for other, _ in linked(self.directory, self.source)]

    def _linked_entries(self) -> list[dict]:
        """The entries of the linked data sets' own ledgers, marked ``linked`` with their name:
        read with this ledger's, never written here (a release is recorded once, in the
        ledger of the data set it was made from)."""
        out = []
        for other in self.linked():
            if other.path.exists() and other.path != self.path:
                out += [{**e, "linked": other.name} for e in other._parse(other._read_raw())[1]]
        return out

    def entries(self) -> list[dict]:
        """The recorded entries, an older pate's ledgers of the same data first, then those of
        the data sets sharing records with this one (`linked`) ([] for a new ledger)."""
        return self._legacy_entries() + self._linked_entries() + self._parse(self._read_raw())[1]

    def releases(self, entries: list[dict] | None = None) -> list[dict]:
        """The entries that are releases (each with a cost)."""
        return [e for e in (self.entries() if entries is None else entries) if e.get("kind") in RELEASE_KINDS]

    def exists(self) -> bool:
        return self.path.exists() or any(Ledger(n, self.directory).path.exists() for n in self.legacy)

    def keyed_digest(self, *parts: bytes) -> str:
        """HMAC-SHA256 of private bytes under the ledger directory's secret key: it says
        whether two inputs are the same without being a public fingerprint of either."""
        self._prepare_directory()
        return keyed(self.directory, *parts)

    def keyed_split_digest(self, data) -> str:
        """`keyed_digest(train_x.tobytes(), train_y.tobytes())` of a `[data]` section's whole
        private train split, read as a stream (`pate.store.identity.keyed_split`): what a
        distributed command's process 0 charges with, holding only its own records."""
        self._prepare_directory()
        return keyed_split(self.directory, data)

    # ------------------------------------------------------------------ accounting

    def costs(self, extra: Iterable[composition.Cost] = (), entries: list[dict] | None = None
              ) -> list[composition.Cost]:
        return [composition.Cost.from_json(e["cost"]) for e in self.releases(entries)] + list(extra)

    def total(self, delta: float, *, extra: Iterable[composition.Cost] = (), extra_tv: float = 0.0,
              conversion: str = "improved") -> composition.Total:
        """The cumulative guarantee of every recorded release (and `extra` ones, with
        `extra_tv` of float64 sampling), its δ counting the float64 label samplers' too:
        the releases' total variations add (`analysis.core.noise.sampling_tv`) and give δ
        (`analysis.core.noise.delta_of_sampling`)."""
        entries = self.entries()
        total = composition.compose(self.costs(extra, entries), delta, conversion=conversion)
        tv = sum(float(e.get("sampling_tv", 0.0)) for e in self.releases(entries)) + float(extra_tv)
        return _with_sampling(total, tv)

    def budget(self, entries: list[dict] | None = None) -> tuple[float, float] | None:
        """The data set's recorded budget (ε, δ): the last ``budget`` entry, else None."""
        found = [e for e in (self.entries() if entries is None else entries) if e.get("kind") == "budget"]
        return _budget_values(found[-1]) if found else None

    def tuned_on_private_data(self, entries: list[dict] | None = None) -> bool:
        """True when a release's parameters were chosen on this data set's private votes."""
        return any(e.get("kind") == "private-tuning" for e in (self.entries() if entries is None else entries))

    def check_budget(self, costs: Iterable[composition.Cost], budget: float | None, delta: float,
                     what: str) -> None:
        """Refuses `what` when its costs would take the cumulative ε over the ledger's
        recorded budget or ``budget`` (a config's; None or 0: none). A first budget, or one
        lower than the recorded one, is recorded (`_limits`); nothing else is written."""
        costs = list(costs)
        with self._locked() as (raw, header, entries):
            limits, record = _limits(self.budget(entries), budget, delta)
            if record is not None:
                self._append(raw, header, entries, [record])
            self._refuse_over_linked_budgets(costs, delta, what)
        _refuse_over_budget(self.name, self.costs(entries=entries), costs, limits, what)

    def _refuse_over_linked_budgets(self, costs: list, delta: float, what: str) -> None:
        """Refuses `what` when its costs would take a data set sharing records with this one
        (`linked`) over the budget recorded in that data set's ledger: the release uses its
        people too."""
        for other in self.linked():
            theirs = other.entries()
            limits, _ = _limits(other.budget(theirs), None, delta)
            _refuse_over_budget(other.name, other.costs(entries=theirs), costs, limits,
                                f"{what}, made from records that data set {other.name!r} shares,")

    def set_budget(self, eps: float, delta: float) -> dict:
        """`pate ledger --set-budget`: records ``eps`` at ``delta`` as the data set's budget,
        raising or lowering it on purpose; refused below what is already spent."""
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < math.inf:
            raise PateError(f"--set-budget must be a finite eps > 0, got {eps!r}")
        with self._locked() as (raw, header, entries):
            spent = composition.compose(self.costs(entries=entries), delta).eps
            if spent > eps:
                raise PateError(f"the data set {self.name!r} has already spent eps {spent:.4g} at delta {delta:g}; "
                                f"a budget of {eps:g} would be below it (a budget cannot undo releases); give at "
                                f"least {spent:.4g}")
            entry = {"kind": "budget", "budget": float(eps), "delta": float(delta),
                     "note": "set by pate ledger --set-budget"}
            return self._append(raw, header, entries, [entry])[-1]

    def mark(self, kind: str, *, note: str, run: str | Path | None = None, mechanism: dict | None = None) -> dict:
        """Records an entry that releases nothing (`MARK_KINDS`)."""
        if kind not in MARK_KINDS:
            raise PateError(f"unknown ledger mark {kind!r}")
        with self._locked() as (raw, header, entries):
            entry = {"kind": kind, "run": None if run is None else str(Path(run).resolve()),
                     "mechanism": mechanism, "note": note}
            return self._append(raw, header, entries, [entry])[-1]

    def check_holds_run(self, labels_path, subjects: tuple) -> None:
        """A run belongs to one ledger: refuses, in one line and before anything is drawn or
        charged, a run whose labels (``labels_path``, known by ``subjects``) were charged to a
        ledger (their ``meta.ledger``) that this ledger folder does not hold, unless this
        ledger records those labels (`pate ledger --import` counted them here on purpose).
        Otherwise the run's next release would go to a fresh, empty ledger (another HOME,
        another ``$PATE_LEDGER_DIR`` or ``[privacy] ledger``): another budget, no record of the
        labels nor of their sanitised draw. The line names the folder the run was labelled
        under when its votes say (`pate.store.identity.labelled_under`). It never charges that
        folder instead: the config and the environment name where charges go, and a run file
        silently overriding them would split a data set's ledger the other way."""
        from pate.store import rundir
        from pate.store.identity import labelled_under

        try:
            meta = rundir.read_npz(labels_path).get("meta") or {}
        except PateError:
            return  # the command's own reading of the labels refuses them
        named = meta.get("ledger") if isinstance(meta, dict) else None
        if not isinstance(named, str) or not named or named == self.name or Ledger(named, self.directory).exists():
            return
        if self.records_labels(labels_path, subjects):
            return
        run = Path(labels_path).parent
        where = labelled_under(run)
        home = (f"the ledger folder {where}" if where is not None and where.resolve() != self.directory.resolve()
                else "another ledger folder")
        point = f"set ${LEDGER_ENV} or [privacy] ledger to {where}" if where is not None else (
            f"set ${LEDGER_ENV} or [privacy] ledger to the folder it was labelled under")
        raise PateError(f"{labels_path} belongs to the ledger {named!r} in {home}, which the ledger folder "
                        f"{self.directory} does not hold (another HOME, ${LEDGER_ENV} or [privacy] ledger?); nothing "
                        f"was drawn, trained or charged: {point}, or count its releases here on purpose first with "
                        f"`pate ledger --import {run}`")

    def check_holds_votes(self, votes_path) -> None:
        """A votes file belongs to the ledger folder it was labelled under (votes.npz's private
        ``meta.ledger_directory``): refuses, in one line and before anything is drawn or
        charged, a release from it under another folder that holds no ledger of its data set
        (another HOME, ``$PATE_LEDGER_DIR`` or ``[privacy] ledger``: a fresh ledger there would
        be another budget, with no record of what the votes already released). A folder that
        holds this data set's ledger (the same folder, or the run imported there on purpose
        with `pate ledger --import`) is the run's. Votes that name no folder (an older pate's,
        made elsewhere) pass: their ledger is the one they name or ``--ledger NAME``."""
        from pate.store.identity import votes_folder

        where = votes_folder(votes_path)
        if where is None or where.resolve() == self.directory.resolve() or self.exists():
            return
        run = Path(votes_path).parent
        raise PateError(f"{votes_path} was labelled under the ledger folder {where}, which records its data set; the "
                        f"ledger folder {self.directory} holds no ledger of it (another HOME, ${LEDGER_ENV} or "
                        f"[privacy] ledger?); nothing was drawn, trained or charged: set ${LEDGER_ENV} or [privacy] ledger to "
                        f"{where}, or count the run's releases here on purpose first with `pate ledger --import {run}`")

    def records_labels(self, labels_path, subjects: tuple) -> bool:
        """Whether this ledger records the label release at ``labels_path`` (known by its own
        identity, `release_identity`, or by ``subjects``: its content digest, an older pate's
        file digest): charged by the command that made it, or by `pate ledger --import`."""
        release = release_identity("labels", labels_path)
        wanted = {s for s in subjects if s}
        return any(e.get("kind") in ("labels", "imported") and (e.get("release") == release or e.get("subject") in wanted)
                   for e in self.entries())

    def refuse_drawn_elsewhere(self, subjects: tuple, directories) -> None:
        """The "once" guard across ledger folders: refuses a sanitised draw of labels (known
        by ``subjects``) whose draw a ledger in another of ``directories`` (the folders this
        run can name, `pate.store.identity.visible_directories`) already records. Reads those
        folders only; a ledger there that cannot be read is passed over."""
        for directory in directories:
            if Path(directory).resolve() == self.directory.resolve():
                continue
            found = _drawn_in(Path(directory), subjects)
            if found is not None:
                path, entry = found
                raise PateError(f"the ledger {path} (another ledger folder) already records a sanitised eps release "
                                f"of these labels (entry {entry.get('seq')}, {entry.get('time')}, run "
                                f"{entry.get('run')}); a second noisy draw would let an attacker average the noise "
                                "away. Publish the first one; for a new release, label again")

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
               note: str = "", sampling_tv: float = 0.0, release: str | None = None) -> dict:
        """Records a release, under the ledger's lock, once its artifacts are written and right
        before they are put in place (`pate.store.door.publish`).

        Args:
          kind: one of `RELEASE_KINDS`.
          cost: its data-independent cost.
          run: the run directory it was made in.
          mechanism: its public parameters (a mechanism record's ``params`` and name...).
          subject: what it releases about (labels.npz sha256, keyed votes digest).
          once: refuse when an entry of this kind about `subject` exists (a second
            sanitised draw of the same private value).
          budget, delta: a config's budget (ε at δ); the ledger's recorded budget holds too
            (`check_budget`).
          data_digest: keyed digest of the private data's content.
          note: a few public words.
          sampling_tv: total variation between the float64 noise samplers and the ideal
            mechanism (`analysis.core.noise.sampling_tv`); it adds to the cumulative δ.
          release: what this one release is known by (`release_identity`: its published
            file's sha256), so that `pate ledger --import` tells two separate releases with
            equal content apart and never charges this one again.

        Returns:
          The entry written.

        Raises:
          PateError: refused (budget, once), or the ledger cannot be written.
        """
        if kind not in RELEASE_KINDS:
            raise PateError(f"unknown ledger entry kind {kind!r}")
        with self._locked() as (raw, header, entries):
            if once and subject is not None:
                self.refuse_repeat(kind, subject, entries)
            limits, record = _limits(self.budget(entries), budget, delta)
            _refuse_over_budget(self.name, self.costs(entries=entries), [cost], limits, f"this {kind} release")
            self._refuse_over_linked_budgets([cost], delta, f"this {kind} release")
            entry = {"kind": kind, "run": None if run is None else str(Path(run).resolve()),
                     "mechanism": mechanism, "cost": cost.to_json(), "subject": subject,
                     "data_digest": data_digest, "note": note,
                     **({"sampling_tv": float(sampling_tv)} if sampling_tv else {}),
                     **({"release": release} if release else {})}
            return self._append(raw, header, entries, [record, entry] if record else [entry])[-1]

    def _locked(self):
        """A context giving (raw bytes, header, every entry) under the ledger's lock."""
        import contextlib

        import filelock

        @contextlib.contextmanager
        def held():
            self._prepare_directory()
            try:
                with contextlib.ExitStack() as locks:
                    # This ledger's lock and those of the data sets sharing its records (their
                    # budgets are checked too), always taken in one order: never a deadlock.
                    for book in sorted({b.path: b for b in [self, *self.linked()]}.values(), key=lambda b: str(b.path)):
                        locks.enter_context(book._lock())
                    raw = self._read_raw()
                    header, own = self._parse(raw)
                    yield raw, header, self._legacy_entries() + self._linked_entries() + own
            except filelock.Timeout:
                raise PateError(f"the ledger {self.path} stayed locked by another pate process for 60 s; "
                                "try again when it has finished") from None

        return held()

    def _append(self, raw: bytes, header: dict | None, entries: list[dict], new: list[dict]) -> list[dict]:
        """Writes `new` entries after the file's `raw` bytes (under the lock); returns them numbered."""
        # After this ledger's highest number, not its count: a withdrawn entry leaves a gap,
        # never a number given twice.
        own = [e for e in entries if "ledger" not in e and "linked" not in e]
        seq = max([len(own)] + [e["seq"] for e in own if type(e.get("seq")) is int])
        written = []
        for doc in new:
            seq += 1
            written.append({"seq": seq, "time": _now(), **doc})
        if header is None:
            header = {"ledger": self.name, "format": _FORMAT, "relation": composition.RELATION,
                      "created": _now()}
            raw = (json.dumps(header) + "\n").encode("utf-8")
        self._write(raw + b"".join((json.dumps(e) + "\n").encode("utf-8") for e in written))
        return written

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
        from analysis.core.files import write_atomic

        for tmp in self.directory.glob(f".{self.path.name}.*.tmp"):  # a killed charge's (under the lock)
            tmp.unlink(missing_ok=True)
        try:
            write_atomic(self.path, data, private=True)
        except OSError as err:
            raise PateError(f"cannot write the ledger {self.path}: {_why(err, self.path)}; nothing was "
                            "released") from None
        os.chmod(self.path, 0o600)

    def export(self, delta: float) -> dict[str, Any]:
        """`pate ledger --export`: the data set's composed dp-accounting event
        (`analysis.mechanisms.events.ledger_event`, in dp-accounting's own JSON form), the
        ledger's cumulative ε beside it, and what dp-accounting's RDP and PLD accountants make
        of the event (None where one cannot read it). Public values only: the costs are
        data-independent. The float64 samplers' δ (``sampling_delta``) has no dp-accounting
        event: add it to the δ of any figure composed from the event."""
        from analysis.core.noise import delta_of_sampling
        from analysis.mechanisms import events

        entries = self.entries()
        costs = self.costs(entries=entries)
        total = self.total(delta)
        event = events.ledger_event(costs)
        readers = events.supported(event)
        theirs: dict[str, float | None] = {}
        for name, accountant in (("rdp", "RdpAccountant"), ("pld", "PLDAccountant")):
            theirs[name] = None
            if readers[name]:
                from dp_accounting import pld, rdp

                module = rdp if name == "rdp" else pld
                theirs[name] = float(getattr(module, accountant)().compose(event).get_epsilon(delta))
        tv = sum(float(e.get("sampling_tv", 0.0)) for e in self.releases(entries))
        kinds = sorted({c.kind for c in costs})
        return {"data_set": self.public_name(), "releases": len(costs), "delta": float(delta),
                "ledger_eps": total.eps, "ledger_delta": total.delta, "ledger_route": total.route,
                "relation": composition.RELATION, "cost_kinds": kinds,
                "dp_accounting_eps": theirs, "sampling_delta": delta_of_sampling(tv, total.eps) if tv else 0.0,
                "event": events.to_json(event),
                "note": ("dp_accounting.dp_event.DpEvent.from_named_tuple-compatible; read it with "
                         "analysis.mechanisms.events.from_json. Gaussian costs are exact; pure-eps costs are "
                         "exported as zCDP (looser than the ledger's randomized-response curve); costs with no "
                         "dp-accounting event (GNSS, approx, DP-SGD replace-one) are UnsupportedDpEvent, and "
                         "the accountants then refuse the whole event rather than under-count it")}

    def public_name(self) -> str:
        """The name release files carry (a keyed digest, or the user's own name)."""
        return self.name

    def summary(self, delta: float, *, extra: Iterable[composition.Cost] = (), extra_tv: float = 0.0,
                release: dict | None = None) -> dict[str, Any]:
        """The public figures of the ledger (with `extra` releases not yet charged), for
        release.json / dpsgd.json. ``eps`` at ``delta`` is what the data set has spent in
        all: the composition of every release's data-independent cost, or — when every
        release recorded is the one described by ``release`` (``eps``, ``delta``, its
        labels' ``subject``) — that release's own figure where smaller (it then covers
        everything the data set released)."""
        extra = list(extra)
        entries = self.entries()
        total = self.total(delta, extra=extra, extra_tv=extra_tv)
        eps, at, how = total.eps, total.delta, ("composition of the data-independent cost of every release "
                                                "recorded for this data set (pate ledger)")
        if release is not None and release.get("subject") is not None and all(
                e.get("subject") == release.get("subject") for e in self.releases(entries)) \
                and float(release["eps"]) <= eps:
            eps, at = float(release["eps"]), float(release["delta"])
            how = "this release's own figure: every release recorded for this data set is this one's"
        doc = {"data_set": self.public_name(), "eps": eps, "delta": at, "releases": total.count,
               "cumulative_eps": total.eps, "cumulative_delta": total.delta, "route": total.route,
               "relation": composition.RELATION, "what": how}
        if total.delta >= 1.0:
            doc["warning"] = ("the data set's delta is 1 (the float64 label noise of its releases at this eps): "
                              "the cumulative eps guarantees NOTHING")
        if self.tuned_on_private_data(entries):
            doc["parameters_chosen_on_private_data"] = True
        return doc


def _entries_in(directory) -> Iterator[tuple[Path, dict]]:
    """Every entry of every ledger file of ``directory`` (plain files only; unreadable files and
    lines skipped), with its file: what the checks across ledger folders read."""
    try:
        files = sorted(p for p in Path(directory).glob("*.jsonl") if p.is_file() and not p.is_symlink())
    except OSError:
        return
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield path, entry


def _drawn_in(directory: Path, subjects: tuple) -> tuple[Path, dict] | None:
    """The first sanitised-eps entry about one of ``subjects`` in any ledger of ``directory``."""
    wanted = {s for s in subjects if s}
    return next(((path, entry) for path, entry in _entries_in(directory)
                 if entry.get("kind") == "sanitised-eps" and entry.get("subject") in wanted), None)


def labels_recorded_in(directory: Path, labels_path, subjects: tuple) -> bool:
    """Whether any ledger of ``directory`` records the label release at ``labels_path`` (by
    its own identity, `release_identity`, or by one of ``subjects``): what `pate train-student`
    asks, reading the labels alone (never the votes or teachers that name their data set)."""
    release = release_identity("labels", labels_path)
    wanted = {s for s in subjects if s}
    return any(entry.get("kind") in ("labels", "imported")
               and (entry.get("release") == release or entry.get("subject") in wanted)
               for _, entry in _entries_in(directory))


def release_identity(kind: str, path) -> str:
    """What one release is known by in its data set's ledger: its kind and the sha256 of the
    file it published (labels.npz, release.json, ...). Two separate releases with equal labels
    are two (their files differ: the time written, the run's meta); a byte-identical copy of
    the file is the same release. Public: the file is the release."""
    from pate.store.digests import file_digest

    return f"{kind}:{file_digest(path)}"


def _why(err: OSError, path) -> str:
    """What an OSError on a ledger file or folder means, and what to do."""
    import errno

    if err.errno == errno.EISDIR:
        return "it is a folder, not the file pate makes there; move it aside"
    if err.errno == errno.ENOTDIR:
        return (f"the ledger folder {Path(path).parent} is a file, not a folder; set [privacy] ledger or "
                f"${LEDGER_ENV} to a folder")
    if err.errno == errno.ELOOP:
        return "it is a symbolic link (pate never reads or writes a ledger through one); move it aside"
    if err.errno == errno.ENOSPC:
        return "no space left on the device; free space on it"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{err.strerror}; make the ledger folder writable, or set [privacy] ledger or ${LEDGER_ENV}"
    return err.strerror or str(err)


def _with_sampling(total: composition.Total, tv: float) -> composition.Total:
    """`total` with the float64 samplers' δ, (1 + e^ε) · tv, added (at most 1)."""
    from analysis.core.noise import delta_of_sampling

    if tv <= 0:
        return total
    return dataclasses.replace(total, delta=min(1.0, total.delta + delta_of_sampling(tv, total.eps)))


def _budget_values(doc: dict) -> tuple[float, float]:
    eps, delta = doc.get("budget"), doc.get("delta")
    for name, value in (("budget", eps), ("delta", delta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise PateError(f"a budget entry needs a number {name} > 0, got {value!r}")
    if not delta < 1:
        raise PateError(f"a budget entry's delta must be < 1, got {delta!r}")
    return float(eps), float(delta)


def _limits(recorded: tuple[float, float] | None, budget: float | None, delta: float
            ) -> tuple[list[tuple[float, float, str]], dict | None]:
    """The budgets a release must fit — the ledger's recorded one and a config's — and the
    budget entry to record: a config's first budget, or one at least as tight on both ε and
    δ (a config can tighten the ledger's budget, never raise it: `Ledger.set_budget` does)."""
    limits = [] if recorded is None else [(*recorded, "the data set's total_budget recorded in its ledger (raise "
                                                     "it on purpose with `pate ledger --set-budget EPS`)")]
    record = None
    if budget:
        limits.append((float(budget), float(delta), "[privacy] total_budget"))
        if recorded is None or (budget <= recorded[0] and delta <= recorded[1] and (budget, delta) != recorded):
            record = {"kind": "budget", "budget": float(budget), "delta": float(delta),
                      "note": "recorded from a config's [privacy] total_budget"}
    return limits, record


def _refuse_over_budget(name: str, spent: list, new: list, limits, what: str) -> None:
    for budget, delta, source in limits:
        total = composition.compose(spent + new, delta)
        if total.eps > budget:
            before = composition.compose(spent, delta).eps
            raise PateError(f"{what} would take the cumulative eps of data set {name!r} to {total.eps:.4g} "
                            f"(delta {total.delta:.3g}; {before:.4g} already spent), over {source} = {budget:g}; "
                            "nothing was written (`pate ledger` lists what was spent)")


def publish_line(data_set: dict, file: str, own: str) -> str:
    """The first line a release prints: the figure to publish, the data set's
    (`Ledger.summary`), which ``file`` leads with; ``own`` says where the release's own is."""
    return (f"PUBLISH: eps {data_set['eps']:.4g} at delta {data_set['delta']:.3g}, the HEADLINE: what data set "
            f"{data_set['data_set']} has spent in all ({data_set['releases']} release(s), this one included; "
            f"{file}'s first figure). This release's own eps is {own}.")


def cumulative_line(book: Ledger, delta: float) -> str:
    """The line every release prints: what its data set has spent in all, with a warning when
    other data sets share its records (their releases count here, its releases there)."""
    total = book.total(delta)
    others = book.linked()
    warn = (f"; warning: {len(others)} other data set(s) of the ledger folder share records with this one "
            f"({', '.join(o.name for o in others)}): each one's releases count against the other's budget"
            if others else "")
    return (f"ledger of {book.name}: {total.count} release(s), cumulative data-independent eps "
            f"{total.eps:.4g} at delta {total.delta:.3g} (`pate ledger` lists them){warn}")


def describe(ledger: Ledger, delta: float, *, finite: bool = False) -> dict[str, Any]:
    """What `pate ledger` shows, as data (`render` prints it; ``pate ledger --json`` prints it as
    JSON for scripts): every entry with its own ε at ``delta`` (None for an entry that releases
    nothing), the cumulative ε, δ and route over the releases, the budget, and the notes. With
    ``finite``, an infinite ε is the string "inf" (JSON has no infinity; null would read as none)."""
    doc = _describe(ledger, delta)
    if finite:
        doc["entries"] = [{k: _finite(v) for k, v in e.items()} for e in doc["entries"]]
        if doc["cumulative"] is not None:
            doc["cumulative"] = {k: _finite(v) for k, v in doc["cumulative"].items()}
    return doc


def _finite(value):
    return "inf" if isinstance(value, float) and not math.isfinite(value) else value


def _describe(ledger: Ledger, delta: float) -> dict[str, Any]:
    entries = ledger.entries()
    rows, data_digests = [], set()
    for e in entries:
        row = {"seq": e.get("seq"), "time": e.get("time"), "kind": e.get("kind"), "run": e.get("run"),
               "older_name": e.get("ledger"), "linked": e.get("linked")}
        if e.get("kind") in RELEASE_KINDS:
            cost = composition.Cost.from_json(e["cost"])
            row.update(own_eps=composition.single_eps(cost, delta),
                       what=(e.get("mechanism") or {}).get("describe") or cost.describe(), cost=e["cost"])
        elif e.get("kind") == "budget":
            row.update(own_eps=None, what=f"budget eps {e['budget']:g} at delta {e['delta']:g} ({e.get('note', '')})",
                       budget=e["budget"], delta=e["delta"])
        else:
            row.update(own_eps=None, what=f"parameters chosen on the private votes ({e.get('note', '')})")
        rows.append(row)
        if e.get("data_digest") and not e.get("linked"):
            data_digests.add(e["data_digest"])
    doc: dict[str, Any] = {"ledger": ledger.name, "file": str(ledger.path), "relation": composition.RELATION,
                           "delta": float(delta), "entries": rows, "cumulative": None, "budget": None,
                           "older_names": list(ledger.legacy) if any("ledger" in e for e in entries) else [],
                           "notes": [], "parameters_chosen_on_private_data": ledger.tuned_on_private_data(entries)}
    if not entries:
        return doc
    total = ledger.total(delta)
    doc["cumulative"] = {"eps": total.eps, "delta": total.delta, "route": total.route,
                         "rdp": total.routes["rdp"], "pld": total.routes["pld"], "releases": total.count}
    budget = ledger.budget(entries)
    if budget is not None:
        doc["budget"] = {"eps": budget[0], "delta": budget[1]}
    doc["notes"] = same_data_set_notes(ledger.directory, ledger.source)
    if len(data_digests) > 1:
        doc["notes"].append("note: the data's content changed between releases (keyed digests differ); they "
                            "are still composed, as releases of one data set")
    return doc


def render(ledger: Ledger, delta: float) -> str:
    """`pate ledger`'s table (`describe`): one line per entry with a release's own ε, then the cumulative ε."""
    doc = describe(ledger, delta)
    lines = [f"ledger: {doc['ledger']}", f"file: {doc['file']}",
             f"neighbouring relation: {composition.RELATION_TEXT}"]
    if not doc["entries"]:
        lines.append("no release recorded")
        return "\n".join(lines)
    lines.append(f"{'#':>3}  {'when':<25} {'kind':<15} {'own eps':>8}  what / run")
    for e in doc["entries"]:
        seq = f"{e['seq'] if e['seq'] is not None else '?'}" + ("*" if e["older_name"] else "+" if e["linked"] else "")
        own = " " * 8 if e["own_eps"] is None else f"{e['own_eps']:>8.4g}"
        lines.append(f"{seq:>3}  {e['time'] or '':<25} {e['kind'] or '':<15} "
                     f"{own}  {e['what']}" + (f"  [{e['run']}]" if e["run"] else "")
                     + (f"  (of data set {e['linked']})" if e["linked"] else ""))
    total = doc["cumulative"]
    lines.append(f"cumulative eps {total['eps']:.4g} at delta {total['delta']:.3g} "
                 f"({total['route']}; rdp {total['rdp']:.4g}, pld {total['pld']:.4g}) "
                 f"over {total['releases']} releases")
    if doc["budget"] is not None:
        lines.append(f"budget: eps {doc['budget']['eps']:g} at delta {doc['budget']['delta']:g} "
                     f"(`pate ledger --set-budget EPS` raises it on purpose)")
    if doc["older_names"]:
        lines.append("*: recorded under the name an older pate gave this data set (" + ", ".join(doc["older_names"]) + ")")
    if any(e["linked"] for e in doc["entries"]):
        lines.append("+: a release of another data set that shares records with this one, counted here too")
    lines += doc["notes"]
    if doc["parameters_chosen_on_private_data"]:
        lines.append("warning: release parameters were chosen on the private votes (pate plan --votes "
                     "--on-private-votes): no eps here covers that choice")
    lines.append("data-dependent (sanitised) eps values are not composed: ex-post guarantees do not add")
    return "\n".join(lines)
