"""Inverting a data-independent ε: the least noise (or the most queries) that meets a
budget. The records of `analysis.mechanisms.registry` calibrate themselves with these; `pate plan`
and `pate label --budget` (`analysis.planning.plan`) call them through the records.

- LNMax (PATE 2017): Laplace noise Lap(1/γ) per count. The data-independent moments
  accountant gives per answer α(l) = min(2γ²l(l+1), 2γl) (a (2γ, 0)-DP mechanism; PATE 2017,
  Theorem 2) and ε = min_l (N·α(l) + log 1/δ)/l over l = 1..L (Abadi et al. 2016,
  Theorem 2). For each l the largest γ with N·α(l) ≤ εl − log 1/δ has a closed form
  (α is a minimum of two increasing functions); γ is the largest over l. No γ works when
  ε ≤ log(1/δ)/L: even zero answers cost that much under this accountant.
- GNMax (PATE 2018): RDP N·λ/σ² (Proposition 8); ε(λ) = N·λ/σ² + c(λ, δ) with the
  conversion term c of `analysis.accounting.rdp`. For each order with c(λ) < ε the smallest σ is
  √(Nλ/(ε − c(λ))); σ is the smallest over the orders. With the classic conversion no σ
  works when ε ≤ min_λ log(1/δ)/(λ−1) over the orders tried (raise the largest order);
  with the improved conversion every ε > 0 is reachable (ε = 0 once N·λ/σ² <
  −log(1 − δ²), dp-accounting's rule), possibly with enormous σ.
- Confident-GNMax: σ₁ = ratio·σ₂ (default ratio 5, about the paper's Glyph and SVHN
  settings). Threshold steps on all N queries cost N·λ/(2σ₁²), GNMax on at most A =
  `num_answered` (default N) answers A·λ/σ₂², so RDP = λ(N/(2·ratio²) + A)/σ₂², solved like
  GNMax. A < N is valid only if the labeller stops after A answers.

With the PLD accountant the data-independent ε is dp-accounting's (`analysis.accounting.pld`: the
same steps as privacy loss distributions, never above the RDP conversions) and the noise
is found by bisection on log σ (log γ) against it: LNMax from γ = ε/(2N), which basic
composition already allows; the Gaussian mechanisms from the σ at which the exact
Gaussian ε (Balle & Wang 2018, Theorem 8) meets the budget, a lower bound on what the
(pessimistically rounded) PLD allows.

The closed forms are checked against bisection on log σ (log γ) in tests/analysis/test_plan.py.
Every value here depends on public parameters only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from analysis.accounting import pld
from analysis.core.errors import PateError
from analysis.accounting.rdp import DEFAULT_ORDERS, check_orders, conversion_term
from analysis.core.validation import check_delta, check_positive

#: sigma_threshold / sigma ratios `plan` accepts: outside, (ratio)^2 over- or underflows
#: and either noise is meaningless next to the other.
SIGMA_RATIO_RANGE = (1e-6, 1e6)
DEFAULT_MOMENTS = tuple(range(1, 9))


@dataclass(frozen=True)
class Calibrated:
    """What a record's ``calibrate`` found: the record with the calibrated noise, its
    data-independent ε and the order (moment) attaining it (NaN for the PLD), the
    accountant's name (``"moments"``, a conversion, or ``"pld"``) and plain-language notes."""

    record: object
    eps: float
    order: float
    conversion: str
    notes: tuple = field(default_factory=tuple)


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


def pld_gamma(n, eps, delta):
    """The largest γ (to a relative 1e-6) whose PLD ε of n LNMax answers is ≤ eps, and that ε."""
    def forward(g):
        return pld.lnmax_eps(n, g, delta).eps

    lo = eps / (2.0 * n)  # basic composition: n answers of a (2γ)-DP mechanism cost 2γn
    hi = 2.0 * lo
    while forward(hi) <= eps:
        lo, hi = hi, 2.0 * hi
    gamma = pld.calibrate(forward, lo, hi, eps)
    return gamma, forward(gamma)


def pld_sigma(mu2_sigma2, forward, eps, delta):
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


def nudge(x, forward, eps, up=True):
    """Moves the closed-form noise parameter by a few ulps until the forward ε is ≤ the budget
    (the inversion is exact in real arithmetic, not always in floating point)."""
    for _ in range(64):
        res = forward(x)
        if res.eps <= eps:
            return x, res
        x = x * (1 + 1e-13) if up else x / (1 + 1e-13)
    raise PateError(f"internal error: calibrated noise {x:g} gives eps={res.eps:g} > {eps:g}")


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
