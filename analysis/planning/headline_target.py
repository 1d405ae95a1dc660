"""A headline that meets its target: the public parameters of a GNSS release (order λ,
smoothness β, RDP cost → σ_ss) and the number of queries, chosen so that the headline ε
a GNMax / Confident-GNMax release publishes is at most a target ε with probability at
least p over the release noise — on votes simulated from a public model
(`analysis.planning.simulated_votes`), never on the run's own votes.

Why a probability: the headline (`analysis.reporting.report.gnmax_report`) is

    H = min(DI, conv_λ(g · max(0, round(f/g + a S̃) + Z) + c))

with DI the labels' data-independent RDP curve composed with the release (public,
`analysis.sanitised.gnss.gnss_headline_independent`), f the data-dependent RDP at λ (private), c
the release's RDP cost with its discrete correction, g the public grid and Z an exact
discrete Gaussian of std σ_n·S̃ (S̃ grows with the smooth sensitivity S, private); the shift a
and σ_n ≥ σ_ss make the sanitised value an upper bound on f except with probability η = δ
(`analysis.sanitised.gnss.upper_bound`, `release_centre`), which the headline's δ then adds.
A release whose cost is too small for that bound is never chosen. The second term is a draw: a plan for ε = 2 that only looks at
its expectation publishes more in a good share of runs.

`release_outcome` computes P[H ≤ t] and E[H] over Z exactly (a sum over the discrete
Gaussian's support out to 12 std, whose tail beyond is below e^-72): 1 when DI ≤ t (the
data-independent route is a hard cap), else the discrete Gaussian's CDF at the largest
grid value whose ε is ≤ t. `choose_release` evaluates it on ``ensembles`` simulated
ensembles of the configured shape (public seeds ``seed, seed + 1, …``; f and S of every
query prefix from `analysis.sanitised.gnmax_sensitivity.prefix_profiles`), averages over them (the
probability over the public model's votes and the release noise), and returns, for the
most queries (at most ``max_queries``) at which some release on a public grid of orders,
β and costs reaches ``probability``, the release with the smallest expected headline.
Its inputs are public numbers only — it takes no votes — so the choice costs no privacy
and may be published (labels.npz records it, release.json reports its probability).

Where P ≥ 1/2 it falls as the prefix grows (f and S are sums of non-negative terms, so the
noise's centre and spread both grow), so the most queries is found by bisection over a
grid of prefixes; the returned choice is checked directly. Replace-one neighbours, as
everywhere (the release's cost is the GNSS bound of `analysis.sanitised.gnss.rdp_gnss`).

**A later round** (`pate label --round 2` under a target for both rounds): ``offset`` is
the RDP that earlier rounds published at one order λ (their sanitised RDP plus each
release's cost, public). The sum of both rounds' sanitised RDPs, converted at λ
(`analysis.planning.rounds.diagnostics`, "rdp"), is conv_λ(offset + g·max(0, round(f/g + a S̃) + Z) + c),
the form above with c replaced by offset + c, so the same computation plans it at that
order alone. That sum is an ex-post figure, not the published headline of both rounds (the
data-independent composition, `analysis.planning.rounds`), so `pate label --round 2` does not plan by
it: it plans the published headline exactly (`analysis.planning.rounds.plan_round2`, a `ReleaseChoice`
with ``route = DATA_INDEPENDENT``).

**The teachers checking a student** (``student``; Interactive-GNMax): the simulated ensembles
are paired with a public model of the student (`analysis.planning.simulated_votes`: its real check
offsets on the queries, its calibration on the evaluation split), and f and S take the check
statistic max_j (n_j − o_j) (`analysis.bounds.interactive`). The report recomputes P with the
offsets the release recorded and the calibration the plan recorded. `pate label --round 2` no
longer plans this way (its plan is data-independent, above, and the offsets do not enter it);
the report still reads such a plan from labels written before.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from analysis.sanitised import gnss
from analysis.core.errors import PateError
from analysis.sanitised.gnmax_sensitivity import prefix_profiles
from analysis.accounting.rdp import eps_curve
from analysis.planning.simulated_votes import StudentModel, VoteModel

ORDERS = (8.0, 10.0, 12.0, 14.0, 16.0, 20.0)  # release orders tried
COSTS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8)  # RDP a release may spend at its order
BETA_TIMES_ORDER = (0.1, 0.2, 0.3, 0.4)  # β · λ tried (the 2018 paper's choice: 0.1)
ENSEMBLES = 4  # simulated ensembles the probability averages over
SEED = 0  # the first simulated ensemble's seed (public, no release noise)
PROBABILITY = 0.95  # default P[this release's eps ≤ target]
PREFIXES = 40  # query counts tried: multiples of ceil(max_queries / PREFIXES)
_REACH = 12.0  # the discrete Gaussian is summed out to this many std
_MAX_SUPPORT = 4_000_000  # refuse a release noise whose support is wider (grid units)


@dataclasses.dataclass(frozen=True)
class Release:
    """Public GNSS release parameters: ``order``, ``beta``, the ``release_cost`` asked for,
    the ``sigma_ss`` that spends it (`analysis.sanitised.gnss.gnss_parameters`) and ``cost``, the RDP
    charged at ``order`` (`rdp_gnss` plus the discrete correction, as the report adds)."""

    order: float
    beta: float
    release_cost: float
    sigma_ss: float
    cost: float


def release_parameters(order: float, beta: float, release_cost: float) -> Release:
    """The `Release` at ``order`` with smoothness ``beta`` spending ``release_cost``: σ_ss
    by `analysis.sanitised.gnss.gnss_parameters`, what `pate analyze` releases with."""
    beta, sigma_ss = gnss.gnss_parameters(float(order), float(beta), float(release_cost))
    return _release(order, beta, release_cost, sigma_ss)


def _release(order, beta, release_cost, sigma_ss) -> Release:
    cost = float(gnss.rdp_gnss([order], beta, sigma_ss)[0]) + gnss.gnss_discrete_correction(order, sigma_ss)
    return Release(float(order), float(beta), float(release_cost), float(sigma_ss), cost)


def _screen_release(order: float, beta: float, release_cost: float) -> Release | None:
    """`release_parameters` in closed form, for screening many candidates: `rdp_gnss` is
    max(v_lo + K_lo/σ², v_hi + K_hi/σ²), so the least σ_ss with cost ≤ c is
    max(K_lo/(c − v_lo), K_hi/(c − v_hi))^½ (the bisection of `gnss_sigma_for_cost` finds
    the same up to its precision). None where no σ_ss spends that little."""
    lam, lo = float(order), math.exp(-2.0 * beta)
    shrink = 1.0 - lam * (1.0 - lo)
    if shrink <= 0:
        return None
    v_lo = (lam * math.log(lo) - math.log(shrink)) / (2 * (lam - 1))
    v_hi = (2 * lam * beta - math.log1p(lam * math.expm1(2 * beta))) / (2 * (lam - 1))
    if not release_cost > max(v_lo, v_hi):
        return None
    sigma2 = max(lam * lo / (2 * shrink) / (release_cost - v_lo), lam / 2 / (release_cost - v_hi))
    return _release(order, beta, release_cost, math.sqrt(sigma2))


def _unit_cap(release: Release, target: float, delta: float, conversion: str, grid: float) -> int:
    """The largest grid value u whose sanitised ε (`analysis.accounting.rdp.eps_curve` of u·g + cost)
    is ≤ ``target``; -1 when none is."""
    def eps(u):
        return float(eps_curve([release.order], [[u * grid + release.cost]], delta, conversion)[0, 0])

    c = eps(0) - release.cost  # ε = RDP + c(λ, δ): linear in the released RDP
    u = int(math.floor((target - c - release.cost) / grid)) + 1
    while u >= 0 and eps(u) > target:
        u -= 1
    while eps(u + 1) <= target:
        u += 1
    return max(u, -1)


def _cdf(x: int, std: float) -> float:
    """P[Z ≤ x] of the discrete Gaussian of std ``std`` (grid units): the exact sum below 50
    std; above, Φ((x + ½)/s) − φ_s'(x + ½)/24 (Euler–Maclaurin, error below 1e-9 there)."""
    from scipy.special import ndtr

    if std < 50:
        reach = int(math.ceil(_REACH * std)) + 2
        k = np.arange(-reach, reach + 1, dtype=float)
        pmf = np.exp(-0.5 * (k / std) ** 2)
        return float(pmf[k <= x].sum() / pmf.sum())
    y = (x + 0.5) / std
    return float(min(1.0, ndtr(y) + y * math.exp(-0.5 * y * y) / (math.sqrt(2 * math.pi) * std * 24 * std)))


