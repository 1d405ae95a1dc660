"""PATE 2018 privacy analysis: GNMax, Confident-GNMax, smooth sensitivity, GNSS release.

Reference: Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable Private
Learning with PATE", ICLR 2018 (arXiv:1802.08908) — "the 2018 paper" below.

Mechanisms. ``votes`` is an integer histogram (..., m) of T teachers' predictions.
GNMax returns argmax_j (n_j + N(0, σ²)). Confident-GNMax (Algorithm 1) first tests
max_j n_j + N(0, σ₁²) ≥ t and runs GNMax with σ₂ only on queries that pass.

Neighbouring relation. Two vote sets are neighbours when one teacher's vote differs
(one training example lives in one teacher's shard and can change that teacher's vote
arbitrarily). The histogram then moves one vote between two classes: L2 sensitivity √2
for the histogram, 1 for max_j n_j. All guarantees below are under this relation.

Guarantees, one query (they add over queries: Mironov 2017, Proposition 1):

- GNMax, data-independent: λ/σ² at order λ (2018 paper, Proposition 8; a Gaussian
  mechanism of L2 sensitivity √2 — ``dp_accounting.GaussianDpEvent(σ/√2)``).
- Threshold step, data-independent: λ/(2σ₁²) (sensitivity 1; ``GaussianDpEvent(σ₁)``).
- Data-dependent bounds (Theorem 6 of the 2018 paper, Appendix A) hold at one fixed
  vote set D against all its neighbours; they are *private* values and are published
  only through the smooth-sensitivity release (`sanitized_eps`).

Where this module departs from the paper's code (tensorflow/privacy
research/pate_2018), on purpose, each pinned by a test in tests/test_gnmax.py:

1. The GNSS cost. ``compute_rdp_of_smooth_sensitivity_gaussian`` (the code's "Theorem
   23") returns λe^{2β}/σ² + (βλ − ½log(1 − 2λβ))/(λ − 1). The exact Rényi divergence
   between the two Gaussians the mechanism can produce (means one sensitivity apart,
   scales a factor e^{±β} apart) is larger when λβ is not small: at λ = 50, β = 0.49/λ
   (the code's default), σ = 5 it is 33.2 against the formula's 2.09. `rdp_gnss`
   uses the exact worst case instead (derivation in its docstring).
2. Confident-GNMax accounting. The paper charges the threshold on every query and
   GNMax on the answered ones; its code adds ``pr_answered * rdp_gnmax`` ("expected"
   cost). Neither is an upper bound on the Rényi divergence of the released
   (answered?, label) pair, whose distribution depends on D. `rdp_confident` gives one
   (a Hölder argument, in its docstring); it charges an unlikely-answered query a small
   fraction of the GNMax cost and an answered one all of it, and needs no answered set.
   The paper's accounting is kept as ``accounting="realised"`` to reproduce published
   numbers, labelled as such.
3. The threshold's local sensitivity at distance d. The code takes the larger of the
   local sensitivities at max-vote v ± d only; the bound at distance d must cover every
   vote set within distance d (v' ∈ [v − d, v + d]), otherwise the summed profile over
   queries is not a smooth upper bound. Here it is a running maximum.
4. Smooth-sensitivity parameters. The code picks σ_ss = (λe^{2β}/SS)^{1/3}, i.e. from the
   private smooth sensitivity, and the order from the private data-dependent curve.
   Here β, σ_ss and the order are arguments that must be chosen without the votes.
5. Conditions C5–C6 (Section B.4). The code relies on them without checking. C6 (the
   local sensitivity rising with q̃ up to its peak) fails for orders that are large for
   σ — e.g. σ = 40 with λ ≥ 50, σ = 100 with λ ≥ 100 — and then the local sensitivity
   read off the single most extreme q̃ at distance d can be (slightly) below the maximum
   over the distance-d ball. Here C5 (β non-decreasing in q̃) is checked on a dense grid
   for the (σ, λ) in use, and C6 is not needed: profiles use running maxima of cell-wise
   bounds (`_GNMaxLS`).

Numbering: theorem and proposition numbers are those of arXiv:1802.08908 as cited in the
paper's code (Proposition 7, Theorem 6, Proposition 8, Proposition 10, Section B, and
"Theorem 23" for GNSS); they were not re-checked against the paper's text here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr, logsumexp, ndtri_exp

from analysis.errors import PateError
from analysis.rdp import DEFAULT_ORDERS, check_delta, check_orders, eps_from_rdp

__all__ = [
    "log_q",
    "rdp",
    "rdp_data_independent",
    "log_pr_answered",
    "rdp_threshold",
    "rdp_threshold_data_independent",
    "rdp_confident",
    "answer_weight",
    "local_sensitivity_profile",
    "smooth_sensitivity",
    "rdp_gnss",
    "gnss_sigma_for_cost",
    "EpsResult",
    "SanitizedEps",
    "data_independent_eps",
    "data_dependent_eps",
    "sanitized_eps",
    "DEFAULT_ORDERS",
]

_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)

# Below this many nats under the start of the local-sensitivity peak, the profile of a
# query is bounded by its value at the cut (see `_GNMaxLS`). A fixed constant keeps the
# bound a smooth function; it only costs tightness of order e^{-40}·(peak).
_FLOOR_NATS = 40.0
# Points of the grid on which Condition C5 (β monotone in q̃) is checked.
_CHECK_GRID = 4001
# Queries per chunk in the smooth-sensitivity profile (memory ~ chunk × teachers).
_CHUNK = 256


# ----------------------------------------------------------------------------- helpers


def _log1mexp(x):
    """log(1 − e^x) for x ≤ 0, stable at both ends (−inf at x = 0)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(
            x < -_LN2, np.log1p(-np.exp(np.minimum(x, -_LN2))), np.log(-np.expm1(np.minimum(x, 0.0)))
        )


#: The noise scales the analysis accepts: sigma**2 must neither overflow nor vanish.
SIGMA_RANGE = (1e-100, 1e100)


def _check_sigma(sigma, name="sigma") -> float:
    """A positive, finite noise scale; the aggregator's (sigma, sigma_threshold) also within
    `SIGMA_RANGE` (the GNSS release's sigma_ss is the release code's to bound)."""
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma > 0):
        raise PateError(f"{name} must be a positive number, got {sigma!r}")
    if name != "sigma_ss" and not SIGMA_RANGE[0] <= sigma <= SIGMA_RANGE[1]:
        raise PateError(f"{name} must lie between {SIGMA_RANGE[0]:g} and {SIGMA_RANGE[1]:g}, got {sigma:g}")
    return sigma


