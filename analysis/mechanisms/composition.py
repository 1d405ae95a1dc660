"""The data-independent privacy cost of a release as a record, and the composition of
every release made from one private data set (what `pate ledger` adds up).

A `Cost` is the part of a release's guarantee that depends on public parameters only
(the noise, the number of queries fixed in advance): never a vote, never a
data-dependent ε. Data-dependent (sanitised) ε values are *not* composed across
releases: each is an ex-post statement about one release, and ex-post guarantees do not
add (Redberg & Wang, "Privately publishable per-instance privacy", NeurIPS 2021; Ligett
et al. 2017 on ex-post privacy loss), so the cumulative ε of a data set is the
composition of the data-independent costs below, which are ordinary (ε, δ) / RDP
guarantees and compose adaptively.

Neighbouring relation: **replace-one** on the private training set. PATE's partition
assigns fixed positions of a permutation of range(N) to the teachers, so replacing one
example changes one teacher's shard and hence one teacher's vote — the relation every
PATE bound in `analysis` is stated for ("one teacher's vote changes"). DP-SGD's
Poisson-subsampled Gaussian is accounted under the same relation here (an RDP curve for
replace-one derived from the add/remove curve by Mironov's weak triangle inequality, see
`dpsgd_replace_one_rdp`), so the sum is about one relation.

The kinds of cost (``Cost.kind``):

- ``"gaussian"`` (``mu2``): a composition of Gaussian mechanisms, μ-GDP with μ² the sum
  of (sensitivity/σ)² of the steps (Dong, Roth, Su, "Gaussian differential privacy",
  JRSS-B 2022, Corollary 3.3). GNMax answer: μ² = 2/σ² (L2 sensitivity √2 of the vote
  histogram); Confident-GNMax threshold step: 1/σ₁² (sensitivity 1 of the top count).
  RDP α μ²/2 (Mironov 2017, Proposition 7 and 1); PLD that of N(0,1) vs N(μ,1).
- ``"pure"`` (``eps0``, ``count``): ``count`` answers of an ε₀-DP mechanism (LNMax:
  ε₀ = 2γ, PATE 2017 Section 3). Every ε₀-DP pair is a post-processing of binary
  randomized response with that ε₀ (Kairouz, Oh, Viswanath, ICML 2015, Theorem 2.4 /
  3.4 with Blackwell's theorem), so its Rényi divergence is at most randomized
  response's, ``log(p e^{(α−1)ε₀} + (1−p) e^{−(α−1)ε₀})/(α−1)`` with p = e^{ε₀}/(1+e^{ε₀})
  (data processing inequality, van Erven & Harremoës 2014, Theorem 9), which is
  ≤ min(ε₀, αε₀²/2) (Bun & Steinke 2016, Proposition 3.3). PLD: randomized response
  self-composed (`analysis.accounting.pld.lnmax_pld`).
- ``"gnss"`` (``beta``, ``sigma_ss``): one GNSS release of a sanitised RDP (PATE 2018,
  Section 4.3): `analysis.sanitised.gnss.rdp_gnss` plus the discrete-noise correction at every
  order where it is finite; no PLD.
- ``"discrete-gaussian"`` (``mu2``): releases of integer values plus independent
  discrete Gaussian noise (DP-MERF's mean embedding, `analysis.baselines.merf`; the
  fine-grained release; R rounds of Gaussian FedAvg messages on the grid, μ² summed over the
  rounds, `analysis.baselines.fedavg_privacy`), with μ² = (L2 sensitivity/σ)² in grid units. RDP α μ²/2 exactly as the continuous Gaussian:
  for integer shifts the normalisers of the two discrete Gaussians are equal and the
  Rényi sum is at most the normaliser (Canonne, Kamath, Steinke, "The discrete Gaussian
  for differential privacy", NeurIPS 2020, Proposition 5), and Rényi divergences of
  independent coordinates add (van Erven & Harremoës 2014, Theorem 28); proof in
  `analysis.baselines.merf`. **No PLD**: the continuous Gaussian's privacy
  profile is not proven to bound the discrete one's, so the PLD route takes this cost as
  its own (ε, δ') from the RDP curve.
- ``"skellam"`` (``mu``, ``l1``, ``l2sq``, ``count``): ``count`` rounds of integer sums plus
  Skellam noise Sk(μ) per coordinate, of l1 sensitivity ``l1`` and squared l2 sensitivity ``l2sq``
  in integer units (DP-FedSGD with distributed Skellam shares, `analysis.mechanisms.skellam`;
  `analysis.accounting.skellam_rdp`: Agarwal, Kairouz & Liu 2021, Corollary 3.6, at the next integer order); the curves add. **No
  PLD**.
- ``"ddg"`` (``sigma2``, ``clients``, ``dim``, ``l1``, ``l2sq``, ``count``): ``count`` rounds of
  integer sums of length ``dim`` plus the sum of ``clients`` exact N_ℤ(0, σ²) shares per coordinate
  (DP-FedSGD with distributed discrete Gaussian shares, `analysis.mechanisms.ddg`;
  `analysis.accounting.ddg_rdp`: Kairouz, Liu & Steinke 2021, Proposition 14, τ from Theorem 1); the curves
  add. **No PLD**.
- ``"approx"`` (``eps``, ``delta``): an (ε, δ)-DP step with no finer description (the
  LNMax smooth-sensitivity release, `analysis.sanitised.lnmax_release.release_eps_cost`). Added
  by basic composition (Dwork & Roth 2014, Theorem 3.16).
- ``"poisson-gaussian"`` (``q``, ``noise_multiplier``, ``steps``): DP-SGD's steps, as
  an RDP curve under replace-one (`dpsgd_replace_one_rdp`); no PLD. dp-accounting's
  ``REPLACE_ONE`` PLD of the subsampled Gaussian is *not* used: it is the loss
  distribution of one pair of mixtures, and a pair that is worst case for one step need
  not be worst case once steps and other releases are composed (Lebeda, Regehr, Kamath &
  Steinke, "Avoiding pitfalls for privacy accounting of subsampled mechanisms under
  composition", 2024). The RDP curve below holds for every replace-one pair, so it
  composes with the rest (Mironov 2017, Proposition 1).

`compose` gives two routes and publishes the smaller: RDP (the curves add, Mironov
2017, Proposition 1, converted once) and PLD (dp-accounting composes the privacy loss
distributions). A cost that one route cannot express enters that route as its own
(ε, δ') at a share δ' of δ, added by basic composition; ``"approx"`` costs enter both
that way with their own δ. Every step is sound, so the smaller total is too.
This module uses numpy, scipy and dp-accounting only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping

import numpy as np

from analysis.core.errors import PateError

KINDS = ("gaussian", "discrete-gaussian", "pure", "gnss", "approx", "poisson-gaussian", "skellam", "ddg")
RELATION = "replace-one"
RELATION_TEXT = ("replace-one: two training sets are neighbours when one example is replaced by another "
                 "(PATE: one teacher's shard changes, so one teacher's vote)")
PLD_DISCRETIZATION = 1e-3  # grid of the composed PLD (dp-accounting rounds pessimistically)
_FIELDS = {"gaussian": ("mu2",), "discrete-gaussian": ("mu2",), "pure": ("eps0", "count"),
           "gnss": ("beta", "sigma_ss"),
           "approx": ("eps", "delta"), "poisson-gaussian": ("q", "noise_multiplier", "steps"),
           "skellam": ("mu", "l1", "l2sq", "count"),
           "ddg": ("sigma2", "clients", "dim", "l1", "l2sq", "count")}


@dataclasses.dataclass(frozen=True)
class Cost:
    """The data-independent cost of one release (module docstring for the kinds)."""

    kind: str
    params: Mapping[str, float]

    def __post_init__(self):
        if self.kind not in _FIELDS:
            raise PateError(f"unknown cost kind {self.kind!r}; one of {', '.join(KINDS)}")
        params = {}
        for key in _FIELDS[self.kind]:
            try:
                raw = self.params[key]
                if isinstance(raw, (bool, np.bool_, str, bytes)):  # true, "3": not a number a cost is made of
                    raise TypeError(key)
                value = float(raw)
            except (KeyError, TypeError, ValueError):
                raise PateError(f"a {self.kind} cost needs a number {key!r}, got "
                                f"{dict(self.params).get(key)!r}") from None
            if not math.isfinite(value) or value < 0:
                raise PateError(f"{self.kind} cost: {key} must be a finite number >= 0, got {value}")
            params[key] = value
        if self.kind == "approx" and not params["delta"] < 1:
            raise PateError(f"approx cost: delta must be < 1, got {params['delta']}")
        if self.kind == "poisson-gaussian" and not params["q"] <= 1:
            raise PateError(f"poisson-gaussian cost: q must be <= 1, got {params['q']}")
        object.__setattr__(self, "params", params)

    def to_json(self) -> dict:
        return {"kind": self.kind, **self.params}

    @classmethod
    def from_json(cls, doc: Mapping) -> "Cost":
        if not isinstance(doc, Mapping) or "kind" not in doc:
            raise PateError(f"not a cost record: {doc!r}")
        return cls(str(doc["kind"]), {k: v for k, v in doc.items() if k != "kind"})

    def describe(self) -> str:
        p = self.params
        if self.kind == "gaussian":
            return f"Gaussian, mu {math.sqrt(p['mu2']):.4g}"
        if self.kind == "discrete-gaussian":
            return f"discrete Gaussian, mu {math.sqrt(p['mu2']):.4g} (RDP only)"
        if self.kind == "pure":
            return f"{int(p['count'])} x {p['eps0']:.4g}-DP"
        if self.kind == "gnss":
            return f"GNSS release, beta {p['beta']:.4g}, sigma_ss {p['sigma_ss']:.4g}"
        if self.kind == "approx":
            return f"({p['eps']:.4g}, {p['delta']:.3g})-DP"
        if self.kind == "skellam":
            return (f"{int(p['count'])} x Skellam, mu {p['mu']:.6g}, sensitivity l2^2 {p['l2sq']:.6g}, "
                    f"l1 {p['l1']:.6g} (RDP only)")
        if self.kind == "ddg":
            return (f"{int(p['count'])} x distributed discrete Gaussian, {int(p['clients'])} shares of sigma^2 "
                    f"{p['sigma2']:.6g}, sensitivity l2^2 {p['l2sq']:.6g}, l1 {p['l1']:.6g}, {int(p['dim'])} "
                    "coordinates (RDP only)")
        return f"{int(p['steps'])} subsampled Gaussian steps, q {p['q']:.4g}, sigma {p['noise_multiplier']:.4g}"


# --------------------------------------------------------------------------- building costs

def labels_cost(mechanism, num_queries: int, *, max_answers: int | None = None) -> Cost:
    """The data-independent cost of a label release: `num_queries` queries of a
    `analysis.mechanisms.registry` record, as the record states it (``mechanism.cost``: LNMax
    ``count`` answers of a 2γ-DP mechanism; GNMax μ² = 2N/σ²; Confident-GNMax the
    threshold step on every query and GNMax on ``max_answers`` of them when the cap was
    fixed in advance, else on all — what `analysis.bounds.gnmax.data_independent_eps` composes)."""
    n = int(num_queries)
    if n < 0:
        raise PateError(f"num_queries must be >= 0, got {num_queries}")
    return mechanism.cost(n, max_answers=max_answers)


def gnss_cost(beta: float, sigma_ss: float) -> Cost:
    return Cost("gnss", {"beta": beta, "sigma_ss": sigma_ss})


def approx_cost(eps: float, delta: float) -> Cost:
    return Cost("approx", {"eps": eps, "delta": delta})


def dpsgd_cost(sampling_rate: float, noise_multiplier: float, steps: int) -> Cost:
    return Cost("poisson-gaussian", {"q": sampling_rate, "noise_multiplier": noise_multiplier, "steps": steps})


# --------------------------------------------------------------------------- RDP and PLD of a cost

#: Below this ε₀ `rr_rdp` uses the zCDP bound: the exact formula has lost most of its digits.
_SMALL_EPS0 = 1e-4


def rr_rdp(eps0: float, orders) -> np.ndarray:
    """Rényi divergence of binary randomized response at ε₀ (module docstring), per order."""
    orders = np.asarray(orders, dtype=float)
    if eps0 == 0:
        return np.zeros_like(orders)
    if eps0 < _SMALL_EPS0:
        # The difference below is O(α ε₀²) out of O(1) terms: at ε₀ = 1e-30 it rounds below 0.
        # ε₀-DP is (ε₀²/2)-zCDP (Bun & Steinke 2016, Proposition 3.3), so α ε₀²/2 bounds it above.
        return orders * (eps0 * eps0 / 2.0)
    log_p = -math.log1p(math.exp(-eps0)) if eps0 < 700 else 0.0
    log_q = -eps0 + log_p  # log(1 - p) = log p - eps0
    a1 = orders - 1.0
    return np.logaddexp(log_p + a1 * eps0, log_q - a1 * eps0) / a1


def sampled_gaussian_rdp(q: float, noise_multiplier: float, orders) -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian step (sensitivity 1, noise std
    ``noise_multiplier``, sampling rate ``q``) under **add/remove-one**, at each order,
    both directions.

    For integer α the Rényi divergence of the pair μ₀ = N(0, σ²), μ = (1−q)μ₀ + qN(1, σ²)
    is ``log A_α/(α−1)`` with A_α = Σ_k C(α,k)(1−q)^{α−k} q^k exp((k²−k)/(2σ²))
    (Mironov, Talwar & Zhang, "Rényi differential privacy of the sampled Gaussian
    mechanism", 2019, Section 3), and that pair bounds both D_α(μ‖μ₀) and D_α(μ₀‖μ)
    for every add/remove pair of data sets (ibid.; dp-accounting computes the same). A
    non-integer order is bounded by the next integer: D_α grows with α (van Erven &
    Harremoës 2014, Theorem 3)."""
    orders = np.asarray(orders, dtype=float)
    out = np.zeros(orders.shape)
    if q == 0:
        return out
    if noise_multiplier == 0:
        return np.full(orders.shape, np.inf)
    if q == 1:  # no sampling: the Gaussian mechanism, α/(2σ²) at the next integer order
        return np.ceil(orders - 1e-12) / (2.0 * noise_multiplier ** 2)
    from scipy.special import gammaln

    cache: dict[int, float] = {}
    for i, a in enumerate(orders.ravel()):
        n = int(math.ceil(a - 1e-12))
        if n not in cache:
            k = np.arange(n + 1, dtype=float)
            with np.errstate(divide="ignore"):
                log_terms = (gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + (n - k) * np.log1p(-q)
                             + k * math.log(q) + (k * k - k) / (2.0 * noise_multiplier ** 2))
            cache[n] = max(float(np.logaddexp.reduce(log_terms)), 0.0) / (n - 1)
        out.flat[i] = cache[n]
    return out


