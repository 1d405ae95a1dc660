"""The noisy aggregators as records: one frozen, self-validating record per mechanism,
carrying everything that depends on which mechanism it is.

A record is what the CLI builds from its options (:func:`from_options`), what the
aggregator runs (``pate.release.aggregation.aggregate``), what ``labels.npz`` stores and loads
(:meth:`Mechanism.to_arrays`, :func:`from_arrays`) and what ``analyze`` and ``plan``
account for. Its methods are the one place where the mechanisms differ:

- the data-independent cost of N queries: as a `analysis.mechanisms.composition.Cost`
  (:meth:`Mechanism.cost`) and as ε under each accountant
  (:meth:`Mechanism.independent_eps`: the moments accountant or the RDP conversions, and
  dp-accounting's PLD, `analysis.accounting.pld`), with the cap on answers of Confident-GNMax;
- the sanitised release published with the labels and its cost: the smooth-sensitivity
  release of LNMax (`analysis.sanitised.lnmax_release`) or GNSS (`analysis.sanitised.gnss`)
  (:meth:`Mechanism.published_eps`, :meth:`Mechanism.sanitised_cost`,
  :meth:`Mechanism.release_beta`);
- calibration to a budget (:meth:`Mechanism.calibrate`, `analysis.accounting.calibration`) and the
  data-dependent ε of the same noise (private).

The mechanism's name is parsed here only (:func:`record_type` and the ``from_*``
functions). Neighbouring relation everywhere: one teacher's vote changes (PATE 2017,
Section 3; PATE 2018, Section 4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, ClassVar, Mapping

import numpy as np

from analysis.accounting import calibration
from analysis.bounds import gnmax
from analysis.sanitised import gnss
from analysis.bounds import lnmax
from analysis.sanitised import lnmax_release
from analysis.accounting import pld
from analysis.accounting.calibration import Calibrated
from analysis.mechanisms.composition import Cost, approx_cost, gnss_cost
from analysis.core.errors import PateError
from analysis.accounting.rdp import DEFAULT_ORDERS
from analysis.core.validation import check_positive, check_sigma


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """Base of the records; ``name`` is the mechanism's name in files and on the CLI.

    Every record has ``cost``, ``independent_eps``, ``published_eps``, ``sanitised_cost``,
    ``release_beta``, ``noise_options``, ``rdp_accountant``, ``data_dependent`` and the
    class method ``calibrate`` (module docstring). ``accountants``: the data-independent accountants `analysis.independent` compares,
    each with the keywords of :meth:`independent_eps` that select it.
    """

    name: ClassVar[str] = ""
    #: Whether a noisy threshold step decides which queries are answered (Confident-GNMax):
    #: "unanswered" is then an outcome of every query, the step is one more noise coordinate,
    #: and Interactive-GNMax's check offsets apply to it.
    threshold_step: ClassVar[bool] = False
    accountants: ClassVar[Mapping[str, Mapping[str, str]]] = {}
    accounting_defaults: ClassVar[Mapping[str, float]] = {}  # parameters no data-independent cost needs

    def params(self) -> dict[str, float]:
        """The noise parameters, as labels.npz stores them."""
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The record as labels.npz arrays: ``mechanism`` and one 0-d array per parameter."""
        return {"mechanism": np.array(self.name), **{k: np.array(v) for k, v in self.params().items()}}

    def describe(self) -> str:
        return f"{self.name} (" + ", ".join(f"{k} {v:g}" for k, v in self.params().items()) + ")"

    def answerable(self, num_teachers: int) -> bool:
        """Whether any query can be answered with ``num_teachers`` teachers."""
        return True

    def charged(self, queried, answered, cap: int | None = None):
        """What a release is charged for, of its ``queried`` and ``answered`` queries (counts
        or rows) and its answer ``cap``: ``(answered, None)`` — only answers cost."""
        return answered, None

    def budget_refusal(self) -> str:
        """What a budget that allows no answer allows none of (`analysis.planning.plan.budget_plan`)."""
        return f"{self.name} answer at this noise"

    def plan_counts(self, fits: Callable[[int, int | None], bool], max_queries: int) -> tuple[int, int | None]:
        """``(queries, answer cap)`` of the largest plan with ``fits(queries, cap)``: every
        query answered (cap None), the most queries that fit."""
        return calibration.largest(lambda k: fits(k, None), max_queries), None


