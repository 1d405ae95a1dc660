"""`pate label`: the teachers vote on the public pool and a noisy aggregator releases
labels for the queried points.

Writes ``votes.npz`` (the vote histogram of the queried pool points, row i = pool point i:
**private**, never publish)
and ``labels.npz`` (the DP release: ``indices``, ``labels`` with -1 for unanswered
queries, the mechanism and its noise parameters — nothing else; no votes, no noise
values, no seed; ``meta.research_seed`` is true when a ``--seed`` made the noise). Both
are computed before either is written, and written atomically.

`pate.steps.label_votes` does the same from a vote histogram computed elsewhere (`pate
label --votes FILE`), through this module's `released_arrays` and `charge_release`.

Every release goes through `release_labels`, the one place that calls the aggregator.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis import composition, mechanisms
from analysis import plan as plan_mod
from analysis.errors import PateError
from analysis.noise import seed_record
from pate import aggregation, release_target, rundir
from pate import ledger as ledger_mod
from analysis.report_io import render_table
from pate.released_labels import CHECK_OFFSETS, content_digest, read_labels
from pate.config import AggregationConfig, Config
from pate.door import Door, step

# The keys labels.npz may hold besides `meta` (config hash and package version).
RELEASED_KEYS = ("indices", "labels", "mechanism", "gamma", "sigma", "threshold", "sigma_threshold",
                 "max_answers", CHECK_OFFSETS)


@dataclasses.dataclass(frozen=True)
class LabelResult:
    """What `label` released and how good it is (pool labels are known in benchmarks)."""

    mechanism: str
    num_queries: int
    num_answered: int
    label_accuracy: float  # released labels vs true pool labels, on answered queries
    plurality_accuracy: float  # noiseless plurality vote vs true labels, on the queries
    params: dict

    def summary(self) -> str:
        params = ", ".join(f"{k} {v:g}" for k, v in self.params.items())
        return "\n".join([
            f"mechanism: {self.mechanism} ({params})",
            f"queries: {self.num_queries}  answered: {self.num_answered}",
            f"accuracy of released labels (answered queries): {self.label_accuracy:.4f}",
            f"accuracy of the noiseless plurality vote (queries, private): {self.plurality_accuracy:.4f}",
        ])


def resolve(cfg: AggregationConfig, *, num_teachers: int, pool_size: int) -> AggregationConfig:
    """Checks an aggregation config against the ensemble and the pool."""
    if cfg.queries > pool_size:
        raise PateError(f"aggregation.queries = {cfg.queries} is more than the {pool_size} points "
                        f"of the public pool; use at most {pool_size}")
    if not mechanisms.from_config(cfg).answerable(num_teachers):
        raise PateError(f"aggregation.threshold = {cfg.threshold:g} is above the {num_teachers} "
                        "teachers: no query could ever be answered; lower it")
    return cfg


def check_accountable(cfg: AggregationConfig, privacy) -> None:
    """Refuses, before any vote is computed, settings whose data-independent ε is not finite
    (e.g. ``--sigma 1e-300`` would release the noiseless plurality)."""
    n = cfg.queries
    try:
        record = mechanisms.from_config(cfg)
        eps = record.independent_eps(n, privacy.delta, moments=range(1, privacy.moments + 1),
                                     conversion=privacy.conversion).eps
        option = record.noise_options()
    except (ValueError, OverflowError, ZeroDivisionError, FloatingPointError) as err:
        raise PateError(f"the [aggregation] / [privacy] settings cannot be accounted ({err}); "
                        "check the noise (--gamma/--sigma/--sigma-threshold) and privacy.delta") from None
    if not np.isfinite(eps):
        raise PateError(f"{option} gives a non-finite data-independent eps for {n} queries: the "
                        "release could not be accounted for; use more noise")


def mechanism_params(cfg: AggregationConfig) -> dict:
    """The noise parameters of the chosen mechanism (what labels.npz records)."""
    return mechanisms.from_config(cfg).params()


def release_settings(mechanism: mechanisms.Mechanism, privacy) -> dict:
    """The sanitised release `pate analyze` makes after these labels with a ``[privacy]``
    section (`analysis.plan.published_eps`'s keywords: the β of the mechanism's release,
    the release order and cost)."""
    beta = mechanism.release_beta(privacy)
    return dict(beta=beta, release_order=privacy.release_order or None, release_cost=privacy.release_cost)


def budget_plan(cfg: AggregationConfig, budget: float, delta: float, *, moments: int = 8,
                conversion: str = "classic", accountant: str = "rdp", privacy=None) -> plan_mod.BudgetPlan:
    """`analysis.plan.budget_plan` for an ``[aggregation]`` section (its mechanism and at
    most ``cfg.queries`` queries). With ``privacy`` (a `PrivacyConfig`), the budget covers
    what is published: the labels and the sanitised ε `pate analyze` releases with those
    settings (`release_settings`); what `pate label --budget` plans."""
    release = None if privacy is None else release_settings(mechanisms.from_config(cfg), privacy)
    return plan_mod.budget_plan(mechanisms.from_config(cfg), cfg.queries, budget, delta, moments=moments,
                                conversion=conversion, accountant=accountant, release=release)


def budget_line(budget: float, plan: plan_mod.BudgetPlan, accountant: str) -> str:
    """What `pate label --budget` prints, from a run's teachers or from ``--votes`` alike."""
    answers = f", at most {plan.max_answers} answers" if plan.max_answers is not None else ""
    return (f"budget eps {budget:g} ({accountant}): {plan.num_queries} queries{answers}; data-independent eps "
            f"{plan.eps_published:.4g} at delta {plan.delta_published:g} for the labels and the sanitised eps "
            f"`pate analyze` publishes with them (the labels alone: {plan.eps:.4g})")


