"""What a mechanism record is: the base every release kind extends, with the capabilities the
steps ask about, and the family of argmaxes whose every answer is pure 2γ-DP.

A record is what the CLI builds from its options, what the aggregator runs
(:meth:`Mechanism.sample`), what ``labels.npz`` stores and loads (:meth:`Mechanism.to_arrays`,
`analysis.mechanisms.registry.from_arrays`) and what ``analyze``, ``plan``, ``audit`` and the
ledger account for. A step never tests a mechanism's name: it asks the record.

Capabilities (class attributes; the module docstring of `analysis.mechanisms.registry` lists
every record with its values):

- ``needs_teachers``: it aggregates teacher votes (False: fine-grained PATE, whose private
  records vote themselves);
- ``exact``: its noise is sampled exactly (no floating-point δ, :meth:`Mechanism.sampling_tv`
  is 0); the float64 samplers of LNMax and the Gaussians add the δ of `analysis.core.noise`;
- ``sanitised``: a smooth-sensitivity release of its data-dependent ε exists and
  ``analyze`` publishes one (LNMax's, GNSS); without it the headline is the
  data-independent ε and the data-dependent ε stays a private diagnostic;
- ``threshold_step``: a noisy threshold decides which queries are answered;
- ``noisy_histogram``: its release is a noisy vote histogram, kept in ``labels.npz`` beside the
  labels it gives (fine-grained PATE's ``noisy_counts``): post-processing may read more than the
  argmax (the student's soft targets, `pate.release.soft_targets`);
- ``accountants``: the data-independent accountants ``analysis.reporting.accountants``
  compares, each with the keywords of :meth:`Mechanism.independent_eps` that select it.

Neighbouring relation everywhere: one teacher's vote changes (PATE 2017, Section 3;
PATE 2018, Section 4), which a replaced training example causes.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Callable, ClassVar, Mapping

import numpy as np

from analysis.accounting import calibration, pld
from analysis.accounting.calibration import Calibrated
from analysis.accounting.rdp import DEFAULT_ORDERS
from analysis.bounds import lnmax
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource, sampling_tv
from analysis.core.validation import check_counts, check_positive
from analysis.mechanisms.composition import Cost

#: The label of a query a mechanism did not answer (Confident-GNMax's threshold step).
UNANSWERED = -1


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """Base of the records; ``name`` is the mechanism's name in files and on the CLI.

    Every record has ``cost``, ``independent_eps``, ``published_eps``, ``sanitised_cost``,
    ``release_beta``, ``noise_options``, ``rdp_accountant``, ``data_dependent``, ``sample``,
    ``dp_event`` and the class method ``calibrate``; the capabilities are the class attributes
    of the module docstring.
    """

    name: ClassVar[str] = ""
    #: One line for `--help` and the docs.
    summary: ClassVar[str] = ""
    needs_teachers: ClassVar[bool] = True
    exact: ClassVar[bool] = False
    sanitised: ClassVar[bool] = True
    #: Whether a noisy threshold step decides which queries are answered (Confident-GNMax):
    #: "unanswered" is then an outcome of every query, the step is one more noise coordinate,
    #: and Interactive-GNMax's check offsets apply to it.
    threshold_step: ClassVar[bool] = False
    noisy_histogram: ClassVar[bool] = False
    accountants: ClassVar[Mapping[str, Mapping[str, str]]] = {}
    accounting_defaults: ClassVar[Mapping[str, float]] = {}  # parameters no data-independent cost needs

    def planned_sanitised_cost(self, queries: int, privacy) -> Cost:
        """The ledger cost of the sanitised ε `pate analyze` will draw after ``queries`` queries with
        a ``[privacy]`` section's settings (``delta``, ``conversion``, ``release_order``,
        ``release_cost``, the β keys): public values only, so `pate run` checks its whole budget
        before any work. A record with a sanitised release says how; one without raises."""
        raise PateError(f"{self.name} declares a sanitised release but no plan of its cost "
                        "(planned_sanitised_cost): it cannot be budgeted")

    def params(self) -> dict[str, float]:
        """The noise parameters, as labels.npz stores them."""
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The record as labels.npz arrays: ``mechanism`` and one 0-d array per parameter."""
        return {"mechanism": np.array(self.name), **{k: np.array(v) for k, v in self.params().items()}}

    def describe(self) -> str:
        return f"{self.name} (" + ", ".join(f"{k} {v:g}" for k, v in self.params().items()) + ")"

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The noise options the record is built from (``--gamma`` → ``gamma``, …)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def array_keys(cls) -> tuple[str, ...]:
        """The labels.npz arrays of its parameters (besides ``mechanism``)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_options(cls, **given) -> "Mechanism":
        """The record from CLI-style options (``gamma=…, sigma=…``; None = not given): every
        parameter the mechanism needs must be given and no other."""
        needs = cls.option_names()
        missing = [k for k in needs if given.get(k) is None]
        if missing:
            raise PateError(f"{cls.name} needs {', '.join('--' + k.replace('_', '-') for k in missing)} "
                            "(no default noise is assumed)")
        extra = [k for k, v in given.items() if v is not None and k not in needs]
        if extra:
            raise PateError(f"{', '.join('--' + k.replace('_', '-') for k in extra)} do(es) not apply to {cls.name}")
        return cls(**{k: given[k] for k in needs})

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], source: str = "labels.npz") -> "Mechanism":
        """The record stored in a labels.npz: one 0-d number array per parameter."""
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in arrays:
                raise PateError(f"{source} labelled by {cls.name} lacks its '{f.name}' parameter")
            try:
                values[f.name] = float(np.asarray(arrays[f.name]))
            except (TypeError, ValueError):
                raise PateError(f"{source}: '{f.name}' is not a number") from None
        try:
            return cls(**values)
        except PateError as err:
            raise PateError(f"{source}: {err}") from None

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

    def noise_coordinates(self, num_classes: int) -> int:
        """Independent noise draws per query: one per class, one more for a threshold step."""
        return int(num_classes) + (1 if self.threshold_step else 0)

    def sampling_tv(self, num_queries: int, num_classes: int) -> float:
        """Total variation between the implemented sampler and the ideal mechanism over
        ``num_queries`` queries (`analysis.core.noise.sampling_tv`): 0 for an exact sampler."""
        return 0.0 if self.exact else sampling_tv(int(num_queries), self.noise_coordinates(num_classes))

    def sample(self, votes, source: NoiseSource, offsets=None) -> np.ndarray:
        """The labels of every row of ``votes`` (int32; `UNANSWERED` where not answered). Every
        record that aggregates teacher votes (`needs_teachers`) has its own; the others do not
        answer votes at all."""
        raise PateError(f"{self.name} does not answer teacher votes: its release is made from the private "
                        "records themselves")

    def dp_event(self, num_queries: int, max_answers: int | None = None):
        """The dp-accounting event of ``num_queries`` answers (`analysis.mechanisms.events`)."""
        from analysis.mechanisms import events

        return events.of_cost(self.cost(num_queries, max_answers))


def check_votes(votes) -> np.ndarray:
    """A queries × classes histogram of counts, as int64."""
    if np.ndim(votes) != 2 or np.shape(votes)[0] == 0:
        raise PateError(f"votes must be a non-empty queries × classes histogram, got shape {np.shape(votes)}")
    return check_counts(votes)  # int64; the caller's own array when it is one (read, never written)


def check_source(noise) -> NoiseSource:
    if not isinstance(noise, NoiseSource):
        raise PateError("the aggregators take an analysis.core.noise.NoiseSource "
                        "(pate.release.aggregation.noise_source(seed)), not a JAX key")
    return noise


class NoSanitisedRelease:
    """What a record without a sanitised release shares (mixed in before its parents): no
    sanitised draw, so no GNSS cost nor β; its headline is the data-independent ε."""

    sanitised: ClassVar[bool] = False

    @classmethod
    def sanitised_cost(cls, values: Mapping, release_cost: float) -> Cost:
        raise PateError(f"{cls.name} has no sanitised release: its headline is the data-independent eps")

    def planned_sanitised_cost(self, queries: int, privacy) -> Cost:
        return self.sanitised_cost({}, 0.0)

    def release_beta(self, privacy, beta=None, gnss_beta=None):
        return None


#: The largest γ of an exactly sampled pure argmax (permute-and-flip, the exponential mechanism):
#: its coins take γ × gap e⁻¹ factors (`analysis.core.noise.bernoulli_exp_gaps`, at most 2⁴⁰),
#: so with gaps up to 10⁹ teachers this bound keeps every coin in reach; an answer is then
#: 2000-DP already, no privacy left.
MAX_EXACT_GAMMA = 1000.0


@dataclasses.dataclass(frozen=True)
class PureArgmax(NoSanitisedRelease, Mechanism, abc.ABC):
    """An argmax of the counts whose every answer is ``2 gamma``-DP: one teacher's changed vote
    moves one count down by one and another up by one, and each mechanism of the family
    (LNMax, permute-and-flip, the exponential mechanism) is ``2γ``-DP under that change.

    Shared: the data-independent cost (N answers of a pure ε₀ = 2γ mechanism, kind "pure" of
    `analysis.mechanisms.composition`), ε under the moments accountant (PATE 2017, Theorem 2)
    or the PLD (randomized response self-composed, `analysis.accounting.pld.lnmax_eps`: every
    ε₀-DP pair is a post-processing of binary randomized response, Kairouz, Oh & Viswanath
    2015), and the calibration of γ to a budget.
    """

    gamma: float
    accountants: ClassVar[Mapping[str, Mapping[str, str]]] = {"moments": {}, "pld": {"accountant": "pld"}}

    def __post_init__(self):
        gamma = check_positive("gamma", self.gamma)
        if self.exact and gamma > MAX_EXACT_GAMMA:
            raise PateError(f"{self.name}: gamma = {gamma:.4g} is past {MAX_EXACT_GAMMA:g}, the most its exact coins "
                            f"take (each answer would be {2 * gamma:.4g}-DP: no privacy left); give a gamma of at "
                            f"most {MAX_EXACT_GAMMA:g}")
        object.__setattr__(self, "gamma", gamma)

    @property
    def eps0(self) -> float:
        """The pure ε of one answer: 2γ."""
        return 2.0 * self.gamma

    def cost(self, num_queries: int, max_answers: int | None = None) -> Cost:
        """``num_queries`` answers of a 2γ-DP mechanism (`analysis.mechanisms.composition`, kind "pure")."""
        return Cost("pure", {"eps0": self.eps0, "count": num_queries})

    def independent_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                        moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                        max_answers: int | None = None):
        """Data-independent ε of ``num_queries`` answers: the moments accountant
        (`analysis.bounds.lnmax.data_independent_eps`, over ``moments``: a statement about any
        2γ-DP answer) or, with ``accountant="pld"``, the PLD (`analysis.accounting.pld.lnmax_eps`)."""
        if accountant == "pld":
            return pld.lnmax_eps(num_queries, self.gamma, delta)
        return lnmax.data_independent_eps(num_queries, self.gamma, delta, moments)

    @abc.abstractmethod
    def q_bound(self, votes) -> np.ndarray:
        """An upper bound on P[answer ≠ the plurality] for every row of ``votes`` (private): each
        member of the family states and proves its own."""

    def data_dependent(self, rows, delta, *, moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS,
                       conversion: str = "classic"):
        """(ε, moment, None): the data-dependent ε of answering ``rows`` — PRIVATE. PATE 2017,
        Theorem 3 for a 2γ-DP mechanism with q from :meth:`q_bound`, composed by the moments
        accountant (`analysis.bounds.lnmax.eps_from_q`)."""
        dd = lnmax.eps_from_q(self.q_bound(rows), self.eps0, delta, moments)
        return dd.eps, dd.moment, None

    def published_eps(self, num_queries: int, delta: float, *, accountant: str = "rdp",
                      moments=lnmax.DEFAULT_MOMENTS, orders=DEFAULT_ORDERS, conversion: str = "classic",
                      max_answers: int | None = None, beta: float | None = None,
                      release_order: float | None = None, release_cost: float = 0.2) -> tuple[float, float, str]:
        """What a release publishes without a sanitised release: the labels' data-independent
        ε at δ (`sanitised` records override this)."""
        labels = self.independent_eps(num_queries, delta, accountant=accountant, moments=moments)
        return labels.eps, delta, "no sanitised release: the data-independent eps is the headline"

    def noise_options(self) -> str:
        return f"--gamma {self.gamma:g}"

    def rdp_accountant(self, conversion: str) -> str:
        return "moments accountant"

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
            notes.append(f"noise scale 1/gamma = {1 / gamma:.4g} exceeds the {num_teachers} teachers: "
                         "answers will be close to random")
        return Calibrated(cls(gamma), eps_got, order_got, "pld" if accountant == "pld" else "moments",
                          tuple(notes))