def dpsgd_replace_one_rdp(q: float, noise_multiplier: float, steps: int, orders) -> np.ndarray:
    """RDP curve of ``steps`` Poisson-subsampled Gaussian steps under **replace-one**.

    Write ε(α) = steps · `sampled_gaussian_rdp`(α), the add/remove curve of the run
    (adaptive composition, Mironov 2017, Proposition 1). For D' = D − x + x', the chain
    D → D − x → D' is one removal and one addition, and Mironov 2017, Proposition 11
    (the weak triangle inequality, p = q = 2) gives

        D_α(M(D) ‖ M(D')) ≤ (α − ½)/(α − 1) · D_{2α}(M(D) ‖ M(D − x)) + D_{2α−1}(M(D − x) ‖ M(D'))
                          ≤ (α − ½)/(α − 1) · ε(2α) + ε(2α − 1),

    for every replace-one pair (the same bound with D and D' swapped), so the curve
    composes with other replace-one curves."""
    orders = np.asarray(orders, dtype=float)
    if steps == 0 or q == 0:
        return np.zeros(orders.shape)
    first = sampled_gaussian_rdp(q, noise_multiplier, 2.0 * orders)
    second = sampled_gaussian_rdp(q, noise_multiplier, 2.0 * orders - 1.0)
    return steps * ((orders - 0.5) / (orders - 1.0) * first + second)


