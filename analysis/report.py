"""The ε report: data-independent, data-dependent and sanitised ε, each marked public or
private, with the headline ε of everything released. Its table, JSON documents and plot
are `analysis.report_io`'s.

What may be published: the data-independent ε, the sanitised ε and the parameters of
its release. The raw data-dependent ε, its best order, the smooth sensitivity and the
noise scale all depend on the private votes and are marked private.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from analysis import lnmax, lnmax_release
from analysis.errors import PateError


@dataclasses.dataclass(frozen=True)
class Item:
    """One number of the report.

    Attributes:
      key: its name in the JSON document.
      label: its row label in the table.
      value: the number (or a short string).
      public: whether it may be published.
      note: a short explanation shown in the table.
    """

    key: str
    label: str
    value: float | int | str
    public: bool
    note: str = ""


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
    """A privacy report for one labelling run.

    Attributes:
      mechanism: "lnmax", "gnmax" or "confident-gnmax".
      items: the numbers, in table order.
      warnings: lines a user must read that mention public values only.
      private_warnings: lines that mention private values (kept out of release.json).
      curve_queries: x-axis of the plot (number of queries charged).
      curve_independent: data-independent ε after each query (public).
      curve_dependent: data-dependent ε after each query (private).
      curve_label: what the x-axis counts.
    """

    mechanism: str
    items: tuple[Item, ...]
    warnings: tuple[str, ...] = ()
    curve_queries: np.ndarray | None = None
    curve_independent: np.ndarray | None = None
    curve_dependent: np.ndarray | None = None
    private_warnings: tuple[str, ...] = ()
    curve_label: str = "answered queries"

    def value(self, key: str):
        for item in self.items:
            if item.key == key:
                return item.value
        raise KeyError(key)


def lnmax_report(votes, gamma: float, delta: float, moments=lnmax.DEFAULT_MOMENTS,
                 beta: float = lnmax_release.DEFAULT_BETA, noise=None,
                 grid: float = lnmax_release.RELEASE_GRID) -> PrivacyReport:
    """The PATE 2017 report for LNMax answers to every row of ``votes``.

    The headline ``eps`` is the total guarantee of everything released — the labels and
    the sanitised ε — at ``delta_total = delta + delta + delta_sampling`` (the answers' δ,
    the release's, and the float64 label samplers', `headline_delta`): the smaller of the
    data-independent route (ε_DI + ε_r) and the data-dependent route (the sanitised
    value, floored at 0, + ε_r). Both are functions of published values only.

    Args:
      votes: ``(n, num_classes)`` histograms of the answered queries (private).
      gamma: LNMax's inverse Laplace scale.
      delta: δ of every (ε, δ) figure.
      moments: orders of the moments accountant.
      beta: smoothness of the smooth-sensitivity release.
      noise: an ``analysis.noise.NoiseSource`` for the release; fresh OS entropy when None.
      grid: public grid step of the published sanitised ε.
    """
    from analysis.noise import sampling_delta

    votes = np.asarray(votes)
    moments = lnmax.check_moments(moments)
    n = votes.shape[0]
    independent = lnmax.data_independent_eps(n, gamma, delta, moments)
    if not math.isfinite(independent.eps):
        raise PateError(f"the data-independent eps of {n} LNMax answers at --gamma {gamma:g} is not "
                        "finite; lower --gamma")
    released = lnmax_release.sanitized_eps(votes, gamma, delta, beta, moments, noise=noise, grid=grid)
    dependent = released.data_dependent
    di_curve, dd_curve = lnmax.cumulative_eps(votes, gamma, delta, moments)
    routes = {"data-independent": independent.eps + released.eps_release,
              "sanitised data-dependent": max(released.value, 0.0) + released.eps_release}
    route = min(routes, key=routes.get)
    warnings, private_warnings = [], []
    extra_delta = sampling_delta(n, votes.shape[1], routes[route])
    delta_total = headline_delta(delta + released.delta_release, extra_delta, warnings)
    items = (
        Item("eps", "HEADLINE eps (everything released)", routes[route], True,
             f"at delta {delta_total:g}; {route} route, release included"),
        Item("delta_total", "delta of the headline", delta_total, True,
             "answers + release + float64 label noise"),
        Item("num_queries", "answered queries", n, True),
        Item("gamma", "gamma (Laplace noise 1/gamma)", float(gamma), True),
        Item("delta", "delta", float(delta), True),
        Item("eps_data_independent", "data-independent eps (labels only)", independent.eps, True,
             f"moment {independent.moment:g}"),
        Item("eps_data_dependent", "data-dependent eps", dependent.eps, False,
             "depends on the votes: do not publish as is"),
        Item("best_moment", "best moment (data-dependent)", dependent.moment, False),
        Item("smooth_sensitivity", "smooth sensitivity of eps", released.smooth_sensitivity, False,
             f"beta = {beta:g}"),
        Item("noise_scale", "discrete Laplace scale of the release", released.noise_scale, False),
        Item("eps_sanitized", "sanitised data-dependent eps", released.value, True,
             f"on the grid {grid:g} (NRS07 with exact discrete Laplace)"),
        Item("eps_release_cost", "eps spent by the release", released.eps_release, True,
             f"at delta {released.delta_release:g}; beta {beta:g}"),
        Item("beta", "beta", float(beta), True),
        Item("grid", "grid step of the sanitised eps", float(grid), True),
        Item("delta_sampling", "delta from float64 label noise", extra_delta, True,
             "included in the headline delta (analysis.noise)"),
    )
    if dependent.best_is_largest:
        private_warnings.append(
            f"the best moment is the largest one tried ({dependent.moment:g}); "
            "try more moments (--moments) for a lower data-dependent eps")
    if independent.best_is_largest:
        warnings.append(
            f"the data-independent eps is best at the largest moment tried "
            f"({independent.moment:g}); more moments may lower it")
    return PrivacyReport("lnmax", items, tuple(warnings), np.arange(1, n + 1), di_curve, dd_curve,
                         tuple(private_warnings), "answered queries")


def headline_delta(delta: float, sampling: float, warnings: list) -> float:
    """The δ of the headline: the analysis δ (``delta``: the answers', plus the release's
    for LNMax) plus the float64 label samplers' δ (``sampling``, `analysis.noise.sampling_delta`
    at the headline ε: the implemented mechanism is within total variation τ of the ideal
    one, so an (ε, δ) guarantee of the ideal one holds for it at (ε, δ + (1 + e^ε) τ), the
    derivation in `analysis.noise`). The sanitised ε adds no such term: it is drawn with
    exact discrete samplers. A δ is a probability: at 1 or above the headline guarantees
    nothing, which is said in ``warnings`` (public: it depends on public values only) and
    the δ reported is 1.
    """
    total = float(delta) + float(sampling)
    if total >= 1.0:
        warnings.append(f"the headline delta is at least 1 (delta {delta:g} + {sampling:.3g} from the float64 "
                        "label noise at this eps): the headline eps guarantees NOTHING; use more noise or "
                        "fewer queries")
        return 1.0
    return total


MAX_RELEASE_COST = 10.0  # RDP a GNSS release may spend at its order


def gnss_parameters(order: float, beta: float | None = None, release_cost: float = 0.2):
    """Public GNSS release parameters at ``order``: β (default 0.1/order) and the σ_ss
    whose release costs ``release_cost`` in RDP at that order. Functions of public
    numbers only.

    Raises:
      PateError: ``release_cost`` above :data:`MAX_RELEASE_COST` (the release would be
        almost noiseless and its ε meaningless).
    """
    from analysis import gnss

    if not 0 < float(release_cost) <= MAX_RELEASE_COST:
        raise PateError(f"--release-cost must lie in (0, {MAX_RELEASE_COST:g}] (RDP at the release order), got "
                        f"{release_cost:g}: a larger cost leaves the sanitised eps almost noiseless")
    beta = gnss.BETA_TIMES_ORDER / order if beta is None else float(beta)
    return beta, gnss.gnss_sigma_for_cost(order, beta, release_cost)


def gnss_headline_independent(independent, beta: float, sigma_ss: float, delta: float,
                              conversion: str) -> tuple[float, float]:
    """ε of the labels' data-independent RDP curve composed with the GNSS release.

    The sanitised value is released too, so a data-independent headline must count it:
    ``min_λ conv(ρ_DI(λ) + rdp_gnss(λ) + discrete correction)`` over the orders of the
    curve where the GNSS cost is finite (Mironov 2017, Proposition 1: RDP adds). Returns
    ``(eps, order)``; public (no vote enters).
    """
    from analysis import gnss
    from analysis import rdp as rdp_mod

    orders = np.asarray(independent.orders, dtype=float)
    feasible = orders * -math.expm1(-2.0 * beta) < 1.0
    if not feasible.any():
        return math.inf, math.nan
    o = orders[feasible]
    cost = gnss.rdp_gnss(o, beta, sigma_ss) + np.array([gnss.gnss_discrete_correction(x, sigma_ss)
                                                         for x in o])
    eps, order = rdp_mod.eps_from_rdp(o, np.asarray(independent.rdp)[feasible] + cost, delta, conversion)
    return float(eps), float(order)


def data_independent_with_release(mechanism: str, independent, delta: float, *, conversion: str = "classic",
                                  beta: float | None = None, release_order: float | None = None,
                                  release_cost: float = 0.2) -> tuple[float, float, str]:
    """The data-independent ε once the sanitised ε that `pate analyze` / `pate run` publish
    is counted too: ``(eps, delta_total, how)``.

    LNMax: the labels' (ε, δ) plus the smooth-sensitivity release's (ε_r, δ) at the
    default β (``analysis.lnmax_release.DEFAULT_BETA``, or ``beta``). GNMax / Confident-GNMax: the labels' data-independent RDP
    curve composed with the GNSS release at its default order (the data-independent
    optimum, or ``release_order``), β = 0.1/order and ``release_cost`` of RDP there
    (:func:`gnss_headline_independent`). Public: no vote enters.
    """
    if mechanism == "lnmax":
        beta = lnmax_release.DEFAULT_BETA if beta is None else beta
        cost = lnmax_release.release_eps_cost(beta, delta)
        return independent.eps + cost, 2 * delta, f"smooth-sensitivity release, beta {beta:g}, +eps {cost:.4f}"
    order = float(independent.order if release_order is None else release_order)
    beta, sigma_ss = gnss_parameters(order, beta, release_cost)
    eps, _ = gnss_headline_independent(independent, beta, sigma_ss, delta, conversion)
    return eps, delta, f"GNSS release at order {order:g}, RDP cost {release_cost:g}"


def gnmax_report(votes, sigma: float, delta: float, *, threshold: float | None = None,
                 sigma_threshold: float | None = None, answered=None, num_teachers: int | None = None,
                 orders=None, conversion: str = "classic", release_order: float | None = None,
                 beta: float | None = None, release_cost: float = 0.2,
                 max_answers: int | None = None, noise=None, grid: float | None = None,
                 sanitize: bool = True) -> PrivacyReport:
    """The PATE 2018 report for GNMax or Confident-GNMax over the queried rows of ``votes``.

    GNMax: ``votes`` are the answered queries. Confident-GNMax (``threshold`` and
    ``sigma_threshold`` given, ``sigma`` is σ₂): ``votes`` are *all* queried rows (the
    threshold step runs on each) and ``answered`` marks which were answered; the
    data-dependent cost is the joint bound of ``analysis.confident.rdp_confident`` (a proven
    bound on the release, unlike the 2018 paper's accounting that charges GNMax only on
    the answered queries), and the data-independent cost composes the threshold step
    and GNMax on every query — or on at most ``max_answers`` of them when the labeller
    capped its answers in advance (``pate label --budget``).

    The sanitised ε is released with GNSS at ``release_order``. Every parameter of the
    release is fixed before the votes are looked at: when ``release_order`` is None it
    is the order of the data-independent optimum (a public quantity), not the paper's
    data-dependent best order. The headline ``eps`` (at δ) is the smaller of the
    sanitised route (its own cost included) and the data-independent route with the
    release's cost composed in (:func:`gnss_headline_independent`), at
    ``delta_total = delta + delta_sampling`` (`headline_delta`).
    """
    from analysis import gnmax, gnss
    from analysis import rdp as rdp_mod
    from analysis.confident import rdp_confident
    from analysis.noise import sampling_delta

    votes = np.asarray(votes)
    orders = rdp_mod.DEFAULT_ORDERS if orders is None else orders
    orders = rdp_mod.check_orders(orders)
    grid = gnss.RELEASE_GRID if grid is None else grid
    n = votes.shape[0]
    confident = threshold is not None
    num_answered = None if answered is None else int(np.sum(answered))
    independent = gnmax.data_independent_eps(n, sigma, delta, orders,
                                             sigma_threshold=sigma_threshold if confident else None,
                                             num_answered=max_answers if confident else None,
                                             conversion=conversion)
    if not math.isfinite(independent.eps):
        raise PateError(f"the data-independent eps of these {n} queries is not finite at --sigma "
                        f"{sigma:g}" + (f", --sigma-threshold {sigma_threshold:g}" if confident else "")
                        + "; raise the noise")
    kwargs = dict(threshold=threshold, sigma_threshold=sigma_threshold) if confident else {}
    dependent = gnmax.data_dependent_eps(votes, sigma, delta, orders, conversion=conversion, **kwargs)
    warnings, private_warnings = [], []
    if not sanitize:
        items = [Item("num_queries", "queries", n, True)]
        if num_answered is not None:
            items.append(Item("num_answered", "answered queries", num_answered, True))
        items += [Item("delta", "delta", float(delta), True),
                  Item("eps_data_independent", "data-independent eps", independent.eps, True,
                       f"order {independent.order:g}"),
                  Item("eps_data_dependent", "data-dependent eps", dependent.eps, False,
                       "depends on the votes: do not publish as is")]
        return PrivacyReport("confident-gnmax" if confident else "gnmax", tuple(items))
    fixed = release_order is not None
    order = float(release_order) if fixed else float(independent.order)
    beta, sigma_ss = gnss_parameters(order, beta, release_cost)
    released = gnss.sanitized_eps(votes, sigma, delta, order, beta, sigma_ss, conversion=conversion,
                                  num_teachers=num_teachers, noise=noise, grid=grid, **kwargs)
    di_route, di_route_order = gnss_headline_independent(independent, beta, sigma_ss, delta, conversion)
    routes = {"data-independent": di_route, "sanitised data-dependent": released.eps}
    route = min(routes, key=routes.get)
    coordinates = votes.shape[1] + (1 if confident else 0)
    extra_delta = sampling_delta(n, coordinates, routes[route])
    delta_total = headline_delta(delta, extra_delta, warnings)
    # Per-query RDP curves for the cumulative plot.
    if confident:
        thr, gn, w, _ = gnmax.confident_curves(votes, sigma, threshold, sigma_threshold, orders)
        per_query = rdp_confident(thr, gn, w, orders)
        per_query_di = (gnmax.rdp_threshold_data_independent(sigma_threshold, orders)
                        + gnmax.rdp_data_independent(sigma, orders))
    else:
        per_query = gnmax.rdp(gnmax.log_q(votes, sigma), sigma, orders)
        per_query_di = gnmax.rdp_data_independent(sigma, orders)
    count = np.arange(1, n + 1, dtype=float)[:, None]
    dd_curve, _ = rdp_mod.eps_from_rdp(orders, np.cumsum(per_query, axis=0), delta, conversion)
    if confident and max_answers is not None:
        gn_steps = np.minimum(count, max_answers)
        di_rdp = (count * gnmax.rdp_threshold_data_independent(sigma_threshold, orders)
                  + gn_steps * gnmax.rdp_data_independent(sigma, orders))
    else:
        di_rdp = count * per_query_di
    di_curve, _ = rdp_mod.eps_from_rdp(orders, di_rdp, delta, conversion)
    mech = "confident-gnmax" if confident else "gnmax"
    items = [Item("eps", "HEADLINE eps (everything released)", routes[route], True,
                  f"at delta {delta_total:g}; {route} route, release included"),
             Item("delta_total", "delta of the headline", delta_total, True, "answers + float64 label noise"),
             Item("num_queries", "queries", n, True)]
    if confident:
        if num_answered is not None:
            items.append(Item("num_answered", "answered queries", num_answered, True))
        if max_answers is not None:
            items.append(Item("max_answers", "answer cap (fixed in advance)", int(max_answers), True))
        items += [Item("threshold", "threshold T", float(threshold), True),
                  Item("sigma_threshold", "sigma_1 (threshold noise)", float(sigma_threshold), True)]
    items += [
        Item("sigma", "sigma_2 (answer noise)" if confident else "sigma (Gaussian noise)", float(sigma), True),
        Item("delta", "delta", float(delta), True),
        Item("conversion", "RDP -> (eps, delta) conversion", conversion, True),
        Item("eps_data_independent", "data-independent eps (labels only)", independent.eps, True,
             f"order {independent.order:g}"),
        Item("eps_data_dependent", "data-dependent eps", dependent.eps, False,
             "depends on the votes: do not publish as is"),
        Item("best_order", "best order (data-dependent)", dependent.order, False),
    ]
    if confident:
        items.append(Item("expected_answered", "expected answers (sum Pr[answered])",
                          float(dependent.expected_answered), False))
    items += [
        Item("smooth_sensitivity", "smooth sensitivity of the RDP", released.smooth_sensitivity, False,
             f"order {order:g}, beta {beta:.4g}"),
        Item("noise_std", "discrete Gaussian std of the release", released.noise_std, False),
        Item("rdp_sanitized", "sanitised data-dependent RDP", released.rdp_released, True,
             f"on the grid {grid:g}, at order {order:g}"),
        Item("eps_sanitized", "sanitised data-dependent eps", released.eps, True,
             "GNSS release, its own cost included (2018, Sec. 4.3)"),
        Item("eps_data_independent_with_release", "data-independent eps + release", di_route, True,
             f"order {di_route_order:g}"),
        Item("release_order", "release order", order, True,
             "fixed in advance" if fixed else "data-independent best order (public)"),
        Item("release_rdp_cost", "RDP spent by the release", released.rdp_gnss, True,
             f"sigma_ss {sigma_ss:.4g}"),
        Item("beta", "beta", float(beta), True),
        Item("grid", "grid step of the sanitised RDP", float(grid), True),
        Item("delta_sampling", "delta from float64 label noise", extra_delta, True,
             "included in the headline delta (analysis.noise)"),
    ]
    if n and dependent.order == orders.max():
        private_warnings.append(f"the best order is the largest one tried ({dependent.order:g}); "
                                "more orders may lower the data-dependent eps")
    if independent.order == orders.max():
        warnings.append(f"the data-independent eps is best at the largest order tried "
                        f"({independent.order:g}); more orders may lower it")
    return PrivacyReport(mech, tuple(items), tuple(warnings), np.arange(1, n + 1),
                         np.asarray(di_curve), np.asarray(dd_curve), tuple(private_warnings),
                         "queries (threshold steps)" if confident else "answered queries")


def brief_lnmax_report(votes, gamma: float, delta: float, moments=lnmax.DEFAULT_MOMENTS) -> PrivacyReport:
    """Data-independent and data-dependent ε of LNMax answers, without a sanitised release."""
    n = np.asarray(votes).shape[0]
    independent = lnmax.data_independent_eps(n, gamma, delta, moments)
    dependent = lnmax.data_dependent_eps(votes, gamma, delta, moments)
    return PrivacyReport("lnmax", (
        Item("num_queries", "answered queries", n, True),
        Item("delta", "delta", float(delta), True),
        Item("eps_data_independent", "data-independent eps", independent.eps, True,
             f"moment {independent.moment:g}"),
        Item("eps_data_dependent", "data-dependent eps", dependent.eps, False,
             "depends on the votes: do not publish as is"),
    ), private_warnings=(f"the best moment is the largest one tried ({dependent.moment:g}); try more "
                         "moments (--moments) for a lower data-dependent eps",) if dependent.best_is_largest else ())


# ------------------------------------------------------------ data-independent, every accountant


#: The accountants `data_independent_items` compares, per mechanism family.
DATA_INDEPENDENT_ACCOUNTANTS = {"lnmax": ("moments", "pld"), "gnmax": ("classic", "improved", "pld")}


def data_independent_items(mechanism: str, num_queries: int, delta: float, *, gamma: float | None = None,
                           sigma: float | None = None, sigma_threshold: float | None = None,
                           max_answers: int | None = None, moments=lnmax.DEFAULT_MOMENTS,
                           orders=None) -> tuple[Item, ...]:
    """The data-independent ε under every accountant, and the headline: the smallest.

    LNMax: the moments accountant (`analysis.lnmax.data_independent_eps`) and the PLD
    (`analysis.pld.lnmax_eps`). GNMax and Confident-GNMax: the RDP curve converted
    classically and with the improved conversion (`analysis.gnmax.data_independent_eps`)
    and the PLD (`analysis.pld.gnmax_eps`); Confident-GNMax composes ``num_queries``
    threshold steps and GNMax on ``max_answers`` (default all) of them. Each is a valid
    (ε, δ) bound of the same mechanism at the same δ computed from public parameters
    only, so the smallest is valid too and is publishable: it is the headline
    (``eps_data_independent_headline``; ``data_independent_headline`` names it). All
    items are public.
    """
    from analysis import gnmax, pld
    from analysis import rdp as rdp_mod

    n = int(num_queries)
    values = {}
    if mechanism == "lnmax":
        values["moments"] = lnmax.data_independent_eps(n, gamma, delta, moments).eps
        values["pld"] = pld.lnmax_eps(n, gamma, delta).eps
        family = "lnmax"
    elif mechanism in ("gnmax", "confident-gnmax"):
        confident = mechanism == "confident-gnmax"
        orders = rdp_mod.DEFAULT_ORDERS if orders is None else orders
        kwargs = dict(sigma_threshold=sigma_threshold, num_answered=max_answers) if confident else {}
        for conversion in ("classic", "improved"):
            values[conversion] = gnmax.data_independent_eps(n, sigma, delta, orders, conversion=conversion,
                                                            **kwargs).eps
        values["pld"] = pld.gnmax_eps(n, sigma, delta, **kwargs).eps
        family = "gnmax"
    else:
        raise PateError(f"unknown mechanism '{mechanism}'")
    labels = {"moments": "moments accountant (PATE 2017)", "classic": "RDP, classic conversion",
              "improved": "RDP, improved conversion", "pld": "PLD (dp-accounting)"}
    items = [Item(f"eps_data_independent_{name}", f"data-independent eps, {labels[name]}", float(values[name]),
                  True) for name in DATA_INDEPENDENT_ACCOUNTANTS[family]]
    best = min(values, key=lambda k: (values[k], k != "pld"))
    items.append(Item("eps_data_independent_headline", "data-independent eps, tightest (labels only)",
                      float(values[best]), True, f"{labels[best]}; the HEADLINE eps also counts the release"))
    items.append(Item("data_independent_headline", "tightest data-independent accountant", best, True))
    return tuple(items)


def extend(report: PrivacyReport, items) -> PrivacyReport:
    """``report`` with ``items`` added after its own (keys must be new).

    When the items bring a tighter data-independent ε of LNMax
    (``eps_data_independent_headline``, e.g. the PLD), the headline ``eps`` is recomputed
    with it: its data-independent route is that ε plus the release's own cost, at the
    same total δ (basic composition; its float64-sampling part, computed at the larger ε,
    still bounds that δ at the smaller one: `analysis.noise.sampling_delta` grows with ε).
    For GNMax the headline keeps composing the RDP curve with the GNSS release (both in
    RDP at one δ).
    """
    clash = {i.key for i in items} & {i.key for i in report.items}
    if clash:
        raise PateError(f"report already holds {', '.join(sorted(clash))}")
    report = dataclasses.replace(report, items=tuple(report.items) + tuple(items))
    keys = {i.key for i in report.items}
    if report.mechanism == "lnmax" and {"eps", "eps_release_cost", "eps_data_independent_headline"} <= keys:
        di_route = report.value("eps_data_independent_headline") + report.value("eps_release_cost")
        if di_route < report.value("eps"):
            how = report.value("data_independent_headline")
            delta_total = report.value("delta_total")
            report = dataclasses.replace(report, items=tuple(
                Item("eps", item.label, di_route, True,
                     f"at delta {delta_total:g}; data-independent route ({how}), release included")
                if item.key == "eps" else item for item in report.items))
    return report


# --------------------------------------------------------------------------- expected release


def expected_headline(f: float, s: float, cost: float, order: float, delta: float, conversion: str,
                      independent: float) -> tuple[float, float]:
    """(E[headline], P[headline > E + 0.5]) over Z ~ N(0, 1) for a sanitised RDP max(0, f + sZ).

    The headline is ``min(conv(max(0, f + s Z) + cost), independent)`` at ``order``
    (`analysis.rdp.eps_from_rdp`), the GNSS grid rounding ignored; the expectation is a
    40-node Gauss-Hermite sum. ``f`` (the data-dependent RDP) and ``s`` (the GNSS noise
    std) depend on the votes: the result is private, for choosing settings in research.
    """
    from analysis.rdp import eps_from_rdp

    z, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / w.sum()
    released = np.maximum(0.0, f + s * z)
    eps = np.array([eps_from_rdp([order], [r + cost], delta, conversion)[0] for r in released])
    headline = np.minimum(eps, independent)
    mean = float(np.sum(w * headline))
    # The tail exactly: the headline rises with the released RDP r, so it exceeds m = mean + 0.5
    # where r > r*, eps(r* + cost) = m (bisection), unless the data-independent route caps it.
    target = mean + 0.5
    if independent <= target:
        return mean, 0.0
    lo, hi = 0.0, max(f, 0.0) + 20.0 * s + 20.0
    if eps_from_rdp([order], [lo + cost], delta, conversion)[0] > target:
        return mean, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps_from_rdp([order], [mid + cost], delta, conversion)[0] <= target else (lo, mid)
    from scipy.stats import norm

    return mean, float(norm.sf((hi - f) / s)) if s > 0 else float(f > hi)


def release_expectation(votes: np.ndarray, answered: np.ndarray, threshold: float, sigma_threshold: float,
                        sigma: float, privacy, seed: int):
    """(E[headline], P[headline > E + 0.5], the `gnss.sanitized_eps` result) of a Confident-GNMax
    release of `votes` whose `answered` mask is known, at `privacy`'s fixed release order, cost,
    β and conversion (`expected_headline`). `privacy` is a ``[privacy]`` section
    (`pate.config.PrivacyConfig`: ``delta``, ``conversion``, ``release_order`` (0: order 12),
    ``gnss_beta`` (0: the default), ``release_cost``). Reads private votes: research only."""
    from analysis import gnmax, gnss
    from analysis.noise import RELEASE_STREAM, NoiseSource

    order = privacy.release_order or 12.0
    beta, sigma_ss = gnss_parameters(order, privacy.gnss_beta or None, privacy.release_cost)
    indep = gnmax.data_independent_eps(votes.shape[0], sigma, privacy.delta, sigma_threshold=sigma_threshold,
                                       conversion=privacy.conversion)
    di_route, _ = gnss_headline_independent(indep, beta, sigma_ss, privacy.delta, privacy.conversion)
    san = gnss.sanitized_eps(votes, sigma, privacy.delta, order, beta, sigma_ss, threshold=threshold,
                             sigma_threshold=sigma_threshold, answered_mask=answered,
                             noise=NoiseSource(seed, RELEASE_STREAM))
    mean, tail = expected_headline(san.rdp_exact, san.noise_std, san.rdp_gnss, order, privacy.delta,
                                   privacy.conversion, di_route)
    return mean, tail, san