def cap_answers(labels: np.ndarray, max_answers: int | None) -> np.ndarray:
    """Withholds every answer after the first ``max_answers`` (label -1)."""
    if max_answers is None:
        return labels
    answered = np.cumsum(labels >= 0)
    return np.where((labels >= 0) & (answered > max_answers), aggregation.UNANSWERED, labels)


def release_labels(votes: np.ndarray, mechanism: str, params: dict, *, seed: int | None = None,
                   max_answers: int | None = None, offsets=None) -> np.ndarray:
    """Noisy labels for every row of ``votes``: THE one call of the aggregator.

    Draws a fresh noise key (``seed`` for research only; never written anywhere), runs
    `pate.aggregation.aggregate` with the mechanism's parameters (``gamma``; ``sigma``;
    ``threshold``, ``sigma_threshold``, ``sigma``) and withholds every answer past the
    ``max_answers``-th (`cap_answers`); ``offsets``: Interactive-GNMax's check. int32, -1 = not answered.
    """
    released = aggregation.aggregate(votes, mechanism, aggregation.noise_source(seed), offsets, **params)
    return cap_answers(released, max_answers)


def label(config: Config, workdir, *, seed: int | None = None, overwrite: bool = False,
          budget: float | None = None, accountant: str = "rdp", echo=print) -> LabelResult:
    """Computes the votes on the pool, releases noisy labels and writes both files.

    Args:
      config: the run's config with the `[aggregation]` section to use.
      workdir: a run directory with trained teachers.
      seed: noise seed (research only; never written anywhere). Default: OS entropy.
      overwrite: replace existing votes.npz / labels.npz.
      budget: stop answering where the data-independent ε of what is published — the
        labels and the sanitised ε of `pate analyze` with ``config.privacy`` — would exceed
        it (see `budget_plan`); None answers `aggregation.queries` queries.
      accountant: how `budget` is measured: "rdp" or "pld" (see `budget_plan`).
      ``config.privacy.target_eps``: plan the queries and release first (`pate.release_target`).
      echo: where progress lines go.

    Raises:
      PateError: no teachers; labels exist and not `overwrite`; bad parameters.
    """
    from pate.data import load_dataset, split
    from pate.steps.teachers import load_teachers

    # Votes, labels and config.toml are swapped in together once all three are written.
    with step("label", workdir, config=config, overwrite=overwrite, echo=echo) as door:
        aggregation.noise_source(seed)  # refuses a bad seed before any vote is computed
        check_accountable(config.aggregation, config.privacy)
        teachers = load_teachers(door.run.path)
        agg = config.aggregation
        splits = split(load_dataset(config.data), config.data.public_size)
        if splits.pool_x.shape[1:] != tuple(teachers.image_shape):
            raise PateError(f"the pool's images have shape {splits.pool_x.shape[1:]} but the teachers "
                            f"were trained on {tuple(teachers.image_shape)}: is this the same data set?")
        resolve(agg, num_teachers=teachers.num_teachers, pool_size=splits.pool_x.shape[0])
        # A target headline plans the queries and the release before any teacher votes.
        target = release_target.choose(config, teachers.num_teachers, teachers.num_classes, budget=budget, echo=echo)
        plan = None if target is None else release_target.budget_plan(target)
        if budget is not None:
            plan = budget_plan(agg, budget, config.privacy.delta, moments=config.privacy.moments,
                               conversion=config.privacy.conversion, accountant=accountant,
                               privacy=config.privacy)
            echo(budget_line(budget, plan, accountant))
        planned = {} if target is None else {release_target.PLAN_KEY: target.meta()}
        result = _release_from_teachers(door, config, teachers, splits, plan, seed, echo, planned)
    echo(f"wrote {door.run / rundir.VOTES_NPZ} (private: never publish) and {door.run / rundir.LABELS_NPZ} "
         "(the release); `pate analyze` gives the sanitised eps and the headline eps")
    return result