def rdp(cost: Cost, orders) -> np.ndarray | None:
    """The RDP curve of a cost at ``orders`` (inf where it has none), or None when the cost
    has no RDP form in this module (``approx``)."""
    orders = np.asarray(orders, dtype=float)
    p = cost.params
    if cost.kind in ("gaussian", "discrete-gaussian"):
        return orders * p["mu2"] / 2.0
    if cost.kind == "pure":
        return p["count"] * rr_rdp(p["eps0"], orders)
    if cost.kind == "gnss":
        from analysis.sanitised.gnss import gnss_discrete_correction, rdp_gnss

        out = np.full(orders.shape, np.inf)
        ok = orders * -math.expm1(-2.0 * p["beta"]) < 1.0
        if ok.any():
            o = orders[ok]
            out[ok] = rdp_gnss(o, p["beta"], p["sigma_ss"]) + np.array(
                [gnss_discrete_correction(x, p["sigma_ss"]) for x in o])
        return out
    if cost.kind == "poisson-gaussian":
        return dpsgd_replace_one_rdp(p["q"], p["noise_multiplier"], int(p["steps"]), orders)
    if cost.kind == "skellam":
        from analysis.accounting.skellam_rdp import rdp as skellam_rdp

        return p["count"] * skellam_rdp(orders, p["l1"], p["l2sq"], p["mu"])
    if cost.kind == "ddg":
        from analysis.accounting.ddg_rdp import rdp as ddg_rdp

        return p["count"] * ddg_rdp(orders, p["l1"], p["l2sq"], p["sigma2"], int(p["clients"]), int(p["dim"]))
    return None


