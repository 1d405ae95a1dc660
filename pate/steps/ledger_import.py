"""`pate ledger --import RUN`: charges the releases of a run directory that its data set's
ledger does not record yet (a run made before the ledger, or under another ledger
folder), each exactly once.

Every kind of release pate writes is known: the labels of each round (labels.npz,
labels-round2.npz), each round's sanitised ε (release-round1.json, release.json), the
DP-SGD model (dpsgd.json), the federated model (fedavg.json) and the synthetic data
(synth.json with synthetic.npz), in the run and in every ``stale-*/`` folder where a later
command moved them aside (`pate.store.door.Staging.commit`). A release is known by its own
identity, the sha256 of the file it published (`pate.store.ledger.release_identity`): two
separate releases whose labels happen to be equal are two, a byte-identical copy is one.
A release its own command charged carries that identity, so it is skipped; an entry an
older pate wrote without one is known by its subject (the labels' content digest, the
published JSON's) and stands for one file only. The whole import holds the ledger's import
lock (`pate.store.ledger.Ledger.importing`): imports of one run at the same time charge it
once, and the others say it is already in the ledger.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.core.errors import PateError
from pate.store import digests, rundir
from pate.store.door import STALE_PREFIX
from pate.store.identity import directory_for
from pate.store.ledger import Ledger, release_identity


def _places(run: rundir.RunDir) -> list[rundir.RunDir]:
    """The run directory, then each of its ``stale-*/`` folders (plain folders only)."""
    aside = sorted(n for n in os.listdir(run.path) if n.startswith(STALE_PREFIX))
    return [run] + [rundir.RunDir(run.path / n) for n in aside
                    if (run.path / n).is_dir() and not (run.path / n).is_symlink()]


class _Importer:
    """Charges one run's releases to `book`, each once (the module docstring)."""

    def __init__(self, run: rundir.RunDir, book: Ledger, release_cost: float, echo):
        self.run, self.book, self.release_cost, self.echo = run, book, release_cost, echo
        self.written: list[dict] = []
        self.seen: set[str] = set()  # the releases met in this import (a file copied aside is one)
        self.claimed: set[str] = set()  # older entries (no identity) that one file already stands for
        self.labelled: list[tuple] = []  # (labels, record, content digest, file digest) of every labels file

    def _where(self, place: rundir.RunDir, name: str) -> str:
        return name if place.path == self.run.path else f"{place.path.name}/{name}"

    def once(self, kind: str, cost: composition.Cost, release: str, subjects: tuple, describe: str,
             sampling_tv: float = 0.0, run=None) -> None:
        """Charges the release ``release`` unless the ledger records it: an entry with its
        identity, or an older entry of `kind` about one of `subjects` that no other file of
        this import stands for."""
        if release in self.seen:
            return
        self.seen.add(release)
        entries = self.book.entries()
        if any(e.get("kind") == kind and e.get("release") == release for e in entries):
            self.echo(f"already in the ledger: {describe}")
            return
        for e in entries:
            key = json.dumps(e, sort_keys=True)
            if (e.get("kind") == kind and "release" not in e and e.get("subject") in subjects
                    and e.get("subject") is not None and key not in self.claimed):
                self.claimed.add(key)
                self.echo(f"already in the ledger: {describe}")
                return
        self.written.append(self.book.charge(kind, cost, run=run or self.run.path, subject=subjects[0],
                                             mechanism={"describe": describe}, note="imported",
                                             sampling_tv=sampling_tv, release=release))
        self.echo(f"charged: {describe}")

    def labels(self, place: rundir.RunDir, name: str, what: str) -> None:
        """The label release in `name` (a round's labels) in `place`, charged once; kept for
        the sanitised draws that name it."""
        from pate.release.labels import content_digest, read_labels, read_run_labels

        if not place.exists(name):
            return
        labels = read_run_labels(place.path) if name == rundir.LABELS_NPZ else read_labels(place / name)
        subjects = (content_digest(labels), digests.file_digest(place / name))
        release = release_identity("labels", place / name)
        record = registry.from_arrays(labels, name)
        where = self._where(place, name)
        if not record.needs_teachers:  # one release of the records' own votes, no sanitised draw
            self.once("labels", record.cost(), release, subjects,
                      f"labels ({where}): every pool point from one {record.describe()}")
            return
        cap = int(float(labels["max_answers"])) if "max_answers" in labels else None
        n = int(labels["indices"].size)
        classes = self._classes(place)
        tv = 0.0 if classes is None else record.sampling_tv(n, classes)
        self.once("labels", composition.labels_cost(record, n, max_answers=cap), release, subjects,
                  f"{what} ({where}): {n} queries of {record.describe()}", tv)
        self.labelled.append((labels, record, *subjects))

    def _classes(self, place: rundir.RunDir) -> int | None:
        """The number of classes of the votes (the float64 noise's coordinates)."""
        for where in (place, self.run):
            for name in (rundir.VOTES_NPZ, rundir.VOTES_ROUND2_NPZ):
                if where.exists(name):
                    try:
                        return int(np.asarray(where.read_npz(name, ("votes",))["votes"]).shape[1])
                    except (PateError, IndexError):
                        continue
        return None

    def sanitised(self, place: rundir.RunDir, name: str) -> None:
        """The sanitised ε the release file `name` in `place` publishes, charged once, with
        the mechanism record of the labels it names (any labels file of the run), else the
        one it names itself (labels replaced by an older pate)."""
        if not place.exists(name):
            return
        doc = place.read_json(name)
        named = (doc.get("meta") or {}).get("labels_sha256")
        found = [(record, content) for _, record, content, older in self.labelled if named in (content, older)]
        where = self._where(place, name)
        if found:
            record, subject = found[0]
        else:
            try:
                record, subject = registry.record_type(str(doc.get("mechanism"))), named
            except PateError:
                raise PateError(f"{place / name} names no mechanism pate knows; it was not written by pate "
                                "analyze or is damaged") from None
            if record.sanitised and named is not None:
                self.echo(f"note: {where} publishes a sanitised eps of labels this run no longer holds (replaced "
                          "by an older pate): its draw is counted, those labels cannot be")
        if not record.sanitised:
            return  # its release.json publishes public figures only: nothing more to charge
        details = doc.get("details") or {}
        try:
            cost = record.sanitised_cost(details, self.release_cost)
        except (KeyError, TypeError, ValueError):
            raise PateError(f"{place / name} lacks the release's parameters (release_order, beta / "
                            "eps_release_cost); it was not written by pate analyze or is damaged") from None
        self.once("sanitised-eps", cost, release_identity("sanitised", place / name), (subject, named),
                  f"sanitised eps of {record.name} ({where}): {cost.describe()}")

    def baselines(self, place: rundir.RunDir) -> None:
        """dpsgd.json, fedavg.json and synth.json, each charged once (the subject its command charged)."""
        run = place
        if run.exists(rundir.DPSGD_JSON):
            doc = run.read_json(rundir.DPSGD_JSON)
            cost = _cost(lambda: composition.dpsgd_cost(doc["sampling_rate"], doc["noise_multiplier"], doc["steps"]),
                         run / rundir.DPSGD_JSON, "sampling_rate, noise_multiplier or steps", "pate dpsgd")
            subject = "dpsgd:" + digests.file_digest(run / rundir.DPSGD_JSON)
            self.once("dpsgd", cost, subject, (subject,), f"DP-SGD {doc.get('model', '?')}: {cost.describe()}")
        if run.exists(rundir.FEDAVG_JSON):
            doc = run.read_json(rundir.FEDAVG_JSON)
            cost = _cost(lambda: _fedavg_cost(doc), run / rundir.FEDAVG_JSON,
                         "mechanism, per_round_eps / per_round_mu, grid or rounds", "pate fedavg")
            subject = "fedavg:" + digests.file_digest(run / rundir.FEDAVG_JSON)
            self.once("fedavg", cost, subject, (subject,), f"{doc.get('algorithm', '?')} {doc['mechanism']}: "
                      f"{cost.describe()}")
        if run.exists(rundir.SYNTH_JSON):
            doc = run.read_json(rundir.SYNTH_JSON)
            cost = _cost(lambda: composition.Cost.from_json(doc["cost"]), run / rundir.SYNTH_JSON, "cost",
                         "pate synth")
            samples = run.read_npz(rundir.SYNTHETIC_NPZ, ("images", "labels"))
            digest = hashlib.sha256(samples["images"].tobytes() + samples["labels"].tobytes()).hexdigest()
            self.once("synth", cost, "synth:" + digest, ("synth:" + digest,),
                      f"synthetic data ({doc.get('method', 'pate-gan')}): {cost.describe()}")


