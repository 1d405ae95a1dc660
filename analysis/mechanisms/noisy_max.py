"""The PATE papers' noisy argmaxes as records: LNMax (PATE 2017), GNMax and Confident-GNMax
(PATE 2018), each with its float64 sampler, its data-independent cost, its data-dependent ε
(private) and the sanitised release that publishes it: LNMax's smooth-sensitivity release
(`analysis.sanitised.lnmax_release`) or GNSS (`analysis.sanitised.gnss`).

The noise is float64, drawn on the host from an `analysis.core.noise.NoiseSource` (fresh OS
entropy unless a research seed is given). The analyses are of the ideal continuous noise; the
samplers are within Kolmogorov distance 2^-50 of it, which adds at most
``analysis.core.noise.sampling_delta(Q, c, ε)`` to δ over Q queries of c noise coordinates
(`Mechanism.sampling_tv`; the derivation is in `analysis.core.noise`). Neighbouring relation:
one teacher's vote changes (PATE 2017, Section 3; PATE 2018, Section 4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, ClassVar, Mapping

import numpy as np

from analysis.accounting import calibration, pld
from analysis.accounting.calibration import Calibrated
from analysis.accounting.rdp import DEFAULT_ORDERS
from analysis.bounds import gnmax, lnmax
from analysis.bounds.interactive import check_statistic
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.core.validation import check_positive, check_sigma
from analysis.mechanisms.composition import Cost, approx_cost, gnss_cost
from analysis.mechanisms.record import UNANSWERED, Mechanism, PureArgmax, check_source, check_votes
from analysis.sanitised import gnss, lnmax_release


#: How many counts the noisy argmaxes draw noise for at once (`noisy_argmax`): each draw's
#: float64 temporaries (about a dozen arrays of this many values) stay a few MiB, whatever
#: the number of queries.
NOISE_BLOCK = 1 << 17


def laplace_noisy_counts(votes, gamma, noise) -> np.ndarray:
    """``votes + Lap(1/gamma)`` on every count, float64."""
    votes = check_votes(votes).astype(np.float64)
    return votes + check_source(noise).laplace(votes.shape, 1.0 / check_positive("gamma", gamma))


def gaussian_noisy_counts(votes, sigma, noise) -> np.ndarray:
    """``votes + N(0, sigma^2)`` on every count, float64."""
    votes = check_votes(votes).astype(np.float64)
    return votes + check_source(noise).normal(votes.shape, check_positive("sigma", sigma))


def noisy_argmax(votes, draw: Callable[[tuple[int, int]], np.ndarray], block: int | None = None) -> np.ndarray:
    """``argmax_j n_j + Z_j`` per row, the noise ``Z = draw(shape)`` drawn for blocks of rows
    of about ``block`` counts each (default `NOISE_BLOCK`; at least one row), in row order;
    int32 (one label per row).

    The same law as one draw for every count: ``draw`` (`NoiseSource.laplace`, `.normal`)
    makes one uint64 word per count, in row-major order, so successive blocks take the
    words of one draw of the whole array, in the same order — for a seeded source the very
    same words (Philox's stream is sequential), so the same labels; from OS entropy fresh,
    independent words either way. Only the memory changes: a few float64 arrays of one
    block, not of every count of every query."""
    votes = check_votes(votes)
    rows = max(1, int(NOISE_BLOCK if block is None else block) // votes.shape[1])
    out = np.empty(votes.shape[0], np.int32)
    for start in range(0, votes.shape[0], rows):
        part = votes[start:start + rows]
        out[start:start + part.shape[0]] = np.argmax(part.astype(np.float64) + draw(part.shape), axis=-1)
    return out


@dataclasses.dataclass(frozen=True)
class LNMax(PureArgmax):
    """LNMax (PATE 2017, Eq. 1): argmax of the counts plus Lap(1/gamma) noise; each answer is
    ``2 gamma``-DP. Its sanitised ε is the smooth-sensitivity release
    (`analysis.sanitised.lnmax_release`)."""

    name: ClassVar[str] = "lnmax"
    summary: ClassVar[str] = "Laplace noisy max (PATE 2017); sanitised eps by smooth sensitivity"
    sanitised: ClassVar[bool] = True

    def published_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                      moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                      max_answers: int | None = None, beta: float | None = None,
                      release_order: float | None = None, release_cost: float = 0.2) -> tuple[float, float, str]:
        """The labels' ε under ``accountant`` plus the smooth-sensitivity release's (ε_r, δ)
        (`analysis.sanitised.lnmax_release.with_release`), at 2δ."""
        labels = self.independent_eps(num_queries, delta, accountant=accountant, moments=moments)
        return lnmax_release.with_release(labels.eps, delta, beta)

    @classmethod
    def sanitised_cost(cls, values: Mapping, release_cost: float) -> Cost:
        """The ledger's record of a published smooth-sensitivity release (its ε_r and δ,
        ``eps_release_cost`` and ``delta`` of the report)."""
        return approx_cost(values["eps_release_cost"], values["delta"])

    def planned_sanitised_cost(self, queries: int, privacy) -> Cost:
        """The smooth-sensitivity release's ``(ε_r, δ)`` at the section's ``lnmax_beta``
        (`analysis.sanitised.lnmax_release.release_eps_cost`, the upper bound's shift included)."""
        beta = self.release_beta(privacy)
        return self.sanitised_cost({"eps_release_cost": lnmax_release.release_eps_cost(beta, privacy.delta),
                                    "delta": privacy.delta}, privacy.release_cost)

    def release_beta(self, privacy, beta=None, gnss_beta=None):
        """The β of the release: ``beta`` when given, else the ``[privacy]`` section's
        ``lnmax_beta`` (``gnss_beta`` is GNSS's alone)."""
        return privacy.lnmax_beta if beta is None else beta

    def q_bound(self, votes) -> np.ndarray:
        """PATE 2017, Lemma 4 (`analysis.bounds.lnmax.q_bound`): private."""
        return lnmax.q_bound(votes, self.gamma)

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        """``argmax_j n_j + Lap(1/gamma)`` per row (float64 noise, `analysis.core.noise`); int32."""
        scale = 1.0 / check_positive("gamma", self.gamma)
        source = check_source(source)
        return noisy_argmax(votes, lambda shape: source.laplace(shape, scale))


class _Gaussian(Mechanism):
    """GNMax and Confident-GNMax: RDP curves converted with a conversion, and the GNSS
    release (`analysis.sanitised.gnss`) of the sanitised ε."""

    accountants: ClassVar[Mapping[str, Mapping[str, str]]] = {
        "classic": {"conversion": "classic"}, "improved": {"conversion": "improved"}, "pld": {"accountant": "pld"}}

    def published_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                      moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                      max_answers: int | None = None, beta: float | None = None,
                      release_order: float | None = None, release_cost: float = 0.2) -> tuple[float, float, str]:
        """The labels' data-independent RDP curve composed with the GNSS release
        (`analysis.sanitised.gnss.with_release`), converted with ``conversion``, at δ; the release
        composes in RDP only, so ``accountant`` plays no part."""
        labels = self.independent_eps(num_queries, delta, orders=orders, conversion=conversion,
                                      max_answers=max_answers)
        return gnss.with_release(labels, delta, conversion=conversion, beta=beta, release_order=release_order,
                                 release_cost=release_cost)

    @classmethod
    def sanitised_cost(cls, values: Mapping, release_cost: float) -> Cost:
        """The ledger's record of a published GNSS release: its β and the σ_ss of
        ``release_cost`` at its order (``beta``, ``release_order`` of the report)."""
        order, beta = float(values["release_order"]), float(values["beta"])
        return gnss_cost(beta, gnss.gnss_parameters(order, beta, release_cost)[1])

    def planned_sanitised_cost(self, queries: int, privacy) -> Cost:
        """The GNSS release at ``release_order`` (else the order of the labels' data-independent
        optimum, as `analysis.reporting.report.gnmax_report` picks it) with its β and ``release_cost``;
        refused (before any vote) when that cost is too small for the published upper bound
        (`analysis.sanitised.gnss.upper_bound` at η = δ)."""
        order = privacy.release_order or self.independent_eps(int(queries), privacy.delta,
                                                              conversion=privacy.conversion).order
        beta, sigma_ss = gnss.gnss_parameters(float(order), self.release_beta(privacy), privacy.release_cost)
        gnss.upper_bound(sigma_ss, beta, privacy.delta)
        return self.sanitised_cost({"release_order": float(order), "beta": beta}, privacy.release_cost)

    def release_beta(self, privacy, beta=None, gnss_beta=None):
        """The β of the release: ``gnss_beta``, else ``beta``, else the ``[privacy]``
        section's ``gnss_beta`` (0: None, the default 0.1 / order)."""
        if gnss_beta is not None:
            return gnss_beta
        return (privacy.gnss_beta or None) if beta is None else beta

    def rdp_accountant(self, conversion: str) -> str:
        return conversion + " RDP conversion"