def pld(cost: Cost, discretization: float = PLD_DISCRETIZATION):
    """The privacy loss distribution of a cost (dp-accounting), or None when it has none
    here (``discrete-gaussian``, ``gnss``, ``approx``, ``poisson-gaussian``: module docstring) or costs nothing."""
    from dp_accounting.pld import common, privacy_loss_distribution as pld_mod

    p = cost.params
    if cost.kind == "gaussian":
        if p["mu2"] == 0 or p["mu2"] > 1e4:
            return None  # nothing spent / as good as noiseless: the RDP form serves
        return pld_mod.from_gaussian_mechanism(standard_deviation=1.0 / math.sqrt(p["mu2"]),
                                               value_discretization_interval=discretization)
    if cost.kind == "pure":
        if p["count"] == 0 or p["eps0"] == 0 or p["eps0"] > 500:
            return None  # dp-accounting overflows (exp(eps0)); the RDP form serves
        one = pld_mod.from_privacy_parameters(common.DifferentialPrivacyParameters(p["eps0"], 0.0),
                                              value_discretization_interval=discretization)
        return one.self_compose(int(p["count"]))
    return None


# --------------------------------------------------------------------------- composition

@dataclasses.dataclass(frozen=True)
class Total:
    """The cumulative guarantee of several releases: (ε, δ) by the smaller route.

    Attributes:
      eps: ε of everything composed, at `delta`.
      delta: δ of the guarantee (the δ asked for plus the δ of ``approx`` costs).
      route: "rdp" or "pld", whichever gave the smaller ε.
      routes: ε by each route.
      count: how many costs were composed.
    """

    eps: float
    delta: float
    route: str
    routes: Mapping[str, float]
    count: int


