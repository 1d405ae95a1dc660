"""Where the randomness of a release comes from, and how noise is sampled from it.

Every noisy number pate releases — the aggregators' labels (`pate.release.aggregation`) and the
sanitised ε (`analysis.sanitised.lnmax_release.sanitized_eps`, `analysis.sanitised.gnss.sanitized_eps`) — draws its
bits from one :class:`NoiseSource`:

- **No seed (every real release).** Each draw reads fresh bytes from ``os.urandom``, the
  operating system's CSPRNG: far more than 128 bits of entropy reach every noise draw, and
  no state exists that could be guessed or leaked.
- **A seed (research only).** An integer ``0 <= seed < 2**128`` becomes the 128-bit key of
  numpy's Philox-4x64 counter generator, used as is (no hashing, no truncation): seeds that
  differ in any bit give different streams. The labels and the sanitised release use
  disjoint counter ranges (``stream``), so one seed never makes the two noises equal.
  Whoever knows the seed can remove the noise, so a seed is never written into any file.

Two kinds of samplers:

1. Continuous noise for the aggregators (:meth:`NoiseSource.laplace`,
   :meth:`NoiseSource.normal`), float64, by inversion of the CDF on a grid of 2^-53: one
   uint64 gives a sign bit and a 52-bit integer ``k``; ``V = (2k + 1) 2^-53`` is exact in
   float64 and the magnitude is ``-log V`` (Laplace) or ``-Φ⁻¹(V/2)`` (half-normal). The
   largest magnitudes are 36.7 (Laplace, in units of the scale) and 8.29 (Gaussian, in
   units of σ). **Remaining δ.** The sampled law differs from the ideal one in
   Kolmogorov distance by ``κ <= 2^-50`` (half a grid step, 2^-53, plus a few ulps of
   ``log``/``ndtri``, which move at most three grid points across any threshold). A
   noisy-argmax label is, in each noise coordinate with the others fixed, a threshold
   event, so (hybrid argument over the coordinates) each outcome's probability moves by
   at most ``c κ`` for ``c`` noise coordinates, and the outcome distribution of one query
   moves by at most ``c² κ / 2`` in total variation. Over ``Q`` queries the transcript
   moves by ``τ <= Q c² κ / 2``; an ``(ε, δ)``-DP ideal mechanism is then implemented
   ``(ε, δ + (1 + e^ε) τ)``-DP. :func:`sampling_delta` returns that extra δ (about 4e-10 at
   1000 queries, 11 coordinates, ε = 2). float32 noise, which this replaces, had κ ≈ 2^-24
   and bounded support (Laplace ±16, Gaussian ±5.4), i.e. labels possible under one vote
   set and impossible under its neighbour.

2. Exact samplers for published noisy *values* (:func:`discrete_laplace`,
   :func:`discrete_gaussian`): Canonne, Kamath, Steinke, "The Discrete Gaussian for
   Differential Privacy" (NeurIPS 2020), Algorithms 1–3, in exact rational arithmetic on
   Python integers. The value is published as an integer multiple of a public grid step,
   so no floating-point bit can carry information (Mironov, "On significance of the least
   significant bits for differential privacy", CCS 2012). How the privacy statement is
   adjusted for the grid is said where each release is made.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np

from analysis.core.errors import PateError

SEED_BITS = 128
LABELS_STREAM = 0  # the aggregator's noise
RELEASE_STREAM = 1  # the sanitised-ε release's noise
KOLMOGOROV_BOUND = 2.0**-50  # κ of the continuous samplers (module docstring)


def check_seed(seed, option: str = "--seed") -> int | None:
    """``seed`` as an int in ``[0, 2**128)``, or None; anything else is refused."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise PateError(f"{option} must be an integer, got {seed!r}")
    seed = int(seed)
    if not 0 <= seed < 2**SEED_BITS:
        raise PateError(f"{option} must satisfy 0 <= seed < 2**{SEED_BITS}, got {seed}")
    return seed


