"""PATE 2018 privacy analysis: the per-query RDP bounds of GNMax and Confident-GNMax and
the ε over all queries (data-independent and data-dependent).

The rest of the 2018 analysis lives beside it, one idea per module:
``analysis.bounds.confident`` (the joint Confident-GNMax bound),
``analysis.sanitised.gnmax_sensitivity`` (smooth sensitivity of the data-dependent RDP) and
``analysis.sanitised.gnss`` (the sanitised release and its cost). The notes below cover all four.

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
research/pate_2018), on purpose, each pinned by a test in tests/analysis/test_gnmax.py:

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
from scipy.special import log_ndtr, logsumexp

from analysis.bounds.confident import answer_weight, rdp_confident
from analysis.core.errors import PateError
from analysis.bounds.interactive import check_statistic
from analysis.accounting.rdp import DEFAULT_ORDERS, check_orders, eps_from_rdp
from analysis.core.validation import check_counts, check_delta, check_sigma

__all__ = [
    "log_q",
    "rdp",
    "rdp_data_independent",
    "log_pr_answered",
    "rdp_threshold",
    "rdp_threshold_data_independent",
    "EpsResult",
    "data_independent_eps",
    "data_dependent_eps",
]
_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)


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
    votes = check_counts(votes)
    sigma = check_sigma(sigma)
    m = votes.shape[-1]
    flat = votes.reshape(-1, m)
    logub = np.empty(flat.shape[0])
    for rows in row_blocks(flat, ()):  # a row's bound is its own: the same numbers, a block's memory
        srt = np.sort(flat[rows], axis=-1)
        gaps = srt[:, -1:] - srt[:, :-1]
        logub[rows] = logsumexp(log_ndtr(-gaps / (_SQRT2 * sigma)), axis=-1)
    out = np.minimum(logub, math.log1p(-1.0 / m)).reshape(votes.shape[:-1])
    return out[()] if out.ndim == 0 else out


def theorem6(logq, sigma: float, orders: np.ndarray) -> np.ndarray:
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
    conditions are listed in `theorem6`. Shape log_q.shape + orders.shape.
    """
    sigma = check_sigma(sigma)
    orders = check_orders(orders)
    log_q = np.asarray(log_q, dtype=float)
    if np.any(log_q > 0) or np.any(np.isnan(log_q)):
        raise PateError("log_q must be ≤ 0 (a log-probability)")
    return theorem6(log_q, sigma, orders)


def rdp_data_independent(sigma, orders=DEFAULT_ORDERS):
    """Proposition 8 of the 2018 paper: GNMax is (λ, λ/σ²)-RDP for every λ > 1.

    The histogram has L2 sensitivity √2, so this is the Gaussian mechanism's
    λΔ²/(2σ²) with Δ² = 2 (Mironov 2017, Corollary 3). Shape of `orders`.
    """
    sigma = check_sigma(sigma)
    return check_orders(orders) / (sigma * sigma)  # the same rounding as `theorem6`'s cap


def log_pr_answered(threshold, sigma, votes, offsets=None):
    """log Pr[max_j n_j + N(0, σ²) ≥ threshold] = log Φ((max_j n_j − threshold)/σ).

    The probability that Confident-GNMax's threshold step (2018 paper, Algorithm 1,
    σ = σ₁) answers a query. Exact, in log space; shape votes.shape[:-1]. With the
    student's check ``offsets`` (Interactive-GNMax, `analysis.bounds.interactive`) the statistic
    is max_j (n_j − o_j) instead.
    """
    stat = check_statistic(votes, offsets)
    sigma = check_sigma(sigma)
    threshold = float(threshold)
    return log_ndtr((stat - threshold) / sigma)


def rdp_threshold(log_pr_answered, sigma, orders=DEFAULT_ORDERS):
    """Theorem 6 applied to Confident-GNMax's threshold step (2018 paper, Section 4.1, App. A).

    The step releases one bit, post-processing of max_j n_j + N(0, σ₁²): a Gaussian
    mechanism of sensitivity 1, i.e. RDP λ/(2σ₁²) = λ/(√2σ₁)². Theorem 6 is applied with
    that curve (σ = √2·σ₁ in `rdp`) and q = min(p, 1 − p), p = Pr[answered], the chance
    of the less likely bit. Falls back to λ/(2σ₁²). Shape log_pr_answered.shape + orders.shape.
    """
    sigma = check_sigma(sigma)
    orders = check_orders(orders)
    logp = np.asarray(log_pr_answered, dtype=float)
    if np.any(logp > 0) or np.any(np.isnan(logp)):
        raise PateError("log_pr_answered must be ≤ 0 (a log-probability)")
    logq = np.minimum(logp, _log1mexp(logp))
    return theorem6(logq, _SQRT2 * sigma, orders)


def rdp_threshold_data_independent(sigma, orders=DEFAULT_ORDERS):
    """The threshold step is (λ, λ/(2σ₁²))-RDP: a Gaussian mechanism of sensitivity 1."""
    sigma = check_sigma(sigma, "sigma_threshold")
    return check_orders(orders) / (2.0 * sigma**2)


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


# ------------------------------------------------------------------ high level