def _check_votes(votes, num_teachers=None) -> np.ndarray:
    """Integer histogram (..., m), m ≥ 2, non-negative; rows sum to `num_teachers`."""
    arr = np.asarray(votes)
    if arr.ndim < 1 or arr.shape[-1] < 2:
        raise PateError(f"votes must have shape (..., classes) with at least 2 classes, got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise PateError("votes must be integer vote counts")
        arr = arr.astype(np.int64)
    arr = arr.astype(np.int64, copy=False)
    if np.any(arr < 0):
        raise PateError("votes must be non-negative counts")
    if num_teachers is not None:
        sums = arr.sum(axis=-1)
        if np.any(sums != num_teachers):
            bad = np.flatnonzero(np.ravel(sums != num_teachers))
            raise PateError(
                f"{bad.size} vote rows do not sum to {num_teachers} teachers (first: row {bad[0]} sums to "
                f"{np.ravel(sums)[bad[0]]})"
            )
    return arr


def _teachers_of(votes: np.ndarray, num_teachers) -> int:
    if num_teachers is None:
        sums = np.unique(votes.reshape(-1, votes.shape[-1]).sum(axis=-1))
        if sums.size != 1:
            raise PateError(f"vote rows sum to different totals ({sums[:3].tolist()}...); pass num_teachers")
        return int(sums[0])
    num_teachers = int(num_teachers)
    if num_teachers < 1:
        raise PateError(f"num_teachers must be positive, got {num_teachers}")
    return num_teachers


# ------------------------------------------------------------------ Proposition 7, Theorem 6


def log_q(votes, sigma):
    """Proposition 7 of the 2018 paper: an upper bound on log Pr[GNMax(votes) ≠ i*].

    i* is the (first) argmax of the noiseless votes. By a union bound over the other
    classes, Pr[outcome ≠ i*] ≤ Σ_{j≠i*} Pr[n_j + Z_j ≥ n_{i*} + Z_{i*}]
    = Σ_{j≠i*} Φ(−(n_{i*} − n_j)/(√2 σ)) (= ½ Σ erfc((n_{i*} − n_j)/(2σ)), the paper's
    form). The bound is also capped at 1 − 1/m: i* has the largest chance of winning (swap
    its noise with any other class's), so at least 1/m. Computed in log space
    (log_ndtr + logsumexp); shape votes.shape[:-1].
    """
    votes = _check_votes(votes)
    sigma = _check_sigma(sigma)
    m = votes.shape[-1]
    srt = np.sort(votes, axis=-1)
    gaps = srt[..., -1:] - srt[..., :-1]
    logub = logsumexp(log_ndtr(-gaps / (_SQRT2 * sigma)), axis=-1)
    return np.minimum(logub, math.log1p(-1.0 / m))


def _theorem6(logq, sigma: float, orders: np.ndarray) -> np.ndarray:
    """min(data-independent λ/σ², Theorem 6 bound) at each order; shape logq.shape + orders.shape.

    Theorem 6 (2018 paper, Appendix A): if M is (μ₁, ε₁)- and (μ₂, ε₂)-RDP, q ≥
    Pr[M(D) ≠ i*], λ ≤ μ₁ and q ≤ e^{(μ₂−1)ε₂} / (μ₁/(μ₁−1) · μ₂/(μ₂−1))^{μ₂}, then for every
    neighbour D': D_λ(M(D)‖M(D')) ≤ 1/(λ−1) · log((1−q)·A^{λ−1} + q·B^{λ−1}) with
    A = (1−q)/(1 − (q e^{ε₂})^{(μ₂−1)/μ₂}) and B = e^{ε₁}/q^{1/(μ₁−1)}. The curve ε(μ) = μ/σ²
    is that of a Gaussian mechanism with σ (GNMax) and μ₂ = σ√(log 1/q), μ₁ = μ₂ + 1 is the
    choice of Proposition 10. Conditions checked here, else the data-independent value:
    μ₂ > 1 (so μ₁ > 2 > 1), λ < μ₁ (strict, as in the paper's code), the q condition above,
    and q e^{ε₂} < 1 (A > 0). q = 0 gives 0 (the output is fixed).
    """
    logq = np.asarray(logq, dtype=float)[..., None]
    var = sigma * sigma
    indep = orders / var
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mu2 = sigma * np.sqrt(-logq)
        mu1 = mu2 + 1.0
        eps1 = mu1 / var
        eps2 = mu2 / var
        ok_q = (
            (mu2 > 1.0)
            & np.isfinite(logq)
            & (logq <= (mu2 - 1.0) * eps2 - mu2 * (np.log1p(1.0 / (mu1 - 1.0)) + np.log1p(1.0 / (mu2 - 1.0))))
            & (-logq > eps2)
        )
        ok = ok_q & (orders < mu1)
        lam1 = orders - 1.0
        log1q = _log1mexp(np.where(ok_q, logq, -1.0))
        inner = _log1mexp(np.where(ok_q, (logq + eps2) * (1.0 - 1.0 / mu2), -1.0))
        log_a = lam1 * (log1q - inner)
        log_b = lam1 * (eps1 - logq / (mu1 - 1.0))
        dep = np.logaddexp(log1q + log_a, logq + log_b) / lam1
        out = np.where(ok, np.minimum(dep, indep), indep)
    return np.where(np.isneginf(logq), 0.0, out)


def rdp(log_q, sigma, orders=DEFAULT_ORDERS):
    """Theorem 6 of the 2018 paper: data-dependent RDP of one GNMax answer.

    Bounds D_λ(GNMax(D) ‖ GNMax(D')) for every neighbour D' of the vote set D whose
    Proposition 7 bound is `log_q` (any q ≥ Pr[GNMax(D) ≠ argmax] works: the bound is
    increasing in q where its conditions hold). Where the conditions fail, or where it
    is larger, the data-independent λ/σ² (Proposition 8) is returned instead; the
    conditions are listed in `_theorem6`. Shape log_q.shape + orders.shape.
    """
    sigma = _check_sigma(sigma)
    orders = check_orders(orders)
    log_q = np.asarray(log_q, dtype=float)
    if np.any(log_q > 0) or np.any(np.isnan(log_q)):
        raise PateError("log_q must be ≤ 0 (a log-probability)")
    return _theorem6(log_q, sigma, orders)


def rdp_data_independent(sigma, orders=DEFAULT_ORDERS):
    """Proposition 8 of the 2018 paper: GNMax is (λ, λ/σ²)-RDP for every λ > 1.

    The histogram has L2 sensitivity √2, so this is the Gaussian mechanism's
    λΔ²/(2σ²) with Δ² = 2 (Mironov 2017, Corollary 3). Shape of `orders`.
    """
    sigma = _check_sigma(sigma)
    return check_orders(orders) / sigma**2


def log_pr_answered(threshold, sigma, votes):
    """log Pr[max_j n_j + N(0, σ²) ≥ threshold] = log Φ((max_j n_j − threshold)/σ).

    The probability that Confident-GNMax's threshold step (2018 paper, Algorithm 1,
    σ = σ₁) answers a query. Exact, in log space; shape votes.shape[:-1].
    """
    votes = _check_votes(votes)
    sigma = _check_sigma(sigma)
    threshold = float(threshold)
    return log_ndtr((votes.max(axis=-1) - threshold) / sigma)


def rdp_threshold(log_pr_answered, sigma, orders=DEFAULT_ORDERS):
    """Theorem 6 applied to Confident-GNMax's threshold step (2018 paper, Section 4.1, App. A).

    The step releases one bit, post-processing of max_j n_j + N(0, σ₁²): a Gaussian
    mechanism of sensitivity 1, i.e. RDP λ/(2σ₁²) = λ/(√2σ₁)². Theorem 6 is applied with
    that curve (σ = √2·σ₁ in `rdp`) and q = min(p, 1 − p), p = Pr[answered], the chance
    of the less likely bit. Falls back to λ/(2σ₁²). Shape log_pr_answered.shape + orders.shape.
    """
    sigma = _check_sigma(sigma)
    orders = check_orders(orders)
    logp = np.asarray(log_pr_answered, dtype=float)
    if np.any(logp > 0) or np.any(np.isnan(logp)):
        raise PateError("log_pr_answered must be ≤ 0 (a log-probability)")
    logq = np.minimum(logp, _log1mexp(logp))
    return _theorem6(logq, _SQRT2 * sigma, orders)


def rdp_threshold_data_independent(sigma, orders=DEFAULT_ORDERS):
    """The threshold step is (λ, λ/(2σ₁²))-RDP: a Gaussian mechanism of sensitivity 1."""
    sigma = _check_sigma(sigma)
    return check_orders(orders) / (2.0 * sigma**2)


# ------------------------------------------------------------------ Confident-GNMax, joint


def _log_answer_weight(logp, sigma_threshold: float, orders: np.ndarray) -> np.ndarray:
    """log Ŷ(λ), the Hölder bound of `answer_weight`, minimised over μ in closed form."""
    logp = np.asarray(logp, dtype=float)[..., None]
    lam1 = orders - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        u = sigma_threshold * np.sqrt(-2.0 * logp)  # argmin over u = μ − 1 > 0 of E(u)
        interior = u > lam1
        u_safe = np.where(interior, u, lam1 + 1.0)
        e_int = logp * (1.0 - lam1 / u_safe) + lam1 * (u_safe + 1.0) / (2.0 * sigma_threshold**2)
    boundary = lam1 * orders / (2.0 * sigma_threshold**2)  # μ → λ: Ŷ → e^{(λ−1)λ/(2σ₁²)} ≥ 1
    out = np.where(interior, np.minimum(e_int, boundary), boundary)
    return np.where(np.isneginf(logp), -np.inf, out)  # never answered: Y = 0


def answer_weight(log_pr_answered, sigma_threshold, orders=DEFAULT_ORDERS):
    """w(λ) = min(1, Ŷ): how much of the GNMax cost an unlikely-answered query pays.

    With P₁ = Pr_D[answered], P₁'s counterpart Q₁ at a neighbour, and Y = P₁^λ Q₁^{1−λ},
    Hölder at any order μ > λ gives Y ≤ P₁^{(μ−λ)/(μ−1)} · (P₁^μ Q₁^{1−μ})^{(λ−1)/(μ−1)}
    ≤ P₁^{(μ−λ)/(μ−1)} e^{(λ−1) μ/(2σ₁²)}, the last step because P₁^μ Q₁^{1−μ} is one term
    of the threshold bit's Rényi sum, ≤ e^{(μ−1)μ/(2σ₁²)}. Ŷ is the minimum over μ, attained
    at μ − 1 = σ₁√(2 log 1/P₁) (the exponent is convex in μ − 1). Non-decreasing in P₁.
    """
    sigma_threshold = _check_sigma(sigma_threshold, "sigma_threshold")
    orders = check_orders(orders)
    return np.exp(np.minimum(0.0, _log_answer_weight(log_pr_answered, sigma_threshold, orders)))


def rdp_confident(rdp_thr, rdp_gnmax, weight, orders):
    """RDP of one Confident-GNMax query's whole output: the bit "answered?" and, if answered,
    the label.

    Let P = (P₀, P₁) and Q be the bit's distributions at a vote set D and at a neighbour
    D', p and q the labels' (the two noises are independent). Then, with X = P₀^λ Q₀^{1−λ}
    and Y = P₁^λ Q₁^{1−λ},
      e^{(λ−1)D_λ} = X + Y·Σ_l p_l^λ q_l^{1−λ} ≤ (X + Y) + Y·(e^{(λ−1)ε_G} − 1),
    where X + Y = e^{(λ−1)D_λ(bit)} lies in [1, e^{(λ−1)ε_thr}], so Y/(X + Y) ≤ min(1, Y) and
      ρ(λ) ≤ ε_thr(λ) + log(1 + w·(e^{(λ−1)ε_G(λ)} − 1))/(λ−1),  w ≥ min(1, Y) (`answer_weight`).
    ε_thr and ε_G may be data-dependent (Theorem 6) or data-independent bounds; w = 1 gives
    plain composition ε_thr + ε_G. The realised set of answered queries is not used.
    Arguments broadcast to (..., len(orders)).
    """
    lam1 = np.asarray(orders, dtype=float) - 1.0
    big = lam1 * np.asarray(rdp_gnmax, dtype=float)
    w = np.asarray(weight, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        small = np.log1p(w * np.expm1(np.minimum(big, 1.0)))  # accurate for small costs
        large = np.logaddexp(np.log1p(-w), np.log(w) + big)  # log((1 − w) + w e^B), no overflow
    return np.asarray(rdp_thr) + np.where(big < 1.0, small, large) / lam1


# ------------------------------------------------------------------ GNSS (Section B)


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
    sigma_ss = _check_sigma(sigma_ss, "sigma_ss")
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


# ------------------------------------------------------------------ smooth sensitivity


class _GNMaxLS:
    """Local sensitivity of the Theorem 6 bound β(q̃) at one order, as a function of q̃.

    Notation: m classes, T teachers, s = √2σ. For a vote set y, q̃(y) is `log_q` (union
    bound, capped at 1 − 1/m); it is always ≥ q_min = (m−1)Φ(−T/s) (every gap is ≤ T).

    Neighbours (2018 paper, Section B.4). Every gap moves by at most 2 between neighbours
    (also when the argmax changes), so each term Φ(−g/s) moves at most to Φ(Φ⁻¹(·) ± √2/σ).
    That map is concave (+) / convex (−) in its argument, so over all ways to split q̃ into
    m − 1 terms the extremes are at equal terms: q̃(y') ∈ [bl(q̃), bu(q̃)] with
    bu/bl(q) = (m−1) Φ(Φ⁻¹(q/(m−1)) ± √2/σ), clipped to [q_min, 1 − 1/m]. As β is
    non-decreasing in q (Condition C5, checked on a dense grid here; the paper's code
    assumes it), LS(q) = max(β(bu q) − β(q), β(q) − β(bl q)), and on a cell [a, b] of q̃
    values LS ≤ CB = max(β(bu b) − β(a), β(b) − β(bl a)) — using C5 only.

    The paper also relies on Condition C6 (LS rising up to q₁ = bl(q₀), q₀ where β reaches
    λ/σ²). It fails for large orders relative to σ (e.g. σ = 40, λ ≥ 50; σ = 100, λ ≥ 100),
    so here the profile uses running maxima of the cell bounds instead: `env_up(u)` ≥ LS on
    every q̃ ≤ u and `env_down(l)` ≥ LS on every q̃ ≥ l. Cells are uniform in
    z = Φ⁻¹(q/(m−1)), 64 per neighbour step √2/σ (≈ 3% slack), plus one cell [q_min, cut]
    for everything more than `_FLOOR_NATS` below the peak.
    """

    def __init__(self, sigma: float, order: float, num_classes: int, num_teachers: int, cells_per_step=64):
        self.sigma = sigma
        self.order = float(order)
        self.m = int(num_classes)
        self.T = int(num_teachers)
        self._orders = np.array([self.order])
        self.log_m1 = math.log(self.m - 1)
        self.cap = math.log1p(-1.0 / self.m)
        self.qmin = min(self.cap, self.log_m1 + float(log_ndtr(-self.T / (_SQRT2 * sigma))))
        self.indep = self.order / sigma**2
        self.step = _SQRT2 / sigma
        self.trivial = not bool(self.beta(self.qmin) < self.indep)
        if self.trivial:  # β is λ/σ² on every reachable vote set (given C5): f is constant, LS = 0
            self.cut_lo = self.cut_hi = self.cut = self.qmin
            self.peak = 0.0
            self._check_c5()
            return
        lo, hi = self.qmin, self.cap  # bisection for q₀ = sup{q : β(q) < λ/σ²}
        if bool(self.beta(hi) < self.indep):
            lo = hi
        else:
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                if bool(self.beta(mid) < self.indep):
                    lo = mid
                else:
                    hi = mid
                if hi - lo <= 1e-13 * max(1.0, abs(lo)):
                    break
        self.cut_lo = float(self.down(lo))  # ≤ q₁: below it, profiles follow the largest q̃
        self.cut_hi = float(hi)  # ≥ q₀: above it, profiles follow the smallest q̃
        self.cut = max(self.qmin, self.cut_lo - _FLOOR_NATS)
        self._check_c5()
        z = np.arange(float(self._z(self.cut)), float(self._z(self.cap)), self.step / cells_per_step)
        inner = self.log_m1 + log_ndtr(z)
        inner = inner[(inner > self.cut) & (inner < self.cap)]
        edges = np.unique(np.concatenate([[self.qmin, self.cut], inner, [self.cap]]))
        a, b = edges[:-1], edges[1:]
        cb = np.maximum(self.beta(self.up(b)) - self.beta(a), self.beta(b) - self.beta(self.down(a)))
        self.edges = edges
        self.cb = np.maximum(cb, 0.0)
        self._run_up = np.maximum.accumulate(self.cb)
        self._run_down = np.maximum.accumulate(self.cb[::-1])[::-1]
        self.peak = float(self.cb.max())

    def beta(self, logq):
        return _theorem6(logq, self.sigma, self._orders)[..., 0]

    def _z(self, logq):
        return ndtri_exp(np.minimum(np.asarray(logq, dtype=float) - self.log_m1, 0.0))

    def up(self, logq, steps=1):
        return np.minimum(self.cap, self.log_m1 + log_ndtr(self._z(logq) + steps * self.step))

    def down(self, logq, steps=1):
        return np.maximum(self.qmin, self.log_m1 + log_ndtr(self._z(logq) - steps * self.step))

    def ls(self, logq):
        """LS at a point q̃ (no cell slack): max(β(bu q) − β(q), β(q) − β(bl q))."""
        b = self.beta(logq)
        return np.maximum(self.beta(self.up(logq)) - b, b - self.beta(self.down(logq)))

    def _check_c5(self):
        """Condition C5 (Section B.4): β non-decreasing in q, on a dense grid."""
        x = np.linspace(math.sqrt(-self.cap), math.sqrt(-self.qmin), _CHECK_GRID)
        near = np.linspace(self.cut_lo - 2.0, self.cut_hi + 2.0, _CHECK_GRID)
        grid = np.unique(np.concatenate([-(x**2), near, [self.cut_lo, self.cut_hi, self.cap, self.qmin]]))
        b = self.beta(grid[(grid >= self.qmin) & (grid <= self.cap)])
        if np.any(np.diff(b) < -1e-9 * np.abs(b[1:]) - 1e-300):
            raise PateError(
                f"smooth sensitivity: the Theorem 6 bound is not monotone in q for sigma={self.sigma:g}, "
                f"order={self.order:g} (Condition C5 of the 2018 paper, Section B.4, fails); choose another order"
            )

    def _cell(self, logq):
        return np.clip(np.searchsorted(self.edges, logq, side="right") - 1, 0, self.cb.size - 1)

    def env_up(self, u):
        """≥ LS(q̃) for every q̃ ≤ u; non-decreasing in u."""
        u = np.asarray(u, dtype=float)
        if self.trivial:
            return np.zeros(u.shape)
        return np.where(u >= self.cut_lo, self.peak, self._run_up[self._cell(u)])

    def env_down(self, l):
        """≥ LS(q̃) for every q̃ ≥ l; non-increasing in l."""
        l = np.asarray(l, dtype=float)
        if self.trivial:
            return np.zeros(l.shape)
        return np.where(l <= self.cut_hi, self.peak, self._run_down[self._cell(l)])


def _distinct_gaps(srt_desc: np.ndarray):
    """For rows sorted descending: top-vs-rest gaps of classes 3..m as (values, counts).

    Padded to the longest row with value 0 / count 0. Classes with equal counts share a
    term of the union bound, which makes the trajectory below cheap.
    """
    n, m = srt_desc.shape
    if m < 3:
        return np.zeros((n, 1), np.int64), np.zeros((n, 1), np.int64)
    gaps = srt_desc[:, :1] - srt_desc[:, 2:]  # ascending along the row
    new = np.ones(gaps.shape, bool)
    new[:, 1:] = gaps[:, 1:] != gaps[:, :-1]
    k = np.cumsum(new, axis=1) - 1
    width = int(k[:, -1].max()) + 1
    vals = np.zeros((n, width), np.int64)
    cnts = np.zeros((n, width), np.int64)
    rows = np.broadcast_to(np.arange(n)[:, None], gaps.shape)
    vals[rows[new], k[new]] = gaps[new]
    np.add.at(cnts, (rows.ravel(), k.ravel()), 1)
    return vals, cnts


def _gnmax_profiles(votes: np.ndarray, sigma: float, order: float, num_teachers: int, ls: _GNMaxLS):
    """Yields (row slice, A) with A[i, d] ≥ max LS over vote sets within distance d of row i.

    d runs over 0..T (beyond T every vote set is within reach). For each row:
    - q̃ below the peak: the largest q̃ within distance d is exact — moving d votes from the
      top class to the runner-up maximises the union bound while the top stays on top
      (Φ(−g/s) is convex for g ≥ 0, so concentrating the moves on the smallest gap is
      best; moves not taking from the top are dominated). Gaps become g₂ − 2d and g_j − d;
      after d > g₂/2 the cap 1 − 1/m is used. Below a fixed cut (`_FLOOR_NATS` under the
      peak) the value at the cut is used; the closed form bu^d locates where the exact
      part starts.
    - q̃ above the peak: the smallest q̃ within distance d is bounded below by bl^d(q̃).
    Each profile is the maximum over a distance-d ball of one fixed function of the vote
    set, or of LS over an interval that nests ([L(D', d), U(D', d)] ⊆ [L(D, d+1), U(D, d+1)]
    for neighbours), which is what makes the β-discounted maximum a β-smooth bound.
    """
    T = num_teachers
    s = _SQRT2 * sigma
    m = votes.shape[-1]
    darange = np.arange(T + 1)
    table = log_ndtr(-np.arange(T + 1) / s)  # log Φ(−x/s), x = 0..T
    logq_all = log_q(votes, sigma)
    cut = ls.cut
    floor_val = 0.0 if ls.trivial else float(ls.env_up(cut - 1.0))
    for start in range(0, votes.shape[0], _CHUNK):
        sl = slice(start, min(start + _CHUNK, votes.shape[0]))
        lq = logq_all[sl]
        n = lq.shape[0]
        if ls.trivial:
            yield sl, np.zeros((n, T + 1))
            continue
        A = np.full((n, T + 1), ls.peak)
        left = np.flatnonzero(lq > ls.cut_hi)
        if left.size:
            A[left] = _left_profiles(lq[left], T, ls)
        right = np.flatnonzero(lq < ls.cut_lo)
        if right.size:
            A[right] = _right_profiles(votes[sl][right], lq[right], T, s, m, table, cut, floor_val, ls, darange)
        yield sl, A


def _left_profiles(lq, T, ls: _GNMaxLS, window=8):
    """Rows with q̃ above the peak: A(d) = env_down(bl^d(q̃)), the peak once bl^d(q̃) ≤ cut_hi.

    LS vanishes for q ≥ bu(q₀) (there β(q) = β(bl q) = λ/σ²), i.e. more than ~2 steps above
    cut_hi, so only a window of `window` distances before the peak is evaluated; the
    distances before it are 0, which is checked (else the whole row is evaluated).
    """
    n = lq.shape[0]
    z0 = ls._z(lq)
    zc = float(ls._z(ls.cut_hi))
    k = np.clip(np.ceil((z0 - zc) / ls.step).astype(np.int64), 0, T + 1)  # first d at/below cut_hi
    out = np.full((n, T + 1), ls.peak)
    d = (k - window)[:, None] + np.arange(window + 1)[None, :]
    dc = np.clip(d, 0, T)
    vals = ls.env_down(ls.down(lq[:, None], dc))
    if np.any((d[:, 0] > 0) & (vals[:, 0] > 0)):  # window too short: evaluate everything
        return ls.env_down(ls.down(lq[:, None], np.arange(T + 1)[None, :]))
    rows = np.broadcast_to(np.arange(n)[:, None], d.shape)
    cols = np.arange(T + 1)[None, :]
    out[cols < np.maximum(k - window, 0)[:, None]] = 0.0
    keep = (d >= 0) & (d <= T)
    out[rows[keep], d[keep]] = vals[keep]
    # At and beyond k the bound is the peak (bl^d ≤ cut_hi); vals there are peak already.
    return out


def _right_profiles(v, lq, T, s, m, table, cut, floor_val, ls: _GNMaxLS, darange, budget=4_000_000):
    """Rows with q̃ below the peak: A(d) = env_up(U(d)), U(d) = the largest q̃ within distance d."""
    n = v.shape[0]
    srt = -np.sort(-v, axis=1)
    g2 = srt[:, 0] - srt[:, 1]
    vals, cnts = _distinct_gaps(srt)
    logc = np.where(cnts > 0, np.log(np.maximum(cnts, 1)), -np.inf)
    # Before d_lo even the closed-form bound bu^d(q̃) is below the cut.
    z0 = ls._z(lq)
    zc = float(ls._z(cut))
    d_lo = np.clip(np.floor((zc - z0) / ls.step), 0, T).astype(np.int64)
    # From d_hi on the runner-up term alone is at the peak, or the top has been overtaken.
    zr = float(ndtri_exp(min(ls.cut_lo, -1e-300)))
    d_hi = np.ceil((g2 + s * zr) / 2.0).astype(np.int64) + 1
    d_hi = np.clip(np.minimum(d_hi, g2 // 2 + 1), d_lo + 1, T + 1)
    out = np.full((n, T + 1), ls.peak)
    out[darange[None, :] < d_lo[:, None]] = floor_val
    length = d_hi - d_lo
    order = np.argsort(length, kind="stable")
    width = vals.shape[1]
    i = 0
    while i < n:  # groups of rows of similar length, ≤ `budget` terms each
        j = i + 1
        while j < n and (j - i + 1) * int(length[order[j]]) * (width + 1) <= budget:
            j += 1
        sub = order[i:j]
        L = int(length[sub].max())
        d = d_lo[sub, None] + np.arange(L)[None, :]
        valid = d < d_hi[sub, None]
        d = np.minimum(d, T)
        x2 = g2[sub, None] - 2 * d
        ub = table[np.clip(x2, 0, T)]
        if m >= 3:
            xr = np.clip(vals[sub][:, None, :] - d[:, :, None], 0, T)
            terms = logc[sub][:, None, :] + table[xr]
            mx = terms[..., 0]  # smallest gap j ≥ 3 (count ≥ 1): the largest term but for ties in count
            mx = np.maximum(mx, terms.max(axis=-1))
            ub = np.logaddexp(ub, mx + np.log(np.exp(terms - mx[..., None]).sum(axis=-1)))
        ub = np.where(x2 >= 0, np.minimum(ub, ls.cap), ls.cap)
        a = ls.env_up(ub)
        rows = np.broadcast_to(sub[:, None], d.shape)
        out[rows[valid], d[valid]] = a[valid]
        i = j
    return out


def local_sensitivity_profile(votes, num_teachers, sigma, order):
    """Upper bounds on the local sensitivity at distance d of the GNMax data-dependent RDP.

    For each vote row D and d = 0..T returns A(d) ≥ max{LS(y) : y within d changed
    teachers of D}, where LS(y) = max over neighbours y' of |β(y) − β(y')| and β is `rdp`
    at `order` (2018 paper, Section B.4; the paper's Algorithms 3–5 compute the same
    quantity by moving votes one at a time). Shape votes.shape[:-1] + (T+1,).
    """
    votes = _check_votes(votes)
    sigma = _check_sigma(sigma)
    order = float(check_orders([order])[0])
    T = _teachers_of(votes, num_teachers)
    _check_votes(votes, T)
    flat = votes.reshape(-1, votes.shape[-1])
    ls = _GNMaxLS(sigma, order, flat.shape[-1], T)
    out = np.empty((flat.shape[0], T + 1))
    for sl, A in _gnmax_profiles(flat, sigma, order, T, ls):
        out[sl] = A
    return out.reshape(votes.shape[:-1] + (T + 1,))


def smooth_sensitivity(votes, num_teachers, sigma, order, beta):
    """β-smooth sensitivity of one GNMax answer's data-dependent RDP (2018 paper, Section B).

    SS_β(D) = max_{d ≥ 0} e^{−βd} A(d) with A from `local_sensitivity_profile` (the
    paper's Algorithm 3 gives A(0); Section B.2 the smooth maximum). It satisfies
    SS_β(D) ≥ LS(D) and SS_β(D') ≤ e^β SS_β(D) for neighbours (Nissim, Raskhodnikova,
    Smith 2007). For many queries, `sanitized_eps` bounds the sensitivity of the sum by
    the discounted maximum of the summed profiles, which is smaller than the sum of
    these per-query values. Shape votes.shape[:-1].
    """
    beta = float(beta)
    if not (beta > 0 and math.isfinite(beta)):
        raise PateError(f"beta must be a positive number, got {beta!r}")
    prof = local_sensitivity_profile(votes, num_teachers, sigma, order)
    disc = np.exp(-beta * np.arange(prof.shape[-1]))
    return np.max(prof * disc, axis=-1)


# ------------------------------------------------------------------ results


@dataclass(frozen=True, repr=False)
class EpsResult:
    """An (ε, δ) guarantee from an RDP curve.

    `private` is True for data-dependent values: they depend on the votes and must not
    be published (publish `sanitized_eps` instead).
    """

    eps: float
    order: float
    delta: float
    orders: np.ndarray
    rdp: np.ndarray
    mechanism: str
    conversion: str
    num_queries: int
    private: bool
    accounting: str | None = None
    expected_answered: float | None = None

    def __repr__(self):
        extra = ""
        if self.accounting:
            extra = f", accounting={self.accounting!r}, expected_answered={self.expected_answered:.1f}"
        return (f"EpsResult(eps={self.eps:.6g}, order={self.order:g}, delta={self.delta:g}, "
                f"mechanism={self.mechanism!r}, conversion={self.conversion!r}, num_queries={self.num_queries}, "
                f"private={self.private}{extra})")


@dataclass(frozen=True)
class SanitizedEps:
    """The data-dependent ε released through GNSS (2018 paper, Section 4.3, Appendix B).

    Publishable: `eps` (the release), `rdp_released`, `order`, `beta`, `sigma_ss`,
    `rdp_gnss`, `delta`, `conversion`. Private (functions of the votes): `rdp_exact`,
    `eps_exact`, `smooth_sensitivity`, `noise_std`.
    """

    eps: float
    rdp_released: float
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


# ------------------------------------------------------------------ high level


def _mechanism(threshold, sigma_threshold) -> str:
    if (threshold is None) != (sigma_threshold is None):
        raise PateError("Confident-GNMax needs both threshold and sigma_threshold (or neither, for GNMax)")
    return "gnmax" if threshold is None else "confident-gnmax"


def data_independent_eps(
    num_queries,
    sigma,
    delta,
    orders=DEFAULT_ORDERS,
    *,
    sigma_threshold=None,
    num_answered=None,
    conversion="classic",
) -> EpsResult:
    """Data-independent (ε, δ) of `num_queries` GNMax or Confident-GNMax answers.

    GNMax: N·λ/σ² (Proposition 8). Confident-GNMax (`sigma_threshold` given): the
    threshold step on all N queries, N·λ/(2σ₁²), plus GNMax on at most A = `num_answered`
    (default N) of them, A·λ/σ². A < N is valid only if the labeller stops answering after
    A answers: then the N threshold steps and at most A GNMax steps compose (run the
    thresholds first; their noise is independent of the labels). Converted with
    `analysis.rdp.eps_from_rdp`.
    """
    n = int(num_queries)
    if n < 0:
        raise PateError(f"num_queries must be ≥ 0, got {num_queries}")
    delta = check_delta(delta)
    orders = check_orders(orders)
    curve = n * rdp_data_independent(sigma, orders)
    mech = "gnmax"
    if sigma_threshold is not None:
        mech = "confident-gnmax"
        a = n if num_answered is None else int(num_answered)
        if not 0 <= a <= n:
            raise PateError(f"num_answered must be between 0 and num_queries={n}, got {num_answered}")
        curve = n * rdp_threshold_data_independent(sigma_threshold, orders) + a * rdp_data_independent(sigma, orders)
    elif num_answered is not None:
        raise PateError("num_answered applies to Confident-GNMax only (pass sigma_threshold)")
    eps, order = eps_from_rdp(orders, curve, delta, conversion)
    return EpsResult(float(eps), float(order), delta, orders, curve, mech, conversion, n, private=False)


def _confident_curves(votes, sigma, threshold, sigma_threshold, orders):
    """Per-query (threshold RDP, GNMax RDP, answer weight, log Pr[answered]) at all orders."""
    logp = log_pr_answered(threshold, sigma_threshold, votes)
    thr = rdp_threshold(logp, sigma_threshold, orders)
    gn = rdp(log_q(votes, sigma), sigma, orders)
    w = answer_weight(logp, sigma_threshold, orders)
    return thr, gn, w, logp


def data_dependent_eps(
    votes,
    sigma,
    delta,
    orders=DEFAULT_ORDERS,
    *,
    threshold=None,
    sigma_threshold=None,
    answered_mask=None,
    accounting="joint",
    conversion="classic",
) -> EpsResult:
    """Data-dependent (ε, δ) of answering every row of `votes` — a PRIVATE value.

    GNMax (no threshold): Σ_queries Theorem 6 bound (`rdp`) on Proposition 7's q.
    Confident-GNMax (`threshold`, `sigma_threshold` = σ₁, `sigma` = σ₂):
    - accounting="joint" (default, an upper bound on the Rényi divergence of everything
      released): Σ_queries `rdp_confident`(threshold bound, GNMax bound, `answer_weight`).
    - accounting="realised": the 2018 paper's accounting — threshold bound on every query
      plus GNMax bound on the rows where `answered_mask` is True. It conditions on which
      queries were answered, which a DP guarantee for the joint release does not allow;
      use it to compare with published numbers.
    `expected_answered` is Σ Pr[answered]. Converted with `analysis.rdp.eps_from_rdp`;
    the result is marked private.
    """
    votes = _check_votes(votes)
    if votes.ndim != 2:
        raise PateError(f"votes must be a (queries, classes) array, got shape {votes.shape}")
    sigma = _check_sigma(sigma)
    delta = check_delta(delta)
    orders = check_orders(orders)
    mech = _mechanism(threshold, sigma_threshold)
    n = votes.shape[0]
    if mech == "gnmax":
        if answered_mask is not None:
            raise PateError("answered_mask applies to Confident-GNMax only")
        curve = rdp(log_q(votes, sigma), sigma, orders).sum(axis=0)
        eps, order = eps_from_rdp(orders, curve, delta, conversion)
        return EpsResult(float(eps), float(order), delta, orders, curve, mech, conversion, n, private=True)
    thr, gn, w, logp = _confident_curves(votes, sigma, threshold, sigma_threshold, orders)
    if accounting == "joint":
        curve = rdp_confident(thr, gn, w, orders).sum(axis=0)
    elif accounting == "realised":
        mask = _check_mask(answered_mask, n)
        curve = thr.sum(axis=0) + gn[mask].sum(axis=0)
    else:
        raise PateError(f"accounting must be 'joint' or 'realised', got {accounting!r}")
    eps, order = eps_from_rdp(orders, curve, delta, conversion)
    return EpsResult(
        float(eps), float(order), delta, orders, curve, mech, conversion, n, private=True,
        accounting=accounting, expected_answered=float(np.exp(logp).sum()),
    )


def _check_mask(answered_mask, n) -> np.ndarray:
    if answered_mask is None:
        raise PateError("accounting='realised' needs answered_mask (which queries were answered)")
    mask = np.asarray(answered_mask)
    if mask.shape != (n,):
        raise PateError(f"answered_mask has shape {mask.shape}, expected ({n},)")
    return mask.astype(bool)


def _threshold_tables(T, threshold, sigma_threshold, sigma, order, joint):
    """Per max-vote v = 0..T: f-part values and the LS bound h(v), plus the weight W₁(v)."""
    orders = np.array([order])
    v = np.arange(T + 1)
    logp = log_ndtr((v - float(threshold)) / sigma_threshold)
    thr = rdp_threshold(logp, sigma_threshold, orders)[:, 0]
    ls_thr = _neighbour_ls(thr)
    if not joint:
        return thr, ls_thr, None, None
    w = np.maximum.accumulate(answer_weight(logp, sigma_threshold, orders)[:, 0])
    e_max = order / sigma**2  # largest GNMax RDP at this order
    b_max = (order - 1.0) * e_max
    # |g(w', e) − g(w, e)| ≤ c·|w' − w| with c = expm1(b_max)/(λ−1), and ≤ e_max (g is in [0, e]).
    lsw = _neighbour_ls(w)
    with np.errstate(over="ignore", invalid="ignore"):
        h = ls_thr + np.where(lsw > 0, np.minimum(np.expm1(b_max) / (order - 1.0) * lsw, e_max), 0.0)
        w_next = np.append(w[1:], w[-1])  # a neighbour's w is at most w(v + 1)
        w1 = np.exp(np.minimum(0.0, np.log(w_next) + b_max))  # min(1, w·e^{b_max})
    return thr, h, w, w1


def _neighbour_ls(f: np.ndarray) -> np.ndarray:
    """max(|f(v±1) − f(v)|) over the neighbours v ± 1 that exist in 0..T."""
    diff = np.abs(np.diff(f))
    out = np.zeros_like(f)
    out[:-1] = diff
    out[1:] = np.maximum(out[1:], diff)
    return out


def _ball_max_sums(h: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """F(d) = Σ_v counts[v] · max{h(v') : |v' − v| ≤ d, 0 ≤ v' ≤ T}, d = 0..T (exact)."""
    T1 = h.size
    out = np.empty(T1)
    cur = h.copy()
    top = h.max()
    for d in range(T1):
        out[d] = counts @ cur
        if np.all(cur[counts > 0] >= top):
            out[d:] = counts.sum() * top
            break
        nxt = cur.copy()
        nxt[1:] = np.maximum(nxt[1:], cur[:-1])
        nxt[:-1] = np.maximum(nxt[:-1], cur[1:])
        cur = nxt
    return out


def _total_profile(votes, sigma, order, T, *, threshold, sigma_threshold, answered_mask, accounting):
    """F(d) ≥ the local sensitivity at distance d of the whole data-dependent RDP at `order`,
    and f(D) itself (the exact data-dependent RDP at `order`, same function)."""
    ls = _GNMaxLS(sigma, order, votes.shape[-1], T)
    orders = np.array([order])
    gn = rdp(log_q(votes, sigma), sigma, orders)[:, 0]
    F = np.zeros(T + 1)
    if threshold is None:
        for _, A in _gnmax_profiles(votes, sigma, order, T, ls):
            F += A.sum(axis=0)
        return F, float(gn.sum())
    joint = accounting == "joint"
    thr_tab, h, w_tab, w1 = _threshold_tables(T, threshold, sigma_threshold, sigma, order, joint)
    vmax = votes.max(axis=-1)
    F += _ball_max_sums(h, np.bincount(vmax, minlength=T + 1).astype(float))
    if joint:
        f = rdp_confident(thr_tab[vmax], gn, w_tab[vmax], order)
        d = np.arange(T + 1)
        for sl, A in _gnmax_profiles(votes, sigma, order, T, ls):
            weight = w1[np.minimum(vmax[sl, None] + d[None, :], T)]
            F += (weight * A).sum(axis=0)
        return F, float(f.sum())
    mask = _check_mask(answered_mask, votes.shape[0])
    if np.any(mask):
        for _, A in _gnmax_profiles(votes[mask], sigma, order, T, ls):
            F += A.sum(axis=0)
    return F, float(thr_tab[vmax].sum() + gn[mask].sum())


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
    rng=None,
) -> SanitizedEps:
    """Releases the data-dependent RDP at `order` with GNSS and returns the sanitised ε.

    Steps (2018 paper, Section 4.3 and Appendix B): f(D) = data-dependent RDP of all
    queries at order λ (as in `data_dependent_eps`); S(D) = max_d e^{−βd} F(d), where F(d)
    sums the per-query local-sensitivity bounds at distance d (smooth sensitivity of a
    sum ≤ discounted maximum of summed profiles); release f̃ = max(0, f(D) + S(D)·σ_ss·Z),
    Z ~ N(0, 1). The release costs `rdp_gnss(λ, β, σ_ss)` (data-independent), so the
    published ε is the conversion of f̃ + rdp_gnss at λ with `conversion`.

    `order`, `beta` and `sigma_ss` must not be chosen by looking at the votes (the paper's
    code picks all three from private values; that choice is not covered by this
    analysis). `gnss_sigma_for_cost` picks σ_ss from a target cost. Confident-GNMax LS terms
    in the joint accounting: |Δρ| ≤ |Δε_thr| + c·|Δw| + min(1, w'e^{(λ−1)λ/σ²})·|Δε_G| with
    c = expm1((λ−1)λ/σ²)/(λ−1) (derivatives of `rdp_confident` in w and ε_G), each term
    bounded by its own ball maximum. `rng`: a numpy Generator (fresh OS entropy if None).
    """
    votes = _check_votes(votes)
    if votes.ndim != 2:
        raise PateError(f"votes must be a (queries, classes) array, got shape {votes.shape}")
    T = _teachers_of(votes, num_teachers)
    _check_votes(votes, T)
    sigma = _check_sigma(sigma)
    delta = check_delta(delta)
    order = float(check_orders([order])[0])
    mech = _mechanism(threshold, sigma_threshold)
    if mech == "confident-gnmax":
        sigma_threshold = _check_sigma(sigma_threshold, "sigma_threshold")
        if accounting not in ("joint", "realised"):
            raise PateError(f"accounting must be 'joint' or 'realised', got {accounting!r}")
    else:
        accounting = None
        if answered_mask is not None:
            raise PateError("answered_mask applies to Confident-GNMax only")
    cost = float(rdp_gnss([order], beta, sigma_ss)[0])
    F, f = _total_profile(
        votes, sigma, order, T, threshold=threshold, sigma_threshold=sigma_threshold,
        answered_mask=answered_mask, accounting=accounting,
    )
    ss = float(np.max(F * np.exp(-float(beta) * np.arange(T + 1))))
    rng = np.random.default_rng() if rng is None else rng
    released = max(0.0, f + ss * float(sigma_ss) * float(rng.standard_normal()))
    eps, _ = eps_from_rdp([order], [released + cost], delta, conversion)
    eps_exact, _ = eps_from_rdp([order], [f + cost], delta, conversion)
    return SanitizedEps(
        eps=float(eps), rdp_released=released, order=order, beta=float(beta), sigma_ss=float(sigma_ss),
        rdp_gnss=cost, delta=delta, conversion=conversion, mechanism=mech, accounting=accounting,
        rdp_exact=f, eps_exact=float(eps_exact), smooth_sensitivity=ss, noise_std=ss * float(sigma_ss),
    )
