"""GNMax and Confident-GNMax with exact coins: the PATE 2018 mechanisms with independent
discrete Gaussian noise N_Z(0, σ²) on every integer count, sampled exactly (Canonne, Kamath,
Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020 — CKS20 — Algorithm 3,
vectorised: `analysis.mechanisms.fine_grained.discrete_gaussian_rational`), from the release's
`analysis.core.noise.NoiseSource` (OS entropy; a research seed reproduces the labels).

Why. The float64 records (`analysis.mechanisms.noisy_max`) are analysed as the ideal continuous
mechanism, and their sampler adds ``(1 + e^ε) Q c² κ / 2`` to δ (`analysis.core.noise.sampling_delta`):
at Glyph scale (Q = 100,000 queries, c = 151 coordinates) that is 1 — no guarantee. Here the
sampled law *is* the analysed one: no δ is added (`Mechanism.exact`).

Mechanisms. GNMax-exact answers ``argmax_j (n_j + X_j)``, X_j i.i.d. N_Z(0, V), ties to the
lowest class index (a public rule; ``np.argmax``). Confident-GNMax-exact answers a query only
when ``s + Z ≥ T`` (s = max_j n_j, or max_j (n_j − o_j) with Interactive-GNMax's integer
offsets; Z ~ N_Z(0, V₁) independent of the rest), then with GNMax-exact. The variances V, V₁
the sampler uses are the least values ≥ σ², σ₁² on the vectorised sampler's grid (multiples
of 1/64, coarser for σ above ~300, t(t − 1) above ~800: :func:`sampler_variance`; more noise,
never less).

Privacy (replace-one teacher: the vote vector moves by +1/−1 in two coordinates, L2² = 2; s
by at most 1), proofs in `analysis.bounds.discrete_gnmax`:

- data-independent (public): (λ, λ/σ²)-RDP per answer and λ/(2σ₁²) per threshold check
  (CKS20, Proposition 5, additive over the independent coordinates), the continuous GNMax's
  curve, so the ε at δ is `analysis.bounds.gnmax.data_independent_eps`'s, with the classic or
  improved conversion; **no PLD route** (the continuous Gaussian's privacy profile is not
  proven to bound the discrete one's): the ledger's cost is ``"discrete-gaussian"``
  (`analysis.mechanisms.composition`), RDP only;
- data-dependent (private): PATE 2018, Theorem 6 with q from the discrete Gaussian's
  subgaussian tail (CKS20, Corollary 9);
- **no sanitised release**: the smooth sensitivity of `analysis.sanitised.gnmax_sensitivity` is
  proven for the erfc q of continuous noise only, so ``sanitised`` is False and the headline
  is the data-independent ε (docs/privacy.md).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import ClassVar, Mapping

import numpy as np

from analysis.accounting.calibration import Calibrated
from analysis.accounting.rdp import DEFAULT_ORDERS
from analysis.bounds import discrete_gnmax, lnmax
from analysis.bounds.interactive import check_statistic
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import noisy_max
from analysis.mechanisms.composition import Cost
from analysis.mechanisms.fine_grained import discrete_gaussian_rational, variance_on_grid
from analysis.mechanisms.record import UNANSWERED, NoSanitisedRelease, check_source, check_votes

#: The data-independent accountants of the exact records: the RDP curve, converted two ways
#: (no PLD: the module docstring).
RDP_ACCOUNTANTS: Mapping[str, Mapping[str, str]] = {"classic": {"conversion": "classic"},
                                                     "improved": {"conversion": "improved"}}


#: The largest t of a variance t(t − 1) the vectorised sampler takes (its constant 2t(t − 1) <= 2^40).
LARGEST_T = 741_455


def sampler_variance(sigma: float, name: str = "sigma") -> Fraction:
    """V >= σ² (σ the float as given, squared exactly) that the vectorised discrete Gaussian
    takes: the least multiple of 1/64 (or of a coarser 1/2^j; `analysis.mechanisms.fine_grained.
    variance_on_grid`) for σ up to ~800, else the least t(t − 1) >= σ² (then ⌊√V⌋ + 1 = t divides
    V and the sampler's constant is 2t(t − 1); V − σ² < 2σ, under 0.3% of σ² past σ = 800), up to
    σ ~ 7.4e5. Beyond it, refused in one line."""
    exact = Fraction(float(sigma)) ** 2
    try:
        return variance_on_grid(exact)
    except PateError:
        pass
    t = (1 + math.isqrt(4 * math.ceil(exact))) // 2  # about the root of t(t − 1) = σ²
    while t * (t - 1) < exact:
        t += 1
    if t > LARGEST_T:
        raise PateError(f"{name} = {sigma:g} is beyond the exact discrete Gaussian sampler (sigma <= ~7.4e5); "
                        "use the float64 record or less noise")
    return Fraction(t * (t - 1))


def float_up(value: Fraction) -> float:
    """The least float >= a rational (a variance that enters a tail bound never rounds down).
    A :func:`sampler_variance` is a multiple of 1/2^j (j <= 6) below 2^32, or an integer below
    2^40, so its float is the variance itself, exactly."""
    x = float(value)
    return math.nextafter(x, math.inf) if Fraction(x) < value else x


def discrete_noisy_argmax(votes, variance: Fraction, source: NoiseSource, block: int | None = None) -> np.ndarray:
    """``argmax_j (n_j + X_j)`` per row, X_j i.i.d. N_Z(0, variance) drawn exactly, ties to the
    lowest index; int32. The noise is drawn for blocks of about ``block`` counts (default
    `analysis.mechanisms.noisy_max.NOISE_BLOCK`), in row order: each element of an exact
    rejection sampler has the scalar sampler's law whatever its block, so only the memory and
    (for a seed) which words go to which count depend on the block size, a fixed constant."""
    votes = check_votes(votes)
    rows = max(1, int(noisy_max.NOISE_BLOCK if block is None else block) // votes.shape[1])
    out = np.empty(votes.shape[0], np.int32)
    for start in range(0, votes.shape[0], rows):
        part = votes[start:start + rows]
        out[start:start + part.shape[0]] = np.argmax(part + discrete_gaussian_rational(source, variance, part.shape),
                                                     axis=-1)
    return out


class _ExactCoins(NoSanitisedRelease):
    """What the exact-coin records share (mixed in before their float64 parents)."""

    exact: ClassVar[bool] = True
    accountants: ClassVar[Mapping[str, Mapping[str, str]]] = RDP_ACCOUNTANTS

    @property
    def variance(self) -> Fraction:
        """V, the answer noise's exact variance parameter (:func:`sampler_variance`)."""
        return sampler_variance(self.sigma)

    def independent_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                        moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                        max_answers: int | None = None):
        """The float64 record's RDP route (the same curve: CKS20, Proposition 5); no PLD."""
        if accountant == "pld":
            raise PateError(f"{self.name} is accounted in RDP only: no PLD of the discrete Gaussian is proven here")
        return super().independent_eps(num_queries, delta, orders=orders, conversion=conversion,
                                       max_answers=max_answers)

    def published_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                      moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                      max_answers: int | None = None, beta: float | None = None,
                      release_order: float | None = None, release_cost: float = 0.2) -> tuple[float, float, str]:
        """The labels' data-independent ε at δ: no sanitised release exists (module docstring)."""
        labels = self.independent_eps(num_queries, delta, orders=orders, conversion=conversion,
                                      max_answers=max_answers)
        return labels.eps, delta, "no sanitised release: the data-independent eps is the headline"

    def rdp_accountant(self, conversion: str) -> str:
        return conversion + " RDP conversion (discrete Gaussian)"

    @classmethod
    def calibrate(cls, n: int, eps: float, delta: float, *, accountant: str = "rdp", **kwargs) -> Calibrated:
        """The float64 record's RDP calibration (the same curve), as this record; no PLD."""
        if accountant == "pld":
            raise PateError(f"{cls.name} is accounted in RDP only: no PLD of the discrete Gaussian is proven here")
        return super().calibrate(n, eps, delta, accountant=accountant, **kwargs)  # builds `cls`


