"""A fine-grained release across silos: each adds a share of the noise, a secure sum adds them up.

Plan: n silos each count the votes of their own records over the pool (`fine_grained.vote_histogram`,
the same public map everywhere), add an exact share of the noise (`analysis.core.shares.laplace_share`)
to every cell, and a secure sum modulo M shows the coordinator only the total: the histogram of all
records plus the sum of the shares present. This module holds the arithmetic that makes that total
the central release (`fine_grained.release` with `fine_grained.laplace_noise`), nothing of the
protocol.

**Shares.** The plan names the number h of shares that must be present (``needed``, 1 <= h <= n;
``needed = n`` trusts every silo to add its share). Each silo draws Y − Y', Y, Y' ~ NB(1/h, p),
p = e^{−1/b}, b the central scale (Δ₁/ε, Δ₁ = 2k replace-one). Any h shares sum to exactly the
discrete Laplace of scale b (`analysis.core.shares`), so a histogram with h shares present has
**exactly the law of the central release**, and with more present it is the central release plus
independent noise (post-processing of it: ε is unchanged).

**Trust model.** What each party learns, granted a secure sum that reveals the total only:

- *The coordinator* sees the total mod M, i.e. (except with the probability of
  :func:`wrap_free_modulus`) the noisy histogram: the central release and nothing more.
- *A silo* sees its own records and the total: the same release.
- *A coalition of silos* knows its members' records and shares; it can subtract its own shares from
  the total, so what protects the others is the sum of the shares of the silos outside it. With at
  least h honest silos outside it that hold back nothing, that is a full discrete Laplace of scale b
  plus independent noise: ε = Δ₁/b. With fewer, m < h honest shares, see :func:`guaranteed_eps`.
- *A silo that drops, dies or withholds its share*: the coordinator counts the shares present and
  :func:`check_shares_present` refuses a total with fewer than h (``PateError``): it is never
  published with less noise than planned. Nothing is charged (the charge is made by whoever
  publishes, once, for the central ε).

**Fewer shares: a discrete Laplace of a smaller scale.** m < h shares sum to D = Y − Y' with Y, Y'
~ NB(s, p), s = m/h. NB(s, p)'s pgf is exp(Σ_{j>=1} s p^j (z^j − 1)/j) (a compound Poisson with
Lévy weights s p^j / j); the geometric law of ratio q has weights q^j / j. With q = s p,
s p^j − (s p)^j = p^j (s − s^j) >= 0 for every j >= 1 (s <= 1), so NB(s, p) = Geom(s p) + W with W
independent (the compound Poisson of those non-negative weights, total mass finite). Hence D =
(discrete Laplace with ratio s p) + independent noise, and the release is (Δ₁/b')-DP with
1/b' = −ln(s p) = 1/b + ln(h/m): ε' = ε + Δ₁ ln(h/m) (:func:`guaranteed_eps`). It is an upper bound
(the extra W only helps), equal to ε at m = h, infinite at m = 0.

**The modulus that never wraps.** A cell of the histogram counts records (each record's k votes
go to k distinct pool points, so a cell holds at most one vote of a record): 0 <= H <= N, whatever
k. The noise of any set of present shares is D = Y − Y' with Y, Y' ~ NB(R, p), R = m/h <= n/h, and
|D| <= max(Y, Y'), so P[|D| > T] <= 2 P[Y_n >= T + 1] (Y_n ~ NB(n/h, p) dominates every subset's
Y: a sum of non-negative shares). Chernoff, for 1 < z < 1/p: P[Y >= a] <= z^{−a} ((1 − p)/(1 − p z))^R;
at the minimiser z = a / (p (a + R)) (> 1 once a > R p/(1 − p), the mean):

    ln P[Y >= a] <= a ln p + a ln((a + R)/a) + R ln((a + R)/R) + R ln(1 − p).

:func:`wrap_free_modulus` takes the least T with cells · 2 · that bound <= β (union bound over the
cells), and M = N + 2T + 1: every total H + D lies in [−T, N + T], M consecutive integers, so its
residue mod M decodes to it (:func:`decode`) except with probability at most β, stated. The bound
is evaluated in float64 and rounded up by a relative 1e-9 (far above its rounding error).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from analysis.core.errors import PateError
from analysis.mechanisms.fine_grained import Noise, l1_sensitivity

#: Flower's SecAgg+ default modulus (``modulus_range`` = 2^32): a larger M is refused unless asked.
DEFAULT_MAX_MODULUS = 2**32


def _count(name: str, value, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < least:
        raise PateError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _needed(silos: int, needed) -> tuple[int, int]:
    silos = _count("the number of silos", silos)
    needed = silos if needed is None else _count("the shares needed", needed)
    if needed > silos:
        raise PateError(f"the shares needed ({needed}) cannot exceed the number of silos ({silos})")
    return silos, needed


def _laplace(noise: Noise) -> Noise:
    if not isinstance(noise, Noise) or noise.kind != "laplace":
        raise PateError("noise shares split a discrete Laplace release; build it with fine_grained.laplace_noise")
    return noise


def share_order(silos: int, needed: int | None = None) -> Fraction:
    """The order r = 1/h of each silo's NB(r, p) draws: any h shares sum to the central noise."""
    return Fraction(1, _needed(silos, needed)[1])