@dataclasses.dataclass(frozen=True)
class GNMax(_Gaussian):
    """GNMax (PATE 2018, Section 4.1): argmax of the counts plus N(0, sigma²) noise;
    ``(λ, λ/σ²)``-RDP per answer (Proposition 8)."""

    sigma: float
    name: ClassVar[str] = "gnmax"
    summary: ClassVar[str] = "Gaussian noisy max (PATE 2018); sanitised eps by GNSS"

    def __post_init__(self):
        object.__setattr__(self, "sigma", check_sigma(self.sigma, "sigma"))

    def cost(self, num_queries: int, max_answers: int | None = None) -> Cost:
        """``num_queries`` Gaussian answers: μ² = 2N/σ² (L2 sensitivity √2)."""
        return Cost("gaussian", {"mu2": 2.0 * num_queries / self.sigma ** 2})

    def independent_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                        moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                        max_answers: int | None = None):
        """Data-independent ε of ``num_queries`` answers: N·λ/σ² converted with
        ``conversion`` (`analysis.bounds.gnmax.data_independent_eps`) or, with
        ``accountant="pld"``, the PLD (`analysis.accounting.pld.gnmax_eps`)."""
        if accountant == "pld":
            return pld.gnmax_eps(num_queries, self.sigma, delta)
        return gnmax.data_independent_eps(num_queries, self.sigma, delta, orders, conversion=conversion)

    def noise_options(self) -> str:
        return f"--sigma {self.sigma:g}"

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        """``argmax_j n_j + N(0, sigma^2)`` per row (float64 noise, `analysis.core.noise`); int32."""
        source = check_source(source)
        return noisy_argmax(votes, lambda shape: source.normal(shape, self.sigma))

    def data_dependent(self, rows, delta, *, moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS,
                       conversion: str = "classic"):
        """(ε, order, None): the data-dependent ε of answering ``rows`` — PRIVATE."""
        dd = gnmax.data_dependent_eps(rows, self.sigma, delta, orders, conversion=conversion)
        return dd.eps, dd.order, None

    @classmethod
    def calibrate(cls, n: int, eps: float, delta: float, *, accountant: str = "rdp",
                  moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                  threshold=None, sigma_ratio=None, num_answered=None, num_teachers=None) -> Calibrated:
        """The smallest σ whose data-independent ε of ``n`` answers is ≤ ``eps``
        (`analysis.accounting.calibration`: RDP N·λ/σ², or μ² = 2N/σ² for the PLD)."""
        if threshold is not None or num_answered is not None:
            raise PateError("threshold and num_answered apply to confident-gnmax only")
        if accountant == "pld":
            sigma, eps_got = calibration.pld_sigma(2.0 * n, lambda s: pld.gnmax_eps(n, s, delta).eps, eps, delta)
            order_got = math.nan
        else:
            sigma, _ = calibration.gaussian_sigma(lambda lam: n * lam, eps, delta, orders, conversion)
            sigma, res = calibration.nudge(
                sigma, lambda s: gnmax.data_independent_eps(n, s, delta, orders, conversion=conversion), eps)
            eps_got, order_got = res.eps, res.order
        notes = []
        if num_teachers is not None and sigma > num_teachers:
            notes.append(f"sigma = {sigma:.4g} exceeds the {num_teachers} teachers: answers will be close to random")
        return Calibrated(cls(sigma), eps_got, order_got, "pld" if accountant == "pld" else conversion,
                          tuple(notes))


