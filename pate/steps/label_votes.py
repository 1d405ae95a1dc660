"""`pate label --votes FILE`: labels released from votes computed elsewhere — teachers
trained in any framework — with no pate teachers and no config.

The votes are validated as `pate analyze` validates them, the queried rows are chosen from
public information only, and the release goes through `pate.steps.label`'s
`released_arrays` (so `release_labels`, the one place that calls the aggregator) and
`charge_release`: the run directory gets the same ``votes.npz`` (private) and
``labels.npz`` (the release) as `pate label`, and `pate analyze --workdir` works unchanged.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.core.errors import PateError
from analysis.core.noise import seed_record
from analysis.reporting.report_io import render_table
from analysis.planning.simulated_votes import VoteModel
from pate.release import aggregation, outcome
from pate.store import rundir
from pate.store import ledger as ledger_mod
from pate.config import AggregationConfig, PrivacyConfig
from pate.store.door import Door, step
from pate.release.budget import accountable_record, budget_line, budget_plan, resolve
from pate.release.labels import charge_release, check_run_ledger, released_arrays


@dataclasses.dataclass(frozen=True)
class VotesRelease:
    """What `label_votes` released (all of it publishable but `num_teachers`, which is
    public anyway in PATE).

    Attributes:
      mechanism: the aggregator.
      params: its noise parameters (and ``max_answers`` when a budget capped it).
      indices: the rows of the votes input that were queried, in order.
      labels: the released label of each (-1 = not answered).
      eps_data_independent: the plan's data-independent ε when ``budget`` was given.
    """

    mechanism: str
    params: dict
    indices: np.ndarray
    labels: np.ndarray
    eps_data_independent: float | None = None

    @property
    def num_queries(self) -> int:
        return int(self.indices.size)

    @property
    def num_answered(self) -> int:
        return int(np.sum(self.labels >= 0))

    def summary(self) -> str:
        params = ", ".join(f"{k} {v:g}" for k, v in self.params.items())
        return (f"mechanism: {self.mechanism} ({params})\n"
                f"queries: {self.num_queries}  answered: {self.num_answered}")


def noise_params(mechanism: str, *, gamma=None, sigma=None, threshold=None, sigma_threshold=None) -> dict:
    """The noise parameters ``mechanism`` needs, checked present and the rest absent."""
    return registry.from_options(mechanism, gamma=gamma, sigma=sigma, threshold=threshold,
                                   sigma_threshold=sigma_threshold).params()



def label_votes(votes, workdir, *, num_classes: int, mechanism: str = "lnmax", gamma=None, sigma=None,
                threshold=None, sigma_threshold=None, queries: int | None = None, indices=None,
                budget: float | None = None, delta: float = 1e-5, moments: int = 8,
                conversion: str = "classic", accountant: str = "rdp", input_is_labels: bool = False,
                seed: int | None = None, overwrite: bool = False, ledger: str | None = None,
                total_budget: float | None = None, allow_near_chance: bool = False, echo=print) -> VotesRelease:
    """Releases noisy labels from votes computed elsewhere: teachers trained anywhere.

    The votes are validated as `pate analyze` validates them (`analysis.core.votes`), the
    queried rows are chosen from public information only (``indices``, then the first
    ``queries``, then the ``budget`` plan), the aggregator runs through `release_labels`
    and the run directory gets the same ``votes.npz`` (private: every row of the input)
    and ``labels.npz`` (the release: ``indices`` into the input's rows, ``labels``, the
    mechanism and its noise) as `label`, so `pate analyze --workdir` works unchanged.

    Args:
      votes: a ``(points, num_classes)`` vote histogram, or with ``input_is_labels`` a
        ``(teachers, points)`` matrix of predicted labels; or the path of a ``.npz``
        (key ``votes``, or ``labels`` with ``input_is_labels``) / ``.npy`` holding one.
      workdir: the run directory to write (created if missing).
      num_classes: the number of classes (required: classes no teacher predicted still
        count).
      mechanism, gamma, sigma, threshold, sigma_threshold: the aggregator and its noise;
        every parameter the mechanism needs must be given.
      queries: query only the first N selected rows.
      indices: rows to query, in order (array, or path of a ``.npy`` / ``.npz`` key
        ``indices``); default all rows.
      budget: stop where the data-independent ε of the labels and of the sanitised ε
        `pate analyze` publishes with them (default release settings) would exceed it
        (`budget_plan`, at ``delta`` with ``moments``, ``conversion`` and ``accountant``).
      input_is_labels: ``votes`` is a teachers × points matrix of predicted labels.
      seed: noise seed (research only; never written). Default: fresh OS entropy.
      overwrite: replace an existing votes.npz / labels.npz.
      ledger: the name of the private data set the votes come from, whose ledger
        (`pate.store.ledger`) is charged; default the data set a votes.npz written by pate
        names (`pate.store.ledger.Ledger.for_votes`); required for an array or other votes.
      total_budget: refuse the release when the ledger's cumulative ε at ``delta`` would
        exceed it (None or 0: none); the ledger's recorded budget holds either way.
      allow_near_chance: release labels the plan expects near chance anyway (release.json's
        warnings then say so; `pate.release.outcome`).
      echo: where the summary and the privacy table go.

    Before anything is released, the expected answers and label accuracy of the release on
    votes simulated from the public vote model (the votes' teacher count, ``num_classes``,
    the default mean teacher accuracy; `analysis.planning.expected_outcome`) are printed.

    Raises:
      PateError: bad votes, indices or parameters, a release expected near chance and not
        ``allow_near_chance``, or a release exists and not ``overwrite``. Nothing is written then.
    """
    with step("label", workdir, overwrite=overwrite, echo=echo) as door:
        if (isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer))
                or int(num_classes) < 2):  # 4.9 is no class count (int() would truncate it)
            raise PateError(f"--num-classes must be a whole number, at least 2, got {num_classes!r}")
        params = noise_params(mechanism, gamma=gamma, sigma=sigma, threshold=threshold,
                              sigma_threshold=sigma_threshold)
        hist = _vote_histogram(votes, int(num_classes), input_is_labels)
        selected = _selected_rows(indices, queries, hist.shape[0])
        agg = AggregationConfig(mechanism=mechanism, queries=int(selected.size), **params)
        agg.validate()
        privacy = PrivacyConfig(delta=delta, moments=moments, conversion=conversion)
        record = accountable_record(agg, privacy)
        resolve(record, agg.queries, num_teachers=int(hist[0].sum()), pool_size=hist.shape[0])
        aggregation.noise_source(seed)  # refuses a bad seed before anything is released
        plan = None
        if budget is not None:
            plan = budget_plan(record, agg.queries, budget, delta, moments=moments, conversion=conversion, accountant=accountant,
                               privacy=privacy)
            echo(budget_line(budget, plan, accountant))
            selected = selected[:plan.num_queries]
        book = ledger_mod.Ledger.for_votes(votes, ledger)  # the votes' data set; in-memory votes must name theirs
        if isinstance(votes, (str, os.PathLike)):  # the folder the votes were labelled under, or a refusal
            book.check_holds_votes(votes)
        check_run_ledger(book, door.run.path)  # --overwrite: the run's earlier release's ledger, or a refusal
        expected = outcome.expect(record, int(selected.size),  # printed once every other check has passed
                                  VoteModel(int(hist[0].sum()), int(num_classes), accuracy=privacy.target_accuracy),
                                  max_answers=None if plan is None else plan.max_answers, allow=allow_near_chance,
                                  override=outcome.FLAG_OVERRIDE, echo=echo)
        result = _release_from_votes(door, hist, selected, record, plan, book, seed=seed,
                                     privacy=dataclasses.replace(privacy, total_budget=total_budget or 0.0),
                                     total_budget=total_budget, echo=echo, meta=outcome.meta(expected))
    echo(ledger_mod.cumulative_line(book, delta))
    echo(f"wrote {door.run / rundir.VOTES_NPZ} (private: never publish) and {door.run / rundir.LABELS_NPZ} "
         "(the release); `pate analyze --workdir` gives the sanitised eps")
    return result


def _vote_histogram(votes, num_classes: int, input_is_labels: bool) -> np.ndarray:
    """The vote histogram `label_votes` was given (an array or a file), checked."""
    import os

    from analysis.core import votes as votes_mod

    if isinstance(votes, (str, os.PathLike)):
        hist = votes_mod.load_votes(votes, input_is_labels=input_is_labels, num_classes=num_classes)
    elif input_is_labels:
        hist = votes_mod.labels_to_votes(votes, num_classes)
    else:
        hist = votes_mod.check_votes(votes)
    if hist.shape[1] != num_classes:
        raise PateError(f"the votes have {hist.shape[1]} class columns but --num-classes is {num_classes}")
    return hist


def _selected_rows(indices, queries: int | None, rows: int) -> np.ndarray:
    """The rows `label_votes` queries, in order: ``indices`` (default all), the first ``queries``."""
    import os

    from analysis.core import votes as votes_mod

    if indices is None:
        selected = np.arange(rows)
    elif isinstance(indices, (str, os.PathLike)):
        selected = votes_mod.load_indices(indices, rows)
    else:
        selected = votes_mod.check_indices(indices, rows)
    if queries is not None:
        if int(queries) < 1 or int(queries) > selected.size:
            raise PateError(f"--queries {queries} must be between 1 and the {selected.size} rows selected")
        selected = selected[:int(queries)]
    return selected


def _release_from_votes(door: Door, hist: np.ndarray, selected: np.ndarray, record: Mechanism,
                        plan, book, *, seed, privacy: PrivacyConfig, total_budget, echo,
                        meta: dict | None = None) -> VotesRelease:
    """The body of `label_votes` once its inputs are checked: the ledger's budget, the
    release, the report; writes votes.npz and labels.npz through `door`."""
    from analysis.reporting import report as report_mod
    from pate.release.privacy_report import data_independent_comparison, report_for_release

    delta, moments = privacy.delta, privacy.moments
    cap = None if plan is None else plan.max_answers
    cost = composition.labels_cost(record, int(selected.size), max_answers=cap)
    book.check_budget([cost], total_budget, delta, "this label release")
    from analysis.core.votes import rows_of

    labels = released_arrays(rows_of(hist, selected), selected, record, seed, cap)
    # The table is computed before anything is written: a failure leaves no release.
    brief = report_for_release(hist, labels, delta=delta, moments=moments, conversion=privacy.conversion,
                               sanitize=False)
    brief = report_mod.extend(brief, data_independent_comparison(hist, labels, delta=delta, moments=moments))
    # Votes and labels are swapped in together, the old release and what was made from it
    # moved aside, once both are written and the release is charged.
    door.out.write_npz(rundir.VOTES_NPZ, {"votes": hist.astype(np.int32)},
                       meta={"data_set": book.source, "ledger_directory": str(book.directory)})
    door.out.write_npz(rundir.LABELS_NPZ, labels, meta={"ledger": book.public_name(), **seed_record(seed),
                                                        **(meta or {})})
    charge_release(door, book, cost, record, door.out / rundir.LABELS_NPZ, int(selected.size),
                   privacy, data_digest=book.keyed_digest(_int64_bytes(hist)), num_classes=hist.shape[1])
    params = {**record.params(), **({} if cap is None else {"max_answers": cap})}
    result = VotesRelease(record.name, params, selected, labels["labels"],
                          None if plan is None else plan.eps)
    echo(result.summary())
    echo(render_table(brief))
    return result


def _int64_bytes(hist: np.ndarray) -> memoryview:
    """The histogram's bytes as int64 (what the ledger's keyed digest of the votes has always
    covered), without a copy when it is a C-ordered int64 array already."""
    return memoryview(np.ascontiguousarray(hist, dtype=np.int64)).cast("B")
