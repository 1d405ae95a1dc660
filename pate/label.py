"""`pate label`: the teachers vote on the public pool and a noisy aggregator releases
labels for the queried points.

Writes ``votes.npz`` (the vote histogram of the queried pool points, row i = pool point i:
**private**, never publish)
and ``labels.npz`` (the DP release: ``indices``, ``labels`` with -1 for unanswered
queries, the mechanism and its noise parameters — nothing else; no votes, no noise
values, no seed). Both are computed before either is written, and written atomically.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from analysis.errors import PateError
from pate import aggregation, rundir
from pate.config import AggregationConfig, Config

# The keys labels.npz may hold besides `meta` (config hash and package version).
RELEASED_KEYS = ("indices", "labels", "mechanism", "gamma", "sigma", "threshold", "sigma_threshold",
                 "max_answers")


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
    if cfg.mechanism == "confident-gnmax" and cfg.threshold > num_teachers:
        raise PateError(f"aggregation.threshold = {cfg.threshold:g} is above the {num_teachers} "
                        "teachers: no query could ever be answered; lower it")
    return cfg


def checked_noise_key(seed):
    """`aggregation.noise_key(seed)`, with a seed it cannot use refused as `--seed`."""
    try:
        return aggregation.noise_key(seed)
    except PateError as err:
        raise PateError(f"--seed: {err}") from None
    except (ValueError, OverflowError, TypeError) as err:
        raise PateError(f"--seed {seed} cannot seed the noise ({err}); give a whole number "
                        "0 <= seed < 2**32, or none for OS entropy") from None


def check_release(config: Config) -> None:
    """Checks, before any teacher votes, that the release and its report can be made:
    the mechanism's noise and the run's `[privacy]` settings give a finite
    data-independent ε for the queries asked (what `label` prints and `analyze`
    reports). Nothing private is read: these are public settings."""
    from analysis import gnmax, lnmax

    agg, p = config.aggregation, config.privacy
    try:
        if agg.mechanism == "lnmax":
            res = lnmax.data_independent_eps(agg.queries, agg.gamma, p.delta, range(1, p.moments + 1))
        elif agg.mechanism == "gnmax":
            res = gnmax.data_independent_eps(agg.queries, agg.sigma, p.delta, conversion=p.conversion)
        else:
            res = gnmax.data_independent_eps(agg.queries, agg.sigma, p.delta,
                                             sigma_threshold=agg.sigma_threshold,
                                             num_answered=agg.queries, conversion=p.conversion)
    except (ValueError, OverflowError, ZeroDivisionError, FloatingPointError) as err:
        raise PateError(f"the [aggregation] / [privacy] settings cannot be accounted ({err}); "
                        "check the noise (--gamma/--sigma/--sigma-threshold) and privacy.delta") from None
    if not np.isfinite(res.eps):
        raise PateError(f"the data-independent eps of {agg.queries} {agg.mechanism} answers at these "
                        "settings is not finite; use more noise (--gamma/--sigma) or fewer --queries")


def mechanism_params(cfg: AggregationConfig) -> dict:
    """The noise parameters of the chosen mechanism (what labels.npz records)."""
    if cfg.mechanism == "lnmax":
        return {"gamma": cfg.gamma}
    if cfg.mechanism == "gnmax":
        return {"sigma": cfg.sigma}
    return {"threshold": cfg.threshold, "sigma_threshold": cfg.sigma_threshold, "sigma": cfg.sigma}


@dataclasses.dataclass(frozen=True)
class BudgetPlan:
    """How many queries a labelling run may make under a data-independent ε budget.

    Attributes:
      num_queries: queries to make (for Confident-GNMax: threshold steps).
      max_answers: for Confident-GNMax, stop answering after this many answers; None
        for LNMax and GNMax, where every query is answered.
      eps: the data-independent ε of that plan (≤ the budget).
    """

    num_queries: int
    max_answers: int | None
    eps: float


def budget_plan(cfg: AggregationConfig, budget: float, delta: float, *, moments: int = 8,
                conversion: str = "classic") -> BudgetPlan:
    """The largest plan whose data-independent ε stays within ``budget``.

    The plan is fixed before any vote is seen, so it costs no privacy: LNMax and GNMax
    answer the first ``k`` queries, ``k`` the most whose data-independent ε fits (PATE
    2017 moments accountant; PATE 2018 Proposition 8 and the RDP conversion).
    Confident-GNMax runs the threshold step on the first ``n`` queries and answers at
    most ``A`` of them (answers past the A-th are withheld, a post-processing of the
    uncapped release): ε of ``n`` threshold steps plus ``A`` GNMax steps, with ``n``
    then ``A`` as large as fit.

    Raises:
      PateError: not even one query fits the budget.
    """
    from analysis import gnmax, lnmax

    if not (budget > 0 and np.isfinite(budget)):
        raise PateError(f"--budget must be a positive number, got {budget}")
    n_max = cfg.queries

    def largest(fits, hi: int) -> int:
        """The largest k in [0, hi] with fits(k), for fits monotone (true then false)."""
        lo = 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    if cfg.mechanism == "lnmax":
        def eps(k): return lnmax.data_independent_eps(k, cfg.gamma, delta, range(1, moments + 1)).eps
    elif cfg.mechanism == "gnmax":
        def eps(k): return gnmax.data_independent_eps(k, cfg.sigma, delta, conversion=conversion).eps
    else:
        def eps_pair(n, a):
            return gnmax.data_independent_eps(n, cfg.sigma, delta, sigma_threshold=cfg.sigma_threshold,
                                              num_answered=a, conversion=conversion).eps
        n = largest(lambda k: eps_pair(k, 0) <= budget, n_max)
        a = largest(lambda k: eps_pair(n, k) <= budget, n) if n else 0
        if a == 0:
            raise PateError(f"a budget of eps {budget:g} allows no Confident-GNMax answer at these noise "
                            "levels; raise the budget or the noise (see `pate plan`)")
        return BudgetPlan(n, a, float(eps_pair(n, a)))
    k = largest(lambda k: eps(k) <= budget, n_max)
    if k == 0:
        raise PateError(f"a budget of eps {budget:g} allows no {cfg.mechanism} answer at this noise; "
                        "raise the budget or the noise (see `pate plan`)")
    return BudgetPlan(k, None, float(eps(k)))


def cap_answers(labels: np.ndarray, max_answers: int | None) -> np.ndarray:
    """Withholds every answer after the first ``max_answers`` (label -1)."""
    if max_answers is None:
        return labels
    answered = np.cumsum(labels >= 0)
    return np.where((labels >= 0) & (answered > max_answers), aggregation.UNANSWERED, labels)


def label(config: Config, workdir, *, seed: int | None = None, overwrite: bool = False,
          budget: float | None = None, echo=print) -> LabelResult:
    """Computes the votes on the pool, releases noisy labels and writes both files.

    Args:
      config: the run's config with the `[aggregation]` section to use.
      workdir: a run directory with trained teachers.
      seed: noise seed (research only; never written anywhere). Default: OS entropy.
      overwrite: replace existing votes.npz / labels.npz.
      budget: stop answering where the data-independent ε would exceed it (see
        `budget_plan`); None answers `aggregation.queries` queries.
      echo: where progress lines go.

    Raises:
      PateError: no teachers; labels exist and not `overwrite`; bad parameters.
    """
    from pate.data import load_dataset, split
    from pate.teachers import load_teachers, predict_votes

    run = rundir.RunDir(workdir)
    present = [a for a in rundir.LABEL_ARTIFACTS if run.exists(a)]
    if present and not overwrite:
        raise PateError(f"{run.path} already holds {', '.join(present)}; pass --overwrite to "
                        "label again (the old release is replaced)")
    key = checked_noise_key(seed)
    check_release(config)
    teachers = load_teachers(run.path)
    agg = config.aggregation
    splits = split(load_dataset(config.data), config.data.public_size)
    if splits.pool_x.shape[1:] != tuple(teachers.image_shape):
        raise PateError(f"the pool's images have shape {splits.pool_x.shape[1:]} but the teachers "
                        f"were trained on {tuple(teachers.image_shape)}: is this the same data set?")
    resolve(agg, num_teachers=teachers.num_teachers, pool_size=splits.pool_x.shape[0])
    plan = None
    if budget is not None:
        plan = budget_plan(agg, budget, config.privacy.delta, moments=config.privacy.moments,
                           conversion=config.privacy.conversion)
        echo(f"budget eps {budget:g}: {plan.num_queries} queries"
             + (f", at most {plan.max_answers} answers" if plan.max_answers is not None else "")
             + f" (data-independent eps {plan.eps:.4g})")

    # Votes only for the queried points (the first ones of the pool): nothing else is
    # answered, and a vote nobody needs is private data kept for no reason.
    queried = np.arange(agg.queries if plan is None else plan.num_queries)
    echo(f"voting: {teachers.num_teachers} teachers on {queried.size} pool points")
    votes = predict_votes(teachers.params, teachers.model, splits.pool_x[queried], teachers.num_classes,
                          batch_size=config.teachers.eval_batch_size)
    if np.any(votes.sum(axis=1) != teachers.num_teachers):
        raise PateError("internal error: a vote row does not count every teacher once")

    params = mechanism_params(agg)
    released = aggregation.aggregate(votes[queried], agg.mechanism, key, **params)
    if plan is not None and plan.max_answers is not None:
        released = cap_answers(released, plan.max_answers)
        params["max_answers"] = plan.max_answers
    answered = released >= 0
    truth = splits.pool_y[queried]
    result = LabelResult(
        mechanism=agg.mechanism, num_queries=int(queried.size), num_answered=int(answered.sum()),
        label_accuracy=float(np.mean(released[answered] == truth[answered])) if answered.any() else float("nan"),
        plurality_accuracy=float(np.mean(np.argmax(votes[queried], axis=1) == truth)),
        params=params)

    labels = {"indices": queried.astype(np.int64), "labels": released.astype(np.int32),
              "mechanism": np.array(agg.mechanism)}
    labels.update({k: np.array(float(v)) for k, v in params.items()})
    from analysis import report as report_mod
    from pate.analyze import report_for_release

    # Everything that can fail is computed before the first byte is written.
    p = config.privacy
    brief = report_for_release(votes, labels, delta=p.delta, moments=p.moments,
                               conversion=p.conversion, sanitize=False)
    table = report_mod.render_table(brief)

    # Votes, labels and config.toml are swapped in together once all three are written.
    staging = rundir.Staging(run, "label", rundir.LABEL_ARTIFACTS)
    try:
        out = rundir.RunDir(staging.path)
        out.write_npz(rundir.VOTES_NPZ, {"votes": votes.astype(np.int32)}, config)
        out.write_npz(rundir.LABELS_NPZ, labels, config)
        out.write_config(config)
    except BaseException:
        staging.discard()
        raise
    moved = staging.commit(extra=(rundir.CONFIG_TOML,))
    echo(result.summary())
    echo(table)
    if moved:
        echo(rundir.stale_message(moved, "labels"))
    echo(f"wrote {run / rundir.VOTES_NPZ} (private: never publish) and {run / rundir.LABELS_NPZ} "
         "(the release); `pate analyze` gives the sanitised eps")
    return result


def labels_path(workdir) -> Path:
    return Path(workdir) / rundir.LABELS_NPZ
