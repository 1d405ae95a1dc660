"""Data-independent ε from privacy loss distributions (PLD), with Google's dp-accounting.

The RDP route (`analysis.accounting.rdp`) bounds every Rényi divergence and converts once; the
PLD route composes the full privacy loss distributions of the steps and reads ε at δ
off the composed distribution. For the Gaussian steps of GNMax it is essentially exact
(dp-accounting rounds pessimistically, so it is an upper bound a few 1e-4 above the
exact value), and always at most the RDP conversions. At 1000 GNMax answers, σ = 100,
δ = 1e-5: classic RDP 2.2478, improved RDP 1.9165, PLD 1.7601.

Neighbouring relation (as everywhere in this package): two private training sets are
neighbours when one teacher's vote differs, so the vote histogram moves one vote from
one class to another: L1 and L2 sensitivity of the histogram 2 and √2, sensitivity 1 of
its top count. The guarantees below hold in both directions (D, D') and (D', D).

How each step maps to a dp-accounting object (a *dominating pair*: a pair of
distributions (P, Q) whose hockey-stick divergences H_{e^ε}(P‖Q) bound those of the
mechanism on every pair of neighbours; Zhu, Dong, Wang, "Optimal accounting of
differential privacy via characteristic function", AISTATS 2022, Definition 7):

- **GNMax answer** (argmax of votes + N(0, σ²I)): ``GaussianDpEvent(σ/√2)``. The noisy
  histogram is a Gaussian mechanism with L2 shift ‖Δ‖₂ ≤ √2; by rotation invariance
  the pair (N(v, σ²I), N(v + Δ, σ²I)) is, coordinate for coordinate, the 1-d pair
  (N(0, σ²), N(‖Δ‖₂, σ²)) and the rest identical, whose hockey-stick divergences grow
  with ‖Δ‖₂; so (N(0, σ²), N(√2, σ²)) ≅ (N(0, (σ/√2)²), N(1, (σ/√2)²)) dominates —
  the noise multiplier σ/√2 of dp-accounting's unit-sensitivity Gaussian (Balle & Wang,
  "Improving the Gaussian mechanism", ICML 2018, Theorem 8; Dong, Roth, Su, "Gaussian
  differential privacy", JRSS-B 2022, Theorem 2.7: μ-GDP with μ = √2/σ). The argmax is
  post-processing, which never increases a hockey-stick divergence (data processing).
  The same event gives RDP λ/σ², the 2018 paper's Proposition 8
  (`analysis.bounds.gnmax.rdp_data_independent`).
- **Confident-GNMax threshold step** (is max_j n_j + N(0, σ₁²) ≥ T?): post-processing of
  a Gaussian mechanism of sensitivity 1 on the top count, ``GaussianDpEvent(σ₁)``
  (RDP λ/(2σ₁²), `analysis.bounds.gnmax.rdp_threshold_data_independent`).
- **Confident-GNMax**: exactly what `analysis.bounds.gnmax.data_independent_eps` composes —
  N threshold steps plus GNMax on A of them, A = N or the answer cap fixed in advance
  (`num_answered`; valid only when the labeller stops after A answers: the threshold
  steps run first, their noise independent of the labels, and at most A GNMax steps
  follow, padded to exactly A by post-processing). ``ComposedDpEvent([N × Gaussian(σ₁),
  A × Gaussian(σ₂/√2)])``. Dominating pairs compose, adaptively too (Zhu, Dong, Wang
  2022, Theorem 10; Dong, Roth, Su 2022, Theorem 3.2 for the Gaussian case: the whole is
  μ-GDP with μ² = N/σ₁² + 2A/σ₂²).
- **LNMax answer** (argmax of votes + Lap(1/γ) per count): an answer is (2γ, 0)-DP
  (PATE 2017, Section 3; `analysis.bounds.lnmax`), and nothing finer is assumed. dp-accounting
  has no event for "a 2γ-DP mechanism": its ``LaplaceDpEvent`` is one Laplace release of
  L1 sensitivity C, which is not a proven dominating pair here (the histogram moves
  in two coordinates), and ``RandomizedResponseDpEvent`` ignores the composition count
  in its PLD accountant (dp-accounting 0.6.0: ``compose(event, 100)`` gives the ε of one
  answer). So the answer enters as the PLD of ``from_privacy_parameters(ε=2γ, δ=0)``:
  privacy loss ±2γ with probabilities e^{2γ}/(1+e^{2γ}) and 1/(1+e^{2γ}), the binary
  randomized response that dominates every ε-DP mechanism (Kairouz, Oh, Viswanath,
  "The composition theorem for differential privacy", ICML 2015, Theorem 3.4 and its
  proof; Murtagh & Vadhan 2016), self-composed N times. The result is the optimal
  composition bound for N answers of a 2γ-DP mechanism (up to the pessimistic
  rounding), at most the moments accountant's (which bounds the same mechanisms).

ε from a PLD: the smallest ε with H_{e^ε} ≤ δ on the discretised, pessimistically rounded
distribution (Meiser & Mohammadi, CCS 2018; Koskela, Jälkö, Honkela, AISTATS 2020;
Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect the dots", PETS 2022, for
dp-accounting's construction). Every value here is data-independent and publishable.

This module uses numpy and dp-accounting only (no JAX, no `pate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.core.errors import PateError
from analysis.core.validation import check_count, check_delta, check_positive

__all__ = [
    "DEFAULT_DISCRETIZATION",
    "PldEps",
    "gnmax_event",
    "threshold_event",
    "gaussian_events",
    "lnmax_pld",
    "gnmax_eps",
    "lnmax_eps",
    "gaussian_eps_exact",
    "gaussian_mu_for",
    "calibrate",
]

#: dp-accounting's default value discretisation of the privacy loss (nats). Finer is
#: tighter and slower; the rounding is pessimistic either way. With ``discretization=None``
#: (the default of the functions below) it is scaled to the answer: for the Gaussian
#: steps DEFAULT_DISCRETIZATION · max(1, ε̂) with ε̂ the exact Gaussian ε (one rounding,
#: as dp-accounting composes Gaussians in closed form before discretising;
#: LNMax uses the step 2γ, on which its losses lie exactly), so the rounding costs a
#: relative ~1e-4 at most and large ε stay fast (the support grows with ε / step).
DEFAULT_DISCRETIZATION = 1e-4


def _auto(discretization, guess) -> float:
    if discretization is not None:
        return check_positive("discretization", discretization)
    return DEFAULT_DISCRETIZATION * max(1.0, float(guess()))

@dataclass(frozen=True)
class PldEps:
    """A data-independent (ε, δ) guarantee from the PLD accountant (publishable).

    Attributes:
      eps: ε at `delta`.
      delta: the δ of the guarantee.
      mechanism: "lnmax", "gnmax" or "confident-gnmax".
      num_queries: queries (threshold steps for Confident-GNMax).
      num_answered: GNMax steps composed for Confident-GNMax (None otherwise).
      accountant: always "pld".
    """

    eps: float
    delta: float
    mechanism: str
    num_queries: int
    num_answered: int | None = None
    accountant: str = "pld"


def gnmax_event(sigma):
    """One GNMax answer at noise σ: ``GaussianDpEvent(σ/√2)`` (L2 sensitivity √2; see the
    module docstring for the dominating-pair argument)."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(check_positive("sigma", sigma) / math.sqrt(2.0))