def _mean_headline(m: int, std: float, a: float, di: float, grid: float) -> float:
    """E[min(di, a + g·max(0, m + Z))] for Z ~ N(0, std²) (grid units): the continuous
    law of the discrete Gaussian (above 50 std the two agree to far below the grid)."""
    from scipy.special import ndtr

    if di <= a:
        return di
    cap = (di - a) / grid if math.isfinite(di) else math.inf
    lo, up = -m / std, (cap - m) / std
    phi = lambda z: math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) if math.isfinite(z) else 0.0  # noqa: E731
    middle = (a + grid * m) * (ndtr(up) - ndtr(lo)) + grid * std * (phi(lo) - phi(up))
    return float(a * ndtr(lo) + middle + (di * ndtr(-up) if math.isfinite(up) else 0.0))


def release_outcome(f: float, ss: float, release: Release, di_route: float, target: float, delta: float,
                    conversion: str, grid: float = gnss.RELEASE_GRID) -> tuple[float, float]:
    """``(P[H ≤ target], E[H])`` over the release noise (module docstring) for a
    data-dependent RDP ``f`` and smooth sensitivity ``ss`` at ``release.order`` and the
    data-independent route ``di_route``. The published grid value is max(0, m + Z), m =
    round(f/g + a S̃) (`analysis.sanitised.gnss.release_centre`), and the sanitised ε rises with it, so P is the discrete
    Gaussian's CDF at the largest grid value within the target (`_cdf`), the centre shifted as
    `analysis.sanitised.gnss.release_centre` shifts it. Private when
    ``f`` and ``ss`` come from private votes."""
    return _outcome(f, ss, release, di_route, target, _bounds(release, target, delta, conversion, grid),
                    delta, conversion, grid)


