"""`pate ledger --import RUN`: charges the releases of a run directory that its data set's
ledger does not record yet (a run made before the ledger, or under another ledger
folder), each exactly once.

Every kind of release pate writes is known: the labels of each round (labels.npz,
labels-round2.npz), each round's sanitised ε (release-round1.json, release.json), the
DP-SGD model (dpsgd.json), the federated model (fedavg.json) and the synthetic data
(synth.json with synthetic.npz). A release is known by its content — the labels'
`content_digest`, the digest of the published JSON or of the synthetic samples — the
same subject its own command charges it under, so a release already recorded (by its
command or by an earlier import) is skipped: importing twice charges nothing more.
"""

from __future__ import annotations

import hashlib

import numpy as np

from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.core.errors import PateError
from pate.store import digests, rundir
from pate.store.identity import directory_for
from pate.store.ledger import Ledger


class _Importer:
    """Charges one run's releases to `book`, each once."""

    def __init__(self, run: rundir.RunDir, book: Ledger, release_cost: float, echo):
        self.run, self.book, self.release_cost, self.echo = run, book, release_cost, echo
        self.written: list[dict] = []

    def once(self, kind: str, cost: composition.Cost, subjects: tuple, describe: str, sampling_tv: float = 0.0):
        """Charges a release about ``subjects[0]`` unless an entry of `kind` about any of
        `subjects` (the digests older versions keyed it on too) is recorded."""
        if any(s is not None and self.book.find(kind, s) is not None for s in subjects):
            self.echo(f"already in the ledger: {describe}")
            return
        self.written.append(self.book.charge(kind, cost, run=self.run.path, subject=subjects[0], once=True,
                                             mechanism={"describe": describe}, note="imported",
                                             sampling_tv=sampling_tv))
        self.echo(f"charged: {describe}")

    def labels(self, name: str, what: str) -> tuple[dict, Mechanism, str, str] | None:
        """The label release in `name` (a round's labels), charged once; its labels,
        mechanism record and subjects (content digest, file digest)."""
        from pate.release.labels import content_digest, read_labels, read_run_labels

        if not self.run.exists(name):
            return None
        labels = read_run_labels(self.run.path) if name == rundir.LABELS_NPZ else read_labels(self.run / name)
        subjects = (content_digest(labels), digests.file_digest(self.run / name))
        record = registry.from_arrays(labels, name)
        if not record.needs_teachers:  # one release of the records' own votes, no sanitised draw
            self.once("labels", record.cost(), subjects, f"labels: every pool point from one {record.describe()}")
            return None
        cap = int(float(labels["max_answers"])) if "max_answers" in labels else None
        n = int(labels["indices"].size)
        classes = self._classes(labels)
        tv = 0.0 if classes is None else record.sampling_tv(n, classes)
        self.once("labels", composition.labels_cost(record, n, max_answers=cap), subjects,
                  f"{what}: {n} queries of {record.describe()}", tv)
        return labels, record, subjects[0], subjects[1]

    def _classes(self, labels: dict) -> int | None:
        """The number of classes of the run's votes (the float64 noise's coordinates)."""
        for name in (rundir.VOTES_NPZ, rundir.VOTES_ROUND2_NPZ):
            if self.run.exists(name):
                try:
                    return int(np.asarray(self.run.read_npz(name, ("votes",))["votes"]).shape[1])
                except (PateError, IndexError):
                    continue
        return None

    def sanitised(self, name: str, labelled) -> None:
        """The sanitised ε of `labelled` (a round's labels) that the release file `name`
        publishes, charged once."""
        if labelled is None or not self.run.exists(name):
            return
        labels, record, subject, older = labelled
        if not record.sanitised:
            return  # its release.json publishes public figures only: nothing more to charge
        doc = self.run.read_json(name)
        if (doc.get("meta") or {}).get("labels_sha256") not in (subject, older):
            return  # another round's release
        details = doc.get("details") or {}
        try:
            cost = record.sanitised_cost(details, self.release_cost)
        except (KeyError, TypeError, ValueError):
            raise PateError(f"{self.run / name} lacks the release's parameters (release_order, beta / "
                            "eps_release_cost); it was not written by pate analyze or is damaged") from None
        self.once("sanitised-eps", cost, (subject, older), f"sanitised eps of {record.name}: {cost.describe()}")

    def baselines(self) -> None:
        """dpsgd.json, fedavg.json and synth.json, each charged once (the subject its command charged)."""
        from analysis.baselines import fedavg_privacy

        run = self.run
        if run.exists(rundir.DPSGD_JSON):
            doc = run.read_json(rundir.DPSGD_JSON)
            cost = _cost(lambda: composition.dpsgd_cost(doc["sampling_rate"], doc["noise_multiplier"], doc["steps"]),
                         run / rundir.DPSGD_JSON, "sampling_rate, noise_multiplier or steps", "pate dpsgd")
            self.once("dpsgd", cost, ("dpsgd:" + digests.file_digest(run / rundir.DPSGD_JSON),),
                      f"DP-SGD {doc.get('model', '?')}: {cost.describe()}")
        if run.exists(rundir.FEDAVG_JSON):
            doc = run.read_json(rundir.FEDAVG_JSON)
            cost = _cost(lambda: fedavg_privacy.round_cost(
                doc["mechanism"], doc["per_round_mu"] if doc["mechanism"] == "gaussian" else doc["per_round_eps"],
                doc["rounds"]), run / rundir.FEDAVG_JSON, "mechanism, per_round_eps / per_round_mu or rounds",
                "pate fedavg")
            self.once("fedavg", cost, ("fedavg:" + digests.file_digest(run / rundir.FEDAVG_JSON),),
                      f"{doc.get('algorithm', '?')} {doc['mechanism']}: {cost.describe()}")
        if run.exists(rundir.SYNTH_JSON):
            doc = run.read_json(rundir.SYNTH_JSON)
            cost = _cost(lambda: composition.Cost.from_json(doc["cost"]), run / rundir.SYNTH_JSON, "cost",
                         "pate synth")
            samples = run.read_npz(rundir.SYNTHETIC_NPZ, ("images", "labels"))
            digest = hashlib.sha256(samples["images"].tobytes() + samples["labels"].tobytes()).hexdigest()
            self.once("synth", cost, ("synth:" + digest,), f"synthetic data ({doc.get('method', 'pate-gan')}): "
                      f"{cost.describe()}")


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
    imp = _Importer(run, book, release_cost, echo)
    first = imp.labels(rundir.LABELS_NPZ, "labels")
    second = imp.labels(rundir.LABELS_ROUND2_NPZ, "round-2 labels")
    for release in (rundir.RELEASE_ROUND1_JSON, rundir.RELEASE_JSON):
        imp.sanitised(release, first)
        imp.sanitised(release, second)
    imp.baselines()
    if not any(run.exists(n) for n in (rundir.LABELS_NPZ, rundir.DPSGD_JSON, rundir.FEDAVG_JSON, rundir.SYNTH_JSON)):
        raise PateError(f"{run.path} holds no release (labels.npz, dpsgd.json, fedavg.json, synth.json) to import")
    return imp.written