def _fedavg_cost(doc) -> composition.Cost:
    """What `pate fedavg` charged, from fedavg.json's public values: distributed rounds (the cost its
    grid record's kind states: Skellam or distributed discrete Gaussian), else the rounds of noise on
    every message (on a grid, Gaussian rounds are discrete Gaussians)."""
    from analysis.baselines import fedavg_privacy
    from analysis.mechanisms import ddg, skellam

    grid = doc.get("grid")
    distributed = {"skellam": skellam.cost_from_json, "ddg": ddg.cost_from_json}
    if isinstance(grid, dict) and grid.get("kind") in distributed:
        return distributed[grid["kind"]](grid, doc["rounds"])
    return fedavg_privacy.round_cost(doc["mechanism"], doc["per_round_mu"] if doc["mechanism"] == "gaussian"
                                     else doc["per_round_eps"], doc["rounds"], exact=grid is not None)


def _cost(build, path, fields: str, command: str) -> composition.Cost:
    try:
        return build()
    except (KeyError, TypeError, ValueError, PateError):
        raise PateError(f"{path} lacks {fields}; it was not written by {command} or is damaged") from None


def import_run(workdir, *, name: str | None = None, echo=print) -> list[dict]:
    """Charges every release of a run directory its data set's ledger does not record
    yet, once each (module docstring), to the run's ledger (`pate.store.ledger.Ledger.for_run`)
    or the ledger ``name``.

    Returns:
      The entries written.

    Raises:
      PateError: no run directory, a run with no release, or a damaged release file.
    """
    run = rundir.RunDir(workdir)
    if not run.path.is_dir():
        raise PateError(f"run directory {run.path} does not exist")
    config = run.own_config()
    book = Ledger.for_run(workdir, config) if name is None else Ledger(name, directory_for(
        config.privacy if config is not None else None))
    release_cost = config.privacy.release_cost if config is not None else 0.2
    places = _places(run)
    if not any(p.exists(n) for p in places for n in (rundir.LABELS_NPZ, rundir.LABELS_ROUND2_NPZ, rundir.RELEASE_JSON,
                                                    rundir.DPSGD_JSON, rundir.FEDAVG_JSON, rundir.SYNTH_JSON)):
        raise PateError(f"{run.path} holds no release (labels.npz, dpsgd.json, fedavg.json, synth.json) to import")
    with book.importing():
        imp = _Importer(run, book, release_cost, echo)
        for place in places:
            imp.labels(place, rundir.LABELS_NPZ, "labels")
            imp.labels(place, rundir.LABELS_ROUND2_NPZ, "round-2 labels")
        for place in places:
            for release in (rundir.RELEASE_ROUND1_JSON, rundir.RELEASE_JSON):
                imp.sanitised(place, release)
            imp.baselines(place)
    return imp.written