def _bounds(release: Release, target: float, delta: float, conversion: str, grid: float) -> tuple[float, int]:
    """``(ε of grid value 0, largest grid value within the target)`` of a release."""
    a = float(eps_curve([release.order], [[release.cost]], delta, conversion)[0, 0])
    return a, _unit_cap(release, target, delta, conversion, grid)


def _outcome(f, ss, release: Release, di_route, target, bounds, delta, conversion, grid) -> tuple[float, float]:
    """`release_outcome` with `_bounds` computed once per release."""
    m, std = gnss.release_centre(f, ss, grid, gnss.upper_bound(release.sigma_ss, release.beta, delta))
    if not math.isfinite(std) or std * _REACH > _MAX_SUPPORT:
        raise PateError(f"the release noise (std {std:.3g} grid steps) is too wide to plan with; "
                        "raise the release cost")
    a, u = bounds
    if std < 50:  # the exact sum
        reach = int(math.ceil(_REACH * std)) + 2
        k = np.arange(-reach, reach + 1, dtype=float)
        pmf = np.exp(-0.5 * (k / std) ** 2)
        pmf /= pmf.sum()
        sanitised = eps_curve([release.order], (np.maximum(0.0, m + k) * grid + release.cost)[:, None],
                              delta, conversion)[:, 0]
        mean = float(pmf @ np.minimum(sanitised, di_route))
    else:
        mean = _mean_headline(m, std, a, di_route, grid)
    if di_route <= target:
        return 1.0, mean
    return (0.0 if u < 0 else _cdf(u - m, std)), mean


#: `ReleaseChoice.route` of a plan for the data-independent headline (`analysis.planning.rounds.plan_round2`).
DATA_INDEPENDENT = "data-independent"