def is_free(cost: Cost) -> bool:
    """True when a cost spends nothing (no query, no step, or no privacy loss at all)."""
    p = cost.params
    return {"gaussian": lambda: p["mu2"] == 0, "discrete-gaussian": lambda: p["mu2"] == 0,
            "pure": lambda: p["count"] == 0 or p["eps0"] == 0,
            "gnss": lambda: False, "approx": lambda: p["eps"] == 0 and p["delta"] == 0,
            "poisson-gaussian": lambda: p["steps"] == 0 or p["q"] == 0,
            "skellam": lambda: p["count"] == 0 or (p["l1"] == 0 and p["l2sq"] == 0),
            "ddg": lambda: p["count"] == 0 or (p["l1"] == 0 and p["l2sq"] == 0)}[cost.kind]()


def single_eps(cost: Cost, delta: float, *, conversion: str = "improved", orders=None) -> float:
    """ε of one cost on its own at δ: the smaller of its RDP and PLD forms (an ``approx``
    cost: its own ε, valid at its own δ)."""
    from analysis.accounting.rdp import DEFAULT_ORDERS, eps_from_rdp

    if cost.kind == "approx":
        return cost.params["eps"]
    if is_free(cost):
        return 0.0
    orders = DEFAULT_ORDERS if orders is None else np.asarray(orders, dtype=float)
    values = []
    curve = rdp(cost, orders)
    if curve is not None:
        values.append(float(eps_from_rdp(orders, curve, delta, conversion)[0]))
    dist = pld(cost)
    if dist is not None:
        values.append(max(float(dist.get_epsilon_for_delta(delta)), 0.0))
    return min(values)