@dataclasses.dataclass(frozen=True)
class GNMaxExact(_ExactCoins, noisy_max.GNMax):
    """GNMax with exact discrete Gaussian coins (module docstring)."""

    name: ClassVar[str] = "gnmax-exact"
    summary: ClassVar[str] = ("GNMax with exact discrete Gaussian coins (CKS 2020): no floating-point delta; "
                              "data-independent headline")

    def __post_init__(self):
        super().__post_init__()
        sampler_variance(self.sigma)

    def cost(self, num_queries: int, max_answers: int | None = None) -> Cost:
        """``num_queries`` discrete Gaussian answers: μ² = 2N/σ² (L2 sensitivity √2), RDP only."""
        return Cost("discrete-gaussian", {"mu2": 2.0 * num_queries / self.sigma ** 2})

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        """``argmax_j n_j + N_Z(0, V)`` per row, exactly (:func:`discrete_noisy_argmax`); int32."""
        return discrete_noisy_argmax(votes, self.variance, check_source(source))

    def data_dependent(self, rows, delta, *, moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS,
                       conversion: str = "classic"):
        """(ε, order, None) of answering ``rows`` — PRIVATE (`analysis.bounds.discrete_gnmax`)."""
        dd = discrete_gnmax.data_dependent_eps(rows, self.sigma, float_up(self.variance), delta, orders,
                                               conversion=conversion)
        return dd.eps, dd.order, None


