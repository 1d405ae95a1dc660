"""Noise calibration: the least noise whose data-independent ε meets a budget.

`plan` answers "how much noise do N answers need for (ε, δ)?" before any vote is seen,
so the answer depends on public parameters only and can be published with the run.

- LNMax (PATE 2017): Laplace noise Lap(1/γ) per count. The data-independent moments
  accountant gives per answer α(l) = min(2γ²l(l+1), 2γl) (a (2γ, 0)-DP mechanism; PATE 2017,
  Theorem 2) and ε = min_l (N·α(l) + log 1/δ)/l over l = 1..L (Abadi et al. 2016,
  Theorem 2). For each l the largest γ with N·α(l) ≤ εl − log 1/δ has a closed form
  (α is a minimum of two increasing functions); γ is the largest over l. No γ works when
  ε ≤ log(1/δ)/L: even zero answers cost that much under this accountant.
- GNMax (PATE 2018): RDP N·λ/σ² (Proposition 8); ε(λ) = N·λ/σ² + c(λ, δ) with the
  conversion term c of `analysis.rdp`. For each order with c(λ) < ε the smallest σ is
  √(Nλ/(ε − c(λ))); σ is the smallest over the orders. With the classic conversion no σ
  works when ε ≤ min_λ log(1/δ)/(λ−1) over the orders tried (raise the largest order);
  with the improved conversion every ε > 0 is reachable (ε = 0 once N·λ/σ² <
  −log(1 − δ²), dp-accounting's rule), possibly with enormous σ.
- Confident-GNMax: σ₁ = ratio·σ₂ (default ratio 5, about the paper's Glyph and SVHN
  settings). Threshold steps on all N queries cost N·λ/(2σ₁²), GNMax on at most A =
  `num_answered` (default N) answers A·λ/σ₂², so RDP = λ(N/(2·ratio²) + A)/σ₂², solved like
  GNMax. A < N is valid only if the labeller stops after A answers.

With ``accountant="pld"`` the data-independent ε is dp-accounting's PLD accountant
(`analysis.pld`: the same steps as privacy loss distributions, never above the RDP
conversions) and the noise is found by bisection on log σ (log γ) against it: LNMax from
γ = ε/(2N), which basic composition already allows; the Gaussian mechanisms from the σ
at which the exact Gaussian ε (Balle & Wang 2018, Theorem 8) meets the budget, a lower
bound on what the (pessimistically rounded) PLD allows.

The closed forms are checked against bisection on log σ (log γ) in tests/test_plan.py.
Given votes, the same noise's data-dependent ε (private) is computed for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from analysis import gnmax, lnmax, pld
from analysis.errors import PateError
from analysis.rdp import DEFAULT_ORDERS, check_orders, conversion_term
from analysis.validation import check_delta, check_positive

MECHANISMS = ("lnmax", "gnmax", "confident-gnmax")
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


#: sigma_threshold / sigma ratios `plan` accepts: outside, (ratio)^2 over- or underflows
#: and either noise is meaningless next to the other.
SIGMA_RATIO_RANGE = (1e-6, 1e6)

#: The largest budget `plan` calibrates for.
MAX_EPS = 1e6


def lnmax_gamma(num_queries, eps, delta, moments=DEFAULT_MOMENTS):
    """Largest γ whose data-independent LNMax ε over `num_queries` answers is ≤ `eps`.

    Returns (γ, moment attaining it). Raises `PateError` when ε ≤ log(1/δ)/max(moments).
    """
    n = int(num_queries)
    eps = check_positive("eps", eps)
    delta = check_delta(delta)
    l = np.asarray(moments, dtype=float)
    if l.ndim != 1 or l.size == 0 or np.any(l <= 0):
        raise PateError("moments must be positive numbers")
    room = eps * l - math.log(1.0 / delta)  # N·α(l) must fit in this
    if not np.any(room > 0):
        raise PateError(
            f"no LNMax noise meets eps={eps:g} at delta={delta:g}: with moments up to {l.max():g} the "
            f"moments accountant charges log(1/delta)/{l.max():g} = {math.log(1 / delta) / l.max():.4g} even "
            "for zero answers; raise eps or delta (or the number of moments)"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        quad = np.sqrt(room / (2.0 * n * l * (l + 1.0)))  # 2γ²l(l+1)·N ≤ room
        lin = room / (2.0 * n * l)  # 2γl·N ≤ room
        gam = np.where(room > 0, np.maximum(quad, lin), 0.0)
    best = int(np.argmax(gam))
    return float(gam[best]), float(l[best])


def gaussian_sigma(rdp_per_sigma2, eps, delta, orders=DEFAULT_ORDERS, conversion="classic"):
    """Smallest σ with min_λ [K(λ)/σ² + c(λ, δ)] ≤ ε, where RDP = K(λ)/σ² (K = `rdp_per_sigma2`).

    Returns (σ, order). K(λ) is e.g. N·λ for GNMax. Raises `PateError` when no σ works.
    """
    eps = check_positive("eps", eps)
    delta = check_delta(delta)
    orders = check_orders(orders)
    k = np.asarray(rdp_per_sigma2(orders), dtype=float)
    c = conversion_term(orders, delta, conversion)
    with np.errstate(divide="ignore", invalid="ignore"):
        sig2 = np.where(c < eps, k / (eps - c), np.inf)
    if conversion == "improved":
        # dp-accounting's rule: ε = 0 once δ² > 1 − e^{−ρ}, i.e. ρ < −log(1 − δ²).
        sig2 = np.minimum(sig2, k / -math.log1p(-(delta**2)))
    if not np.any(np.isfinite(sig2)):
        floor = float(np.min(c))
        raise PateError(
            f"no Gaussian noise meets eps={eps:g} at delta={delta:g} with the {conversion} conversion: "
            f"with orders up to {orders.max():g} the conversion alone costs {floor:.4g}; raise eps or delta, "
            "use larger orders, or --conversion improved"
        )
    best = int(np.argmin(sig2))
    return float(math.sqrt(sig2[best])), float(orders[best])


def _pld_gamma(n, eps, delta):
    """The largest γ (to a relative 1e-6) whose PLD ε of n LNMax answers is ≤ eps, and that ε."""
    def forward(g):
        return pld.lnmax_eps(n, g, delta).eps

    lo = eps / (2.0 * n)  # basic composition: n answers of a (2γ)-DP mechanism cost 2γn
    hi = 2.0 * lo
    while forward(hi) <= eps:
        lo, hi = hi, 2.0 * hi
    gamma = pld.calibrate(forward, lo, hi, eps)
    return gamma, forward(gamma)


def _pld_sigma(mu2_sigma2, forward, eps, delta):
    """The smallest σ (to a relative 1e-6) with forward(σ) ≤ eps, where the mechanism is
    μ-GDP with μ² = `mu2_sigma2`/σ²; and its ε. Starts at the σ where the exact Gaussian
    ε meets the budget, below which the PLD (an upper bound) cannot be ≤ eps."""
    if mu2_sigma2 <= 0:
        raise PateError("nothing to calibrate: no step is charged")
    exact = math.sqrt(mu2_sigma2) / pld.gaussian_mu_for(eps, delta)
    hi = exact * (1 + 1e-4)
    while forward(hi) > eps:
        hi = exact + 2.0 * (hi - exact)
    lo = exact * (1 - 1e-9)
    sigma = 1.0 / pld.calibrate(lambda inv: forward(1.0 / inv), 1.0 / hi, 1.0 / lo, eps)
    return sigma, forward(sigma)


def _nudge(x, forward, eps, up=True):
    """Moves the closed-form noise parameter by a few ulps until the forward ε is ≤ the budget
    (the inversion is exact in real arithmetic, not always in floating point)."""
    for _ in range(64):
        res = forward(x)
        if res.eps <= eps:
            return x, res
        x = x * (1 + 1e-13) if up else x / (1 + 1e-13)
    raise PateError(f"internal error: calibrated noise {x:g} gives eps={res.eps:g} > {eps:g}")


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

    See the module docstring for the formulas and when a budget cannot be met. `votes`
    (queries × classes counts, already validated) adds the data-dependent ε of the first
    `num_queries` rows under the same noise. The returned ε is recomputed with the
    forward functions (`analysis.lnmax.data_independent_eps`,
    `analysis.gnmax.data_independent_eps`), never taken from the inversion.
    ``accountant="pld"`` calibrates against `analysis.pld` instead (module docstring);
    `conversion` then applies only to the data-dependent ε given votes.
    """
    if mechanism not in MECHANISMS:
        raise PateError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
    try:
        n = int(num_queries)
    except (TypeError, ValueError):
        raise PateError(f"num_queries must be a whole number, got {num_queries!r}") from None
    if n < 1 or n != num_queries:
        raise PateError(f"num_queries must be a whole number ≥ 1, got {num_queries}")
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
    use_pld = accountant == "pld"
    if num_teachers is not None and int(num_teachers) < 1:
        raise PateError(f"num_teachers must be at least 1, got {num_teachers}")
    notes = []

    if mechanism == "lnmax":
        if threshold is not None or num_answered is not None:
            raise PateError("threshold and num_answered apply to confident-gnmax only")
        if use_pld:
            gamma, eps_got = _pld_gamma(n, eps, delta)
            order_got = math.nan
        else:
            gamma, _ = lnmax_gamma(n, eps, delta, moments)
            gamma, res = _nudge(gamma, lambda gm: lnmax.data_independent_eps(n, gm, delta, moments), eps, up=False)
            eps_got, order_got = res.eps, res.moment
        noise = {"gamma": gamma}
        if num_teachers is not None and 1.0 / gamma > num_teachers:
            notes.append(f"Laplace scale 1/gamma = {1 / gamma:.4g} exceeds the {num_teachers} teachers: "
                         "answers will be close to random")
    elif mechanism == "gnmax":
        if threshold is not None or num_answered is not None:
            raise PateError("threshold and num_answered apply to confident-gnmax only")
        if use_pld:
            sigma, eps_got = _pld_sigma(2.0 * n, lambda s: pld.gnmax_eps(n, s, delta).eps, eps, delta)
            order_got = math.nan
        else:
            sigma, _ = gaussian_sigma(lambda lam: n * lam, eps, delta, orders, conversion)
            sigma, res = _nudge(
                sigma, lambda s: gnmax.data_independent_eps(n, s, delta, orders, conversion=conversion), eps)
            eps_got, order_got = res.eps, res.order
        noise = {"sigma": sigma}
        if num_teachers is not None and sigma > num_teachers:
            notes.append(f"sigma = {sigma:.4g} exceeds the {num_teachers} teachers: answers will be close to random")
    else:
        if threshold is None:
            raise PateError("confident-gnmax needs a threshold (in votes)")
        threshold = float(threshold)
        if not math.isfinite(threshold):
            raise PateError(f"threshold must be a finite number, got {threshold}")
        ratio = check_positive("sigma_ratio", sigma_ratio)
        if not SIGMA_RATIO_RANGE[0] <= ratio <= SIGMA_RATIO_RANGE[1]:
            raise PateError(f"--sigma-ratio must lie between {SIGMA_RATIO_RANGE[0]:g} and "
                            f"{SIGMA_RATIO_RANGE[1]:g}, got {ratio:g}")
        a = n if num_answered is None else int(num_answered)
        if not 0 <= a <= n:
            raise PateError(f"num_answered must be between 0 and {n}, got {num_answered}")
        if num_teachers is not None and threshold > num_teachers:
            notes.append(f"threshold {threshold:g} exceeds the {num_teachers} teachers: few queries will be answered")
        if use_pld:
            # μ² = N/σ₁² + 2A/σ₂² = (N/ratio² + 2A)/σ₂².
            sigma, eps_got = _pld_sigma(n / ratio**2 + 2.0 * a, lambda s: pld.gnmax_eps(
                n, s, delta, sigma_threshold=ratio * s, num_answered=a).eps, eps, delta)
            order_got = math.nan
        else:
            sigma, _ = gaussian_sigma(lambda lam: lam * (n / (2.0 * ratio**2) + a), eps, delta, orders, conversion)
            sigma, res = _nudge(sigma, lambda s: gnmax.data_independent_eps(
                n, s, delta, orders, sigma_threshold=ratio * s, num_answered=a, conversion=conversion), eps)
            eps_got, order_got = res.eps, res.order
        sigma_threshold = ratio * sigma
        noise = {"threshold": threshold, "sigma_threshold": sigma_threshold, "sigma": sigma}
        if a < n:
            notes.append(f"valid only if the labeller stops after {a} answers")
        if num_teachers is not None and sigma > num_teachers:
            notes.append(f"sigma = {sigma:.4g} exceeds the {num_teachers} teachers: answers will be close to random")
        if num_teachers is not None and sigma_threshold > num_teachers:
            notes.append(f"sigma_threshold = {sigma_threshold:.4g} exceeds the {num_teachers} teachers: "
                         "the threshold test will be close to a coin flip")

    # `pate analyze` and `pate run` also publish a sanitised eps; say what it adds.
    from analysis import report as report_mod

    if mechanism == "lnmax":
        di_result = lnmax.data_independent_eps(n, noise["gamma"], delta, moments)
    else:
        confident = mechanism == "confident-gnmax"
        di_result = gnmax.data_independent_eps(
            n, noise["sigma"], delta, orders, sigma_threshold=noise.get("sigma_threshold"),
            num_answered=(a if confident else None), conversion=conversion)
    total, delta_total, how = report_mod.data_independent_with_release(mechanism, di_result, delta,
                                                                       conversion=conversion)
    notes.append(f"the sanitised eps that `pate analyze`/`pate run` also publish comes on top: with it "
                 f"eps {total:.4f} at delta {delta_total:g} ({how}; "
                 f"{'moments accountant' if mechanism == 'lnmax' else conversion + ' RDP conversion'}); "
                 "the headline eps of release.json counts it")

    dd_eps = dd_order = expected = None
    if votes is not None:
        votes = np.asarray(votes)
        if votes.ndim != 2 or votes.shape[0] < n:
            raise PateError(
                f"votes hold {votes.shape[0] if votes.ndim == 2 else 0} queries, fewer than --queries {n}"
            )
        if num_teachers is not None and np.any(votes[:n].sum(axis=1) != int(num_teachers)):
            raise PateError(f"votes rows do not sum to the {num_teachers} teachers given")
        rows = votes[:n]
        if mechanism == "lnmax":
            dd = lnmax.data_dependent_eps(rows, noise["gamma"], delta, moments)
            dd_eps, dd_order = dd.eps, dd.moment
        elif mechanism == "gnmax":
            dd = gnmax.data_dependent_eps(rows, noise["sigma"], delta, orders, conversion=conversion)
            dd_eps, dd_order = dd.eps, dd.order
        else:
            dd = gnmax.data_dependent_eps(
                rows, noise["sigma"], delta, orders, threshold=noise["threshold"],
                sigma_threshold=noise["sigma_threshold"], conversion=conversion,
            )
            dd_eps, dd_order, expected = dd.eps, dd.order, dd.expected_answered
    return Plan(
        mechanism=mechanism, num_queries=n, budget_eps=eps, delta=delta,
        conversion="pld" if use_pld else (conversion if mechanism != "lnmax" else "moments"),
        noise=noise, eps=float(eps_got), order=float(order_got),
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
        where = (f"at moment {number(p.order)}" if p.mechanism == "lnmax"
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
    ``num_queries`` queries of ``mechanism`` (an ``analysis.mechanisms`` record) — the
    labels' data-independent ε with the sanitised release composed in
    (`analysis.report.data_independent_with_release`, with the release settings of the
    `[privacy]` section: ``beta``, ``release_order``, ``release_cost``). The headline is
    the smaller of this and the sanitised route, so it is never above this value.

    LNMax: the labels' ε under ``accountant`` (moments accountant or PLD: the report's
    data-independent route takes the tightest of both) plus the smooth-sensitivity
    release's ε_r, at 2δ. GNMax and Confident-GNMax (threshold steps on every query, GNMax
    on at most ``max_answers``): the labels' RDP curve composed with the GNSS release in
    RDP, converted with ``conversion``, at δ — the report has no PLD route with the
    release, so ``accountant`` plays no part there. Public: no vote enters. The δ does
    not include the float64 samplers' (`analysis.noise.sampling_delta`), which the
    report adds at the headline ε.
    """
    from analysis import mechanisms
    from analysis import report as report_mod

    k = int(num_queries)
    if isinstance(mechanism, mechanisms.LNMax):
        labels = (pld.lnmax_eps(k, mechanism.gamma, delta) if accountant == "pld"
                  else lnmax.data_independent_eps(k, mechanism.gamma, delta, range(1, moments + 1)))
    else:
        confident = isinstance(mechanism, mechanisms.ConfidentGNMax)
        labels = gnmax.data_independent_eps(
            k, mechanism.sigma, delta, sigma_threshold=mechanism.sigma_threshold if confident else None,
            num_answered=max_answers if confident else None, conversion=conversion)
    eps, delta_total, _ = report_mod.data_independent_with_release(
        mechanism.name, labels, delta, conversion=conversion, beta=beta, release_order=release_order,
        release_cost=release_cost)
    return float(eps), float(delta_total)


def budget_plan(mechanism, max_queries: int, budget: float, delta: float, *, moments: int = 8,
                conversion: str = "classic", accountant: str = "rdp", release: dict | None = None) -> BudgetPlan:
    """The largest plan whose data-independent ε stays within ``budget``.

    With ``release`` (the keyword arguments of `published_eps` for the sanitised release:
    ``beta``, ``release_order``, ``release_cost``; ``{}`` for the defaults), the budget
    covers what is published: the labels *and* the sanitised ε `pate analyze` releases with
    them (`published_eps`), so the headline of release.json cannot exceed it. Without,
    the labels alone.

    ``mechanism`` is an ``analysis.mechanisms`` record; at most ``max_queries`` queries.
    The plan is fixed before any vote is seen, so it costs no privacy: LNMax and GNMax
    answer the first ``k`` queries, ``k`` the most whose data-independent ε fits (PATE
    2017 moments accountant; PATE 2018 Proposition 8 and the RDP conversion).
    Confident-GNMax runs the threshold step on the first ``n`` queries and answers at
    most ``A`` of them (answers past the A-th are withheld, a post-processing of the
    uncapped release): ε of ``n`` threshold steps plus ``A`` GNMax steps, with ``n``
    then ``A`` as large as fit. ``accountant="pld"`` measures the same compositions
    with dp-accounting's privacy loss distributions (`analysis.pld`), which allow more
    queries for the same budget; "rdp" uses the moments accountant (LNMax) or the RDP
    curve with ``conversion``.

    Raises:
      PateError: not even one query fits the budget.
    """
    from analysis import mechanisms

    if accountant not in ("rdp", "pld"):
        raise PateError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    if not (budget > 0 and np.isfinite(budget)):
        raise PateError(f"--budget must be a positive number, got {budget}")
    n_max = int(max_queries)
    cfg = mechanism

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

    use_pld = accountant == "pld"

    def published(k, a=None):
        return published_eps(cfg, k, delta, max_answers=a, moments=moments, conversion=conversion,
                             accountant=accountant, **release)

    if isinstance(cfg, mechanisms.LNMax):
        def eps(k):
            if use_pld:
                return pld.lnmax_eps(k, cfg.gamma, delta).eps
            return lnmax.data_independent_eps(k, cfg.gamma, delta, range(1, moments + 1)).eps
    elif isinstance(cfg, mechanisms.GNMax):
        def eps(k):
            if use_pld:
                return pld.gnmax_eps(k, cfg.sigma, delta).eps
            return gnmax.data_independent_eps(k, cfg.sigma, delta, conversion=conversion).eps
    else:
        def eps_pair(n, a):
            if use_pld:
                return pld.gnmax_eps(n, cfg.sigma, delta, sigma_threshold=cfg.sigma_threshold,
                                     num_answered=a).eps
            return gnmax.data_independent_eps(n, cfg.sigma, delta, sigma_threshold=cfg.sigma_threshold,
                                              num_answered=a, conversion=conversion).eps

        def fits_pair(n, a):
            return (eps_pair(n, a) if release is None else published(n, a)[0]) <= budget

        n = largest(lambda k: fits_pair(k, 0), n_max)
        a = largest(lambda k: fits_pair(n, k), n) if n else 0
        if a == 0:
            raise PateError(f"a budget of eps {budget:g} allows no Confident-GNMax answer at these noise "
                            "levels" + (" with the sanitised release on top" if release is not None else "")
                            + "; raise the budget or the noise (see `pate plan`)")
        total = (None, None) if release is None else published(n, a)
        return BudgetPlan(n, a, float(eps_pair(n, a)), *total)
    k = largest(lambda k: (eps(k) if release is None else published(k)[0]) <= budget, n_max)
    if k == 0:
        raise PateError(f"a budget of eps {budget:g} allows no {cfg.name} answer at this noise"
                        + (" with the sanitised release on top" if release is not None else "")
                        + "; raise the budget or the noise (see `pate plan`)")
    total = (None, None) if release is None else published(k)
    return BudgetPlan(k, None, float(eps(k)), *total)
