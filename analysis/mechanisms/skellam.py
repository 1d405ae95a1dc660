"""Distributed Skellam noise for DP-FedSGD under secure aggregation: n clients each add a share,
the secure sum shows the server only the total, and the total carries the noise of ONE central
release (`pate fedavg` with ``[fedavg] mechanism = "skellam"``).

Setting. N private records cut into n clients (a public partition). Round t: the server's model
w is public (computed from earlier releases only). Every client p computes, for each of its
records i, the per-example gradient g_i of the softmax-regression loss at w, clipped in l2 to
C (c_i = g_i min(1, C/‖g_i‖₂)), quantises it (below), sums its records' integer vectors
Q_p = Σ_{i∈p} q_i, adds its share Z_p and sends (Q_p + Z_p) mod M. The server adds the n
messages mod M, decodes the integer total Q + Z (Q = Σ_p Q_p, Z = Σ_p Z_p), and takes one step
of full-batch gradient descent, w ← w − η (Q + Z)/(s N) (server momentum, a function of the
released totals, is post-processing). This is **DP-FedSGD**: one local step, the message a
gradient sum (more local steps would need the sensitivity of a trajectory; refused).
Neighbouring relation: **replace-one** (one record of one client replaced by any other record;
the relation of the ledger and of PATE's bounds).

**Quantisation and its sensitivity** (`quantised_sum.Quantiser`). With the resolution K >= 1 (``[fedavg] grid``)
and d the message length, the public bound is B = (K + 1)√d / 2 and the scale s = K√d / (2C), so
‖s c_i‖₂ <= sC = B − √d/2. Each record's integer vector is q_i = round(s c_i) (coordinates
rounded to the nearest integer): ‖q_i − s c_i‖₂ <= √d/2 (each coordinate moves by at most ½),
so ‖q_i‖₂ <= B by the triangle inequality. ‖q_i‖₂² is an integer, hence <= S = ⌊B²⌋ =
⌊(K + 1)² d / 4⌋. The step **enforces** that bound rather than trusting floating point: a
record whose computed q_i has ‖q_i‖₂² > S contributes the zero vector (a fixed function of the
record and the public model, so the argument below holds for whatever q_i the float32 program
computes; in exact arithmetic it never fires). For an integer vector, |x| <= x² coordinate-wise,
so ‖q‖₁ <= ‖q‖₂² <= S, and ‖q‖₁ <= √d ‖q‖₂ <= √(dS) (Cauchy–Schwarz), an integer:
‖q‖₁ <= min(S, ⌊√(dS)⌋). Replacing record j by j' changes Q by q_j − q_j', so

    Δ₂² = 4S,   Δ₁ = 2 min(S, ⌊√(d S)⌋)        (integer units; `Quantiser.l2sq`, `.l1`).

The rounding costs at most a factor B/(sC) = 1 + 1/K in l2 sensitivity. (Kairouz, Liu & Steinke's
conditional randomised rounding would cost less; this deterministic rounding needs no extra δ.)

**The Skellam mechanism and its RDP** (`rdp`, from `analysis.accounting.skellam_rdp`, where the ledger's
``"skellam"`` cost reads it). Sk(μ) is the law of P − P', P, P' independent
Poisson(μ): integer, symmetric, variance 2μ (Agarwal, Kairouz & Liu, "The Skellam Mechanism for
Differentially Private Federated Learning", NeurIPS 2021, arXiv:2110.04995: their Sk_{μ,μ}).
Adding independent Sk(μ) to every coordinate of an integer query of l1 sensitivity Δ₁ and l2
sensitivity Δ₂ is (α, ε(α))-RDP for every α > 1 with

    ε(α) <= α Δ₂² / (4μ) + min( ((2α − 1) Δ₂² + 6 Δ₁) / (16 μ²),  3 Δ₁ / (4μ) )

(their multi-dimensional Skellam mechanism, Corollary 3.6 of the NeurIPS version, stated there for
noise of variance V = 2μ: α Δ₂²/(2V) + min(((2α − 1)Δ₂² + 6Δ₁)/(4V²), 3Δ₁/(2V)); the authors'
implementation, google-research/federated distributed_dp/accounting_utils.py ``_skellam_rdp``,
carries the same formula and evaluates it at integer orders only; `analysis.accounting.skellam_rdp`
says how the number was found). This module evaluates it at ⌈α⌉ (Rényi divergence is
non-decreasing in the order, van Erven & Harremoës 2014, Theorem 3), so a non-integer order is
never charged less than the integer the authors use. The tests check the bound against the exact
divergence of Sk(μ) + v against Sk(μ), summed from scipy's Skellam pmf, in one dimension and,
by brute force over every integer shift vector of given l1/l2 norms, in small dimensions (the
divergence of a product law is the sum over its coordinates, van Erven & Harremoës 2014,
Theorem 28).

**Composition and calibration.** A replaced record of client p enters round t only through Q
(every other value the server sees is a function of earlier totals), so the R rounds compose
adaptively: their RDP curves add (Mironov 2017, Proposition 1), converted once to (ε, δ) by
`analysis.accounting.rdp.eps_from_rdp` (the ledger's ``"skellam"`` cost,
`analysis.mechanisms.composition`). `calibrate_mu` finds, by bisection on the monotone map μ ↦
ε (every term of ε(α) falls as μ grows), the least μ within a factor 1 + 1e-6 whose R-fold
composition costs at most the target ε at δ; the result is then checked.

**Exact shares** (`skellam_share`). Each of the n clients draws Z_p with coordinates
Poisson(μ/n) − Poisson(μ/n). A sum of independent Poisson variables is Poisson with the summed
mean (the generating functions multiply: exp(λ₁(z − 1)) exp(λ₂(z − 1))), so Σ_p Z_p has exactly
the law Sk(μ) on every coordinate: **the total carries the noise of one central release**.
The Poisson draws come from numpy's generator keyed by 128 bits of the release's
`analysis.core.noise.NoiseSource` (fresh OS entropy per draw, or a research seed). Caveat,
stated and not hidden: numpy's Poisson sampler (Hörmann's transformed rejection, PTRS, for
means >= 10) decides in float64, so its law is Poisson only up to that rounding; unlike the exact
samplers of `analysis.core.noise`, this module does not bound that difference. The noise it
produces is an integer and no data enters the sampler, so Mironov's (2012) low-bit attack does
not apply. *Fewer shares*: a total that lacks some clients' shares carries Sk(μ m/n) for m
present, less than planned; the server counts the messages and refuses a total with fewer than n
(`analysis.mechanisms.silos.check_shares_present`: never released with less noise, nothing
charged).

**Trust model.** Granted a secure sum that reveals only the total (Flower's SecAgg+; in `pate
fedavg` the exact in-process sum mod M, the same arithmetic, `pate.programs.secure_sum`): the
server sees Q + Z mod M, i.e. the central release; each round costs the central guarantee
above. A coalition of c clients (or the server with c clients) knows its members' shares and can
subtract them: what protects the other clients' records is then Sk(μ (n − c)/n), the same
theorem at μ(n − c)/n (`coalition_eps`). Without secure aggregation each message would be
visible with its own share alone, Sk(μ/n): this mechanism assumes the secure sum.

**The modulus that never wraps** (`SkellamSum.of`, `quantised_sum.decode`). Every coordinate of Q lies in
[−N b, N b], b = ⌊√S⌋ (each |q_ij| <= ‖q_i‖₂ <= √S). For Z ~ Sk(μ), E e^{tZ} = exp(2μ(cosh t − 1)),
so by Chernoff at sinh t = T/(2μ), P[Z >= T] <= exp(2μ(√(1 + u²) − 1) − T asinh u), u = T/(2μ),
and P[|Z| >= T] is at most twice that. With T the least integer whose union bound over the d
coordinates and R rounds is <= β, M = 2(N b + T) + 1: every total lies in [−(M − 1)/2, (M − 1)/2]
and its residue decodes to it (`quantised_sum.decode`), except with probability at most β (stated). A wrap
would only make the model worse: what the server sees, (Q + Z) mod M, is a function of Q + Z,
so it never weakens the privacy statement.

The quantisation, the modulus, the messages, the exact sum and the refusal of fewer shares are
shared with the distributed discrete Gaussian (`analysis.mechanisms.quantised_sum.QuantisedSum`);
this record adds the Skellam shares and their accounting. Caveat above: ``"ddg"``
(`analysis.mechanisms.ddg`) draws its shares with an exact sampler and is the one docs recommend.

This module uses numpy only.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from analysis.accounting.skellam_rdp import rdp
from analysis.core.errors import PateError
from analysis.mechanisms import composition
from analysis.mechanisms.quantised_sum import MESSAGE_NOTE, QuantisedSum, check_failure, check_sizes
from analysis.mechanisms.quantised_sum import count as _count
from analysis.mechanisms.quantised_sum import modulus as _modulus
from analysis.mechanisms.quantised_sum import noise_reach as _noise_reach
from analysis.mechanisms.quantised_sum import positive as _positive


# --------------------------------------------------------------------------- RDP of the mechanism


def cost(mu: float, l1: float, l2sq: float, rounds: int) -> composition.Cost:
    """The ledger cost of `rounds` Skellam releases (``"skellam"``: their RDP curves add)."""
    return composition.Cost("skellam", {"mu": _positive("mu", mu), "l1": l1, "l2sq": l2sq,
                                        "count": _count("rounds", rounds)})


def total_eps(mu: float, l1: float, l2sq: float, rounds: int, delta: float) -> float:
    """ε at δ of `rounds` Skellam releases, as the ledger composes it (RDP, improved conversion)."""
    return composition.single_eps(cost(mu, l1, l2sq, rounds), delta)


def calibrate_mu(eps: float, l1: float, l2sq: float, rounds: int, delta: float) -> float:
    """The least μ, within a factor 1 + 1e-6, whose `rounds` releases cost at most `eps` at `delta`
    (bisection on log μ: ε falls as μ grows); the returned μ meets the target."""
    eps = _positive("eps", eps)
    if l2sq <= 0:
        raise PateError("the l2 sensitivity must be positive to calibrate noise")

    def ok(mu: float) -> bool:
        return total_eps(mu, l1, l2sq, rounds, delta) <= eps

    hi = float(l2sq)
    while not ok(hi):
        hi *= 4.0
        if hi > 1e300:
            raise PateError(f"no Skellam noise meets eps {eps:g} at delta {delta:g}")
    lo = hi
    while ok(lo) and lo > 1e-300:
        lo /= 4.0
    while hi / lo > 1.0 + 1e-6:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def coalition_eps(mu: float, l1: float, l2sq: float, rounds: int, delta: float, clients: int,
                  colluding: int) -> float:
    """ε at δ that protects the other clients' records from a coalition of `colluding` of the
    `clients` that subtracts its own shares: the theorem at μ (n − c)/n (module docstring);
    inf when no honest share is left."""
    n = _count("clients", clients)
    c = _count("colluding clients", colluding, least=0)
    if c >= n:
        return math.inf
    return total_eps(mu * (n - c) / n, l1, l2sq, rounds, delta)


# --------------------------------------------------------------------------- exact shares


def poisson_array(source, lam: float, shape) -> np.ndarray:
    """int64 Poisson(`lam`) draws of `shape` from numpy's generator keyed by 128 bits of `source`
    (an `analysis.core.noise.NoiseSource`; module docstring: the sampler's float64 caveat)."""
    lam = _positive("the Poisson mean", lam)
    key = [int(w) for w in source.uint64(2)]
    gen = np.random.Generator(np.random.Philox(key=(key[0] << 64) | key[1]))
    return gen.poisson(lam, size=shape).astype(np.int64)


def skellam_share(source, mu: float, clients: int, shape) -> np.ndarray:
    """One client's share Poisson(μ/n) − Poisson(μ/n) per coordinate: n independent shares sum
    to exactly Sk(μ) (Poisson additivity; module docstring)."""
    lam = _positive("mu", mu) / _count("clients", clients)
    return poisson_array(source, lam, shape) - poisson_array(source, lam, shape)


def log_tail(threshold: float, mu: float) -> float:
    """An upper bound on ln P[Z >= T] for Z ~ Sk(μ) (Chernoff, module docstring); 0 at T <= 0."""
    t, mu = float(threshold), float(mu)
    if t <= 0:
        return 0.0
    u = t / (2.0 * mu)
    return min(0.0, 2.0 * mu * (math.hypot(1.0, u) - 1.0) - t * math.asinh(u))


def noise_reach(mu: float, events: int, failure: float) -> int:
    """The least integer T with events · 2 · P[Sk(μ) >= T] <= failure by the Chernoff bound (rounded up
    by a relative 1e-9): every one of `events` noise coordinates lies in (−T, T) but with that probability."""
    return _noise_reach(lambda t: log_tail(t, mu), events, failure)


def cost_from_json(grid: dict, rounds: int) -> composition.Cost:
    """The ledger cost fedavg.json's ``grid`` record (``"kind": "skellam"``) states."""
    return cost(grid["mu"], grid["l1_steps"], grid["l2sq_steps"], rounds)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SkellamSum(QuantisedSum):
    """Distributed Skellam noise over an exact secure sum (module docstring): the record
    `pate fedavg` builds for ``mechanism = "skellam"``. Its capability: the clients' integer
    messages (Q_p + Z_p) mod M, Z_p Poisson(μ/n) − Poisson(μ/n) per coordinate, summed exactly mod
    M; the server sees only the decoded total, whose noise is Sk(μ)."""

    mu: float

    @classmethod
    def of(cls, clip: float, dim: int, resolution: int, clients: int, records: int, eps: float, rounds: int,
           delta: float, failure: float = 1e-9) -> "SkellamSum":
        """Calibrates μ for `rounds` rounds at `eps`, `delta` and sizes the wrap-free modulus.

        Raises:
          PateError: a modulus above 2^62, or int32 sums that could overflow (lower the resolution).
        """
        q, n, big_n, r = check_sizes(clip, dim, resolution, clients, records, rounds)
        mu = calibrate_mu(eps, q.l1, q.l2sq, r, delta)
        failure = check_failure(failure)
        m = _modulus(q, big_n, noise_reach(mu, q.dim * r, failure))
        return cls(quantiser=q, clients=n, records=big_n, rounds=r, modulus=m, failure=failure, mu=mu)

    # ---- what the ledger and the report read

    def cost(self, rounds: int | None = None) -> composition.Cost:
        return cost(self.mu, self.quantiser.l1, self.quantiser.l2sq, self.rounds if rounds is None else rounds)

    def share(self, source, shape) -> np.ndarray:
        """One client's share (`skellam_share`)."""
        return skellam_share(source, self.mu, self.clients, shape)

    def alone_cost(self, rounds: int | None = None) -> composition.Cost:
        """What `rounds` of ONE client's messages cost its records seen alone, with no secure sum and
        every other client colluding: its own share Sk(μ/n) is the only noise on them, so the
        theorem at μ/n (`coalition_eps` with n − 1 colluding); the replace-one sensitivity of the
        client's sum is the central one (the replaced record is one of its own). A client's
        message is (Q_p + Z_p) mod M, post-processing of Q_p + Z_p; the rounds compose adaptively."""
        return cost(self.mu / self.clients, self.quantiser.l1, self.quantiser.l2sq,
                    self.rounds if rounds is None else rounds)

    @property
    def noise_std(self) -> float:
        """√(2μ) / s: the std of the total's noise per coordinate, in gradient-sum units."""
        return math.sqrt(2.0 * self.mu) / self.quantiser.scale

    @property
    def accounting(self) -> str:
        return ("composition over rounds of ONE central release per round (the server sees only the secure sum, "
                "whose noise is Sk(mu)): R x the Skellam mechanism's RDP (Agarwal, Kairouz & Liu 2021, Corollary "
                "3.6, l1 and l2 sensitivity of the quantised sum), converted once")

    @property
    def noise_text(self) -> str:
        n = self.clients
        return (f"distributed Skellam noise: {n} shares, Poisson(mu/{n}) - Poisson(mu/{n}) each, the sum carries "
                "one central release's noise Sk(mu); secure sum: the in-process exact modular sum (the arithmetic "
                "Flower's SecAgg+ carries exactly, pate/programs/secure_sum.py); Poisson draws from numpy keyed by "
                "128 bits of the noise source (float64 decisions: not an exact sampler)")

    def describe(self) -> str:
        return (f"distributed Skellam noise, {self.clients} shares of Sk(mu/{self.clients}) = Poisson - Poisson, "
                f"the sum carries one central release's noise Sk(mu), mu {self.mu:.6g} "
                f"(std {math.sqrt(2 * self.mu):.4g} integer steps); {self._quantisation_text()}")

    def to_json(self, length: int) -> dict:
        return {"kind": "skellam", **self._json(length), "mu": self.mu,
                "share": f"Poisson(mu/{self.clients}) - Poisson(mu/{self.clients}) per coordinate",
                "note": MESSAGE_NOTE + "the n shares sum to exactly Sk(mu); the server sees the decoded sum alone "
                        "and steps by -lr x sum / (scale x records)"}
