"""The privacy report of a label release over its votes (`report_for_release`), its
data-independent ε under every accountant, the ledger's charge for a sanitised draw, and the
checks on where a report may be written. `pate analyze`, `pate label` (its brief report),
`pate label --votes`, round 2 and `pate audit` use it; only `analysis` and the run directory's
names (no JAX).
"""

from __future__ import annotations
from pathlib import Path
from types import SimpleNamespace
import numpy as np
from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.reporting import report as report_mod
from analysis.reporting.report_for import ReportSettings, report_for
from analysis.reporting.accountants import data_independent_items
from analysis.core import votes as votes_mod
from analysis.core.errors import OptionError, PateError
from pate.store import ledger as ledger_mod
from pate.store import rundir
from pate.store.door import Charge
from pate.release.labels import CHECK_OFFSETS

#: A ``[privacy]`` stand-in with no β of its own: a record's `release_beta` then picks between the β
#: given for any release and the one given for GNSS alone, or None (the report's default).
_NO_DEFAULT_BETA = SimpleNamespace(lnmax_beta=None, gnss_beta=0.0)

#: The report's outputs by option, and the run artifact each one is by default.
_OUTPUTS = {"--json": rundir.PRIVACY_JSON, "--plot": rundir.PRIVACY_PNG, "--release-json": rundir.RELEASE_JSON}


def check_outputs(outputs: dict, inputs: list, workdir=None) -> None:
    """Refuses an output path that is an input, the other output, or where
    `pate.store.rundir.output_problem` refuses a report (a link, folder, device; inside or onto
    a run directory's files; with `workdir`, its own report files may be replaced).

    Args:
      outputs: ``{"--json": path or None, "--plot": ..., "--release-json": ...}``.
      inputs: the files the report reads.
      workdir: the run directory being analysed, if any.

    Raises:
      OptionError: naming the option.
    """
    resolved = {}
    for option, path in outputs.items():
        if path is None:
            continue
        target = Path(path).resolve()
        for other, seen in resolved.items():
            if seen == target:
                raise OptionError(option, f"{path} is also given to {other}")
        for src in inputs:
            if src is not None and Path(src).resolve() == target:
                raise OptionError(option, f"{path} is an input of this command; writing the report "
                                  "there would destroy it")
        problem = rundir.output_problem(path, own_run=workdir, own_name=_OUTPUTS[option])
        if problem is not None:
            raise OptionError(option, f"{problem}; write the report elsewhere")
        resolved[option] = target


def release_cost_of(rep: report_mod.PrivacyReport, release_cost: float) -> composition.Cost | None:
    """The data-independent cost of the sanitised ε a report released: the LNMax
    smooth-sensitivity release's (ε, δ), or the GNSS release at its order and β (the
    ledger's record of a draw); None when the mechanism makes no sanitised release."""
    record = registry.record_type(rep.mechanism)
    if not record.sanitised:
        return None
    return record.sanitised_cost({i.key: i.value for i in rep.items}, release_cost)


def draw_charge(book: ledger_mod.Ledger, rep: report_mod.PrivacyReport, release_cost: float, *,
                subject: str | None, run=None, budget: float | None = None, delta: float = 1e-5,
                release: str | None = None) -> list[Charge]:
    """The charge of one sanitised draw to the data set's ledger, made when its report is
    committed (`pate.store.door.publish`); a second draw about the same `subject` (labels
    digest, keyed votes digest) is refused whatever file was moved. None (an empty list) when
    the mechanism makes no sanitised release: the report then publishes public figures only.
    ``release``: the draw's own identity (`pate.store.ledger.release_identity` of its release.json)."""
    cost = release_cost_of(rep, release_cost)
    if cost is None:
        return []
    return [Charge(book, "sanitised-eps", cost, dict(
        run=run, subject=subject, once=subject is not None, budget=budget, delta=delta, release=release,
        mechanism={"name": rep.mechanism, "describe": f"sanitised eps of {rep.mechanism}: {cost.describe()}"}))]


