"""Distributed discrete Gaussian noise for DP-FedSGD under secure aggregation (`pate fedavg` with
``[fedavg] mechanism = "ddg"``): each of n clients adds N_ℤ(0, σ²) to every coordinate of its
integer message, drawn with the EXACT sampler of `analysis.core.noise` (Canonne, Kamath & Steinke
2020); the secure sum shows the server the total alone. Kairouz, Liu & Steinke, "The Distributed
Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation", ICML 2021,
arXiv:2102.06387.

Setting, neighbouring relation (replace-one), quantisation and sensitivities (Δ₂² = 4S,
Δ₁ = 2 min(S, ⌊√(dS)⌋) integer units), DP-FedSGD's adaptive composition over rounds and the trust
model are those of `analysis.mechanisms.skellam` (its docstring proves them; the arithmetic is
`analysis.mechanisms.quantised_sum`'s). What differs is the noise law and its accounting:

**The shares and their law** (`ddg_share`, `DDGSum.share`). Client p draws X_p with i.i.d.
coordinates N_ℤ(0, σ²), σ² = t(t − 1) for an integer t >= 2, by
`analysis.mechanisms.fine_grained.discrete_gaussian_rational` (CKS 2020, Algorithm 3, every decision
an exact comparison of uniform integers from the release's `analysis.core.noise.NoiseSource`:
128-bit OS entropy, or a research seed) — the law of each share is exactly N_ℤ(0, σ²), and σ² of that
form keeps the sampler's rational constants small (σ up to ~7.4e5). The total Z = Σ_p X_p is not a
discrete Gaussian: its n-fold convolution. No data enters the sampler and the noise is an integer,
so Mironov's (2012) low-bit attack does not apply.

**Its RDP** (`analysis.accounting.ddg_rdp`, the ledger's ``"ddg"`` cost). With a = Δ₂/(√n σ),
b = Δ₁/(√n σ), τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ²k/(k+1)) and d the message length, one round is
(α, min{α a²/2 + τd, α(a² + 2bτ + τ²d)/2, α(a + τ√d)²/2})-RDP for every α > 1 (KLS21, Proposition 14,
τ from Theorem 1; how the statement was verified, and what was not: that module). R rounds compose
adaptively (their curves add, Mironov 2017, Proposition 1), converted once to (ε, δ) by
`analysis.accounting.rdp.eps_from_rdp`. `calibrate` finds the least integer t (σ² = t(t − 1)) whose R
rounds cost at most the target ε at δ: ε falls as σ grows (a, b and τ all fall), so bisection on t.

**Fewer shares.** A total that lacks some clients' shares carries less noise than planned: the
server counts the messages and refuses a total with fewer than n
(`analysis.mechanisms.silos.check_shares_present`: never released, nothing charged). A coalition of c
clients that subtracts its own shares leaves the sum of n − c shares: the theorem at n − c
(`coalition_eps`).

**The modulus that never wraps.** A discrete Gaussian is σ-sub-Gaussian: E e^{sX} <= e^{s²σ²/2}
for X ~ N_ℤ(0, σ²) and every real s (CKS 2020, Corollary 9; proof: completing the square,
E e^{sX} = e^{s²σ²/2} Σ_x e^{−(x − sσ²)²/(2σ²)} / Σ_x e^{−x²/(2σ²)}, and by Poisson summation
Σ_x e^{−(x − c)²/(2σ²)} = √(2πσ²) Σ_k e^{−2π²σ²k²} cos(2πkc) is largest at c = 0, every coefficient
being positive). The n independent shares multiply: E e^{sZ} <= e^{s²nσ²/2}, so by Chernoff
P[Z >= T] <= exp(−T²/(2nσ²)) and P[|Z| >= T] <= 2 exp(−T²/(2nσ²)) (`log_tail`). The union bound
over the d coordinates and R rounds sizes M exactly as for Skellam (`quantised_sum.modulus`): every
total decodes to itself but with probability at most β (stated).

This module uses numpy only (the exact sampler: `analysis.mechanisms.fine_grained`).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from analysis.accounting.ddg_rdp import tau
from analysis.core.errors import PateError
from analysis.mechanisms import composition
from analysis.mechanisms.quantised_sum import (MESSAGE_NOTE, QuantisedSum, check_failure, check_sizes, count, modulus,
                                               noise_reach, positive)

#: The largest t (σ² = t(t − 1)) the exact vectorised sampler takes (its constant 2t(t − 1) <= 2^40).
MAX_SCALE = 741455


def cost(sigma2: float, clients: int, dim: int, l1: float, l2sq: float, rounds: int) -> composition.Cost:
    """The ledger cost of `rounds` releases of an integer sum plus `clients` shares N_ℤ(0, σ²) (``"ddg"``)."""
    return composition.Cost("ddg", {"sigma2": positive("sigma^2", sigma2), "clients": count("clients", clients),
                                    "dim": count("the message length", dim), "l1": l1, "l2sq": l2sq,
                                    "count": count("rounds", rounds)})


def total_eps(sigma2: float, clients: int, dim: int, l1: float, l2sq: float, rounds: int, delta: float) -> float:
    """ε at δ of `rounds` releases, as the ledger composes them (RDP, improved conversion)."""
    return composition.single_eps(cost(sigma2, clients, dim, l1, l2sq, rounds), delta)


def calibrate(eps: float, clients: int, dim: int, l1: float, l2sq: float, rounds: int, delta: float) -> int:
    """The least integer t >= 2 whose σ² = t(t − 1) makes `rounds` releases cost at most `eps` at
    `delta` (bisection: ε falls as t grows)."""
    eps = positive("eps", eps)
    if l2sq <= 0:
        raise PateError("the l2 sensitivity must be positive to calibrate noise")

    def ok(t: int) -> bool:
        return total_eps(t * (t - 1), clients, dim, l1, l2sq, rounds, delta) <= eps

    if ok(2):
        return 2
    hi = 4
    while not ok(hi):
        if hi >= MAX_SCALE:
            raise PateError(f"the distributed discrete Gaussian meeting eps {eps:g} at delta {delta:g} needs "
                            f"sigma above {MAX_SCALE}, past the exact sampler's range; lower fedavg.grid")
        hi = min(2 * hi, MAX_SCALE)
    lo = max(2, hi // 2)  # fails (or 2, which failed above)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def coalition_eps(sigma2: float, clients: int, dim: int, l1: float, l2sq: float, rounds: int, delta: float,
                  colluding: int) -> float:
    """ε at δ that protects the other clients' records from `colluding` clients that subtract their own
    shares: the theorem at n − c shares (module docstring); inf when no honest share is left."""
    n, c = count("clients", clients), count("colluding clients", colluding, least=0)
    if c >= n:
        return math.inf
    return total_eps(sigma2, n - c, dim, l1, l2sq, rounds, delta)


def ddg_share(source, sigma2: int, shape) -> np.ndarray:
    """One client's share: int64 i.i.d. N_ℤ(0, σ²) of `shape`, exactly (CKS 2020, Algorithm 3)."""
    from analysis.mechanisms.fine_grained import discrete_gaussian_rational

    return discrete_gaussian_rational(source, Fraction(int(sigma2)), shape)