def mechanism_name(threshold, sigma_threshold) -> str:
    """'gnmax' or 'confident-gnmax' from the threshold parameters (both or neither given)."""
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
    `analysis.accounting.rdp.eps_from_rdp`.
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


def confident_curves(votes, sigma, threshold, sigma_threshold, orders, offsets=None):
    """Per-query (threshold RDP, GNMax RDP, answer weight, log Pr[answered]) at all orders
    (the threshold on max_j (n_j − o_j) with the check ``offsets`` of Interactive-GNMax)."""
    logp = log_pr_answered(threshold, sigma_threshold, votes, offsets)
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
    offsets=None,
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
    Interactive-GNMax: Confident-GNMax with the student's check ``offsets`` o (public), the
    threshold step on max_j (n_j − o_j) (`analysis.bounds.interactive`: the same range and
    sensitivity, so the same bounds). `expected_answered` is Σ Pr[answered]. Converted with `analysis.accounting.rdp.eps_from_rdp`;
    the result is marked private.
    """
    votes = check_counts(votes)
    if votes.ndim != 2:
        raise PateError(f"votes must be a (queries, classes) array, got shape {votes.shape}")
    sigma = check_sigma(sigma)
    delta = check_delta(delta)
    orders = check_orders(orders)
    mech = mechanism_name(threshold, sigma_threshold)
    n = votes.shape[0]
    if threshold is None:  # GNMax (`mechanism_name` checked: both threshold parameters or neither)
        if answered_mask is not None or offsets is not None:
            raise PateError("answered_mask and check offsets apply to Confident-GNMax only")
        curve = QuerySum()
        for rows in row_blocks(votes, orders):
            curve.add(rdp(log_q(votes[rows], sigma), sigma, orders))
        eps, order = eps_from_rdp(orders, curve.total, delta, conversion)
        return EpsResult(float(eps), float(order), delta, orders, curve.total, mech, conversion, n, private=True)
    if accounting not in ("joint", "realised"):
        raise PateError(f"accounting must be 'joint' or 'realised', got {accounting!r}")
    mask = check_answered_mask(answered_mask, n) if accounting == "realised" else None
    if offsets is not None:
        offsets = np.asarray(offsets)
        if offsets.shape != votes.shape:  # the same check `check_statistic` makes, before the blocks cut it
            raise PateError(f"check offsets must have the votes' shape {votes.shape}, got {offsets.shape}")
    curve, thr_sum, gn_sum = QuerySum(), QuerySum(), QuerySum()
    logp = np.empty(n)
    for rows in row_blocks(votes, orders):
        thr, gn, w, logp[rows] = confident_curves(votes[rows], sigma, threshold, sigma_threshold, orders,
                                                  None if offsets is None else offsets[rows])
        if accounting == "joint":
            curve.add(rdp_confident(thr, gn, w, orders))
        else:
            thr_sum.add(thr)
            gn_sum.add(gn[mask[rows]])
    if accounting == "realised":
        curve.total = thr_sum.total + (gn_sum.total if gn_sum.total is not None else np.zeros(len(orders)))
    eps, order = eps_from_rdp(orders, curve.total, delta, conversion)
    return EpsResult(
        float(eps), float(order), delta, orders, curve.total, mech, conversion, n, private=True,
        accounting=accounting, expected_answered=float(np.exp(logp).sum()),
    )


#: How many floats one block of per-query bounds holds at once (`row_blocks`): every
#: temporary of a block (a dozen arrays of rows × classes or rows × orders) stays a few MiB,
#: whatever the number of queries.
CURVE_BLOCK = 1 << 17


def row_blocks(votes, orders, block: int | None = None):
    """Slices of consecutive rows of ``votes``, in order, each of at most ``block`` floats of
    rows × max(classes, orders) (default `CURVE_BLOCK`): the per-query bounds are functions of their own row, so
    computed block by block they are the same numbers."""
    width = max(int(np.shape(votes)[-1]), int(np.size(orders)), 1)
    rows = max(1, int(CURVE_BLOCK if block is None else block) // width)
    for start in range(0, np.shape(votes)[0], rows):
        yield slice(start, min(start + rows, np.shape(votes)[0]))


class QuerySum:
    """The sum over queries of per-query curves (queries, orders) given block by block, in
    row order: each block is added onto the running total row after row, as numpy sums a
    whole (queries, orders) array along its first axis, so the total is what one sum of all
    the rows would give."""

    def __init__(self):
        self.total = None

    def add(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=float)
        if not rows.shape[0]:
            return
        if self.total is None:
            self.total = rows.sum(axis=0)
        else:
            self.total = np.add.reduce(np.concatenate([self.total[None], rows]), axis=0)


def check_answered_mask(answered_mask, n) -> np.ndarray:
    """The realised accounting's `answered_mask` as a bool (n,) array (required, shape checked)."""
    if answered_mask is None:
        raise PateError("accounting='realised' needs answered_mask (which queries were answered)")
    mask = np.asarray(answered_mask)
    if mask.shape != (n,):
        raise PateError(f"answered_mask has shape {mask.shape}, expected ({n},)")
    return mask.astype(bool)
