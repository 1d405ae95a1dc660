"""A label release's settings, checked and planned before any teacher votes: the
`[aggregation]` section's mechanism record, built once per release after its data-independent ε
is found finite (`accountable_record`), checked against the ensemble and the pool (`resolve`),
the sanitised release `pate analyze` will add, and `pate label --budget`'s plan (`budget_plan`,
`budget_line`). Public values only: no vote is read here."""

from __future__ import annotations

import numpy as np

from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.planning import plan as plan_mod
from analysis.core.errors import PateError
from pate.config import AggregationConfig

def resolve(record: Mechanism, queries: int, *, num_teachers: int, pool_size: int) -> None:
    """Checks a release of ``queries`` queries by ``record`` against the ensemble and the pool."""
    if queries > pool_size:
        raise PateError(f"aggregation.queries = {queries} is more than the {pool_size} points "
                        f"of the public pool; use at most {pool_size}")
    if not record.answerable(num_teachers):
        raise PateError(f"aggregation.threshold = {record.threshold:g} is above the {num_teachers} "
                        "teachers: no query could ever be answered; lower it")


def accountable_record(cfg: AggregationConfig, privacy) -> Mechanism:
    """The mechanism record of an ``[aggregation]`` section (the one place a command builds
    it), after refusing, before any vote is computed, settings whose data-independent ε for
    ``cfg.queries`` queries is not finite (e.g. ``--sigma 1e-300`` would release the
    noiseless plurality)."""
    n = cfg.queries
    try:
        record = registry.from_config(cfg)
        eps = record.independent_eps(n, privacy.delta, moments=range(1, privacy.moments + 1),
                                     conversion=privacy.conversion).eps
        option = record.noise_options()
    except PateError:
        raise  # the record's own line (a gamma past an exact sampler's reach): short, naming the value
    except (ValueError, OverflowError, ZeroDivisionError, FloatingPointError) as err:
        raise PateError(f"the [aggregation] / [privacy] settings cannot be accounted ({err}); "
                        "check the noise (--gamma/--sigma/--sigma-threshold) and privacy.delta") from None
    if not np.isfinite(eps):
        raise PateError(f"{option} gives a non-finite data-independent eps for {n} queries: the "
                        "release could not be accounted for; use more noise")
    return record


def sanitised_cost(record: Mechanism, queries: int, privacy) -> composition.Cost:
    """The ledger cost of the sanitised ε `pate analyze` draws after ``queries`` queries of
    ``record`` with a ``[privacy]`` section's release settings and no target plan: what
    `pate.release.privacy_report.release_cost_of` records for the report it makes. The record
    says (`analysis.mechanisms.record.Mechanism.planned_sanitised_cost`); public values only,
    so `pate run` can check its whole budget before any work."""
    return record.planned_sanitised_cost(int(queries), privacy)


def release_settings(mechanism: Mechanism, privacy) -> dict:
    """The sanitised release `pate analyze` makes after these labels with a ``[privacy]``
    section (`analysis.planning.plan.published_eps`'s keywords: the β of the mechanism's release,
    the release order and cost)."""
    beta = mechanism.release_beta(privacy)
    return dict(beta=beta, release_order=privacy.release_order or None, release_cost=privacy.release_cost)


def budget_plan(record: Mechanism, queries: int, budget: float, delta: float, *, moments: int = 8,
                conversion: str = "classic", accountant: str = "rdp", privacy=None) -> plan_mod.BudgetPlan:
    """`analysis.planning.plan.budget_plan` for a mechanism record and at most ``queries`` queries.
    With ``privacy`` (a `PrivacyConfig`), the budget covers what is published: the labels
    and the sanitised ε `pate analyze` releases with those settings (`release_settings`);
    what `pate label --budget` plans."""
    release = None if privacy is None else release_settings(record, privacy)
    return plan_mod.budget_plan(record, queries, budget, delta, moments=moments,
                                conversion=conversion, accountant=accountant, release=release)


def budget_line(budget: float, plan: plan_mod.BudgetPlan, accountant: str) -> str:
    """What `pate label --budget` prints, from a run's teachers or from ``--votes`` alike."""
    answers = f", at most {plan.max_answers} answers" if plan.max_answers is not None else ""
    return (f"budget eps {budget:g} ({accountant}): {plan.num_queries} queries{answers}; data-independent eps "
            f"{plan.eps_published:.4g} at delta {plan.delta_published:g} for the labels and the sanitised eps "
            f"`pate analyze` publishes with them (the labels alone: {plan.eps:.4g})")
