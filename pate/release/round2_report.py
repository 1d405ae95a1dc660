"""`pate analyze` on a run with two rounds (`pate label --round 2`): round 2's labels checked
against its own votes, round 1's published values read back from ``release-round1.json``,
and the headline of both rounds (`analysis.planning.rounds.cumulative_headline`) put in the report.
Called by `pate.steps.analyze`; kept apart so that it stays small."""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.reporting import report as report_mod
from analysis.core.errors import PateError
from pate.store import rundir
from pate.release.labels import read_labels, release_subjects


def round2_rows(inputs: list, votes: np.ndarray, labels: dict) -> dict:
    """Round 2's labels with ``indices`` the rows of its votes (query i is row i; the file's
    indices are pool points), checked against the votes."""
    if votes.shape[0] != np.asarray(labels["labels"]).size:
        raise PateError(f"{inputs[0]} does not match {inputs[1]}; label round 2 again "
                        "(`pate label --round 2 --overwrite`)")
    return dict(labels, indices=np.arange(votes.shape[0]))


def _round1(workdir, name: str = rundir.RELEASE_ROUND1_JSON) -> tuple[dict, composition.Cost, composition.Cost]:
    """Round 1's published values (its release ``name``, release-round1.json once round 2 kept
    it: its ``details``, ``eps`` and ``delta``), its labels' data-independent cost and its
    sanitised release's cost."""
    run = rundir.RunDir(workdir)
    first = read_labels(run / rundir.LABELS_NPZ)
    doc = run.read_json(name)
    if (doc.get("meta") or {}).get("labels_sha256") not in release_subjects(run / rundir.LABELS_NPZ) or "eps" not in doc:
        raise PateError(f"{run / name} is not the release of {run / rundir.LABELS_NPZ}; "
                        "label round 2 again (`pate label --round 2 --overwrite`)")
    raw = doc.get("details") or {}
    details = {**raw, "eps": doc.get("release_eps", doc["eps"]),  # round 1's own headline (ε, δ)
               "delta": doc.get("release_delta", doc["delta"])}
    record = registry.from_arrays(first, rundir.LABELS_NPZ)
    cap = int(float(first["max_answers"])) if "max_answers" in first else None
    labels_cost = composition.labels_cost(record, int(first["indices"].size), max_answers=cap)
    try:  # the release's own cost at the analysis δ, as `pate analyze` charged it (not the headline's δ)
        released = record.sanitised_cost(raw, float(raw.get("release_rdp_cost", 0.2)))
    except (KeyError, TypeError, ValueError):
        raise PateError(f"{run / name} lacks the release's parameters; it was not "
                        "written by pate analyze or is damaged") from None
    return details, labels_cost, released


def round1_costs(workdir, book, name: str = rundir.RELEASE_ROUND1_JSON) -> tuple[dict, list[composition.Cost]]:
    """Round 1's published values and the data-independent costs of its two releases (its
    labels, its sanitised draw: the ledger's record of that draw when ``book`` has it), as the
    headline of both rounds counts them: what `cumulative` composes and what round 2's
    target plan (`pate.release.target.choose_round2`) plans against. ``name``: round 1's release.json."""
    first, labels1, released1 = _round1(workdir, name)
    found = next((e for e in (book.find("sanitised-eps", subject) for subject in
                                release_subjects(rundir.RunDir(workdir) / rundir.LABELS_NPZ)) if e is not None), None)
    if found is not None:  # the ledger's record of round 1's draw: its exact cost
        released1 = composition.Cost.from_json(found["cost"])
    return first, [labels1, released1]


def cumulative(workdir, rep: report_mod.PrivacyReport, labels: dict, book, released2: composition.Cost,
               delta: float, conversion: str) -> report_mod.PrivacyReport:
    """Round 2's report with its headline replaced by the ε of everything both rounds
    released (`analysis.planning.rounds.cumulative_headline`: the data-independent composition, the
    only one proven); round 2's own headline is kept as ``eps_round2``, and the sums of both
    rounds' ex-post figures (`analysis.planning.rounds.diagnostics`) only as private, unpublished rows.
    ``released2``: the cost of round 2's sanitised release."""
    from analysis.planning.rounds import DIAGNOSTICS, ROUTE, cumulative_headline, diagnostics

    first, earlier = round1_costs(workdir, book)
    record = registry.from_arrays(labels, rundir.LABELS_ROUND2_NPZ)
    every = [*earlier, composition.labels_cost(record, int(np.asarray(labels["labels"]).size)), released2]
    second = {i.key: i.value for i in rep.items if i.public}
    second["delta"] = second["delta_total"]
    cum = cumulative_headline(first, second, every, delta, conversion)
    items = tuple(report_mod.Item("eps", "both rounds' eps (labels + sanitised eps of each)", cum.eps, True,
                                  f"at delta {cum.delta:g}; {ROUTE} ({cum.route.upper()})") if i.key == "eps"
                  else report_mod.Item("delta_total", i.label, cum.delta, True, "both rounds")
                  if i.key == "delta_total" else i for i in rep.items)
    items += (report_mod.Item("rounds", "rounds", 2, True, "labels.npz, then labels-round2.npz"),
              report_mod.Item("eps_round1", "round 1's own eps (not composable)", float(first["eps"]), True,
                              "release-round1.json"),
              report_mod.Item("eps_round2", "round 2's own eps (not composable)", float(second["eps"]), True,
                              f"at delta {second['delta']:g}"),
              *(report_mod.Item(f"eps_diagnostic_{k}", DIAGNOSTICS[k], v, False)
                for k, v in diagnostics(first, second, delta, conversion).items()))
    return dataclasses.replace(rep, items=items)