def guaranteed_eps(noise: Noise, present: int, needed: int) -> float:
    """The pure ε guaranteed when `present` of the `needed` shares of `noise` are added (module
    docstring): Δ₁/b for present >= needed, Δ₁ (1/b + ln(needed/present)) below, inf at 0."""
    noise = _laplace(noise)
    needed = _count("the shares needed", needed)
    present = _count("the shares present", present, least=0)
    central = noise.eps()
    if present >= needed:
        return central
    if present == 0:
        return math.inf
    delta1 = l1_sensitivity(noise.votes, noise.relation)
    return math.nextafter(central + delta1 * math.log(needed / present), math.inf)


def check_shares_present(present: int, needed: int) -> None:
    """Refuse a total with fewer shares than planned (``PateError``, one line): it would be
    published with less noise than the charge assumes."""
    present = _count("the shares present", present, least=0)
    needed = _count("the shares needed", needed)
    if present < needed:
        raise PateError(f"only {present} of the {needed} noise shares needed were added: the total carries less "
                        "noise than planned and is not released (nothing charged)")


def log_tail(a: int, order: float, scale: float) -> float:
    """An upper bound on ln P[Y >= a] for Y ~ NB(order, p), p = e^{−1/scale} (Chernoff, module
    docstring; in log space: ln p = −1/scale, ln(1 − p) = ln(−expm1(−1/scale))); 0 (the trivial
    bound) at or below the mean."""
    a, order, scale = float(a), float(order), float(scale)
    log_p, one_minus_p = -1.0 / scale, -math.expm1(-1.0 / scale)
    if a * one_minus_p <= order * math.exp(log_p):
        return 0.0
    return min(0.0, a * log_p + a * math.log1p(order / a) + order * math.log1p(a / order)
               + order * math.log(one_minus_p))


@dataclasses.dataclass(frozen=True)
class Modulus:
    """A secure sum's modulus: ``modulus`` = records + 2 ``reach`` + 1; every cell's total lies in
    [−reach, records + reach] except with probability at most ``failure`` (all cells together)."""

    modulus: int
    reach: int
    records: int
    failure: float


def _reach(order: float, scale: float, events: int, failure: float) -> tuple[int, float]:
    """The least T with events · 2 · P[NB(order, e^{−1/scale}) >= T + 1] <= failure by the Chernoff bound
    (rounded up by a relative 1e-9), and that bound."""
    target = math.log(failure) - math.log(2 * events)

    def fails(a: int) -> bool:
        return log_tail(a, order, scale) + 1e-9 > target

    high = 1
    while fails(high):
        high *= 2
    low = high // 2  # fails(low) or low == 0; the bound falls in a above the mean
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fails(mid) else (low, mid)
    return high - 1, min(1.0, 2 * events * math.exp(log_tail(high, order, scale)) * (1 + 1e-9))


def _failure(failure) -> float:
    if isinstance(failure, bool) or not isinstance(failure, (int, float)) or not 0 < failure < 1:
        raise PateError(f"the failure probability must lie in (0, 1), got {failure!r}")
    return float(failure)


def wrap_free_modulus(records: int, noise: Noise, silos: int, cells: int, failure: float = 1e-9,
                      needed: int | None = None, max_modulus: int = DEFAULT_MAX_MODULUS,
                      power_of_two: bool = False) -> Modulus:
    """The least modulus M = N + 2T + 1 whose secure sum of `cells` cells decodes to the true
    integer total of N = `records` records' votes (k = ``noise.votes`` each; a cell holds at most
    one vote of a record, so k does not widen it) and any set of the `silos` silos' shares (each
    NB(1/needed)), except with probability <= `failure` (module docstring); with `power_of_two`,
    the least power of two >= that (what Flower's SecAgg+ ``modulus_range`` must be; a larger
    modulus decodes the same window). Refused in one line above `max_modulus`."""
    records = _count("the record count", records)
    cells = _count("the number of cells", cells)
    noise = _laplace(noise)
    silos, needed = _needed(silos, needed)
    failure = _failure(failure)
    reach, stated = _reach(silos / needed, float(noise.parameter), cells, failure)
    modulus = records + 2 * reach + 1
    if power_of_two:
        modulus = 1 << (modulus - 1).bit_length()
    if modulus > max_modulus:
        raise PateError(f"a secure sum of {records} records' votes with noise of scale {float(noise.parameter):.4g} "
                        f"over {silos} silos needs a modulus of {modulus} > {max_modulus}; fewer records or more "
                        f"eps per release, or a larger modulus")
    return Modulus(modulus, reach, records, stated)


def share_reach(noise: Noise, silos: int, cells: int, failure: float = 1e-9, needed: int | None = None) -> Modulus:
    """How far one silo's share can reach: the least T with every share of every silo in every
    cell in [−T, T] except with probability <= `failure` (a share Y − Y' has |Y − Y'| <= max(Y, Y'),
    Y ~ NB(1/needed); the Chernoff bound, a union over silos × cells). What a protocol that bounds
    each party's input (Flower SecAgg+'s ``clipping_range``) must admit beside a silo's own counts.
    Returned as a `Modulus` of the share alone (records 0)."""
    cells = _count("the number of cells", cells)
    noise = _laplace(noise)
    silos, needed = _needed(silos, needed)
    reach, stated = _reach(1 / needed, float(noise.parameter), silos * cells, _failure(failure))
    return Modulus(2 * reach + 1, reach, 0, stated)


def decode(residues, modulus: Modulus) -> np.ndarray:
    """The integer totals in [−reach, records + reach] whose residues mod M are `residues`."""
    m = np.mod(np.asarray(residues, dtype=np.int64), modulus.modulus)
    return np.where(m > modulus.records + modulus.reach, m - modulus.modulus, m)
