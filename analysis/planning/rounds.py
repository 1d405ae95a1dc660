"""The headline ε of an interactive run (`pate label --round 2`): everything both rounds
released, composed from data-independent costs only.

Neighbouring relation: **replace-one** on the private training set, the relation of every
bound in `analysis` (`analysis.mechanisms.composition.RELATION`): one replaced example changes one
teacher's shard, so one vote of round 1 and one vote of round 2 (teacher t's round-2 head
is trained on shard t only).

What was released from the private data: round 1's labels and its sanitised ε
(``release-round1.json``, published before round 2 began), round 2's labels and its
sanitised ε. Round 2's queries and heads are chosen by the round-1 student, a function of
round 1's release and public data: the four releases are an adaptive composition.

**The published headline** is `analysis.mechanisms.composition.compose` of the data-independent cost
of each of the four releases (`analysis.mechanisms.composition.Cost`: the labels' noise and query
count, each sanitised release's own noise), at δ plus both rounds' float64-sampler δ
(`analysis.core.noise`). Each cost is an RDP curve that holds for *every* replace-one pair and
every choice of the queries, so the curves add under adaptive composition: if M₁ is
(α, ε₁)-RDP and M₂(·, y) is (α, ε₂)-RDP for every output y of M₁, the pair is
(α, ε₁ + ε₂)-RDP (Mironov 2017, "Rényi Differential Privacy", Proposition 1), converted
once at δ (`analysis.accounting.rdp`). `compose` also composes their privacy loss distributions and
publishes the smaller (`analysis.mechanisms.composition` module docstring: each route is sound).

**Not published**: the sum of both rounds' published headlines and the sum of both
sanitised RDPs. Each rests on a data-dependent, ex-post bound on one release; ex-post
guarantees do not add (`analysis.mechanisms.composition` module docstring: Redberg & Wang 2021; Ligett
et al. 2017), and no theorem in this code covers two adaptively chosen smooth-sensitivity
releases. `diagnostics` computes them, named as such, for comparison only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

from analysis.mechanisms import composition
from analysis.accounting.rdp import eps_from_rdp


#: The published route (`Cumulative.route`), in words.
ROUTE = "data-independent composition of every release of both rounds"
#: Figures that are *not* a guarantee (`diagnostics`), in words.
DIAGNOSTICS = {"rdp": "sum of both rounds' sanitised RDPs (ex-post: not a guarantee, not published)",
               "basic": "sum of both rounds' own headlines (ex-post: not a guarantee, not published)"}


@dataclasses.dataclass(frozen=True)
class Cumulative:
    """The headline of both rounds: ε at δ of the data-independent composition.

    Attributes:
      eps, delta: the guarantee.
      route: `ROUTE`, and which of `composition.compose`'s routes gave it ("rdp" or "pld").
      routes: ε by each of `compose`'s routes (both data-independent).
    """

    eps: float
    delta: float
    route: str
    routes: dict


def _sampling(details: Mapping) -> float:
    return float(details.get("delta_sampling", 0.0) or 0.0)


def cumulative_headline(first: Mapping, second: Mapping, every: Sequence[composition.Cost], delta: float,
                        conversion: str) -> Cumulative:
    """ε of everything both rounds released (module docstring: the theorem and the relation).

    Args:
      first, second: each round's published values (a release.json's ``details``); only their
        ``delta_sampling`` (the float64 label-noise δ, `analysis.core.noise`) is read.
      every: the data-independent cost of every release of both rounds.
      delta: the analysis δ of both rounds.
      conversion: the RDP → (ε, δ) conversion.
    """
    total = composition.compose(every, delta, conversion=conversion)
    sampling = _sampling(first) + _sampling(second)
    # A δ of 1 or more guarantees nothing (`analysis.reporting.report.headline_delta` warns of it).
    return Cumulative(total.eps, min(total.delta + sampling, 1.0), total.route, dict(total.routes))


def diagnostics(first: Mapping, second: Mapping, delta: float, conversion: str) -> dict[str, float]:
    """The figures the headline does **not** publish (module docstring), by `DIAGNOSTICS` key:
    "basic", the sum of both rounds' own headlines; "rdp", where both rounds released a GNSS
    value at one order, the sum of their sanitised RDPs and release costs converted at
    ``delta``. Ex-post values: no guarantee, for comparison with the headline only."""
    out = {"basic": float(first["eps"]) + float(second["eps"])}
    keys = ("rdp_sanitized", "release_rdp_cost", "release_order")
    if all(k in r for r in (first, second) for k in keys) and float(first["release_order"]) == float(
            second["release_order"]):
        rdp = sum(float(r["rdp_sanitized"]) + float(r["release_rdp_cost"]) for r in (first, second))
        out["rdp"] = (float(eps_from_rdp([float(second["release_order"])], [rdp], delta, conversion)[0])
                      if math.isfinite(rdp) else math.inf)
    return out


@dataclasses.dataclass(frozen=True)
class Round2Plan:
    """Round 2's setting under a target for both rounds (`plan_round2`).

    Attributes:
      num_queries: round 2's queries.
      release: its GNSS release (`analysis.planning.headline_target.Release`: order, β, RDP cost, σ_ss).
      cost: that release's data-independent cost, as `pate analyze` charges it.
      eps: the published headline of both rounds at this setting (`cumulative_headline`'s ε).
    """

    num_queries: int
    release: object
    cost: composition.Cost
    eps: float


def round2_headline_eps(record, num_queries: int, release_cost: composition.Cost, earlier: Sequence[composition.Cost],
                        delta: float, conversion: str) -> float:
    """ε of the headline of both rounds (`cumulative_headline`: the composition of every
    release's data-independent cost) when round 2 asks ``num_queries`` queries of ``record``
    and releases its sanitised ε at ``release_cost``; ``earlier``: round 1's labels' and
    sanitised release's costs. Public values only."""
    every = [*earlier, composition.labels_cost(record, int(num_queries)), release_cost]
    return composition.compose(every, delta, conversion=conversion).eps


def plan_round2(record, max_queries: int, earlier: Sequence[composition.Cost], target: float, delta: float, *,
                order: float, conversion: str = "classic", betas=None, costs=None) -> Round2Plan | None:
    """Round 2's queries and release under a target ``target`` for the *published* headline
    of both rounds (`cumulative_headline`, the data-independent composition; module
    docstring): the most queries (at most ``max_queries``) for which some GNSS release at
    ``order`` on the grid of β · order ``betas`` and RDP costs ``costs``
    (`analysis.planning.headline_target`'s grid) keeps that headline ≤ ``target``, then the largest
    release cost that still does at that count (the least noisy sanitised value). None when
    not even one query fits.

    Only releases that can publish their upper bound are candidates: `pate analyze` publishes
    the sanitised value as an upper bound that fails with probability η = ``delta``
    (`analysis.sanitised.gnss.upper_bound`), which needs σ_ss · z(1 − η) · (e^β − 1) < 1; a
    cheaper release would be planned, its labels released and charged, and its analysis
    refused. For one β that condition holds from some cost up (σ_ss falls as the cost rises),
    so the candidates of a β are a tail of ``costs`` and the searches below still hold.

    Exact, not a probability: every cost is data-independent, so the headline of a setting is
    known before any vote. It rises with the queries (the labels' RDP curve and loss
    distribution grow with them) and, for one β, with the release cost (σ_ss falls, so the
    GNSS RDP curve rises at every order); each search below relies on one of these. Public
    inputs only.
    """
    from analysis.core.errors import PateError
    from analysis.planning.headline_target import BETA_TIMES_ORDER, COSTS, release_parameters
    from analysis.sanitised.gnss import upper_bound

    betas = BETA_TIMES_ORDER if betas is None else betas
    costs = sorted(COSTS if costs is None else costs)

    def option(times: float, c: float):
        try:
            release = release_parameters(order, times / order, c)
            upper_bound(release.sigma_ss, release.beta, delta)  # publishable, as `pate analyze` will publish it
        except (PateError, ValueError, ZeroDivisionError):
            return None
        return release, record.sanitised_cost({"release_order": release.order, "beta": release.beta},
                                              release.release_cost)

    def fits(n: int, cost) -> bool:
        return round2_headline_eps(record, n, cost, earlier, delta, conversion) <= target

    cheapest = {t: next((o for o in (option(t, c) for c in costs) if o is not None), None) for t in betas}
    cheapest = {t: o for t, o in cheapest.items() if o is not None}
    best_n, best = 0, []
    for times, (_, cost) in cheapest.items():  # the most queries each β allows, at its cheapest release
        if not fits(max(best_n, 1), cost):
            continue
        lo, hi = max(best_n, 1), int(max_queries)  # fits(lo); the largest n with fits(n)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid, cost) else (lo, mid - 1)
        best, best_n = ([times] if lo > best_n else best + [times]), lo
    if not best_n:
        return None
    chosen = None
    for times in best:  # then the largest release cost that fits at that count
        options = [o for o in (option(times, c) for c in costs) if o is not None]
        lo, hi = 0, len(options) - 1  # options[0] fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(best_n, options[mid][1]) else (lo, mid - 1)
        if chosen is None or options[lo][0].release_cost > chosen[0].release_cost:
            chosen = options[lo]
    release, cost = chosen
    return Round2Plan(best_n, release, cost, round2_headline_eps(record, best_n, cost, earlier, delta, conversion))