@dataclasses.dataclass(frozen=True)
class ConfidentGNMaxExact(_ExactCoins, noisy_max.ConfidentGNMax):
    """Confident-GNMax with exact discrete Gaussian coins on the check and the answer (module
    docstring)."""

    name: ClassVar[str] = "confident-gnmax-exact"
    summary: ClassVar[str] = ("Confident-GNMax with exact discrete Gaussian coins (CKS 2020): no floating-point "
                              "delta; data-independent headline")

    def __post_init__(self):
        super().__post_init__()
        sampler_variance(self.sigma)
        sampler_variance(self.sigma_threshold, "sigma_threshold")

    @property
    def variance_threshold(self) -> Fraction:
        """V₁, the check noise's exact variance parameter (:func:`sampler_variance`)."""
        return sampler_variance(self.sigma_threshold, "sigma_threshold")

    def cost(self, num_queries: int, max_answers: int | None = None) -> Cost:
        """The check on every query (μ² = N/σ₁²) and the answer on ``max_answers`` (default
        all; 2A/σ₂²), discrete Gaussians: RDP only."""
        a = num_queries if max_answers is None else min(int(max_answers), num_queries)
        return Cost("discrete-gaussian", {"mu2": num_queries / self.sigma_threshold ** 2 + 2.0 * a / self.sigma ** 2})

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        """Answers a row only when ``s + N_Z(0, V₁) >= threshold`` (s the integer statistic,
        `analysis.bounds.interactive.check_statistic`), then with GNMax-exact; every check's noise
        is drawn first, then the answers' noise for the answered rows only (the noises are
        independent, so the law is that of drawing it for every row). `UNANSWERED` elsewhere."""
        votes = check_votes(votes)
        source = check_source(source)
        stat = check_statistic(votes, offsets)
        noisy_top = stat + discrete_gaussian_rational(source, self.variance_threshold, votes.shape[0])
        answered = np.flatnonzero(noisy_top >= self.threshold)  # an integer against a float: exact
        out = np.full(votes.shape[0], UNANSWERED, np.int32)
        if answered.size:
            out[answered] = discrete_noisy_argmax(votes[answered], self.variance, source)
        return out

    def data_dependent(self, rows, delta, *, moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS,
                       conversion: str = "classic", offsets=None):
        """(ε, order, bound on the expected answers) of the checks on ``rows`` — PRIVATE
        (`analysis.bounds.discrete_gnmax`)."""
        dd = discrete_gnmax.data_dependent_eps(
            rows, self.sigma, float_up(self.variance), delta, orders, threshold=self.threshold,
            sigma_threshold=self.sigma_threshold, variance_threshold=float_up(self.variance_threshold),
            conversion=conversion, offsets=offsets)
        return dd.eps, dd.order, dd.expected_answered