@dataclasses.dataclass(frozen=True)
class LNMax(Mechanism):
    """LNMax (PATE 2017, Eq. 1): argmax of the counts plus Lap(1/gamma) noise; each answer is
    ``2 gamma``-DP. Its sanitised ε is the smooth-sensitivity release
    (`analysis.sanitised.lnmax_release`)."""

    gamma: float
    name: ClassVar[str] = "lnmax"
    accountants: ClassVar[Mapping[str, Mapping[str, str]]] = {"moments": {}, "pld": {"accountant": "pld"}}

    def __post_init__(self):
        object.__setattr__(self, "gamma", check_positive("gamma", self.gamma))

    def cost(self, num_queries: int, max_answers: int | None = None) -> Cost:
        """``num_queries`` answers of a 2γ-DP mechanism (`analysis.mechanisms.composition`, kind "pure")."""
        return Cost("pure", {"eps0": 2.0 * self.gamma, "count": num_queries})

    def independent_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                        moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                        max_answers: int | None = None):
        """Data-independent ε of ``num_queries`` answers: the moments accountant
        (`analysis.bounds.lnmax.data_independent_eps`, over ``moments``) or, with
        ``accountant="pld"``, the PLD (`analysis.accounting.pld.lnmax_eps`)."""
        if accountant == "pld":
            return pld.lnmax_eps(num_queries, self.gamma, delta)
        return lnmax.data_independent_eps(num_queries, self.gamma, delta, moments)

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

    def release_beta(self, privacy, beta=None, gnss_beta=None):
        """The β of the release: ``beta`` when given, else the ``[privacy]`` section's
        ``lnmax_beta`` (``gnss_beta`` is GNSS's alone)."""
        return privacy.lnmax_beta if beta is None else beta

    def noise_options(self) -> str:
        return f"--gamma {self.gamma:g}"

    def rdp_accountant(self, conversion: str) -> str:
        return "moments accountant"

    def data_dependent(self, rows, delta, *, moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS,
                       conversion: str = "classic"):
        """(ε, moment, None): the data-dependent ε of answering ``rows`` — PRIVATE."""
        dd = lnmax.data_dependent_eps(rows, self.gamma, delta, moments)
        return dd.eps, dd.moment, None

    @classmethod
    def calibrate(cls, n: int, eps: float, delta: float, *, accountant: str = "rdp",
                  moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                  threshold=None, sigma_ratio=None, num_answered=None, num_teachers=None) -> Calibrated:
        """The largest γ whose data-independent ε of ``n`` answers is ≤ ``eps``
        (`analysis.accounting.calibration`: closed form for the moments accountant, bisection for the PLD)."""
        if threshold is not None or num_answered is not None:
            raise PateError("threshold and num_answered apply to confident-gnmax only")
        if accountant == "pld":
            gamma, eps_got = calibration.pld_gamma(n, eps, delta)
            order_got = math.nan
        else:
            gamma, _ = calibration.lnmax_gamma(n, eps, delta, moments)
            gamma, res = calibration.nudge(gamma, lambda gm: lnmax.data_independent_eps(n, gm, delta, moments),
                                           eps, up=False)
            eps_got, order_got = res.eps, res.moment
        notes = []
        if num_teachers is not None and 1.0 / gamma > num_teachers:
            notes.append(f"Laplace scale 1/gamma = {1 / gamma:.4g} exceeds the {num_teachers} teachers: "
                         "answers will be close to random")
        return Calibrated(cls(gamma), eps_got, order_got, "pld" if accountant == "pld" else "moments",
                          tuple(notes))


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


RECORDS: dict[str, type[Mechanism]] = {r.name: r for r in (LNMax, GNMax, ConfidentGNMax)}
NAMES = tuple(RECORDS)
#: The arrays `Mechanism.to_arrays` may write into a labels.npz: the name and every record's noise.
ARRAY_KEYS = ("mechanism", *dict.fromkeys(f.name for r in RECORDS.values() for f in dataclasses.fields(r)))


def _fields(record: type[Mechanism]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(record))


def record_type(mechanism: str) -> type[Mechanism]:
    """The record class of the mechanism named ``mechanism`` (before its noise is known,
    as in `analysis.planning.plan.plan`)."""
    if mechanism not in RECORDS:
        raise PateError(f"unknown mechanism '{mechanism}'; choose one of {', '.join(NAMES)}")
    return RECORDS[mechanism]


def from_options(mechanism: str, **given) -> Mechanism:
    """The record for ``mechanism`` from CLI-style options (``gamma=…, sigma=…``; None =
    not given). Every parameter the mechanism needs must be given and no other."""
    record = record_type(mechanism)
    needs = _fields(record)
    missing = [k for k in needs if given.get(k) is None]
    if missing:
        raise PateError(f"{mechanism} needs {', '.join('--' + k.replace('_', '-') for k in missing)} "
                        "(no default noise is assumed)")
    extra = [k for k, v in given.items() if v is not None and k not in needs]
    if extra:
        raise PateError(f"{', '.join('--' + k.replace('_', '-') for k in extra)} do(es) not apply to {mechanism}")
    return record(**{k: given[k] for k in needs})


def from_noise(mechanism: str, **noise) -> Mechanism:
    """The record of the named mechanism from its noise alone, for a data-independent
    analysis (`analysis.reporting.accountants`): parameters it does not use are ignored, and
    Confident-GNMax's threshold, on which no data-independent cost depends (its
    threshold step is a Gaussian mechanism of sensitivity 1 on the top count whatever
    the threshold; PATE 2018, Section 4), is 0 unless given."""
    record = record_type(mechanism)
    given = {**record.accounting_defaults, **{k: v for k, v in noise.items() if v is not None}}
    return from_options(mechanism, **{k: given.get(k) for k in _fields(record)})


def from_config(cfg) -> Mechanism:
    """The record of an ``[aggregation]`` config section (its unused keys are ignored)."""
    record = record_type(cfg.mechanism)
    return record(**{k: getattr(cfg, k) for k in _fields(record)})


def from_arrays(arrays: Mapping[str, np.ndarray], source: str = "labels.npz") -> Mechanism:
    """The record stored in a labels.npz (``mechanism`` and its parameters)."""
    if "mechanism" not in arrays:
        raise PateError(f"{source} has no 'mechanism' array; it was not written by `pate label`")
    name = str(np.asarray(arrays["mechanism"]))
    if name not in RECORDS:
        raise PateError(f"{source} names mechanism '{name}', which pate does not know")
    values = {}
    for key in _fields(RECORDS[name]):
        if key not in arrays:
            raise PateError(f"{source} labelled by {name} lacks its '{key}' parameter")
        try:
            values[key] = float(np.asarray(arrays[key]))
        except (TypeError, ValueError):
            raise PateError(f"{source}: '{key}' is not a number") from None
    try:
        return RECORDS[name](**values)
    except PateError as err:
        raise PateError(f"{source}: {err}") from None