@dataclasses.dataclass(frozen=True)
class ReleaseChoice:
    """What `choose_release` chose, and how likely its headline is within the target.

    Every field is a function of public values: the target, the mechanism's noise, the
    public vote model and seeds, δ and the conversion. ``probability`` is the mean over
    the simulated ensembles of P[headline ≤ target] (``probability_min``: the least of
    them); ``expected_eps`` the mean expected headline; ``eps_data_independent`` the
    data-independent route (labels and release), a hard cap on the headline.
    """

    target_eps: float
    target_probability: float
    num_queries: int
    max_queries: int
    order: float
    beta: float
    release_cost: float
    sigma_ss: float
    probability: float
    probability_min: float
    expected_eps: float
    eps_data_independent: float
    delta: float
    conversion: str
    model: VoteModel
    ensembles: int
    seed: int
    offset_rdp: float = 0.0  # RDP earlier rounds published at ``order`` (module docstring)
    student_calibration: tuple = ()  # the checked student's calibration (Interactive-GNMax); () none
    #: "simulated": the probability above; "data-independent": a later round planned exactly for
    #: the published headline of every round (`analysis.planning.rounds.plan_round2`; P is 1, no votes simulated)
    route: str = "simulated"

    def meta(self) -> dict:
        """The choice as JSON-able values (labels.npz ``meta["release_plan"]``)."""
        out = dataclasses.asdict(self)
        out["model"] = dataclasses.asdict(self.model)
        return out

    @classmethod
    def from_meta(cls, meta: dict) -> "ReleaseChoice":
        try:
            values = {f.name: meta[f.name] for f in dataclasses.fields(cls)
                      if f.name in meta or f.default is dataclasses.MISSING}
            values["model"] = VoteModel(**values["model"])
            values["student_calibration"] = tuple(values.get("student_calibration", ()))
            return cls(**values)
        except (KeyError, TypeError) as err:
            raise PateError(f"the release plan recorded with the labels is incomplete ({err}); it was not "
                            "written by this version of pate") from None

    def render(self) -> str:
        if self.route == DATA_INDEPENDENT:
            return "\n".join([
                f"target eps        {self.target_eps:g} at delta {self.delta:g} ({self.conversion} conversion) for "
                "the published headline of both rounds (the data-independent composition of every release)",
                f"queries           {self.num_queries} (of at most {self.max_queries})",
                f"release           order {self.order:g}, beta {self.beta:.4g}, RDP cost {self.release_cost:g} "
                f"(sigma_ss {self.sigma_ss:.4g})",
                f"headline of both rounds {self.eps_data_independent:.4f} <= {self.target_eps:g}, known before any "
                "vote: every cost is data-independent"
                + (" (one more query would exceed the target)" if self.num_queries < self.max_queries else "")])
        m = self.model
        return "\n".join([
            f"target eps        {self.target_eps:g} at delta {self.delta:g} ({self.conversion} conversion), "
            f"P[this release's eps <= target] >= {self.target_probability:g}"
            + (f", with RDP {self.offset_rdp:.4g} at order {self.order:g} published by round 1"
               if self.offset_rdp else ""),
            f"queries           {self.num_queries} (of at most {self.max_queries})",
            f"release           order {self.order:g}, beta {self.beta:.4g}, RDP cost {self.release_cost:g} "
            f"(sigma_ss {self.sigma_ss:.4g})",
            f"P[this release's eps <= {self.target_eps:g}] {self.probability:.4f} (least over the simulated "
            f"ensembles {self.probability_min:.4f}); expected {self.expected_eps:.3f}; "
            f"data-independent cap {self.eps_data_independent:.3f}",
            f"over the release noise, on {self.ensembles} ensembles simulated from a public model "
            f"({m.teachers} teachers, {m.classes} classes, accuracy {m.accuracy:g}, concentration "
            f"{m.concentration:g}, confusion {m.confusion:g}; seeds {self.seed}..{self.seed + self.ensembles - 1}): "
            "no vote of this data set was read"
            + ("; the teachers check the round-1 student's proposals (its offsets on the queries, its calibration "
               "on the evaluation split: public)" if self.student_calibration else ""),
        ])


class _Simulated:
    """f and S of every query prefix ``ends`` of the simulated ensembles, per order (cached);
    with a ``student``, the teachers check its simulated proposals (Interactive-GNMax)."""

    def __init__(self, record, model: VoteModel, ends, ensembles: int, seed: int, student: StudentModel | None,
                 draw: int | None = None):
        self.record, self.ends, self.T = record, np.asarray(ends), int(model.teachers)
        n = max(int(self.ends[-1]), int(draw or 0))  # ensembles of ``draw`` queries: the plan's, prefixes alike
        if student is not None and np.asarray(student.offsets).shape[0] < n:  # rows past the prefix are not used
            o = np.asarray(student.offsets)
            student = dataclasses.replace(student, offsets=np.concatenate([o, np.zeros((n - o.shape[0],) + o.shape[1:],
                                                                                       o.dtype)]))
        self.votes = [(model.draw(seed + i, n), None) if student is None else model.draw_checked(seed + i, n, student)
                      for i in range(int(ensembles))]
        self._profiles: dict[float, list] = {}

    def f_ss(self, release: Release, j: int) -> list[tuple[float, float]]:
        """``(f, S)`` of prefix ``ends[j]`` of each ensemble at the release's order and β."""
        if release.order not in self._profiles:
            r = self.record
            kw = dict(threshold=r.threshold, sigma_threshold=r.sigma_threshold) if hasattr(r, "threshold") else {}
            self._profiles[release.order] = [prefix_profiles(v, r.sigma, release.order, self.T, self.ends, offsets=o,
                                                             **kw) for v, o in self.votes]
        discount = np.exp(-release.beta * np.arange(self.T + 1))
        return [(float(f[j]), float(np.max(F[j] * discount))) for F, f in self._profiles[release.order]]