def threshold_event(sigma_threshold):
    """One Confident-GNMax threshold step at noise σ₁: ``GaussianDpEvent(σ₁)`` (sensitivity 1)."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(check_positive("sigma_threshold", sigma_threshold))


def gaussian_events(num_queries, sigma, *, sigma_threshold=None, num_answered=None):
    """The dp-accounting event of `num_queries` GNMax or Confident-GNMax answers.

    GNMax: ``SelfComposedDpEvent(gnmax_event(σ), N)``. Confident-GNMax (`sigma_threshold`
    given): N threshold steps and A = `num_answered` (default N) GNMax answers, the
    composition `analysis.bounds.gnmax.data_independent_eps` charges. Any dp-accounting
    accountant (``PLDAccountant``, ``RdpAccountant``) can compose the result.
    """
    import dp_accounting

    n = check_count("num_queries", num_queries)
    answer = gnmax_event(sigma)
    if sigma_threshold is None:
        if num_answered is not None:
            raise PateError("num_answered applies to Confident-GNMax only (pass sigma_threshold)")
        return dp_accounting.SelfComposedDpEvent(answer, n) if n else dp_accounting.NoOpDpEvent()
    a = n if num_answered is None else check_count("num_answered", num_answered)
    if a > n:
        raise PateError(f"num_answered must be between 0 and num_queries={n}, got {num_answered}")
    # A zero count is left out (dp-accounting's PLD accountant divides by the count).
    parts = [dp_accounting.SelfComposedDpEvent(event, count)
             for event, count in ((threshold_event(sigma_threshold), n), (answer, a)) if count]
    return dp_accounting.ComposedDpEvent(parts)


def lnmax_pld(num_queries, gamma, *, discretization=None):
    """The PLD of `num_queries` LNMax answers: N-fold composition of the (2γ, 0)-DP
    dominating pair (binary randomized response; Kairouz, Oh, Viswanath 2015, Theorem
    3.4). A ``dp_accounting.pld.PrivacyLossDistribution``; None for zero answers."""
    from dp_accounting.pld import common, privacy_loss_distribution

    n = check_count("num_queries", num_queries)
    eps0 = 2.0 * check_positive("gamma", gamma)
    if n == 0:
        return None
    # Default: the grid step is 2γ itself, so the losses ±2γ and all their sums lie on
    # the grid and the rounding is exact (the PLD is then the exact binomial law).
    discretization = eps0 if discretization is None else check_positive("discretization", discretization)
    one = privacy_loss_distribution.from_privacy_parameters(
        common.DifferentialPrivacyParameters(eps0, 0.0), value_discretization_interval=discretization)
    return one.self_compose(n)


def gnmax_eps(num_queries, sigma, delta, *, sigma_threshold=None, num_answered=None,
              discretization=None) -> PldEps:
    """Data-independent ε of GNMax or Confident-GNMax answers with dp-accounting's PLD
    accountant: ``PLDAccountant`` over `gaussian_events` (module docstring for the
    mapping and the theorems). Never above the RDP conversions of
    `analysis.bounds.gnmax.data_independent_eps` for the same arguments."""
    from dp_accounting.pld import PLDAccountant

    delta = check_delta(delta)
    event = gaussian_events(num_queries, sigma, sigma_threshold=sigma_threshold, num_answered=num_answered)
    n = check_count("num_queries", num_queries)
    a = None
    if sigma_threshold is not None:
        a = n if num_answered is None else int(num_answered)
    if n == 0:
        eps = 0.0
    else:
        mu2 = 2.0 * (n if a is None else a) / float(sigma) ** 2
        if sigma_threshold is not None:
            mu2 += n / float(sigma_threshold) ** 2
        step = _auto(discretization, lambda: gaussian_eps_exact(math.sqrt(mu2), delta))
        accountant = PLDAccountant(value_discretization_interval=step)
        accountant.compose(event)
        eps = float(accountant.get_epsilon(delta))
    mech = "gnmax" if sigma_threshold is None else "confident-gnmax"
    return PldEps(max(eps, 0.0), delta, mech, n, a)


def lnmax_eps(num_queries, gamma, delta, *, discretization=None) -> PldEps:
    """Data-independent ε of `num_queries` LNMax answers, each (2γ, 0)-DP, composed as
    privacy loss distributions (`lnmax_pld`). Never above the moments accountant's
    `analysis.bounds.lnmax.data_independent_eps` (which bounds the same mechanisms)."""
    delta = check_delta(delta)
    if 2.0 * float(gamma) > 500.0:
        # dp-accounting's PLD overflows (exp(2γ)); each answer is then as good as noiseless and
        # basic composition of pure DP, N·2γ at δ = 0, is the bound.
        n = check_count("num_queries", num_queries)
        return PldEps(2.0 * float(gamma) * n, delta, "lnmax", n)
    pld = lnmax_pld(num_queries, gamma, discretization=discretization)
    eps = 0.0 if pld is None else float(pld.get_epsilon_for_delta(delta))
    return PldEps(max(eps, 0.0), delta, "lnmax", check_count("num_queries", num_queries))


def gaussian_eps_exact(mu, delta) -> float:
    """The exact ε at δ of a μ-GDP mechanism (a Gaussian of sensitivity/noise μ):
    the smallest ε with Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) ≤ δ (Balle & Wang 2018,
    Theorem 8). Used to bracket noise calibration; the PLD value lies just above it."""
    from scipy.optimize import brentq
    from scipy.special import log_ndtr

    mu = float(mu)
    delta = check_delta(delta)
    if mu <= 0:
        return 0.0

    def excess(eps):
        a = log_ndtr(-eps / mu + mu / 2)
        b = eps + log_ndtr(-eps / mu - mu / 2)
        return float(np.exp(a) * -np.expm1(b - a)) - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
    return float(brentq(excess, 0.0, hi, xtol=1e-12, rtol=1e-12))


def gaussian_mu_for(eps, delta) -> float:
    """The largest μ whose μ-GDP mechanism is exactly (ε, δ)-DP: the root in μ of
    Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ (Balle & Wang 2018, Theorem 8; the left side
    grows with μ). Used to bracket noise calibration."""
    from scipy.optimize import brentq

    eps = check_positive("eps", eps)
    delta = check_delta(delta)
    hi = 1.0
    while gaussian_eps_exact(hi, delta) < eps:
        hi *= 2.0
    lo = hi / 2.0
    while lo > 1e-12 and gaussian_eps_exact(lo, delta) > eps:
        lo /= 2.0
    return float(brentq(lambda m: gaussian_eps_exact(m, delta) - eps, lo, hi, xtol=1e-14, rtol=1e-13))


def calibrate(forward, feasible, infeasible, budget, rel_tol=1e-6) -> float:
    """Bisection in log space between a `feasible` noise parameter (forward(x) ≤ budget)
    and an `infeasible` one; returns a feasible value within a factor (1 + rel_tol) of
    the boundary. `forward` must be monotone between the two."""
    a, b = float(feasible), float(infeasible)
    if forward(a) > budget:
        raise PateError(f"internal error: calibration start {a:g} does not meet the budget {budget:g}")
    while abs(math.log(b / a)) > rel_tol:
        mid = math.sqrt(a * b)
        if forward(mid) <= budget:
            a = mid
        else:
            b = mid
    return a
