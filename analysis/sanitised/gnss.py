"""The sanitised data-dependent ε of GNMax / Confident-GNMax: the GNSS release (PATE 2018,
Section 4.3 and Appendix B) — its Rényi cost, the σ_ss for a target cost, and the release
itself, sampled exactly on a public grid (``analysis.core.noise``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from analysis.core.errors import PateError
from analysis.bounds.gnmax import mechanism_name
from analysis.sanitised.gnmax_sensitivity import total_profile
from analysis.accounting.rdp import check_orders, eps_from_rdp
from analysis.core.validation import check_counts, check_delta, check_sigma, teachers_of

__all__ = ["rdp_gnss", "gnss_sigma_for_cost", "gnss_discrete_correction", "gnss_parameters",
           "gnss_headline_independent", "with_release", "SanitizedEps", "sanitized_eps", "RELEASE_GRID",
           "noise_units", "UpperBound", "upper_bound", "release_centre"]


def rdp_gnss(orders, beta, sigma_ss):
    """RDP of releasing f(D) + S(D)·N(0, σ_ss²), S a β-smooth bound on f's sensitivity.

    This is the 2018 paper's GNSS mechanism (Section 4.3 / Appendix B; the paper's code
    calls its bound Theorem 23), with the cost computed exactly instead of the code's
    λe^{2β}/σ² + (βλ − ½log(1−2λβ))/(λ−1), which is too small when λβ is not small (see
    the module docstring). Derivation: S β-smooth means S(D') ≤ e^β S(D) for neighbours,
    and S ≥ local sensitivity gives |f(D) − f(D')| ≤ min(S(D), S(D')). For two Gaussians,
    D_λ(N(0, s₀²)‖N(Δ, s₁²)) = V(r) + λΔ²/(2 s₀²(1 + λ(r−1))) with r = s₁²/s₀² and
    V(r) = (λ log r − log(1 + λ(r−1)))/(2(λ−1)), finite iff 1 + λ(r−1) > 0. Here
    r ∈ [e^{−2β}, e^{2β}] and Δ²/s₀² ≤ min(1, r)/σ_ss². V falls then rises in r with V(1) =
    0; the mean term falls in r. Hence the supremum is at most
      max(V(e^{−2β}) + λe^{−2β}/(2σ_ss²(1 − λ(1 − e^{−2β}))),  V(e^{2β}) + λ/(2σ_ss²)),
    which this returns (exact on the first branch). Needs λ(1 − e^{−2β}) < 1. Shape of `orders`.
    """
    orders = check_orders(orders)
    beta = float(beta)
    sigma_ss = check_sigma(sigma_ss, "sigma_ss")
    if not (beta > 0 and math.isfinite(beta)):
        raise PateError(f"beta must be a positive number, got {beta!r}")
    lo, hi = math.exp(-2 * beta), math.exp(2 * beta)
    shrink = 1.0 - orders * (1.0 - lo)
    if np.any(shrink <= 0):
        bad = orders[shrink <= 0].min()
        raise PateError(
            f"GNSS with beta={beta:g} has no finite RDP at order {bad:g}: need order·(1 − e^(−2·beta)) < 1, "
            f"e.g. beta < {-0.5 * math.log1p(-1.0 / bad):.4g}"
        )
    lam1 = orders - 1.0
    v_lo = (orders * math.log(lo) - np.log(shrink)) / (2 * lam1)
    v_hi = (orders * math.log(hi) - np.log1p(orders * (hi - 1.0))) / (2 * lam1)
    down = v_lo + orders * lo / (2 * sigma_ss**2 * shrink)
    up = v_hi + orders / (2 * sigma_ss**2)
    return np.maximum(down, up)


def gnss_sigma_for_cost(order, beta, max_rdp):
    """The smallest σ_ss whose GNSS cost `rdp_gnss(order, beta, σ_ss)` is ≤ `max_rdp`.

    Depends on public parameters only, so it can be fixed before looking at the votes.
    Bisection on log σ_ss (the cost falls in σ_ss to the V(·) floor, which must be below
    `max_rdp`).
    """
    order = float(check_orders([order])[0])
    max_rdp = float(max_rdp)
    floor = float(rdp_gnss([order], beta, 1e150)[0])
    if not max_rdp > floor:
        raise PateError(
            f"no sigma_ss brings the GNSS cost at order {order:g}, beta={beta:g} to {max_rdp:g}: "
            f"the cost never drops below {floor:.4g}; use a smaller beta"
        )
    lo, hi = -10.0, 10.0
    while float(rdp_gnss([order], beta, math.exp(hi))[0]) > max_rdp:
        hi *= 2
    while float(rdp_gnss([order], beta, math.exp(lo))[0]) <= max_rdp:
        lo *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if float(rdp_gnss([order], beta, math.exp(mid))[0]) > max_rdp:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


RELEASE_GRID = 1e-3  # default grid step of the published sanitised RDP (public)
BETA_TIMES_ORDER = 0.1  # default GNSS smoothness: beta = 0.1 / order (the 2018 paper's choice)
_FLOAT_MARGIN = 1e-9  # relative slack on the smooth sensitivity for floating-point error


MAX_RELEASE_COST = 10.0  # RDP a GNSS release may spend at its order


def gnss_parameters(order: float, beta: float | None = None, release_cost: float = 0.2):
    """Public GNSS release parameters at ``order``: β (default 0.1/order,
    :data:`BETA_TIMES_ORDER`) and the σ_ss whose release costs ``release_cost`` in RDP at
    that order (`gnss_sigma_for_cost`). Functions of public numbers only.

    Raises:
      PateError: ``release_cost`` above :data:`MAX_RELEASE_COST` (the release would be
        almost noiseless and its ε meaningless).
    """
    if not 0 < float(release_cost) <= MAX_RELEASE_COST:
        raise PateError(f"--release-cost must lie in (0, {MAX_RELEASE_COST:g}] (RDP at the release order), got "
                        f"{release_cost:g}: a larger cost leaves the sanitised eps almost noiseless")
    beta = BETA_TIMES_ORDER / order if beta is None else float(beta)
    return beta, gnss_sigma_for_cost(order, beta, release_cost)


def gnss_headline_independent(independent, beta: float, sigma_ss: float, delta: float,
                              conversion: str) -> tuple[float, float]:
    """ε of the labels' data-independent RDP curve composed with the GNSS release.

    The sanitised value is released too, so a data-independent headline must count it:
    ``min_λ conv(ρ_DI(λ) + rdp_gnss(λ) + discrete correction)`` over the orders of the
    curve where the GNSS cost is finite (Mironov 2017, Proposition 1: RDP adds). Returns
    ``(eps, order)``; public (no vote enters).
    """
    orders = np.asarray(independent.orders, dtype=float)
    feasible = orders * -math.expm1(-2.0 * beta) < 1.0
    if not feasible.any():
        return math.inf, math.nan
    o = orders[feasible]
    cost = rdp_gnss(o, beta, sigma_ss) + np.array([gnss_discrete_correction(x, sigma_ss) for x in o])
    eps, order = eps_from_rdp(o, np.asarray(independent.rdp)[feasible] + cost, delta, conversion)
    return float(eps), float(order)


def with_release(independent, delta: float, *, conversion: str = "classic", beta: float | None = None,
                 release_order: float | None = None, release_cost: float = 0.2) -> tuple[float, float, str]:
    """``(eps, delta_total, how)``: the labels' data-independent RDP curve
    (``independent``, an `analysis.bounds.gnmax.EpsResult`) composed with the GNSS release at its
    default order (the data-independent optimum, or ``release_order``), β = 0.1/order (or
    ``beta``) and ``release_cost`` of RDP there (:func:`gnss_headline_independent`), at δ.
    Public: no vote enters.
    """
    order = float(independent.order if release_order is None else release_order)
    beta, sigma_ss = gnss_parameters(order, beta, release_cost)
    eps, _ = gnss_headline_independent(independent, beta, sigma_ss, delta, conversion)
    return eps, delta, f"GNSS release at order {order:g}, RDP cost {release_cost:g}"


def gnss_discrete_correction(order, sigma_ss) -> float:
    """Extra RDP of GNSS with *discrete* Gaussian noise over the continuous bound `rdp_gnss`.

    For integer means μ₀, μ₁ and variances s₀², s₁², completing the square in
    Σ_k p₀(k)^λ p₁(k)^{1−λ} gives the continuous Rényi divergence times the ratio
    R(A, m) / (R(1/s₀²)^λ R(1/s₁²)^{1−λ}), where A = λ/s₀² + (1−λ)/s₁², m = B/A and
    R(a, m) = Σ_k e^{−a(k−m)²/2} / √(2π/a) is how far a discrete Gaussian's normaliser
    exceeds the continuous one. By Poisson summation R(a, m) ≤ R(a, 0) = R(a) and R ≥ 1,
    so D_λ(discrete) ≤ D_λ(continuous) + log R(A)/(λ−1) + log R(1/s₁²) (Canonne, Kamath,
    Steinke 2020 bound the equal-variance case the same way). R(a) falls as the variance
    1/a grows; here every scale is σ_ss·S̃ ≥ σ_ss (S̃ ≥ 1 grid step) and 1/A ≥ s₀²/λ ≥
    σ_ss²/λ, so the correction is at most log R(λ/σ_ss²)/(λ−1) + log R(1/σ_ss²).
    """
    from analysis.core.noise import log_theta_ratio

    order = float(order)
    sigma_ss = float(sigma_ss)
    return log_theta_ratio(order / sigma_ss**2) / (order - 1.0) + log_theta_ratio(1.0 / sigma_ss**2)


@dataclass(frozen=True)
class SanitizedEps:
    """The data-dependent ε released through GNSS (2018 paper, Section 4.3, Appendix B).

    Publishable: `eps` (the release), `rdp_released` (= `units` · `grid`: an upper bound on the
    data-dependent RDP except with probability `eta`, `upper_bound`), `units`, `grid`, `order`,
    `beta`, `sigma_ss` (the σ the cost is computed at), `rdp_gnss` (the cost, discrete correction
    included), `delta`, `conversion`, `eta`, `noise_multiplier` (σ_n ≥ σ_ss, the noise drawn) and
    `shift` (a, in units of S̃). Private (functions of the votes): `rdp_exact`, `eps_exact`,
    `smooth_sensitivity`, `noise_std`.
    """

    eps: float
    rdp_released: float
    units: int
    grid: float
    order: float
    beta: float
    sigma_ss: float
    rdp_gnss: float
    delta: float
    conversion: str
    mechanism: str
    accounting: str | None
    rdp_exact: float
    eps_exact: float
    smooth_sensitivity: float
    noise_std: float
    eta: float = 0.0
    noise_multiplier: float = 0.0
    shift: float = 0.0


def sanitized_eps(
    votes,
    sigma,
    delta,
    order,
    beta,
    sigma_ss,
    *,
    threshold=None,
    sigma_threshold=None,
    answered_mask=None,
    accounting="joint",
    conversion="classic",
    num_teachers=None,
    noise=None,
    grid=RELEASE_GRID,
    offsets=None,
    eta=None,
) -> SanitizedEps:
    """Releases the data-dependent RDP at `order` with GNSS and returns the sanitised ε.

    Steps (2018 paper, Section 4.3 and Appendix B): f(D) = data-dependent RDP of all
    queries at order λ (as in `data_dependent_eps`); S(D) = max_d e^{−βd} F(d), where F(d)
    sums the per-query local-sensitivity bounds at distance d (smooth sensitivity of a
    sum ≤ discounted maximum of summed profiles).

    The release is exact on the public grid ``g`` (Mironov 2012: no floating-point bit may
    depend on the votes): f̃(D) = round(f(D)/g) has local sensitivity ≤ LS_f/g + 1, so
    S̃ = S/g + 1 (times 1 + 1e-9 for floating-point error) is a β-smooth bound on it, and
    the published value is g · max(0, round(f(D)/g + a S̃(D)) + Z) with Z a discrete Gaussian of
    variance (σ_n S̃(D))², sampled exactly (``analysis.core.noise``, CKS 2020): an **upper
    bound** on f(D) except with probability η (`upper_bound`: the shift a and σ_n ≥ σ_ss; a
    draw centred on f(D) would publish less than f(D) half the time, and less than the true
    loss whenever the noise exceeds the bound's slack). Its cost is `rdp_gnss(λ, β, σ_ss)` —
    the continuous GNSS bound, whose Rényi divergence between two Gaussians is the same
    quadratic form for discrete ones — plus `gnss_discrete_correction(λ, σ_ss)` for their
    normalisers (≈ 1e-21 at σ_ss = 5, λ = 12). The published ε is the conversion of
    (released RDP + cost) at λ with `conversion`, a deterministic function of the grid value,
    and holds at δ + η (the report adds η to the headline's δ).

    `order`, `beta`, `sigma_ss` and `grid` must not be chosen by looking at the votes (the
    paper's code picks the first three from private values; that choice is not covered
    by this analysis). `gnss_sigma_for_cost` picks σ_ss from a target cost. Confident-GNMax
    LS terms in the joint accounting: |Δρ| ≤ |Δε_thr| + c·|Δw| + min(1, w'e^{(λ−1)λ/σ²})·|Δε_G|
    with c = expm1((λ−1)λ/σ²)/(λ−1) (derivatives of `rdp_confident` in w and ε_G), each term
    bounded by its own ball maximum. `noise`: an ``analysis.core.noise.NoiseSource`` (fresh OS
    entropy when None). ``offsets``: Interactive-GNMax's check offsets (`analysis.bounds.interactive`),
    the threshold step on max_j (n_j − o_j). ``eta``: the probability the published value
    falls below f(D) (public; default δ).

    Raises:
      PateError: bad parameters, or a release whose cost, sensitivity or value is not finite.
    """
    votes, T = _checked_votes(votes, num_teachers)
    sigma = check_sigma(sigma)
    delta = check_delta(delta)
    order = float(check_orders([order])[0])
    grid = float(grid)
    if not (grid > 0 and math.isfinite(grid)):
        raise PateError(f"grid must be a positive number, got {grid}")
    mech, sigma_threshold, accounting = _checked_threshold(threshold, sigma_threshold, answered_mask, accounting)
    bound = upper_bound(sigma_ss, beta, delta if eta is None else eta)
    cost = float(rdp_gnss([order], beta, sigma_ss)[0]) + gnss_discrete_correction(order, sigma_ss)
    if not math.isfinite(cost):
        raise PateError(f"the GNSS release at order {order:g} has no finite cost (beta {beta:g}, "
                        f"sigma_ss {sigma_ss:g}); lower --beta or raise --release-cost")
    F, f = total_profile(
        votes, sigma, order, T, threshold=threshold, sigma_threshold=sigma_threshold,
        answered_mask=answered_mask, accounting=accounting, offsets=offsets,
    )
    ss = float(np.max(F * np.exp(-float(beta) * np.arange(T + 1))))
    if not (math.isfinite(f) and math.isfinite(ss)):
        raise PateError(f"the data-dependent RDP ({f}) or its smooth sensitivity ({ss}) is not finite "
                        "at these noise levels: nothing can be released; raise --sigma/--sigma-threshold")
    units, std_units = _draw(f, ss, grid, bound, noise)
    released = units * grid
    eps, _ = eps_from_rdp([order], [released + cost], delta, conversion)
    eps_exact, _ = eps_from_rdp([order], [f + cost], delta, conversion)
    return SanitizedEps(
        eps=float(eps), rdp_released=released, units=units, grid=grid, order=order, beta=float(beta),
        sigma_ss=float(sigma_ss), rdp_gnss=cost, delta=delta, conversion=conversion, mechanism=mech,
        accounting=accounting, rdp_exact=f, eps_exact=float(eps_exact), smooth_sensitivity=ss,
        noise_std=std_units * grid, eta=bound.eta, noise_multiplier=bound.noise_multiplier, shift=bound.shift,
    )


def _checked_votes(votes, num_teachers):
    """The vote histogram as a checked ``(queries, classes)`` array, and its teacher count."""
    votes = check_counts(votes)
    if votes.ndim != 2:
        raise PateError(f"votes must be a (queries, classes) array, got shape {votes.shape}")
    T = teachers_of(votes, num_teachers)
    check_counts(votes, T)
    return votes, T


def _checked_threshold(threshold, sigma_threshold, answered_mask, accounting):
    """``(mechanism name, σ₁, accounting)`` of the threshold parameters: both or neither
    (GNMax, no accounting and no answered mask)."""
    mech = mechanism_name(threshold, sigma_threshold)
    if threshold is None:
        if answered_mask is not None:
            raise PateError("answered_mask applies to Confident-GNMax only")
        return mech, sigma_threshold, None
    if accounting not in ("joint", "realised"):
        raise PateError(f"accounting must be 'joint' or 'realised', got {accounting!r}")
    return mech, check_sigma(sigma_threshold, "sigma_threshold"), accounting


def noise_units(ss: float, grid: float, sigma_ss: float) -> tuple[float, float]:
    """``(S̃, σ·S̃)``: the smooth sensitivity of the grid value, S̃ = S/g·(1 + 1e-9) + 1,
    and the std of noise of multiplier ``sigma_ss`` (a release draws with
    `UpperBound.noise_multiplier`), both in grid units (`sanitized_eps`)."""
    ss_units = ss / grid * (1.0 + _FLOAT_MARGIN) + 1.0
    return ss_units, float(sigma_ss) * ss_units


@dataclass(frozen=True)
class UpperBound:
    """How a GNSS draw is published as an upper confidence bound (`upper_bound`). Public:
    functions of σ_ss, β and η alone.

    Attributes:
      sigma_ss: the σ the release's RDP cost is computed at (`rdp_gnss`, the ledger's ``gnss`` cost).
      noise_multiplier: σ_n, the std of the noise drawn in units of S̃ (≥ ``sigma_ss``).
      shift: a, what the centre is moved up by, in units of S̃.
      eta: the probability that the published value is below the data-dependent RDP.
    """

    sigma_ss: float
    noise_multiplier: float
    shift: float
    eta: float


def upper_bound(sigma_ss: float, beta: float, eta: float) -> UpperBound:
    """The noise multiplier σ_n and shift a that make GNSS publish an upper confidence bound
    on the data-dependent RDP f(D) at the cost of ``rdp_gnss(λ, β, sigma_ss)``.

    The release is ``h(D) + Z`` with ``h(D) = round(f(D)/g + a S̃(D))`` and Z a discrete
    Gaussian of std σ_n S̃(D) (S̃ the grid's β-smooth bound, `noise_units`).

    Guarantee 1 (the bound). ``h ≥ f/g + a S̃ − ½``, so ``h + Z < f/g`` needs ``Z ≤ −m`` with
    the integer ``m ≥ (a − ½) S̃``. For the discrete Gaussian of variance s² and an integer m ≥ 1,
    ``P[Z ≥ m] ≤ P[N(0, s²) ≥ m − 1]``: each term ``e^{−k²/2s²}`` (k ≥ 1) is at most the integral
    of the same function over ``[k − 1, k]`` (it falls there), and the normaliser ``Σ_k e^{−k²/2s²}
    ≥ √(2π) s`` (Poisson summation, as in `gnss_discrete_correction`). With s = σ_n S̃ and S̃ ≥ 1,
    ``(m − 1)/s ≥ (a − 3/2)/σ_n``, so the failure probability is at most ``Φ̄((a − 3/2)/σ_n) = η``
    for ``a = 3/2 + σ_n z``, ``z = Φ̄⁻¹(η)``. Clipping at 0 lowers no value below f > 0.

    Guarantee 2 (the cost, replace-one). For neighbours D, D′: ``|f − f′| ≤ min(S, S′)``, ``S̃`` is
    β-smooth so ``|S̃ − S̃′| ≤ (e^β − 1) min(S̃, S̃′)``, and rounding moves each value ≤ ½: ``|h −
    h′| ≤ min(S, S′)/g + 1 + a (e^β − 1) min(S̃, S̃′) ≤ k min(S̃, S̃′)`` with ``k = 1 + a (e^β −
    1)`` (times 1 + 1e-9 for floating-point error). `rdp_gnss`'s proof then holds with
    ``Δ²/s₀² ≤ k² min(1, r)/σ_n²``: the release costs ``rdp_gnss(λ, β, σ_n/k)``. σ_n solves
    ``σ_n / k(σ_n) = sigma_ss``: ``σ_n = sigma_ss (1 + 3u/2) m / (1 − sigma_ss z u m)`` with ``u =
    e^β − 1`` and m the margin, so the cost is the planned one. The discrete
    correction (`gnss_discrete_correction`) at sigma_ss ≤ σ_n bounds the one at σ_n.

    Raises:
      PateError: no σ_n exists (``sigma_ss z (e^β − 1) ≥ 1``): the planned cost is too
        small for an upper bound at this β; raise the release cost or lower β.
    """
    sigma_ss = check_sigma(sigma_ss, "sigma_ss")
    eta = float(eta)
    if not 0.0 < eta < 1.0:
        raise PateError(f"the probability eta that a sanitised upper bound fails must lie in (0, 1), got {eta!r}")
    from scipy.special import ndtri

    z = max(0.0, float(-ndtri(eta)))
    u = math.expm1(float(beta))
    m = 1.0 + _FLOAT_MARGIN
    room = 1.0 - sigma_ss * z * u * m
    if not room > 0.0:
        raise PateError(f"the GNSS release (sigma_ss {sigma_ss:.4g}, beta {float(beta):.4g}) cannot publish an upper "
                        f"bound that fails with probability {eta:.3g} at its cost: raise --release-cost or lower "
                        f"--beta (needs sigma_ss * z(1 - eta) * (e^beta - 1) < 1)")
    sigma_n = sigma_ss * (1.0 + 1.5 * u) * m / room
    return UpperBound(sigma_ss=sigma_ss, noise_multiplier=sigma_n, shift=1.5 + sigma_n * z, eta=eta)


def release_centre(f: float, ss: float, grid: float, bound: UpperBound) -> tuple[int, float]:
    """``(h, std)`` in grid units: the centre ``round(f/g + a S̃)`` of a GNSS upper-bound draw
    and the std ``σ_n S̃`` of its noise (`upper_bound`). Private when ``f`` and ``ss`` are."""
    ss_units, std_units = noise_units(ss, grid, bound.noise_multiplier)
    return int(round(f / grid + bound.shift * ss_units)), std_units


def _draw(f: float, ss: float, grid: float, bound: UpperBound, noise) -> tuple[int, float]:
    """The released grid value ``max(0, h + Z)`` in grid units, ``h`` the shifted centre and Z an
    exact discrete Gaussian of std σ_n·S̃ (`release_centre`), and that std in grid units.
    ``noise``: an ``analysis.core.noise.NoiseSource`` (fresh OS entropy when None)."""
    from analysis.core.noise import NoiseSource, discrete_gaussian

    centre, std_units = release_centre(f, ss, grid, bound)
    ss_units, _ = noise_units(ss, grid, bound.noise_multiplier)
    if not math.isfinite(std_units * std_units):
        raise PateError(f"the release noise is not finite (grid {grid:g}); use a larger grid")
    source = NoiseSource() if noise is None else noise
    z = discrete_gaussian(source, Fraction(bound.noise_multiplier) ** 2 * Fraction(ss_units) ** 2)
    return max(0, centre + z), std_units
