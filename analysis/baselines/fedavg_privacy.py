"""Sensitivity and accounting of federated learning with output perturbation
(`pate fedavg`): what one client sends per round, how far one replaced example can move
it, and what R rounds cost together.

Setting. The private train split is cut into P disjoint clients of I points each (equal
sizes, fixed by a public partition). The model is linear (softmax regression on the
features x̃ = [x; 1]); every per-example gradient g_i is clipped to norm C in the norm of
the mechanism (``l1`` for Laplace, ``l2`` for Gaussian): c_i = g_i min(1, C / ‖g_i‖).
Local training is plain full-batch gradient descent, no momentum or Adam (Adam moves
every coordinate by about the learning rate whatever C is, so clipping would bound
nothing). Each round, every value a client sends gets independent noise calibrated to
the sensitivity below. Neighbouring relation: **replace-one** (one of client p's I points
replaced by any other point of the domain), the relation of PATE's bounds and of the
ledger.

Sensitivity of FedAvg (`fedavg_sensitivity`). Client p receives the public global model
w and sends w_K after K local steps w_{k+1} = w_k − (η/I) Σ_i c_i(w_k). Take neighbours
D, D' of client p differing in example j, trajectories w_k, w'_k from the same w_0 = w,
and d_k = ‖w_k − w'_k‖. Then

    d_{k+1} ≤ d_k + (η/I) [ Σ_{i≠j} ‖c_i(w_k) − c_i(w'_k)‖ + ‖c_j(w_k) − c'_j(w'_k)‖ ].

The replaced example's term is at most 2C (two vectors of norm ≤ C). The other I − 1
examples are the same on both sides, but they are evaluated at *different* iterates once
k ≥ 1, so their clipped gradients differ too: by at most 2C each (any loss), and by at
most 2 L d_k when the per-example gradient is L-Lipschitz in the norm of the mechanism
(the radial retraction onto a norm ball, x ↦ x min(1, C/‖x‖), is 2-Lipschitz in any norm
and 1-Lipschitz in l2, where it is a projection). So

    d_1 = 2Cη/I,   d_{k+1} ≤ d_k + η [ (I−1)/I · min(2C, 2 L_clip L d_k) + 2C/I ],

with L_clip = 2 (l1) or 1 (l2). For one local step, Δ = 2Cη/I exactly (attained: two
points whose clipped gradients have disjoint supports). For K > 1 the bound grows with
the iterate gap: with no Lipschitz constant (a general, non-convex loss) every later step
adds 2Cη, I times the first step's share, so **Δ ≈ 2Cη(K − 1 + 1/I), not 2CηK/I**: the
per-round sensitivity that counts K local steps as K independent 2Cη/I moves assumes the
other examples' gradients do not change, and they do. For the linear softmax model,
L is a property of the *input domain*, never of the data: the gradient (p − e_y) x̃ᵀ has
‖(p − p') x̃ᵀ‖₁ = ‖p − p'‖₁‖x̃‖₁ and ‖p − p'‖₁ ≤ range(u − u') ≤ ‖x̃‖∞ ‖Θ − Θ'‖₁ for
logits u = Θx̃ (the softmax Jacobian maps v to p ⊙ (v − p·v), of l1 norm ≤ range(v)), so
L₁ = max ‖x̃‖₁‖x̃‖∞; in l2, ‖p − p'‖₂ ≤ ½‖u − u'‖₂ and L₂ = max ‖x̃‖₂² / 2 (`linear_lipschitz`).
The step clamps its inputs to the domain, so the bound holds for every input.

Sensitivity of inexact ADMM (`iadmm_sensitivity`). Client p sends
z_p = w + (λ_p − ḡ_p(w))/ρ with ḡ_p(w) = (1/I) Σ_i c_i(w) (one linearised step), the
server sets w ← mean_p(z̃_p − λ_p/ρ), and the dual is updated from *released* values only:
λ_p ← λ_p + ρ(w_new − z̃_p) with the noisy z̃_p. λ_p is therefore a function of the
transcript (the same on both neighbours, and the server can compute it: the client need
not send it, so nothing about it is left unnoised), and with λ_p and w fixed z_p moves by
(1/ρ)·2C/I: Δ = 2C/(ρI). (APPFL's IIADMM updates the dual from the noiseless clipped
gradient, so z_{t+1} = w + (g_t − g_{t+1})/ρ holds two data-dependent gradients and
Δ = 4C/(ρI) with its per-round noise calibrated to half of that; ICEADMM sends the dual
unnoised.)

Noise. Laplace of scale b = Δ₁/ε̄ on every coordinate of a vector of l1 sensitivity Δ₁ is
ε̄-DP (Dwork, McSherry, Nissim, Smith 2006; Dwork & Roth 2014, Theorem 3.6); Gaussian of
std σ on a vector of l2 sensitivity Δ₂ is μ-GDP with μ = Δ₂/σ (Dong, Roth, Su 2022,
Theorem 2.7).

Messages on a grid (`GridNoise`, Laplace; the default, ``[fedavg] grid = K`` > 0). Float64
Laplace noise is not published exactly on a grid: which float64 values can occur depends on
the unnoised value, and the low bits betray it (Mironov, "On significance of the least
significant bits for differential privacy", CCS 2012). So a message m ∈ ℝ^d (d = its
length, public) is released as γ·(round(m/γ) + Y), Y ∈ ℤ^d of independent discrete Laplace
coordinates, P[Y_i = y] ∝ exp(−|y|/t), drawn exactly (`analysis.core.noise.discrete_laplace_array`,
Canonne, Kamath, Steinke 2020): what is published is an integer vector (times a public
constant), and any float64 rendering of it is post-processing. The public grid step is
γ = 2^⌊log₂(Δ₁/(K d))⌋, the largest power of two not above Δ₁/(K d): m/γ is then exact in
float64 (a power-of-two scaling of the float32 message), and Δ₁/γ ∈ [K d, 2 K d). Before
rounding, m/γ is clamped to ±2^52 (a 1-Lipschitz map per coordinate, so no sensitivity is
added; it keeps every value an exact float64 integer, far beyond any value training makes).

Sensitivity in grid units, rounding included (`grid_sensitivity`). For reals a, b and any
rounding with |round(x) − x| ≤ ½ (np.rint: half to even), |round(a) − round(b)| ≤
|a − b| + 1, and it is an integer, so it is ≤ ⌊|a − b|⌋ + 1. Summing over the d coordinates
with Σ⌊x_i⌋ ≤ ⌊Σ x_i⌋: for neighbouring messages m, m′ with ‖m − m′‖₁ ≤ Δ₁,

    ‖round(m/γ) − round(m′/γ)‖₁ ≤ ⌊Δ₁/γ⌋ + d = Δ_grid.

The + d is real, not slack: one replaced example moves every coordinate a little, and each
small move can cross a rounding boundary (the brute-force test finds more than ⌊Δ₁/γ⌋); it
costs at most a factor 1 + 1/K of noise. The discrete Laplace on ℤ^d is then ε̄-DP with
ε̄ = Δ_grid/t: for every integer vector k and shift v with ‖v‖₁ ≤ Δ_grid,
p(k)/p(k − v) = exp(Σ(|k_i − v_i| − |k_i|)/t) ≤ exp(‖v‖₁/t) by the triangle inequality
(the geometric mechanism of Ghosh, Roughgarden, Sundararajan 2009, coordinate-wise; the
same argument as the Laplace mechanism's, Dwork & Roth 2014, Theorem 3.6). Calibration
(`grid_noise`): the per-round ε̄ calibrated for the continuous mechanism below gives the
least integer t with Δ_grid/t ≤ ε̄, and the round is charged at ε̄ = Δ_grid/t (no more
than calibrated, so the total stays within `eps`). A round is accounted as a pure ε̄-DP
mechanism, like the continuous Laplace: dp-accounting's
`from_discrete_laplace_mechanism(parameter=1/t, sensitivity=Δ_grid)` is the privacy loss
of a *scalar* discrete Laplace; for a d-dimensional message whose shift is spread over the
coordinates it would need a dominance argument this module does not make, so it is used
only as a check (its pure ε at δ = 0 is Δ_grid/t; tests/baselines/test_fedavg_grid.py).

Gaussian messages on a grid (`GaussianGrid`, the same ``[fedavg] grid = K`` > 0). The same
release, γ·(round(m/γ) + Y), with Y ∈ ℤ^d of independent exact discrete Gaussians N_ℤ(0, σ²),
P[Y_i = y] ∝ exp(−y²/(2σ²)) (Canonne, Kamath & Steinke, "The discrete Gaussian for
differential privacy", NeurIPS 2020, Algorithm 3; the vectorised
`analysis.mechanisms.fine_grained.discrete_gaussian_rational`, OS entropy). The step is
γ = 2^⌊log₂(Δ₂/(K √d))⌋ (`gaussian_grid_step`), so D = Δ₂/γ ∈ [K√d, 2K√d) up to the rounding
of √d, and m/γ is exact as above (same clamp to ±2^52).

*Sensitivity in grid units, rounding included (`gaussian_grid_sensitivity`).* Let x = (m − m′)/γ
for neighbours m, m′ (‖x‖₂ ≤ D = Δ₂/γ) and v = round(m/γ) − round(m′/γ) ∈ ℤ^d. Per coordinate,
as above, |v_i| ≤ ⌊|x_i|⌋ + 1. Put k_i = ⌊|x_i|⌋, non-negative integers with Σk_i² ≤ Σx_i² ≤ D²,
hence Σk_i² ≤ M = ⌊D²⌋ (an integer); Σk_i ≤ Σk_i² ≤ M (k ≤ k² on integers) and
Σk_i ≤ √(d Σk_i²) ≤ √(dM) (Cauchy–Schwarz), so Σk_i ≤ min(M, ⌊√(dM)⌋). Then

    ‖v‖₂² ≤ Σ(k_i + 1)² = Σk_i² + 2Σk_i + d ≤ M + 2 min(M, ⌊√(dM)⌋) + d = S₂,

an integer bound on the squared l2 shift (≈ (D + √d)²: the rounding can add √d, a factor
1 + √d/D ≤ 1 + 1/K of noise). The + d is real: at a coarse grid (D < 1, M = 0) every
coordinate can cross a rounding boundary, ‖v‖₂² = d (the brute-force test finds it).

*Privacy of one round.* For integer a, b, D_α(N_ℤ(a, σ²) ‖ N_ℤ(b, σ²)) ≤ α(a − b)²/(2σ²) for every
α > 1 (Canonne, Kamath & Steinke 2020, Proposition 5: complete the square; the two normalisers
are equal at integer shifts and the shifted theta sum is at most the unshifted one), and Rényi
divergences of independent coordinates add (van Erven & Harremoës 2014, Theorem 28), so a
round is (α, α S₂/(2σ²))-RDP for all α, i.e. (μ̄²/2)-zCDP with μ̄² = S₂/σ² (Bun & Steinke 2016,
Definition 1.1), under replace-one. σ² = t(t − 1) for an integer t (the variances the
vectorised sampler takes up to σ ≈ 7.4e5, `MAX_GAUSSIAN_T`; `analysis.mechanisms.fine_grained`):
the least t with S₂/(t(t − 1)) ≤ μ̄² for the calibrated μ̄, charged at μ̄² = S₂/(t(t − 1)) rounded
up. R rounds compose adaptively in RDP (Mironov 2017, Proposition 1): the ledger's
``"discrete-gaussian"`` cost with μ² = R μ̄² (`analysis.mechanisms.composition`: RDP only, no
PLD: the continuous Gaussian's exact profile is not proven for the discrete one), and the
per-round μ̄ is calibrated on that cost (`calibrate_per_round` with ``exact=True``): at ε 3,
δ 1e-5 over 100 rounds μ̄ is 7 % below the float64 mechanism's (the RDP conversion, not the
grid, which adds at most 1/K).

Composition. A replaced example of client p enters only client p's messages; the other
clients' messages in round t depend on it only through the released global models, i.e.
by post-processing. Round t is therefore (given the transcript so far) an ε̄-DP (or
μ-GDP) mechanism of the data, and R rounds compose adaptively: R × ε̄-DP is the ledger's
``pure`` cost (exact composition through randomized response, RDP and PLD; Kairouz, Oh,
Viswanath 2015), R × μ-GDP is √R μ-GDP (Dong, Roth, Su 2022, Corollary 3.3), the
``gaussian`` cost (float64 noise, ``grid = 0``); R discrete-Gaussian rounds on the grid add
their RDP curves, the ``discrete-gaussian`` cost above. Clients compose in parallel (one example is in one client). The
per-round ε̄ is what APPFL reports as "the" ε; it is printed beside the total, which is
what the released model costs.

What the averaged model carries (`averaged_model_eps`; Gaussian, equal clients, one local
step). The server's model depends on the P noisy messages only through their mean. FedAvg
with K = 1: mean_p w_1^p = w − (η/N) Σ_i c_i(w), N = P I, is the central full-batch
gradient step on all N points. IADMM as above: the duals sum to zero after every round
(Σ_p λ_p ← Σ_p λ_p + ρ(P w_new − Σ_p z̃_p) = 0 by the server's rule), so w_new = mean_p z̃_p =
w − (1/ρ) mean_p ḡ_p(w) + mean noise: **FedAvg at η = 1/ρ, with the same Δ = 2C/(ρI) and the
same noise** (the global models agree draw for draw; the test pins it). The mean of P
independent N(0, σ²) message noises is N(0, σ²/P), σ = Δ/μ̄, Δ = 2Cη/I; a central release of
the full-batch step, of sensitivity 2Cη/N, with that noise is (μ̄/√P)-GDP. So the sequence of
global models is exactly, in law, central noisy full-batch gradient descent at μ/√P in
total: its accuracy is that of central DP-GD at the ε of μ/√P (10 silos charged ε 3 at
δ 1e-5: ε 0.835), while the data set is charged μ, because the server (and whoever reads
the transcript) sees every client's own message. The √P is what cross-silo learning with
noise on each message gives up against one central DP-SGD run at the same ε; only secure
aggregation (each client adding σ/√P, the server seeing the sum alone) would recover it,
under a trust assumption this module does not make. K > 1 local steps break the identity
(each client's trajectory is nonlinear in its data), and the mean of P Laplace vectors is
not Laplace: for those the function returns None. On the grid (the default) the identity
holds up to the grid: the mean of P discrete Gaussians of σ ≫ 1 steps, plus rounding of at
most half a step per coordinate, stands for the continuous noise; the figure is a comparison,
never a charge.

This module uses numpy, scipy and dp-accounting only.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from analysis.mechanisms import composition
from analysis.core.errors import PateError

MECHANISMS = ("laplace", "gaussian")
ALGORITHMS = ("fedavg", "iadmm")
#: The norm each mechanism clips and measures sensitivity in (``skellam``, ``ddg``: the distributed noise
#: of `analysis.mechanisms.skellam` and `analysis.mechanisms.ddg`, clipped in l2 like the Gaussian).
NORMS = {"laplace": "l1", "gaussian": "l2", "skellam": "l2", "ddg": "l2"}
_CLIP_LIPSCHITZ = {"l1": 2.0, "l2": 1.0}


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise PateError(f"{name} must be a positive number, got {value}")
    return value


def linear_lipschitz(max_l1: float, max_linf: float, max_l2: float, norm: str) -> float:
    """L of the softmax regression's per-example gradient x̃ ↦ (p − e_y) x̃ᵀ in `norm`
    (module docstring), from bounds on the norms of x̃ over the input domain."""
    if norm == "l1":
        return float(max_l1) * float(max_linf)
    if norm == "l2":
        return float(max_l2) ** 2 / 2.0
    raise PateError(f"norm must be l1 or l2, got {norm!r}")


def fedavg_sensitivity(clip: float, learning_rate: float, client_size: int, local_steps: int = 1,
                       *, norm: str = "l1", lipschitz: float | None = None) -> float:
    """Sensitivity (in `norm`) of the model one client sends after `local_steps` full-batch
    steps of clipped gradient descent, under replace-one of one of its `client_size`
    points (module docstring: the recursion, valid for any loss with ``lipschitz=None``,
    for an L-Lipschitz per-example gradient otherwise)."""
    c, eta = _positive("clip_norm", clip), _positive("learning_rate", learning_rate)
    n, k = int(client_size), int(local_steps)
    if n < 1 or k < 1:
        raise PateError(f"client size and local steps must be >= 1, got {n} and {k}")
    if norm not in _CLIP_LIPSCHITZ:
        raise PateError(f"norm must be l1 or l2, got {norm!r}")
    d = 2.0 * c * eta / n
    for _ in range(k - 1):
        others = 2.0 * c if lipschitz is None else min(2.0 * c, 2.0 * _CLIP_LIPSCHITZ[norm] * lipschitz * d)
        d = d + eta * ((n - 1) / n * others + 2.0 * c / n)
    return d


def iadmm_sensitivity(clip: float, rho: float, client_size: int) -> float:
    """Sensitivity of z_p = w + (λ_p − ḡ_p(w))/ρ with λ_p a function of the transcript:
    2C/(ρI) (module docstring)."""
    n = int(client_size)
    if n < 1:
        raise PateError(f"client size must be >= 1, got {n}")
    return 2.0 * _positive("clip_norm", clip) / (_positive("rho", rho) * n)


def round_cost(mechanism: str, per_round: float, rounds: int, exact: bool = False) -> composition.Cost:
    """The ledger cost of `rounds` rounds: Laplace at per-round ε̄ = `per_round` (``pure``, on
    the grid or not), or Gaussian at per-round μ = `per_round`: float64 noise ``gaussian``
    (μ² R, exact GDP), or with `exact` the grid's discrete Gaussian, ``discrete-gaussian``
    (μ² R rounded up, RDP; module docstring)."""
    if mechanism == "laplace":
        return composition.Cost("pure", {"eps0": per_round, "count": int(rounds)})
    if mechanism == "gaussian" and exact:
        return composition.Cost("discrete-gaussian", {"mu2": _float_up(int(rounds) * Fraction(float(per_round)) ** 2)})
    if mechanism == "gaussian":
        return composition.Cost("gaussian", {"mu2": int(rounds) * float(per_round) ** 2})
    raise PateError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")


def total_eps(mechanism: str, per_round: float, rounds: int, delta: float, exact: bool = False) -> float:
    """ε at δ of `rounds` rounds (the smaller of RDP and PLD, as the ledger composes)."""
    return composition.single_eps(round_cost(mechanism, per_round, rounds, exact), delta)


def averaged_model_eps(mechanism: str, algorithm: str, local_steps: int, per_round: float, rounds: int,
                       clients: int, delta: float) -> float | None:
    """ε at δ of central noisy full-batch gradient descent whose global models have the law of
    `clients` equal clients' averaged Gaussian messages (module docstring, "What the averaged
    model carries"): per-round μ̄/√P over `rounds` rounds. None where no such identity holds
    (Laplace, or FedAvg with more than one local step)."""
    if mechanism != "gaussian" or (algorithm == "fedavg" and int(local_steps) != 1):
        return None
    if int(clients) < 1:
        raise PateError(f"clients must be >= 1, got {clients}")
    return total_eps(mechanism, _positive("per-round mu", per_round) / math.sqrt(int(clients)), rounds, delta)


def calibrate_per_round(mechanism: str, eps: float, rounds: int, delta: float, exact: bool = False) -> float:
    """The largest per-round ε̄ (Laplace) or μ (Gaussian), within a factor 1 + 1e-6, whose
    `rounds`-fold composition (`round_cost`, `exact`: the grid's discrete Gaussian) costs at
    most `eps` at `delta`."""
    from analysis.accounting.pld import calibrate, gaussian_mu_for

    eps = _positive("eps", eps)
    rounds = int(rounds)
    if rounds < 1:
        raise PateError(f"rounds must be >= 1, got {rounds}")
    if mechanism == "gaussian" and not exact:  # √R μ-GDP exactly (Balle & Wang 2018, Thm 8), then the ledger's
        mu = gaussian_mu_for(eps, delta) / math.sqrt(rounds)
        while total_eps(mechanism, mu, rounds, delta) > eps:
            mu *= 0.999
        return mu
    forward = lambda x: total_eps(mechanism, x, rounds, delta, exact)  # noqa: E731
    lo = eps / rounds / 4.0  # basic composition is feasible: R ε̄ ≤ eps (μ: below ε/R too)
    while forward(lo) > eps:
        lo /= 2.0
    hi = 2.0 * eps
    while forward(hi) <= eps:
        hi *= 2.0
    return calibrate(forward, lo, hi, eps)


def noise_scale(mechanism: str, sensitivity: float, per_round: float) -> float:
    """Laplace scale b = Δ₁/ε̄, or Gaussian std σ = Δ₂/μ."""
    return _positive("sensitivity", sensitivity) / _positive("per-round eps / mu", per_round)


@dataclasses.dataclass(frozen=True)
class GridNoise:
    """Grid release of one message (module docstring, "Messages on a grid"): step γ, the
    sensitivity Δ_grid in grid units (rounding included), the integer discrete Laplace
    scale t and the per-round ε̄ = Δ_grid/t it is charged at."""

    resolution: int
    step: float
    sensitivity: int
    scale: int
    per_round: float

    @property
    def noise_scale(self) -> float:
        """t·γ: the scale of the noise in the message's units."""
        return self.scale * self.step

    def release(self, messages, source) -> np.ndarray:
        """γ·(round(m/γ) + Y), Y exact discrete Laplace (`grid_release`)."""
        return grid_release(messages, source, self)

    def cost(self, rounds: int) -> composition.Cost:
        """R rounds of this pure ε̄-DP release (``pure``)."""
        return round_cost("laplace", self.per_round, rounds)

    def describe(self) -> str:
        return (f"messages on a grid of {self.step:.4g} (K = {self.resolution}): sensitivity {self.sensitivity} grid "
                f"steps (rounding included), exact discrete Laplace of scale {self.scale} steps")

    def to_json(self, length: int) -> dict:
        return {"resolution": self.resolution, "step": self.step, "sensitivity_steps": self.sensitivity,
                "scale_steps": self.scale, "message_length": int(length),
                "note": "released messages are step x (round(m/step) + exact discrete Laplace of scale_steps); "
                        "sensitivity_steps = floor(sensitivity/step) + message_length (rounding included)"}


@dataclasses.dataclass(frozen=True)
class GaussianGrid:
    """Grid release of one Gaussian message (module docstring, "Gaussian messages on a grid"):
    step γ, the integer bound S₂ on the squared l2 shift in grid units (rounding included),
    the integer t of the discrete Gaussian's variance σ² = t(t − 1) (grid units²), and the
    per-round μ̄ = √(S₂/σ²) (rounded up) it is charged at."""

    resolution: int
    step: float
    sensitivity2: int
    scale: int
    per_round: float

    @property
    def sigma2(self) -> int:
        """σ² = t(t − 1) in grid units²."""
        return self.scale * (self.scale - 1)

    @property
    def noise_scale(self) -> float:
        """σ·γ: the std of the noise in the message's units (the discrete Gaussian's parameter)."""
        return math.sqrt(self.sigma2) * self.step

    def release(self, messages, source) -> np.ndarray:
        """γ·(round(m/γ) + Y), Y i.i.d. exact discrete Gaussians N_ℤ(0, t(t − 1)) (CKS 2020,
        Algorithm 3: `analysis.mechanisms.fine_grained.discrete_gaussian_rational`); float64."""
        from analysis.mechanisms.fine_grained import discrete_gaussian_rational

        units = quantise(messages, self.step)
        return (units + discrete_gaussian_rational(source, Fraction(self.sigma2), units.shape)).astype(
            np.float64) * self.step

    def cost(self, rounds: int) -> composition.Cost:
        """R rounds of this (μ̄²/2)-zCDP release (``discrete-gaussian``, μ² = R μ̄² rounded up)."""
        return round_cost("gaussian", self.per_round, rounds, exact=True)

    def describe(self) -> str:
        return (f"messages on a grid of {self.step:.4g} (K = {self.resolution}): squared l2 sensitivity "
                f"{self.sensitivity2} grid steps^2 (rounding included), exact discrete Gaussian of sigma "
                f"{math.sqrt(self.sigma2):.6g} steps")

    def to_json(self, length: int) -> dict:
        return {"resolution": self.resolution, "step": self.step, "sensitivity2_steps": self.sensitivity2,
                "sigma2_steps": self.sigma2, "message_length": int(length),
                "note": "released messages are step x (round(m/step) + exact discrete Gaussian of variance "
                        "sigma2_steps); sensitivity2_steps = M + 2 min(M, isqrt(message_length M)) + "
                        "message_length with M = floor((sensitivity/step)^2) bounds the squared l2 shift "
                        "(rounding included); a round is (mu^2/2)-zCDP, mu^2 = sensitivity2_steps/sigma2_steps"}


#: Quantised messages are clamped to ±2^52 grid steps (module docstring).
GRID_CLAMP = 2.0**52


def grid_step(sensitivity: float, length: int, resolution: int) -> float:
    """γ = 2^⌊log₂(Δ₁/(K d))⌋, the largest power of two <= Δ₁/(K d) (module docstring)."""
    target = _positive("sensitivity", sensitivity) / (int(resolution) * int(length))
    mantissa, exponent = math.frexp(target)  # target = mantissa · 2^exponent, mantissa in [0.5, 1)
    return math.ldexp(1.0, exponent - 1)


def grid_sensitivity(sensitivity: float, step: float, length: int) -> int:
    """Δ_grid = ⌊Δ₁/γ⌋ + d, the l1 sensitivity of round(m/γ) for a message of length d and
    l1 sensitivity Δ₁ (module docstring: rounding adds at most 1 per coordinate)."""
    return int(math.floor(_positive("sensitivity", sensitivity) / _positive("grid step", step))) + int(length)


def grid_noise(sensitivity: float, length: int, resolution: int, per_round: float) -> GridNoise:
    """The grid release of a message of `length` coordinates and l1 `sensitivity` at a
    per-round ε̄ of at most `per_round`: γ, Δ_grid, the least integer t with Δ_grid/t <= ε̄."""
    from analysis.core.noise import MAX_GRID_SCALE

    k, d = int(resolution), int(length)
    if k < 1 or d < 1:
        raise PateError(f"the grid needs a resolution and a message length >= 1, got {k} and {d}")
    step = grid_step(sensitivity, d, k)
    units = grid_sensitivity(sensitivity, step, d)
    eps = _positive("per-round eps", per_round)
    t = max(1, math.ceil(units / eps))
    while units / t > eps:  # float division: make sure the charge is within the calibration
        t += 1
    if t > MAX_GRID_SCALE:
        raise PateError(f"the grid noise scale {t} exceeds 2**40 grid steps; lower fedavg.grid (now {k})")
    return GridNoise(k, step, units, t, units / t)


#: The largest t of σ² = t(t − 1) the vectorised discrete Gaussian takes: 2t(t − 1) <= 2^40
#: (`analysis.mechanisms.fine_grained.discrete_gaussian_rational`).
MAX_GAUSSIAN_T = (1 + math.isqrt(1 + 2**41)) // 2


def gaussian_grid_step(sensitivity: float, length: int, resolution: int) -> float:
    """γ = 2^⌊log₂(Δ₂/(K √d))⌋, the largest power of two <= Δ₂/(K √d) (module docstring)."""
    target = _positive("sensitivity", sensitivity) / (int(resolution) * math.sqrt(int(length)))
    mantissa, exponent = math.frexp(target)
    return math.ldexp(1.0, exponent - 1)


def gaussian_grid_sensitivity(sensitivity: float, step: float, length: int) -> int:
    """S₂ = M + 2 min(M, ⌊√(d M)⌋) + d with M = ⌊(Δ₂/γ)²⌋: a bound on ‖round(m/γ) − round(m′/γ)‖₂²
    for a message of length d and l2 sensitivity Δ₂ (module docstring; exact integer arithmetic)."""
    d = int(length)
    if d < 1:
        raise PateError(f"the message length must be >= 1, got {d}")
    ratio = Fraction(_positive("sensitivity", sensitivity)) / Fraction(_positive("grid step", step))
    m = math.floor(ratio * ratio)
    return m + 2 * min(m, math.isqrt(d * m)) + d


def _gaussian_grid_at(sensitivity: float, d: int, k: int, mu: float) -> GaussianGrid:
    step = gaussian_grid_step(sensitivity, d, k)
    units = gaussian_grid_sensitivity(sensitivity, step, d)
    target = Fraction(mu) ** 2
    t = max(2, math.ceil((1 + math.sqrt(1 + 4 * units / mu**2)) / 2))
    while t > 2 and Fraction(units, (t - 1) * (t - 2)) <= target:  # float start: the least such t
        t -= 1
    while Fraction(units, t * (t - 1)) > target:
        t += 1
    charged = _sqrt_up(Fraction(units, t * (t - 1)))
    while charged > mu:  # a float rounded up past the calibration: one more step of variance
        t += 1
        charged = _sqrt_up(Fraction(units, t * (t - 1)))
    return GaussianGrid(k, step, units, t, charged)


def gaussian_grid_noise(sensitivity: float, length: int, resolution: int, per_round: float) -> GaussianGrid:
    """The grid release of a Gaussian message of `length` coordinates and l2 `sensitivity` at a
    per-round μ̄ of at most `per_round`: γ, S₂, the least t with S₂/(t(t − 1)) <= μ̄².

    Raises:
      PateError: the variance is beyond the exact sampler (t > `MAX_GAUSSIAN_T`); the message
        names the finest ``fedavg.grid`` that fits, if any.
    """
    k, d = int(resolution), int(length)
    if k < 1 or d < 1:
        raise PateError(f"the grid needs a resolution and a message length >= 1, got {k} and {d}")
    mu = _positive("per-round mu", per_round)
    grid = _gaussian_grid_at(sensitivity, d, k, mu)
    if grid.scale <= MAX_GAUSSIAN_T:
        return grid
    fits = next((j for j in range(k - 1, 0, -1) if _gaussian_grid_at(sensitivity, d, j, mu).scale <= MAX_GAUSSIAN_T),
                None)
    what = f"lower fedavg.grid to {fits}" if fits else "raise fedavg.eps or lower fedavg.rounds"
    raise PateError(f"the discrete Gaussian's sigma on the grid of fedavg.grid = {k} ({math.sqrt(grid.sigma2):.4g} "
                    f"steps) is beyond the exact sampler (about 7.4e5 steps); {what}")


#: The grid release of each mechanism (`GridNoise`, `GaussianGrid`).
GRIDS = {"laplace": grid_noise, "gaussian": gaussian_grid_noise}


def _sqrt_up(value: Fraction) -> float:
    """The least float whose square is >= a non-negative rational."""
    x = math.sqrt(float(value))
    while Fraction(x) ** 2 < value:
        x = math.nextafter(x, math.inf)
    return x


def _float_up(value: Fraction) -> float:
    """The least float >= a rational (a privacy parameter never rounds down)."""
    x = float(value)
    return math.nextafter(x, math.inf) if Fraction(x) < value else x


def quantise(messages, step: float) -> np.ndarray:
    """round(m/γ) as int64, m/γ clamped to ±2^52 first (exact: γ is a power of two)."""
    scaled = np.asarray(messages, np.float64) / float(step)
    return np.rint(np.clip(scaled, -GRID_CLAMP, GRID_CLAMP)).astype(np.int64)


def grid_release(messages, source, grid: GridNoise) -> np.ndarray:
    """γ·(round(m/γ) + Y) with Y exact discrete Laplace of integer scale t on every
    coordinate (`analysis.core.noise.discrete_laplace_array`, bits from `source`); float64."""
    from analysis.core.noise import discrete_laplace_array

    units = quantise(messages, grid.step)
    return (units + discrete_laplace_array(source, grid.scale, units.shape)).astype(np.float64) * grid.step
