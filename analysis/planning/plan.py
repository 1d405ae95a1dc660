"""Plans made before any vote is seen, so they depend on public parameters only and can
be published with the run:

- `plan` (`pate plan`): the least noise whose data-independent ε over N answers meets a
  budget — each record calibrates itself (`analysis.mechanisms.registry`, with the formulas of
  `analysis.accounting.calibration`); given votes, the same noise's data-dependent ε (private) is
  computed for comparison.
- `budget_plan` (`pate label --budget`): the most queries (and, for Confident-GNMax,
  answers) whose data-independent ε, with the sanitised release `pate analyze` publishes
  counted in (`published_eps`), meets a budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from analysis.mechanisms import registry
from analysis.core.errors import PateError
from analysis.accounting.rdp import DEFAULT_ORDERS, check_orders
from analysis.core.validation import check_count, check_delta, check_positive

ACCOUNTANTS = ("rdp", "pld")
DEFAULT_SIGMA_RATIO = 5.0
DEFAULT_MOMENTS = tuple(range(1, 9))


@dataclass(frozen=True)
class Plan:
    """Calibrated noise and what it buys.

    `noise` maps parameter names to values (gamma; sigma; threshold, sigma_threshold,
    sigma). `eps` is the data-independent ε of that noise (≤ the budget) at `order`
    (a Rényi order, or the moment l for LNMax; NaN for the PLD accountant, whose
    `conversion` is "pld"). `data_dependent_eps` (and
    `expected_answered` for Confident-GNMax) is filled in when votes are given; it is
    PRIVATE. `notes` are plain-language remarks (e.g. noise larger than the teacher count).
    """

    mechanism: str
    num_queries: int
    budget_eps: float
    delta: float
    conversion: str
    noise: dict
    eps: float
    order: float
    data_dependent_eps: float | None = None
    data_dependent_order: float | None = None
    expected_answered: float | None = None
    notes: tuple = field(default_factory=tuple)


#: The largest budget `plan` calibrates for.
MAX_EPS = 1e6


def plan(
    mechanism,
    num_queries,
    eps,
    delta,
    *,
    num_teachers=None,
    threshold=None,
    sigma_ratio=DEFAULT_SIGMA_RATIO,
    num_answered=None,
    votes=None,
    orders=DEFAULT_ORDERS,
    moments=DEFAULT_MOMENTS,
    conversion="classic",
    accountant="rdp",
) -> Plan:
    """Calibrates the noise of `mechanism` so that `num_queries` answers are (≤eps, delta)-DP.

    The record of `mechanism` calibrates itself (``calibrate`` of `analysis.mechanisms.registry`;
    `analysis.accounting.calibration` for the formulas and when a budget cannot be met). `votes`
    (queries × classes counts, already validated) adds the data-dependent ε of the first
    `num_queries` rows under the same noise. The returned ε is recomputed with the
    forward functions (`analysis.bounds.lnmax.data_independent_eps`,
    `analysis.bounds.gnmax.data_independent_eps`), never taken from the inversion.
    ``accountant="pld"`` calibrates against `analysis.accounting.pld` instead;
    `conversion` then applies only to the data-dependent ε given votes.
    """
    record_type = registry.record_type(mechanism)
    n = check_count("num_queries", num_queries, 1)
    eps = check_positive("eps", eps)
    if eps > MAX_EPS:
        raise PateError(f"--eps must be at most {MAX_EPS:g} (a budget beyond it protects nothing), "
                        f"got {eps:g}")
    delta = check_delta(delta)
    orders = check_orders(orders)
    if conversion not in ("classic", "improved"):
        raise PateError(f"conversion must be 'classic' or 'improved', got {conversion!r}")
    if accountant not in ACCOUNTANTS:
        raise PateError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    if num_teachers is not None and int(num_teachers) < 1:
        raise PateError(f"num_teachers must be at least 1, got {num_teachers}")
    found = record_type.calibrate(n, eps, delta, accountant=accountant, moments=moments, orders=orders,
                                  conversion=conversion, threshold=threshold, sigma_ratio=sigma_ratio,
                                  num_answered=num_answered, num_teachers=num_teachers)
    record = found.record
    # `pate analyze` and `pate run` also publish a sanitised eps; say what it adds.
    total, delta_total, how = record.published_eps(n, delta, moments=moments, orders=orders, conversion=conversion,
                                                   max_answers=num_answered)
    notes = list(found.notes)
    if record.sanitised:
        notes.append(f"the sanitised eps that `pate analyze`/`pate run` also publish comes on top: with it "
                     f"eps {total:.4f} at delta {delta_total:g} ({how}; {record.rdp_accountant(conversion)}); "
                     "the headline eps of release.json counts it")
    else:
        notes.append(f"{record.name} publishes no sanitised eps: the headline is this data-independent eps"
                     + ("; its samplers are exact (no floating-point delta)" if record.exact else ""))
    dd_eps = dd_order = expected = None
    if votes is not None:
        votes = np.asarray(votes)
        if votes.ndim != 2 or votes.shape[0] < n:
            raise PateError(
                f"votes hold {votes.shape[0] if votes.ndim == 2 else 0} queries, fewer than --queries {n}"
            )
        if num_teachers is not None and np.any(votes[:n].sum(axis=1) != int(num_teachers)):
            raise PateError(f"votes rows do not sum to the {num_teachers} teachers given")
        dd_eps, dd_order, expected = record.data_dependent(votes[:n], delta, moments=moments, orders=orders,
                                                           conversion=conversion)
    return Plan(
        mechanism=record.name, num_queries=n, budget_eps=eps, delta=delta, conversion=found.conversion,
        noise=record.params(), eps=float(found.eps), order=float(found.order),
        data_dependent_eps=None if dd_eps is None else float(dd_eps),
        data_dependent_order=None if dd_order is None else float(dd_order),
        expected_answered=expected, notes=tuple(notes),
    )


def number(x) -> str:
    """A number for a table: integers as integers, others with 4-5 significant digits,
    very small or large values in scientific notation (never a 310-digit string)."""
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    if 1e-3 <= abs(x) < 1e6:
        return f"{x:.5g}" if abs(x) < 1 else f"{x:.4f}"
    return f"{x:.4e}"


def probability(x) -> str:
    """A probability such as delta, with every digit that tells it apart from 0 and 1."""
    return format(float(x), ".12g")


def render(p: Plan) -> str:
    """Plain-text summary of a `Plan` for the terminal."""
    lines = [f"mechanism        {p.mechanism}   "
             f"({p.num_queries} queries, budget eps={number(p.budget_eps)}, delta={probability(p.delta)})"]
    for k, v in p.noise.items():
        lines.append(f"{k:<16} {v:.6g}")
    if p.conversion == "pld":
        lines.append(f"eps (data-indep) {number(p.eps)}   PLD accountant (dp-accounting)")
    else:
        where = (f"at moment {number(p.order)}" if p.conversion == "moments"
                 else f"at order {number(p.order)} ({p.conversion} conversion)")
        lines.append(f"eps (data-indep) {number(p.eps)}   {where}")
    if p.data_dependent_eps is not None:
        lines.append(f"eps (data-dep)   {number(p.data_dependent_eps)}   at {number(p.data_dependent_order)}   "
                     "PRIVATE: depends on the votes; do not publish")
    if p.expected_answered is not None:
        lines.append(f"expected answers {p.expected_answered:.1f} of {p.num_queries}")
    for note in p.notes:
        lines.append(f"note: {note}")
    lines.append("every eps here is for replace-one neighbours: training sets that differ in one example, "
                 "replaced (one teacher's votes change)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class BudgetPlan:
    """How many queries a labelling run may make under a data-independent ε budget.

    Attributes:
      num_queries: queries to make (for Confident-GNMax: threshold steps).
      max_answers: for Confident-GNMax, stop answering after this many answers; None
        for LNMax and GNMax, where every query is answered.
      eps: the data-independent ε of the labels of that plan (≤ the budget).
      eps_published: with ``release``: the data-independent ε of the labels *and* the
        sanitised ε `pate analyze` publishes with them (≤ the budget; the headline of
        release.json is at most this), at ``delta_published``.
    """

    num_queries: int
    max_answers: int | None
    eps: float
    eps_published: float | None = None
    delta_published: float | None = None


def published_eps(mechanism, num_queries: int, delta: float, *, max_answers: int | None = None,
                  moments: int = 8, conversion: str = "classic", accountant: str = "rdp",
                  beta: float | None = None, release_order: float | None = None,
                  release_cost: float = 0.2) -> tuple[float, float]:
    """``(ε, δ)``: the data-independent route of the headline `pate analyze` publishes for
    ``num_queries`` queries of ``mechanism`` (an ``analysis.mechanisms.registry`` record) — the
    labels' data-independent ε with the sanitised release composed in (the record's
    ``published_eps``, with the release settings of the `[privacy]` section: ``beta``,
    ``release_order``, ``release_cost``). The headline is the smaller of this and the
    sanitised route, so it is never above this value.

    LNMax: the labels' ε under ``accountant`` (moments accountant or PLD: the report's
    data-independent route takes the tightest of both) plus the smooth-sensitivity
    release's ε_r, at 2δ. GNMax and Confident-GNMax (threshold steps on every query, GNMax
    on at most ``max_answers``): the labels' RDP curve composed with the GNSS release in
    RDP, converted with ``conversion``, at δ — the report has no PLD route with the
    release, so ``accountant`` plays no part there. Public: no vote enters. The δ does
    not include the float64 samplers' (`analysis.core.noise.sampling_delta`), which the
    report adds at the headline ε.
    """
    eps, delta_total, _ = mechanism.published_eps(
        int(num_queries), delta, accountant=accountant, moments=range(1, moments + 1), conversion=conversion,
        max_answers=max_answers, beta=beta, release_order=release_order, release_cost=release_cost)
    return float(eps), float(delta_total)


def budget_plan(mechanism, max_queries: int, budget: float, delta: float, *, moments: int = 8,
                conversion: str = "classic", accountant: str = "rdp", release: dict | None = None) -> BudgetPlan:
    """The largest plan whose data-independent ε stays within ``budget``.

    With ``release`` (the keyword arguments of `published_eps` for the sanitised release:
    ``beta``, ``release_order``, ``release_cost``; ``{}`` for the defaults), the budget
    covers what is published: the labels *and* the sanitised ε `pate analyze` releases with
    them (`published_eps`), so the headline of release.json cannot exceed it. Without,
    the labels alone.

    ``mechanism`` is an ``analysis.mechanisms.registry`` record; at most ``max_queries`` queries.
    The plan is fixed before any vote is seen, so it costs no privacy: LNMax and GNMax
    answer the first ``k`` queries, ``k`` the most whose data-independent ε fits (PATE
    2017 moments accountant; PATE 2018 Proposition 8 and the RDP conversion).
    Confident-GNMax runs the threshold step on the first ``n`` queries and answers at
    most ``A`` of them (answers past the A-th are withheld, a post-processing of the
    uncapped release): ε of ``n`` threshold steps plus ``A`` GNMax steps, with ``n``
    then ``A`` as large as fit (the record's ``plan_counts``). ``accountant="pld"``
    measures the same compositions with dp-accounting's privacy loss distributions
    (`analysis.accounting.pld`), which allow more queries for the same budget; "rdp" uses the
    moments accountant (LNMax) or the RDP curve with ``conversion``.

    Raises:
      PateError: not even one query fits the budget.
    """
    if accountant not in ("rdp", "pld"):
        raise PateError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    if not (budget > 0 and np.isfinite(budget)):
        raise PateError(f"--budget must be a positive number, got {budget}")

    def labels_eps(k, a):
        return mechanism.independent_eps(k, delta, accountant=accountant, moments=range(1, moments + 1),
                                         conversion=conversion, max_answers=a).eps

    def published(k, a):
        return published_eps(mechanism, k, delta, max_answers=a, moments=moments, conversion=conversion,
                             accountant=accountant, **release)

    def fits(k, a):
        return (labels_eps(k, a) if release is None else published(k, a)[0]) <= budget

    k, a = mechanism.plan_counts(fits, int(max_queries))
    if (k if a is None else a) == 0:
        raise PateError(f"a budget of eps {budget:g} allows no {mechanism.budget_refusal()}"
                        + (" with the sanitised release on top" if release is not None else "")
                        + "; raise the budget or the noise (see `pate plan`)")
    total = (None, None) if release is None else published(k, a)
    return BudgetPlan(k, a, float(labels_eps(k, a)), *total)