def _release_from_teachers(door: Door, config: Config, teachers, splits, plan, seed, echo,
                           planned: dict) -> LabelResult:
    """The body of `label` once its inputs are checked: the ledger's budget, the votes,
    the release, the brief report; writes votes.npz and labels.npz through `door`."""
    from pate.voting import plurality_accuracy, predict_votes

    # The ledger of the private data set refuses a release over its total budget before
    # any teacher votes (`pate.ledger`).
    agg = config.aggregation
    record = mechanisms.from_config(agg)
    num_queries = agg.queries if plan is None else plan.num_queries
    cost = composition.labels_cost(record, num_queries, max_answers=None if plan is None else plan.max_answers)
    book = ledger_mod.Ledger.for_config(config)
    book.check_budget([cost], config.privacy.total_budget, config.privacy.delta, "this label release")

    # Votes only for the queried points (the first ones of the pool): nothing else is
    # answered, and a vote nobody needs is private data kept for no reason.
    queried = np.arange(num_queries)
    echo(f"voting: {teachers.num_teachers} teachers on {queried.size} pool points")
    votes = predict_votes(teachers.params, teachers.model, splits.pool_x[queried], teachers.num_classes,
                          batch_size=config.teachers.eval_batch_size)
    if np.any(votes.sum(axis=1) != teachers.num_teachers):
        raise PateError("internal error: a vote row does not count every teacher once")

    params = mechanism_params(agg)
    labels = released_arrays(votes[queried], queried, agg.mechanism, params, seed,
                              None if plan is None else plan.max_answers)
    released, truth = labels["labels"], splits.pool_y[queried]
    answered = released >= 0
    result = LabelResult(
        mechanism=agg.mechanism, num_queries=int(queried.size), num_answered=int(answered.sum()),
        label_accuracy=float(np.mean(released[answered] == truth[answered])) if answered.any() else float("nan"),
        plurality_accuracy=plurality_accuracy(votes[queried], truth),
        params=params)

    # The brief report is computed before anything is written: a release the analysis
    # cannot account for is never written (drawing noise that is never published costs nothing).
    from pate.steps.analyze import report_for_release

    p = config.privacy
    table = render_table(report_for_release(votes, labels, delta=p.delta, moments=p.moments,
                                            conversion=p.conversion, sanitize=False))
    door.out.write_npz(rundir.VOTES_NPZ, {"votes": votes.astype(np.int32)}, config)
    door.out.write_npz(rundir.LABELS_NPZ, labels, config, meta={"ledger": book.name, **seed_record(seed), **planned})
    # Charged before the release is in place: a kill from here on over-counts, never under-counts.
    charge_release(book, cost, record, door.run.path, door.out / rundir.LABELS_NPZ, num_queries, config.privacy,
                   data_digest=book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes()))
    echo(ledger_mod.cumulative_line(book, config.privacy.delta))
    echo(result.summary())
    echo(table)
    return result


def released_arrays(votes: np.ndarray, indices: np.ndarray, mechanism: str, params: dict,
                     seed: int | None, cap: int | None, offsets=None) -> dict:
    """What labels.npz holds: the queried `indices`, their noisy labels (`release_labels`
    over `votes`, their rows), the mechanism and its noise (``max_answers`` added to
    `params` when `cap` withheld answers; the public ``check_offsets`` with `offsets`)."""
    released = release_labels(votes, mechanism, params, seed=seed, max_answers=cap, offsets=offsets)
    if cap is not None:
        params["max_answers"] = cap
    labels = {"indices": indices.astype(np.int64), "labels": released.astype(np.int32),
              "mechanism": np.array(mechanism)}
    labels.update({k: np.array(float(v)) for k, v in params.items()})
    labels.update({} if offsets is None else {CHECK_OFFSETS: np.asarray(offsets).astype(np.int32)})
    return labels


def charge_release(book, cost, record, run_path, labels_path, num_queries: int, privacy, *,
                   data_digest: str | None = None) -> dict:
    """Charges a label release to the data set's ledger (refused over ``total_budget``)."""
    mechanism = {"name": record.name, **record.params(), "queries": int(num_queries),
                 "describe": f"labels: {num_queries} queries of {record.describe()}"}
    return book.charge("labels", cost, run=run_path, mechanism=mechanism,
                       subject=content_digest(read_labels(labels_path)), budget=privacy.total_budget,
                       delta=privacy.delta, data_digest=data_digest)