def _check(record, target: float, probability: float) -> None:
    if not hasattr(record, "sigma") or not hasattr(record, "published_eps") or hasattr(record, "gamma"):
        raise PateError("a target eps applies to gnmax and confident-gnmax (their GNSS release); "
                        f"{getattr(record, 'name', record)!r} has none")
    if not (target > 0 and math.isfinite(target)):
        raise PateError(f"the target eps must be a positive number, got {target}")
    if not 0.5 <= probability < 1:
        raise PateError(f"the target probability must lie in [0.5, 1), got {probability}")


def _check_offset(offset: float, orders) -> None:
    if not (offset >= 0 and math.isfinite(offset)):
        raise PateError(f"the RDP published by earlier rounds must be a non-negative number, got {offset}")
    if offset and len(tuple(orders)) != 1:
        raise PateError("a later round is planned at the order of the earlier rounds' releases: give one order")


def _check_student(student, record, queries: int) -> None:
    if student is None:
        return
    if not hasattr(record, "threshold"):
        raise PateError("the teachers check a student's proposals in Confident-GNMax's threshold step only")
    if np.asarray(student.offsets).shape[0] < int(queries):
        raise PateError(f"the student model covers {np.asarray(student.offsets).shape[0]} queries, "
                        f"fewer than the {queries} planned")


class _Planner:
    """Evaluates releases at query prefixes on the simulated ensembles (`choose_release`)."""

    def __init__(self, record, ends, target, delta, conversion, model, ensembles, seed, grid, offset=0.0,
                 student=None, draw=None):
        self.record, self.ends, self.target, self.offset = record, list(ends), float(target), float(offset)
        self.delta, self.conversion, self.grid = float(delta), conversion, grid
        self.sim = _Simulated(record, model, ends, ensembles, seed, student, draw)
        self._independent: dict[int, object] = {}
        self._bounds: dict[Release, tuple[float, int]] = {}

    def di_route(self, release: Release, j: int, screen: bool = False) -> float:
        """The data-independent route at prefix ``ends[j]`` (`analysis.sanitised.gnss.gnss_headline_independent`).
        ``screen``: +∞ where the labels alone exceed the target (the route is larger still,
        so P is unchanged; E[H] then ignores a cap far in the tail)."""
        n = int(self.ends[j])
        if n not in self._independent:
            self._independent[n] = self.record.independent_eps(n, self.delta, conversion=self.conversion)
        if screen and self._independent[n].eps > self.target:
            return math.inf
        return gnss.gnss_headline_independent(self._independent[n], release.beta, release.sigma_ss, self.delta,
                                              self.conversion)[0]

    def evaluate(self, release: Release, j: int, screen: bool = False) -> tuple[float, float, float, float]:
        """``(mean P, least P, mean E[H], DI route)`` of ``release`` at prefix ``ends[j]``
        (with an ``offset``: of both rounds by the RDP route, no data-independent cap)."""
        di = math.inf if self.offset else self.di_route(release, j, screen)
        shifted = dataclasses.replace(release, cost=release.cost + self.offset)
        if shifted not in self._bounds:
            self._bounds[shifted] = _bounds(shifted, self.target, self.delta, self.conversion, self.grid)
        out = np.array([_outcome(f, ss, shifted, di, self.target, self._bounds[shifted], self.delta,
                                 self.conversion, self.grid) for f, ss in self.sim.f_ss(release, j)])
        return float(out[:, 0].mean()), float(out[:, 0].min()), float(out[:, 1].mean()), di

    def best(self, releases, j: int, probability: float):
        """``(release, evaluation)`` of least expected headline among those with mean P ≥
        ``probability`` at prefix ``ends[j]``, or None: screened with the closed-form σ_ss,
        then confirmed with `release_parameters` and the exact data-independent route."""
        passed = []
        for release in releases:
            try:
                p, _, e, _ = self.evaluate(release, j, screen=True)
            except PateError:
                continue  # a noise too wide to plan with meets no target
            if p >= probability:
                passed.append((e, release))
        for _, screened in sorted(passed, key=lambda c: c[0]):
            release = release_parameters(screened.order, screened.beta, screened.release_cost)
            try:
                found = self.evaluate(release, j)
            except PateError:
                continue
            if found[0] >= probability:
                return release, found
        return None


