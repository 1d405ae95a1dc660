"""What distributed noise under an exact secure sum needs whatever the noise law (`pate fedavg` with
``[fedavg] mechanism = "skellam"`` or ``"ddg"``): the public quantisation of each record's clipped
gradient and its sensitivities, the modulus that never wraps, the clients' messages mod M, their
exact sum, its decoding, and the refusal of a total that lacks a share. The noise law and its
accounting are each record's own (`analysis.mechanisms.skellam.SkellamSum`,
`analysis.mechanisms.ddg.DDGSum`, subclasses of `QuantisedSum`); the setting, the quantisation's
proof and the trust model are stated once, in `analysis.mechanisms.skellam`'s docstring.

**Quantisation** (`Quantiser`): resolution K >= 1, message length d, B = (K + 1)√d / 2, scale
s = K√d / (2C), q_i = round(s c_i) with ‖q_i‖₂² <= S = ⌊(K + 1)² d / 4⌋ enforced (a record past it
contributes zero); replace-one moves the integer sum by Δ₂² = 4S and Δ₁ = 2 min(S, ⌊√(dS)⌋).

**The modulus** (`QuantisedSum.size`): every coordinate of Q lies in [−N b, N b], b = ⌊√S⌋. A
record gives `reach` T, an integer with P[|Z| >= T] summed over the d coordinates and R rounds at
most β (its own tail bound, `noise_reach`); M = 2(N b + T) + 1, so every total lies in
[−(M − 1)/2, (M − 1)/2] and its residue decodes to it (`decode`) but with probability β. A wrap
only spoils the model: the server sees a function of Q + Z, so privacy never depends on it.

This module uses numpy only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from analysis.core.errors import PateError

#: The secure sum's modulus is kept below 2^62 (int64 arithmetic on the host, with room to add).
MAX_MODULUS = 2**62
#: The client-side program sums integer vectors in int32: N ⌊√S⌋ and d ⌊√S⌋² must stay below this.
INT32_LIMIT = 2**31 - 1


def positive(name: str, value) -> float:
    if isinstance(value, bool):
        raise PateError(f"{name} must be a positive number, got {value!r}")
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise PateError(f"{name} must be a positive number, got {value}")
    return value


def count(name: str, value, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < least:
        raise PateError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def noise_reach(log_tail: Callable[[int], float], events: int, failure: float) -> int:
    """The least integer T >= 1 with events · 2 · exp(log_tail(T)) <= failure (rounded up by a relative
    1e-9), for ``log_tail`` an upper bound on ln P[Z >= T] that falls in T: every one of `events` noise
    coordinates lies in (−T, T) but with that probability."""
    target = math.log(failure) - math.log(2 * events)
    fails = lambda a: log_tail(a) + 1e-9 > target  # noqa: E731
    high = 1
    while fails(high):
        high *= 2
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fails(mid) else (low, mid)
    return high


@dataclasses.dataclass(frozen=True)
class Quantiser:
    """The public quantisation of one record's clipped gradient (module docstring): scale s,
    squared-norm bound S, the message length d, and the sensitivities it gives."""

    clip: float
    resolution: int
    dim: int
    scale: float
    bound2: int

    @classmethod
    def of(cls, clip: float, dim: int, resolution: int) -> "Quantiser":
        clip = positive("clip_norm", clip)
        d, k = count("the message length", dim), count("the resolution (fedavg.grid)", resolution)
        return cls(clip, k, d, k * math.sqrt(d) / (2.0 * clip), (k + 1) ** 2 * d // 4)

    @property
    def coordinate_bound(self) -> int:
        """⌊√S⌋: no coordinate of an accepted q_i exceeds it in magnitude."""
        return math.isqrt(self.bound2)

    @property
    def l2sq(self) -> int:
        """Δ₂² = 4S (replace-one, integer units)."""
        return 4 * self.bound2

    @property
    def l1(self) -> int:
        """Δ₁ = 2 min(S, ⌊√(dS)⌋) (replace-one, integer units)."""
        return 2 * min(self.bound2, math.isqrt(self.dim * self.bound2))

    def quantise(self, clipped) -> np.ndarray:
        """round(s c_i) per row of `clipped` (records × d), the rows whose squared norm exceeds S
        replaced by zeros (float64 numpy: the reference the JAX program is tested against)."""
        q = np.rint(np.asarray(clipped, np.float64) * self.scale)
        b = self.coordinate_bound
        q = np.clip(q, -b, b).astype(np.int64)
        return np.where((q * q).sum(axis=-1, keepdims=True) <= self.bound2, q, 0)


def check_sizes(clip: float, dim: int, resolution: int, clients: int, records: int,
                rounds: int) -> tuple[Quantiser, int, int, int]:
    """(quantiser, n, N, R) after the checks every record makes.

    Raises:
      PateError: more clients than records, or int32 sums that could overflow (lower the resolution).
    """
    q = Quantiser.of(clip, dim, resolution)
    n, big_n, r = count("clients", clients), count("records", records), count("rounds", rounds)
    if n > big_n:
        raise PateError(f"{n} clients but only {big_n} records")
    b = q.coordinate_bound
    if big_n * b > INT32_LIMIT or q.dim * b * b > INT32_LIMIT:
        raise PateError(f"the quantised gradients of fedavg.grid = {resolution} (bound {b} per coordinate, "
                        f"{q.dim} coordinates, {big_n} records) overflow the clients' int32 sums; "
                        "lower fedavg.grid")
    return q, n, big_n, r


def modulus(quantiser: Quantiser, records: int, reach: int) -> int:
    """M = 2(N b + T) + 1 (module docstring); refused above 2^62."""
    m = 2 * (records * quantiser.coordinate_bound + reach) + 1
    if m > MAX_MODULUS:
        raise PateError(f"the secure sum needs a modulus of {m} > 2**62; lower fedavg.grid or raise fedavg.eps")
    return m


def check_failure(failure: float) -> float:
    if not 0 < failure < 1:
        raise PateError(f"the failure probability must lie in (0, 1), got {failure!r}")
    return float(failure)


@dataclasses.dataclass(frozen=True)
class QuantisedSum:
    """The arithmetic of one record over an exact secure sum (module docstring). A subclass adds its
    noise parameters and says what it can do: ``share(source, shape)`` (one client's noise, int64),
    ``cost(rounds)`` (the ledger's), ``alone_cost(rounds)`` (one client's messages seen alone: its own
    share the only noise; what `pate silos fedavg` charges a silo's ledger), ``noise_std``, ``describe()``, ``to_json(length)``, and the texts
    ``accounting`` and ``noise_text`` that fedavg.json states."""

    quantiser: Quantiser
    clients: int
    records: int
    rounds: int
    modulus: int
    failure: float

    @property
    def sensitivity(self) -> float:
        """Δ₂ / s: the l2 sensitivity of the quantised gradient sum, in gradient-sum units."""
        return math.sqrt(self.quantiser.l2sq) / self.quantiser.scale

    def shares(self, source, shape) -> np.ndarray:
        """Every client's share: int64 (clients, *shape)."""
        return np.stack([self.share(source, shape) for _ in range(self.clients)])

    def encode(self, sums, shares) -> np.ndarray:
        """The clients' messages (Q_p + Z_p) mod M, int64."""
        return np.mod(np.asarray(sums, np.int64) + np.asarray(shares, np.int64), self.modulus)

    def total(self, messages) -> np.ndarray:
        """The exact sum mod M of the clients' messages, decoded to the integer total; refused when
        fewer messages (shares) than clients arrive (`silos.check_shares_present`)."""
        messages = np.asarray(messages, np.int64)
        acc = np.zeros(messages.shape[1:], np.int64)
        for m in messages:  # each term < 2^62: the sum of two stays inside int64
            acc = np.mod(acc + np.mod(m, self.modulus), self.modulus)
        return self.decode_sum(acc, int(messages.shape[0]))

    def decode_sum(self, residues, present: int) -> np.ndarray:
        """The integer total of a secure sum mod M that holds `present` clients' messages (a sum
        computed elsewhere: Flower's SecAgg+); refused when fewer than every client's share is in it."""
        from analysis.mechanisms.silos import check_shares_present

        check_shares_present(int(present), self.clients)
        return decode(residues, self.modulus)

    def mean_gradient(self, total) -> np.ndarray:
        """The noisy mean gradient, total / (s N), float64."""
        return np.asarray(total, np.float64) / (self.quantiser.scale * self.records)

    def _json(self, length: int) -> dict:
        q = self.quantiser
        return {"resolution": q.resolution, "scale": q.scale, "bound2": q.bound2, "l2sq_steps": q.l2sq,
                "l1_steps": q.l1, "shares": self.clients, "modulus": self.modulus, "wrap_probability": self.failure,
                "message_length": int(length)}

    def _quantisation_text(self) -> str:
        q = self.quantiser
        return (f"each per-example gradient clipped to {q.clip:g}, scaled by {q.scale:.6g} and rounded "
                f"(K = {q.resolution}: squared l2 norm <= {q.bound2}, sensitivity l2^2 {q.l2sq}, l1 {q.l1}); "
                f"an exact secure sum mod {self.modulus} (the server sees the sum alone; wraps with probability "
                f"<= {self.failure:g})")


#: What every record's fedavg.json note says first: what a client sends (its record adds what the server sees).
MESSAGE_NOTE = ("each client sends (sum of its records' round(scale x clipped gradient), rows of squared norm > bound2 "
                "zeroed, + its share) mod modulus; ")


def decode(residues, modulus: int) -> np.ndarray:
    """The integers in [−(M − 1)/2, (M − 1)/2] whose residues mod M (odd) are `residues`."""
    m = np.mod(np.asarray(residues, np.int64), int(modulus))
    return np.where(m > (int(modulus) - 1) // 2, m - int(modulus), m)
