"""Exact shares of a discrete Laplace: n silos' noise that sums to the central release's noise.

The discrete Laplace of scale b (pmf ∝ p^|x|, p = e^{−1/b}; `analysis.core.noise.discrete_laplace`)
is the difference of two independent geometric variables, G − G' with P[G = g] = (1 − p) p^g,
and the geometric law is the negative binomial NB(1, p), whose probability generating function
((1 − p)/(1 − p z))^r is infinitely divisible in r. So for any h ≥ 1

    X = Σ_{i=1..h} (Y_i − Y'_i),   Y_i, Y'_i i.i.d. NB(1/h, p),

has exactly the discrete Laplace law of scale b: the pgf of Σ Y_i is ((1 − p)/(1 − p z))^{h/h},
the geometric's (Goryczka & Xiong 2015; Balle, Bell, Gascón, Nissim, "Private summation in the
multi-message shuffle model", CCS 2020, the Pólya decomposition). Here NB(r, p) has pmf

    P[Y = y] = C(y + r − 1, y) (1 − p)^r p^y = (r)_y / y! · (1 − p)^r p^y,   y = 0, 1, …,

(r)_y = r (r + 1) ⋯ (r + y − 1) the rising factorial; it is scipy's ``nbinom(r, 1 − p)``.

**The exact sampler** (:func:`negative_binomial_array`, for rational 0 < r <= 1 and rational
b = t/s): rejection from the geometric law of the same p.

1. Draw G with P[G = g] = (1 − p) p^g exactly: Canonne, Kamath, Steinke 2020, Algorithm 2 without
   its sign — U uniform on {0, …, t − 1} kept with probability e^{−U/t} (exact coin, their
   Algorithm 1), V the number of Bernoulli(e^{−1}) heads before the first tail, X = U + tV (then
   P[X = x] ∝ e^{−x/t} on ℕ: each x = u + tv once), G = ⌊X/s⌋ (P[G = g] ∝ Σ_{j<s} e^{−(sg+j)/t}
   ∝ e^{−g s/t} = p^g).
2. Accept G = g with probability a_g = (r)_g / g! = Π_{j<g} (j + r)/(j + 1), by g exact rational
   coins Bernoulli((j + r)/(j + 1)) (each <= 1 since r <= 1), all heads; else start again at 1.

An accepted value has P[Y = g] ∝ (1 − p) p^g (r)_g / g! ∝ the NB(r, p) pmf: exactly NB(r, p),
since a_g <= 1 for every g and Σ_g P[G = g] a_g = (1 − p)(1 − p)^{−r} = (1 − p)^{1 − r} > 0 is
the acceptance rate. No floating-point number enters any decision (every draw is an exact
uniform integer from the `NoiseSource`), so there is no sampling δ. A Poisson–Gamma mixture
would be the usual construction; it needs a real-valued Gamma draw and is not exact.

**Cost.** About 1/(1 − p)^{1−r} ≈ b^{1−r} tries per value (b = 20, r = 1/10: about 15), each a
geometric draw (O(1) coins) and at most g + 1 rational coins. The elements of an array run their
loops together over masks, as the vectorised samplers of `analysis.core.noise` do; each element
consumes its own words of the source, so outputs are independent with the scalar law.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from analysis.core.errors import PateError
from analysis.core.noise import MAX_GRID_SCALE, NoiseSource, geometric_candidates, randbelow_array

#: The largest denominator of the share's order r = a/c (the coins Bernoulli((c j + a)/(c (j + 1)))
#: stay far inside int64 for every g a geometric of scale <= 2^40 reaches in practice).
MAX_ORDER_DENOMINATOR = 2**20


def _scale(scale) -> tuple[int, int]:
    """The scale b = t/s of a discrete Laplace as (t, s), both in [1, 2^40]."""
    if isinstance(scale, bool):
        raise PateError(f"the scale must be a positive rational, got {scale!r}")
    try:
        frac = scale if isinstance(scale, Fraction) else Fraction(scale)
    except (TypeError, ValueError):
        raise PateError(f"the scale must be a positive rational, got {scale!r}") from None
    if not (0 < frac and frac.numerator <= MAX_GRID_SCALE and frac.denominator <= MAX_GRID_SCALE):
        raise PateError(f"the scale must be a fraction t/s with 1 <= t, s <= 2**40, got {scale}")
    return frac.numerator, frac.denominator


def _order(r) -> tuple[int, int]:
    """The negative binomial's order r = a/c in (0, 1] as (a, c)."""
    if isinstance(r, bool):
        raise PateError(f"the order r must be a rational in (0, 1], got {r!r}")
    try:
        frac = r if isinstance(r, Fraction) else Fraction(r)
    except (TypeError, ValueError):
        raise PateError(f"the order r must be a rational in (0, 1], got {r!r}") from None
    if not (0 < frac <= 1 and frac.denominator <= MAX_ORDER_DENOMINATOR):
        raise PateError(f"the order r must be a rational in (0, 1] with denominator <= 2**20, got {r}")
    return frac.numerator, frac.denominator