@dataclasses.dataclass(frozen=True)
class ConfidentGNMax(_Gaussian):
    """Confident-GNMax (PATE 2018, Algorithm 1): answer only when the top count plus
    N(0, sigma_threshold²) reaches ``threshold``, then GNMax with ``sigma``.

    Its data-independent cost composes the threshold step on every query and GNMax on
    the answers — all of them, or at most ``max_answers`` when the labeller capped its
    answers in advance (answers past the cap are withheld, a post-processing of the
    uncapped release)."""

    threshold: float
    sigma_threshold: float
    sigma: float
    name: ClassVar[str] = "confident-gnmax"
    summary: ClassVar[str] = "GNMax where a noisy top count clears a threshold (PATE 2018, Algorithm 1)"
    threshold_step: ClassVar[bool] = True
    accounting_defaults: ClassVar[Mapping[str, float]] = {"threshold": 0.0}

    def __post_init__(self):
        threshold = float(self.threshold)
        if not math.isfinite(threshold):
            raise PateError(f"threshold must be a finite number, got {self.threshold}")
        object.__setattr__(self, "threshold", threshold)
        object.__setattr__(self, "sigma_threshold", check_sigma(self.sigma_threshold, "sigma_threshold"))
        object.__setattr__(self, "sigma", check_sigma(self.sigma, "sigma"))

    def cost(self, num_queries: int, max_answers: int | None = None) -> Cost:
        """The threshold step on every query (μ² = N/σ₁², sensitivity 1) and GNMax on
        ``max_answers`` of them when the cap was fixed in advance, else on all (2A/σ₂²)."""
        a = num_queries if max_answers is None else min(int(max_answers), num_queries)
        return Cost("gaussian", {"mu2": num_queries / self.sigma_threshold ** 2 + 2.0 * a / self.sigma ** 2})

    def independent_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                        moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                        max_answers: int | None = None):
        """Data-independent ε of ``num_queries`` threshold steps and GNMax on
        ``max_answers`` (default all) of them: the RDP curve converted with ``conversion``
        (`analysis.bounds.gnmax.data_independent_eps`) or, with ``accountant="pld"``, the PLD
        (`analysis.accounting.pld.gnmax_eps`)."""
        if accountant == "pld":
            return pld.gnmax_eps(num_queries, self.sigma, delta, sigma_threshold=self.sigma_threshold,
                                 num_answered=max_answers)
        return gnmax.data_independent_eps(num_queries, self.sigma, delta, orders, sigma_threshold=self.sigma_threshold,
                                          num_answered=max_answers, conversion=conversion)

    def answerable(self, num_teachers: int) -> bool:
        return self.threshold <= num_teachers

    def charged(self, queried, answered, cap: int | None = None):
        """``(queried, cap)``: the threshold step runs on every query, GNMax on at most ``cap``."""
        return queried, cap

    def budget_refusal(self) -> str:
        return "Confident-GNMax answer at these noise levels"

    def plan_counts(self, fits: Callable[[int, int | None], bool], max_queries: int) -> tuple[int, int | None]:
        """The most threshold steps ``n`` that fit with no answer, then the most answers
        ``A`` among them that fit."""
        n = calibration.largest(lambda k: fits(k, 0), max_queries)
        return n, (calibration.largest(lambda k: fits(n, k), n) if n else 0)

    def noise_options(self) -> str:
        return f"--sigma {self.sigma:g} / --sigma-threshold {self.sigma_threshold:g}"

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        """Answers a row only when ``max_j n_j + N(0, sigma_threshold^2) >= threshold``, then
        with GNMax at ``sigma``; with the student's check ``offsets`` o (Interactive-GNMax,
        Algorithm 2; `analysis.bounds.interactive`) the test is on ``max_j (n_j - o_j)``: the
        teachers answer where they outvote the student. Unanswered rows get `UNANSWERED`; the
        threshold noise and the answer noise are independent draws."""
        votes = check_votes(votes)
        source = check_source(source)
        noisy_top = check_statistic(votes, offsets) + source.normal(votes.shape[0], self.sigma_threshold)
        labels = noisy_argmax(votes, lambda shape: source.normal(shape, self.sigma))  # after the threshold noise
        return np.where(noisy_top >= self.threshold, labels, UNANSWERED).astype(np.int32)

    def data_dependent(self, rows, delta, *, moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS,
                       conversion: str = "classic"):
        """(ε, order, expected answers) of the threshold step on ``rows`` — PRIVATE."""
        dd = gnmax.data_dependent_eps(rows, self.sigma, delta, orders, threshold=self.threshold,
                                      sigma_threshold=self.sigma_threshold, conversion=conversion)
        return dd.eps, dd.order, dd.expected_answered

    @classmethod
    def calibrate(cls, n: int, eps: float, delta: float, *, accountant: str = "rdp",
                  moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                  threshold=None, sigma_ratio=None, num_answered=None, num_teachers=None) -> Calibrated:
        """The smallest σ₂ (σ₁ = ``sigma_ratio`` · σ₂) whose data-independent ε of ``n``
        threshold steps and ``num_answered`` (default n) answers is ≤ ``eps``
        (`analysis.accounting.calibration`)."""
        if threshold is None:
            raise PateError("confident-gnmax needs a threshold (in votes)")
        threshold = float(threshold)
        if not math.isfinite(threshold):
            raise PateError(f"threshold must be a finite number, got {threshold}")
        ratio = check_positive("sigma_ratio", sigma_ratio)
        low, high = calibration.SIGMA_RATIO_RANGE
        if not low <= ratio <= high:
            raise PateError(f"--sigma-ratio must lie between {low:g} and {high:g}, got {ratio:g}")
        a = n if num_answered is None else int(num_answered)
        if not 0 <= a <= n:
            raise PateError(f"num_answered must be between 0 and {n}, got {num_answered}")
        notes = []
        if num_teachers is not None and threshold > num_teachers:
            notes.append(f"threshold {threshold:g} exceeds the {num_teachers} teachers: few queries will be answered")
        if accountant == "pld":
            # μ² = N/σ₁² + 2A/σ₂² = (N/ratio² + 2A)/σ₂².
            sigma, eps_got = calibration.pld_sigma(n / ratio**2 + 2.0 * a, lambda s: pld.gnmax_eps(
                n, s, delta, sigma_threshold=ratio * s, num_answered=a).eps, eps, delta)
            order_got = math.nan
        else:
            sigma, _ = calibration.gaussian_sigma(lambda lam: lam * (n / (2.0 * ratio**2) + a), eps, delta, orders,
                                                  conversion)
            sigma, res = calibration.nudge(sigma, lambda s: gnmax.data_independent_eps(
                n, s, delta, orders, sigma_threshold=ratio * s, num_answered=a, conversion=conversion), eps)
            eps_got, order_got = res.eps, res.order
        sigma_threshold = ratio * sigma
        if a < n:
            notes.append(f"valid only if the labeller stops after {a} answers")
        if num_teachers is not None and sigma > num_teachers:
            notes.append(f"sigma = {sigma:.4g} exceeds the {num_teachers} teachers: answers will be close to random")
        if num_teachers is not None and sigma_threshold > num_teachers:
            notes.append(f"sigma_threshold = {sigma_threshold:.4g} exceeds the {num_teachers} teachers: "
                         "the threshold test will be close to a coin flip")
        return Calibrated(cls(threshold, sigma_threshold, sigma), eps_got, order_got,
                          "pld" if accountant == "pld" else conversion, tuple(notes))