def seed_record(seed) -> dict:
    """What a released file records of a seed: ``{"research_seed": True}`` when one was
    given (the noise of that release is reproducible by whoever has the seed: it is no
    real release), nothing otherwise. Never the seed itself."""
    return {} if seed is None else {"research_seed": True}


class NoiseSource:
    """Random bits for one release: fresh OS entropy, or a 128-bit research seed.

    Args:
      seed: None (default: ``os.urandom`` for every draw) or an int ``0 <= seed < 2**128``
        (research only; used whole as Philox's 128-bit key).
      stream: which release this noise is for (:data:`LABELS_STREAM`,
        :data:`RELEASE_STREAM`); with a seed, streams start at disjoint counters
        (the top 64 bits of Philox's 256-bit counter).
    """

    def __init__(self, seed: int | None = None, stream: int = LABELS_STREAM):
        self._seed = check_seed(seed)
        self._raw = None
        if self._seed is not None:
            self._raw = np.random.Philox(key=self._seed, counter=int(stream) << 192)

    @property
    def seeded(self) -> bool:
        return self._seed is not None

    def key_material(self) -> np.ndarray | None:
        """The Philox key words (two uint64, 128 bits) of a seeded source; None without a seed."""
        if self._raw is None:
            return None
        return np.array(self._raw.state["state"]["key"], dtype=np.uint64)

    def uint64(self, n: int) -> np.ndarray:
        """``n`` uniformly random 64-bit words."""
        n = int(n)
        if self._raw is None:
            return np.frombuffer(os.urandom(8 * n), dtype="<u8").astype(np.uint64)
        return self._raw.random_raw(n).astype(np.uint64)

    def randbelow(self, n: int) -> int:
        """A uniform integer in ``[0, n)``, exactly (rejection on the smallest power of 2)."""
        n = int(n)
        if n < 1:
            raise PateError(f"randbelow needs n >= 1, got {n}")
        bits = (n - 1).bit_length()
        if bits == 0:
            return 0
        words = -(-bits // 64)
        while True:
            value = 0
            for w in self.uint64(words):
                value = (value << 64) | int(w)
            value >>= 64 * words - bits
            if value < n:
                return value

    # -------------------------------------------------------------- continuous, float64

    def _sign_and_grid(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        raw = self.uint64(size)
        sign = np.where(raw & np.uint64(1), -1.0, 1.0)
        k = (raw >> np.uint64(12)).astype(np.float64)  # 52 bits: exact in float64
        return sign, (2.0 * k + 1.0) * 2.0**-53  # V in (0, 1), exact

    def laplace(self, shape, scale: float = 1.0) -> np.ndarray:
        """Laplace(0, scale) noise of ``shape``, float64, by CDF inversion (module docstring)."""
        shape = _shape(shape)
        sign, v = self._sign_and_grid(math.prod(shape))
        return (float(scale) * sign * -np.log(v)).reshape(shape)

    def normal(self, shape, scale: float = 1.0) -> np.ndarray:
        """N(0, scale²) noise of ``shape``, float64, by CDF inversion (module docstring)."""
        shape = _shape(shape)
        sign, v = self._sign_and_grid(math.prod(shape))
        from scipy import special  # imported on first use: `import analysis` stays light

        return (float(scale) * sign * -special.ndtri(0.5 * v)).reshape(shape)


def _shape(shape) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


def sampling_delta(num_queries: int, coordinates: int, eps: float) -> float:
    """Extra δ of implementing the ideal noisy argmax with the float64 samplers.

    ``(1 + e^ε) · Q · c² · κ / 2`` for ``Q`` queries of ``c`` noise coordinates each (the
    classes, plus one for a threshold step), κ = :data:`KOLMOGOROV_BOUND`; derivation in
    the module docstring. A δ is a probability: where the bound exceeds 1 (an ε so large
    that e^ε swamps κ) the result is 1, i.e. nothing is guaranteed, never a "δ" above 1.
    """
    return delta_of_sampling(sampling_tv(num_queries, coordinates), eps)


def sampling_tv(num_queries: int, coordinates: int) -> float:
    """τ = ``Q · c² · κ / 2``: the total variation between the float64 samplers and the
    ideal noisy argmax over ``Q`` queries of ``c`` noise coordinates (module docstring).
    Over several releases, adaptively chosen, the τ add (a hybrid argument: each release's
    conditional law moves by at most its own τ), so a data set's ledger sums them."""
    return num_queries * coordinates**2 * KOLMOGOROV_BOUND / 2.0


def delta_of_sampling(tv: float, eps: float) -> float:
    """The δ that a total variation ``tv`` from the ideal mechanism adds to an (ε, δ)
    guarantee of it: ``(1 + e^ε) · tv`` (P[M'(D) ∈ S] ≤ P[M(D) ∈ S] + τ ≤ e^ε (P[M'(D') ∈ S]
    + τ) + δ + τ), at most 1."""
    if not math.isfinite(eps):
        return 1.0
    return min(1.0, (1.0 + math.exp(min(eps, 700.0))) * tv)


# ------------------------------------------------------------------ exact samplers (CKS 2020)


def _fraction(value, name: str) -> Fraction:
    """A finite, non-negative number as an exact Fraction (a float converts exactly)."""
    if isinstance(value, Fraction):
        frac = value
    else:
        if not math.isfinite(float(value)):
            raise PateError(f"{name} must be finite, got {value}")
        frac = Fraction(value)
    if frac < 0:
        raise PateError(f"{name} must be non-negative, got {value}")
    return frac


def bernoulli(source: NoiseSource, p: Fraction) -> int:
    """1 with probability ``p`` (a Fraction in [0, 1]), exactly."""
    return int(source.randbelow(p.denominator) < p.numerator)


def bernoulli_exp(source: NoiseSource, gamma) -> int:
    """1 with probability ``exp(-gamma)``, exactly, for rational ``gamma >= 0``.

    Canonne, Kamath, Steinke 2020, Algorithm 1: for γ ∈ [0, 1] the parity of the first
    K with Bernoulli(γ/K) = 0; for γ > 1, ⌊γ⌋ independent Bernoulli(e⁻¹) and one
    Bernoulli(e^{−(γ − ⌊γ⌋)}).
    """
    gamma = _fraction(gamma, "gamma")
    whole = gamma.numerator // gamma.denominator
    for _ in range(whole):
        if not _bernoulli_exp_unit(source, Fraction(1)):
            return 0
    return _bernoulli_exp_unit(source, gamma - whole)


def _bernoulli_exp_unit(source: NoiseSource, gamma: Fraction) -> int:
    """Bernoulli(exp(−γ)) for γ ∈ [0, 1] (CKS 2020, Algorithm 1, first case)."""
    k = 1
    while bernoulli(source, gamma / k):
        k += 1
    return k % 2


def discrete_laplace(source: NoiseSource, scale) -> int:
    """An integer with probability ∝ exp(−|y| / scale), exactly (``scale`` > 0, rational).

    Canonne, Kamath, Steinke 2020, Algorithm 2 (with ``scale = t/s``).
    """
    scale = _fraction(scale, "scale")
    if scale <= 0:
        raise PateError(f"the scale of a discrete Laplace must be positive, got {scale}")
    t, s = scale.numerator, scale.denominator
    while True:
        u = source.randbelow(t)
        if not bernoulli_exp(source, Fraction(u, t)):
            continue
        v = 0
        while _bernoulli_exp_unit(source, Fraction(1)):
            v += 1
        y = (u + t * v) // s
        negative = bernoulli(source, Fraction(1, 2))
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(source: NoiseSource, sigma2) -> int:
    """An integer with probability ∝ exp(−y² / (2 σ²)), exactly (``sigma2`` = σ² > 0, rational).

    Canonne, Kamath, Steinke 2020, Algorithm 3: discrete Laplace proposals of scale
    ``t = ⌊σ⌋ + 1``, accepted with probability ``exp(−(|y| − σ²/t)² / (2σ²))``.
    """
    sigma2 = _fraction(sigma2, "sigma2")
    if sigma2 <= 0:
        raise PateError(f"the variance of a discrete Gaussian must be positive, got {sigma2}")
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    while True:
        y = discrete_laplace(source, Fraction(t))
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(source, gamma):
            return y


def discrete_laplace_pmf(y, scale: float) -> np.ndarray:
    """The pmf of :func:`discrete_laplace` (for tests and documentation)."""
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(np.asarray(y, dtype=float))


def discrete_gaussian_pmf(y, sigma2: float) -> np.ndarray:
    """The pmf of :func:`discrete_gaussian` (for tests and documentation)."""
    sigma2 = float(sigma2)
    reach = int(math.ceil(40 * math.sqrt(sigma2))) + 1
    norm = np.exp(-np.arange(-reach, reach + 1, dtype=float) ** 2 / (2 * sigma2)).sum()
    return np.exp(-np.asarray(y, dtype=float) ** 2 / (2 * sigma2)) / norm


def log_theta_ratio(inv_var: float, terms: int = 64) -> float:
    """``log R(a)`` with ``R(a) = Σ_{n∈ℤ} e^{−a n²/2} / √(2π/a)`` for ``a = 1/s²``.

    By Poisson summation ``R(a) = Σ_n e^{−2π² n² / a} >= 1``; it is how much a discrete
    Gaussian's normaliser exceeds the continuous one, and bounds the extra Rényi
    divergence of discrete Gaussians (see ``analysis.sanitised.gnss.gnss_discrete_correction``).
    """
    a = float(inv_var)
    if not (a > 0 and math.isfinite(a)):
        raise PateError(f"inverse variance must be a positive number, got {inv_var}")
    n = np.arange(1, terms + 1, dtype=float)
    if a <= 2 * math.pi:  # Poisson form: terms fall at least like e^{-π n²}
        return float(np.log1p(2.0 * np.exp(-2.0 * math.pi**2 * n**2 / a).sum()))
    # Direct form (terms fall like e^{-π n²} too): log(Σ_k e^{-a k²/2}) − log √(2π/a).
    direct = 1.0 + 2.0 * np.exp(-0.5 * a * n**2).sum()
    return float(math.log(direct) - 0.5 * math.log(2 * math.pi / a))


# ------------------------------------------------------------------ exact samplers, vectorised
#
# The same constructions as above (CKS 2020, Algorithms 1 and 2 with an integer scale t), on
# numpy int64 arrays: every element runs its own rejection loop, and the loops run together
# over a mask of the elements still undecided. Each element consumes its own uint64 words of
# the source, and no floating-point number enters any decision, so each output has exactly
# the law of the scalar sampler's output (an element's loop is the scalar loop, with the
# same exact uniform draws); outputs are independent (disjoint words).

#: Bounds of the vectorised samplers: every intermediate (t·k in Algorithm 1, U + t·V) stays
#: far inside int64.
MAX_GRID_SCALE = 2**40


def _smear(values: np.ndarray) -> np.ndarray:
    """For each v >= 0 (uint64), the least 2^b − 1 >= v: every bit below the top one set."""
    m = values.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        m |= m >> np.uint64(shift)
    return m


def randbelow_array(source: NoiseSource, bounds) -> np.ndarray:
    """A uniform integer in ``[0, n)`` for each ``n`` of `bounds` (int64, 1 <= n < 2**63),
    exactly: rejection on the least power of two >= n, like :meth:`NoiseSource.randbelow`
    (the low bits of one fresh uint64 per try; each try succeeds with probability > 1/2)."""
    bounds = np.asarray(bounds, dtype=np.int64)
    if bounds.size and int(bounds.min()) < 1:
        raise PateError(f"randbelow needs bounds >= 1, got {int(bounds.min())}")
    n = bounds.ravel().astype(np.uint64)
    mask = _smear(n - np.uint64(1))
    out = np.zeros(n.shape, np.uint64)
    todo = np.arange(n.size)
    while todo.size:
        draw = source.uint64(todo.size) & mask[todo]
        ok = draw < n[todo]
        out[todo[ok]] = draw[ok]
        todo = todo[~ok]
    return out.astype(np.int64).reshape(bounds.shape)


def bernoulli_exp_array(source: NoiseSource, numerators, scale: int) -> np.ndarray:
    """For each integer u of `numerators` (0 <= u <= `scale`), 1 with probability
    exp(−u/scale), exactly (bool array).

    Canonne, Kamath, Steinke 2020, Algorithm 1 (γ = u/t ∈ [0, 1]): the parity of the first
    k >= 1 with Bernoulli(γ/k) = 0, where Bernoulli(u/(t k)) is ``randbelow(t k) < u``.
    """
    u = np.asarray(numerators, dtype=np.int64).ravel()
    t = int(scale)
    if not 1 <= t <= MAX_GRID_SCALE or (u.size and not (0 <= int(u.min()) and int(u.max()) <= t)):
        raise PateError(f"bernoulli_exp_array needs 1 <= scale <= 2**40 and 0 <= u <= scale, got scale {t}")
    k = np.ones(u.shape, np.int64)
    out = np.zeros(u.shape, bool)
    todo = np.arange(u.size)
    while todo.size:
        more = randbelow_array(source, t * k[todo]) < u[todo]
        stop = todo[~more]
        out[stop] = k[stop] % 2 == 1
        todo = todo[more]
        k[todo] += 1
    return out.reshape(np.shape(numerators))


def geometric_candidates(source: NoiseSource, count: int, t: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """One round of the geometric part of :func:`discrete_laplace_array` for ``count`` draws at
    scale t/s: ``(keep, y)``, the mask of the draws whose U was kept and, for those, Y = ⌊(U + tV)/s⌋
    with P[Y = y] ∝ e^{−y s/t} (CKS 2020, Algorithm 2, steps before the sign). Redraw the others."""
    u = randbelow_array(source, np.full(count, t, np.int64))
    keep = bernoulli_exp_array(source, u, t)
    u = u[keep]
    v = np.zeros(u.size, np.int64)
    going = np.arange(u.size)
    while going.size:
        success = bernoulli_exp_array(source, np.full(going.size, t, np.int64), t)
        v[going[success]] += 1
        going = going[success]
    return keep, (u + t * v) // s


def discrete_laplace_array(source: NoiseSource, scale, shape) -> np.ndarray:
    """int64 samples of `shape`, each with probability ∝ exp(−|y| / scale), exactly, for an
    integer ``1 <= scale <= 2**40`` (the vectorised :func:`discrete_laplace`) or a rational
    ``scale = t/s`` (a `Fraction`) with 1 <= t, s <= 2**40.

    Canonne, Kamath, Steinke 2020, Algorithm 2: U uniform on {0, …, t−1} kept with
    probability exp(−U/t) (so U has pmf ∝ e^{−u/t} on {0, …, t−1}), V the number of
    Bernoulli(e⁻¹) successes before the first failure (P[V >= v] = e^{−v}), X = U + tV (then
    P[X = x] ∝ e^{−x/t} on ℕ: x = u + tv uniquely), Y = ⌊X/s⌋ (so P[Y = y] ∝
    Σ_{r<s} e^{−(sy + r)/t} ∝ e^{−y s/t}), a fair sign, and (−, 0) rejected so that 0 is not
    counted twice: P[±Y = z] ∝ e^{−|z| s/t}; for s = 1, (1 − e^{−1/t})/(1 + e^{−1/t}) e^{−|z|/t}
    (:func:`discrete_laplace_pmf`). Every draw is an exact uniform integer from `source`.
    """
    if isinstance(scale, Fraction):
        t, s = scale.numerator, scale.denominator
    else:
        t, s = int(scale), 1
        if isinstance(scale, bool) or t != scale:
            t = 0
    if not (1 <= t <= MAX_GRID_SCALE and 1 <= s <= MAX_GRID_SCALE):
        raise PateError(f"the scale of the vectorised discrete Laplace must be an integer in [1, 2**40] or a "
                        f"fraction of such integers, got {scale}")
    shape = _shape(shape)
    out = np.zeros(math.prod(shape), np.int64)
    todo = np.arange(out.size)
    while todo.size:
        keep, x = geometric_candidates(source, todo.size, t, s)
        todo_kept = todo[keep]
        negative = (source.uint64(todo_kept.size) & np.uint64(1)).astype(bool)
        accept = ~(negative & (x == 0))
        out[todo_kept[accept]] = np.where(negative, -x, x)[accept]
        todo = np.concatenate([todo[~keep], todo_kept[~accept]])
    return out.reshape(shape)


def bernoulli_exp_gaps(source: NoiseSource, gaps, gamma) -> np.ndarray:
    """For each integer ``g >= 0`` of `gaps`, 1 with probability ``exp(−γ g)``, exactly (bool
    array of the shape of `gaps`), for a float ``gamma > 0`` — an exact dyadic rational
    ``γ = a / 2^e``.

    Canonne, Kamath, Steinke 2020, Algorithm 1, vectorised: ``x = γ g`` splits into its whole
    part w and fraction f = r / 2^e (exact integers: w = ⌊a g / 2^e⌋, r = a g mod 2^e); the coin
    is heads iff w Bernoulli(e⁻¹) coins and one Bernoulli(e^{−f}) coin are all heads (e^{−x} =
    e^{−w} e^{−f}, independent coins). Bernoulli(e^{−y}) for y = N/D ∈ [0, 1] is the parity of the
    first k >= 1 with Bernoulli(y/k) = 0, and Bernoulli(N/(D k)) = [R = 0 and V < N] for
    independent uniform R in [0, k) and V in [0, D) (randbelow(D k) = D R + V, N <= D). With
    ``e <= 63`` every draw is vectorised; a smaller γ (e > 63) takes the scalar
    :func:`bernoulli_exp` per entry, with the same law.
    """
    gaps = np.asarray(gaps, dtype=np.int64)
    if gaps.size and int(gaps.min()) < 0:
        raise PateError("bernoulli_exp_gaps needs gaps >= 0")
    frac = _fraction(gamma, "gamma")
    a, d = frac.numerator, frac.denominator
    e = d.bit_length() - 1
    if d != 1 << e or e > 63:
        return np.array([bernoulli_exp(source, frac * int(g)) for g in gaps.ravel()], bool).reshape(gaps.shape)
    flat = gaps.ravel()
    uniq, where = np.unique(flat, return_inverse=True)
    whole = np.array([(a * int(g)) >> e for g in uniq], dtype=object)
    if uniq.size and int(max(whole)) > 1 << 40:
        raise PateError(f"gamma x gap = {float(max(whole)):.3g} is too large for an exact coin (at most 2^40 e^-1 "
                        "factors); give a smaller gamma")
    rest = np.array([(a * int(g)) & (d - 1) for g in uniq], dtype=np.uint64)[where]
    out = np.ones(flat.size, bool)
    # the whole part: w coins of Bernoulli(e^-1) each (N = D: the test V < N always holds)
    left = np.array([int(w) for w in whole], dtype=np.int64)[where]
    todo = np.flatnonzero(left > 0)
    while todo.size:
        heads = _bernoulli_exp_fraction(source, np.full(todo.size, 1, np.uint64), 0)
        out[todo[~heads]] = False
        left[todo] -= 1
        todo = todo[heads & (left[todo] > 0)]
    todo = np.flatnonzero(out & (rest > 0))
    out[todo] = _bernoulli_exp_fraction(source, rest[todo], e)
    return out.reshape(gaps.shape)


def _bernoulli_exp_fraction(source: NoiseSource, numerators: np.ndarray, e: int) -> np.ndarray:
    """Bernoulli(exp(−N/2^e)) for each N of `numerators` (uint64, 0 < N <= 2^e, e <= 63), exactly
    (:func:`bernoulli_exp_gaps`)."""
    n = numerators.size
    k = np.ones(n, np.int64)
    out = np.zeros(n, bool)
    todo = np.arange(n)
    while todo.size:
        r_zero = randbelow_array(source, k[todo]) == 0
        v = source.uint64(todo.size) >> np.uint64(64 - e) if e else np.zeros(todo.size, np.uint64)
        more = r_zero & (v < numerators[todo])
        stop = todo[~more]
        out[stop] = k[stop] % 2 == 1
        todo = todo[more]
        k[todo] += 1
    return out