def choose_release(record, max_queries: int, target: float, delta: float, *, model: VoteModel,
                   conversion: str = "classic", probability: float = PROBABILITY, ensembles: int = ENSEMBLES,
                   seed: int = SEED, orders=ORDERS, costs=COSTS, betas=BETA_TIMES_ORDER,
                   grid: float = gnss.RELEASE_GRID, offset: float = 0.0,
                   student: StudentModel | None = None) -> ReleaseChoice:
    """The release parameters and query count of the module docstring for ``record`` (an
    `analysis.mechanisms.registry` GNMax or Confident-GNMax record), at most ``max_queries`` queries,
    the headline ≤ ``target`` at ``delta`` with probability ≥ ``probability`` on ``model``'s
    simulated votes. ``betas`` are β · order. Public inputs only (no votes). ``offset``:
    the RDP earlier rounds published at the single order of ``orders`` (module docstring).
    ``student``: the teachers check this public student model's proposals (Interactive-GNMax;
    `analysis.planning.simulated_votes`), its offsets covering ``max_queries`` queries in query order.

    Raises:
      PateError: not a GNSS mechanism, bad target or probability, or no release on the
        grid meets the target even for the fewest queries tried.
    """
    _check(record, target, probability)
    _check_offset(offset, orders)
    max_queries = int(max_queries)
    step = max(1, math.ceil(max_queries / PREFIXES))
    ends = sorted(set(range(step, max_queries, step)) | {max_queries})
    screened = (_screen_release(order, times / order, cost) for order in orders for times in betas for cost in costs)
    releases = [r for r in screened if r is not None]
    _check_student(student, record, max_queries)
    planner = _Planner(record, ends, target, delta, conversion, model, ensembles, seed, grid, offset, student)
    found, lo, hi = None, 0, len(ends) - 1
    mid = hi  # all the queries asked for first, then bisection for the most that meet the target
    while lo <= hi:
        best = planner.best(releases, mid, probability)
        if best is None:
            hi = mid - 1
        else:
            found, lo = (mid, best), mid + 1
        mid = (lo + hi) // 2
    if found is None:
        left = f" after round 1's RDP {offset:.4g} at order {orders[0]:g}" if offset else ""
        raise PateError(f"no release meets a target eps of {target:g}{left} with probability {probability:g}, "
                        f"even for {ends[0]} queries: raise the target or the noise (see `pate plan`)")
    j, (release, (p, p_min, e, di)) = found
    return ReleaseChoice(float(target), float(probability), int(ends[j]), max_queries, release.order, release.beta,
                         release.release_cost, release.sigma_ss, p, p_min, e, di, float(delta), conversion, model,
                         int(ensembles), int(seed), float(offset), () if student is None else student.calibration)


def headline_probability(record, num_queries: int, release: Release, target: float, delta: float, *,
                         model: VoteModel, conversion: str = "classic", ensembles: int = ENSEMBLES,
                         seed: int = SEED, grid: float = gnss.RELEASE_GRID, offset: float = 0.0,
                         student: StudentModel | None = None, max_queries: int | None = None
                         ) -> tuple[float, float, float, float]:
    """``(mean P, least P, mean E[H], DI route)`` of one release of ``num_queries`` queries
    on ``model``'s simulated ensembles: what the report publishes for a planned release
    (public: no vote of the data set enters). ``offset``, ``student`` as in `choose_release`
    (the student's offsets cover the ``num_queries`` at least). ``max_queries``: the plan's;
    its ensembles are drawn at that size and their first ``num_queries`` used, so that the
    report's P is the plan's for the plan's own settings."""
    _check(record, target, PROBABILITY)
    _check_offset(offset, [release.order])
    _check_student(student, record, num_queries)
    planner = _Planner(record, [int(num_queries)], target, delta, conversion, model, ensembles, seed, grid, offset,
                       student, max_queries)
    return planner.evaluate(release, 0)