def compose(costs: Iterable[Cost], delta: float, *, conversion: str = "improved", orders=None) -> Total:
    """The cumulative (ε, δ) of `costs` (module docstring: the two routes and why each is
    sound). ``delta`` is shared out equally between a route's composed part and each
    cost that route cannot express; ``approx`` costs add their own ε and δ."""
    from analysis.accounting.rdp import DEFAULT_ORDERS, eps_from_rdp
    from analysis.core.validation import check_delta

    delta = check_delta(delta)
    orders = DEFAULT_ORDERS if orders is None else np.asarray(orders, dtype=float)
    costs = list(costs)
    approx = [c for c in costs if c.kind == "approx"]
    rest = [c for c in costs if c.kind != "approx" and not is_free(c)]
    eps_a = sum(c.params["eps"] for c in approx)
    delta_a = sum(c.params["delta"] for c in approx)
    curves = [rdp(c, orders) for c in rest]
    dists = [pld(c) for c in rest]

    def route(forms, combine) -> float:
        """ε of one route: the costs it can express combined at one share of δ, each other
        cost on its own at another share (basic composition)."""
        inside = [f for f in forms if f is not None]
        outside = [c for c, f in zip(rest, forms) if f is None]
        share = delta / (len(outside) + (1 if inside else 0) or 1)
        eps = sum(single_eps(c, share, conversion=conversion, orders=orders) for c in outside)
        return eps + (combine(inside, share) if inside else 0.0)

    def rdp_eps(curves, share):  # the curves add (Mironov 2017, Proposition 1)
        return float(eps_from_rdp(orders, np.sum(curves, axis=0), share, conversion)[0])

    def pld_eps(dists, share):  # the distributions compose
        total = dists[0]
        for d in dists[1:]:
            total = total.compose(d)
        return max(float(total.get_epsilon_for_delta(share)), 0.0)

    routes = {"rdp": route(curves, rdp_eps), "pld": route(dists, pld_eps)}
    best = min(routes, key=routes.get)
    return Total(routes[best] + eps_a, delta + delta_a, best,
                 {k: v + eps_a for k, v in routes.items()}, len(costs))