def geometric_array(source: NoiseSource, scale, size: int) -> np.ndarray:
    """`size` int64 values with P[G = g] = (1 − p) p^g, p = e^{−1/scale}, exactly (step 1 of the
    module docstring; `scale` a rational t/s, 1 <= t, s <= 2^40)."""
    t, s = _scale(scale)
    out = np.zeros(int(size), np.int64)
    todo = np.arange(out.size)
    while todo.size:
        keep, y = geometric_candidates(source, todo.size, t, s)
        out[todo[keep]] = y
        todo = todo[~keep]
    return out


def negative_binomial_array(source: NoiseSource, r, scale, shape) -> np.ndarray:
    """int64 values of `shape`, each NB(r, p) with p = e^{−1/scale}, exactly (module docstring):
    P[Y = y] = (r)_y / y! (1 − p)^r p^y, for rational 0 < r <= 1 and rational scale t/s."""
    a, c = _order(r)
    _scale(scale)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    out = np.zeros(math.prod(shape), np.int64)
    todo = np.arange(out.size)
    while todo.size:
        g = geometric_array(source, scale, todo.size)
        # accept g with probability Π_{j<g} (c j + a) / (c (j + 1)): coin j for every element with j < g
        alive = np.ones(todo.size, bool)
        j = 0
        testing = np.flatnonzero(g > 0)
        while testing.size:
            heads = randbelow_array(source, np.full(testing.size, c * (j + 1), np.int64)) < c * j + a
            alive[testing[~heads]] = False
            j += 1
            testing = testing[heads & (g[testing] > j)]
        out[todo[alive]] = g[alive]
        todo = todo[~alive]
    return out.reshape(shape)


def laplace_share(source: NoiseSource, scale, parts: int, shape) -> np.ndarray:
    """One silo's share of a discrete Laplace of `scale`: Y − Y' with Y, Y' i.i.d.
    NB(1/parts, e^{−1/scale}), exactly. Any `parts` independent shares sum to an exact discrete
    Laplace of `scale` (`analysis.core.noise.discrete_laplace_pmf`); fewer sum to less noise
    (`analysis.mechanisms.silos.guaranteed_eps`)."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or not 1 <= int(parts) <= MAX_ORDER_DENOMINATOR:
        raise PateError(f"the number of shares must be an integer in [1, 2**20], got {parts!r}")
    r = Fraction(1, int(parts))
    return negative_binomial_array(source, r, scale, shape) - negative_binomial_array(source, r, scale, shape)


def negative_binomial_pmf(y, r, scale) -> np.ndarray:
    """The pmf of :func:`negative_binomial_array` (for tests and documentation)."""
    from scipy import stats

    return stats.nbinom.pmf(np.asarray(y), float(r), 1.0 - math.exp(-1.0 / float(scale)))