def report_for_release(votes: np.ndarray, labels: dict, *, delta: float, moments: int = 8,
                       beta: float | None = None, gnss_beta: float | None = None, conversion: str = "classic",
                       release_order: float | None = None, release_cost: float = 0.2,
                       noise=None, sanitize: bool = True, publishable: bool = False) -> report_mod.PrivacyReport:
    """The privacy report of a release (``labels.npz`` contents) over its vote histogram.

    LNMax and GNMax are charged for the answered queries; Confident-GNMax for every
    queried row (its threshold step runs on each; on the student's check with a release's
    ``check_offsets``, Interactive-GNMax). With ``sanitize=False`` only the
    data-independent and data-dependent ε are computed (no smooth-sensitivity release,
    so nothing is spent on one) — what `pate label` prints. ``noise``: an
    ``analysis.core.noise.NoiseSource`` for the sanitised release (OS entropy when None).
    ``beta`` is the smoothness of whichever release the mechanism makes (LNMax default
    ``analysis.sanitised.lnmax_release.DEFAULT_BETA``; GNSS default 0.1 / order); ``gnss_beta``, when given,
    is GNMax's alone (a config holds one β per mechanism). ``publishable``: the caller charges
    the sanitised draw once to the data set's ledger (`analysis.reporting.report.lnmax_report`).
    """
    indices = votes_mod.check_indices(labels["indices"], votes.shape[0], name=rundir.LABELS_NPZ)
    mask = np.asarray(labels["labels"]) >= 0
    answered = indices[mask]
    mech = registry.from_arrays(labels, rundir.LABELS_NPZ)
    confident = mech.threshold_step
    rows = indices if confident else answered  # the threshold step runs on every query
    if rows.size == 0:
        raise PateError(f"{rundir.LABELS_NPZ} answers no query; there is nothing to analyse")
    queries = {"num_teachers": int(votes[0].sum())}
    if confident:
        queries["answered"] = mask
    if "max_answers" in labels:
        queries["max_answers"] = int(float(labels["max_answers"]))
    if labels.get(CHECK_OFFSETS) is not None:
        queries["offsets"] = labels.get(CHECK_OFFSETS)
    settings = ReportSettings(delta=delta, moments=moments, conversion=conversion,
                              beta=mech.release_beta(_NO_DEFAULT_BETA, beta, gnss_beta),
                              release_order=release_order, release_cost=release_cost, sanitize=sanitize,
                              publishable=publishable, noise=noise)
    return report_for(mech, votes_mod.rows_of(votes, rows), settings, **queries)


def report_of(record: Mechanism, rows: np.ndarray, delta: float, *, moments: int = 8, beta: float | None = None,
              noise=None, sanitize: bool = True, publishable: bool = False, conversion: str = "classic",
              release_order: float | None = None, release_cost: float = 0.2, **queries) -> report_mod.PrivacyReport:
    """The report of ``record``'s answers to ``rows`` (the answered queries' votes; every
    queried row for a threshold step), chosen by the record's type
    (`analysis.reporting.report_for.report_for`); ``queries``: a threshold step's ``answered``,
    ``max_answers``, ``offsets``."""
    return report_for(record, rows, ReportSettings(
        delta=delta, moments=moments, conversion=conversion, beta=beta, release_order=release_order,
        release_cost=release_cost, sanitize=sanitize, publishable=publishable, noise=noise), **queries)


def data_independent_comparison(votes: np.ndarray, labels: dict, *, delta: float,
                                moments: int = 8) -> tuple[report_mod.Item, ...]:
    """The data-independent ε of a release (``labels.npz`` contents) under every
    accountant, with the headline marked (`analysis.reporting.accountants.data_independent_items`).

    Counts exactly what `report_for_release` charges: the answered queries for LNMax and
    GNMax; every queried row for Confident-GNMax, with GNMax on ``max_answers`` of them
    when the release was capped. Public: it uses the parameters and counts only.
    """
    indices = votes_mod.check_indices(labels["indices"], votes.shape[0], name=rundir.LABELS_NPZ)
    answered = int(np.sum(np.asarray(labels["labels"]) >= 0))
    record = registry.from_arrays(labels, rundir.LABELS_NPZ)
    cap = int(labels["max_answers"]) if "max_answers" in labels else None
    n, cap = record.charged(indices.size, answered, cap)
    return data_independent_items(record, n, delta, max_answers=cap, moments=range(1, moments + 1))