def log_tail(threshold: float, sigma2: float, clients: int) -> float:
    """An upper bound on ln P[Z >= T] for Z the sum of `clients` shares N_ℤ(0, σ²): −T²/(2nσ²) (module
    docstring, sub-Gaussian Chernoff); 0 at T <= 0."""
    t = float(threshold)
    return 0.0 if t <= 0 else -t * t / (2.0 * clients * float(sigma2))


def cost_from_json(grid: dict, rounds: int) -> composition.Cost:
    """The ledger cost fedavg.json's ``grid`` record (``"kind": "ddg"``) states."""
    return cost(grid["sigma2_steps"], grid["shares"], grid["message_length"], grid["l1_steps"], grid["l2sq_steps"],
                rounds)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DDGSum(QuantisedSum):
    """Distributed discrete Gaussian noise over an exact secure sum (module docstring): the record
    `pate fedavg` builds for ``mechanism = "ddg"``. Its capability: the clients' integer messages
    (Q_p + X_p) mod M, X_p exact N_ℤ(0, t(t − 1)) per coordinate, summed exactly mod M; the server sees
    only the decoded total."""

    scale_t: int

    @classmethod
    def of(cls, clip: float, dim: int, resolution: int, clients: int, records: int, eps: float, rounds: int,
           delta: float, failure: float = 1e-9) -> "DDGSum":
        """Calibrates σ² = t(t − 1) for `rounds` rounds at `eps`, `delta` and sizes the wrap-free modulus.

        Raises:
          PateError: a modulus above 2^62, int32 sums that could overflow, σ past the exact sampler's range.
        """
        q, n, big_n, r = check_sizes(clip, dim, resolution, clients, records, rounds)
        t = calibrate(eps, n, q.dim, q.l1, q.l2sq, r, delta)
        failure = check_failure(failure)
        m = modulus(q, big_n, noise_reach(lambda x: log_tail(x, t * (t - 1), n), q.dim * r, failure))
        return cls(quantiser=q, clients=n, records=big_n, rounds=r, modulus=m, failure=failure, scale_t=t)

    @property
    def sigma2(self) -> int:
        """Each share's σ² = t(t − 1), integer units²."""
        return self.scale_t * (self.scale_t - 1)

    def cost(self, rounds: int | None = None) -> composition.Cost:
        q = self.quantiser
        return cost(self.sigma2, self.clients, q.dim, q.l1, q.l2sq, self.rounds if rounds is None else rounds)

    def alone_cost(self, rounds: int | None = None) -> composition.Cost:
        """What `rounds` of ONE client's messages cost its records seen alone, with no secure sum and every
        other client colluding: its own share N_ℤ(0, σ²) is the only noise on them, so the theorem at one
        share (τ = 0: the discrete Gaussian's αΔ₂²/(2σ²), CKS 2020, Proposition 5; `coalition_eps` with
        n − 1 colluding); the replace-one sensitivity of the client's sum is the central one. A message is
        (Q_p + X_p) mod M, post-processing of Q_p + X_p; the rounds compose adaptively."""
        q = self.quantiser
        return cost(self.sigma2, 1, q.dim, q.l1, q.l2sq, self.rounds if rounds is None else rounds)

    def share(self, source, shape) -> np.ndarray:
        """One client's share (`ddg_share`)."""
        return ddg_share(source, self.sigma2, shape)

    @property
    def noise_std(self) -> float:
        """√(nσ²) / s: an upper bound on the std of the total's noise per coordinate, in gradient-sum units
        (a σ-sub-Gaussian share has variance at most σ², CKS 2020, Corollary 9; at σ >> 1 it is σ² to
        double precision)."""
        return math.sqrt(self.clients * self.sigma2) / self.quantiser.scale

    @property
    def accounting(self) -> str:
        return ("composition over rounds of ONE central release per round (the server sees only the secure sum of "
                "the n discrete Gaussian shares): R x the distributed discrete Gaussian's RDP (Kairouz, Liu & "
                "Steinke 2021, Proposition 14, tau from Theorem 1, l1 and l2 sensitivity of the quantised sum), "
                "converted once")

    @property
    def noise_text(self) -> str:
        n = self.clients
        return (f"distributed discrete Gaussian noise: {n} shares, each exact N_Z(0, {self.sigma2}) per coordinate "
                "(Canonne, Kamath & Steinke 2020, Algorithm 3: exact sampler); secure sum: the in-process exact "
                "modular sum (the arithmetic Flower's SecAgg+ carries exactly, pate/programs/secure_sum.py)")

    def describe(self) -> str:
        n = self.clients
        return (f"distributed discrete Gaussian noise, {n} shares of exact N_Z(0, sigma^2), sigma^2 {self.sigma2} "
                f"(the sum's std <= {math.sqrt(n * self.sigma2):.4g} integer steps, tau "
                f"{tau(self.sigma2, n):.3g}); {self._quantisation_text()}")

    def to_json(self, length: int) -> dict:
        return {"kind": "ddg", **self._json(length), "sigma2_steps": self.sigma2,
                "share": f"exact discrete Gaussian N_Z(0, sigma2_steps) per coordinate",
                "note": MESSAGE_NOTE + "the server sees the decoded sum of the n shares alone (Kairouz, Liu & "
                        "Steinke 2021) and steps by -lr x sum / (scale x records)"}
