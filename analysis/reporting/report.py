"""The ε report: data-independent, data-dependent and sanitised ε, each marked public or
private, with this release's own ε (everything it released; the headline, what the data set has
spent over all its releases, is the ledger's: `pate.store.ledger.publish_line`). Its table, JSON documents and plot
are `analysis.reporting.report_io`'s; the data-independent ε under every accountant is
`analysis.reporting.accountants`'s.

What may be published: the data-independent ε, the sanitised ε and the parameters of
its release. The raw data-dependent ε, its best order, the smooth sensitivity and the
noise scale all depend on the private votes and are marked private.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from analysis.bounds import lnmax
from analysis.sanitised import lnmax_release
from analysis.mechanisms import registry
from analysis.mechanisms import noisy_max
from analysis.mechanisms.record import PureArgmax
from analysis.core.errors import PateError


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
      mechanism: the name of the `analysis.mechanisms.registry` record accounted for.
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


#: The name of the headline route through the sanitised value (an upper confidence bound that fails with
#: probability eta, added to the headline's delta when this route is taken).
SANITISED_ROUTE = "sanitised data-dependent"

#: What a report says of a sanitised value drawn with ``publishable=False``: nothing charged it, so it
#: could be drawn again and again until a low value came up; it stays private and the headline
#: is the data-independent route.
UNCHARGED_DRAW = ("the sanitised value was drawn outside a ledger (publishable=False): it is private and the "
                  "headline takes the data-independent route; publish a sanitised eps only through `pate analyze` "
                  "(or pate.analyze), which charges each draw once to the data set's ledger")

#: The row of a report's own figure. "The headline" is one figure only, the data set's (what its
#: ledger composes over every release: `pate analyze`'s PUBLISH line, release.json's ``eps``); a
#: report's ``eps`` is this release's alone and is named so everywhere (issue 44).
OWN_EPS = "this release's eps"
OWN_EPS_SANITISED = f"{OWN_EPS} (labels + sanitised eps)"
OWN_DELTA = "delta of this release's eps"


def _moments_items(n: int, gamma_label: str, gamma: float, delta: float, independent, dependent,
                   dependent_note: str) -> tuple[Item, ...]:
    """The rows every 2γ-DP argmax's report shares: answers, γ, δ, and the data-independent and
    data-dependent ε of the moments accountant (`analysis.bounds.lnmax.MomentsEps`)."""
    return (
        Item("num_queries", "answered queries", n, True),
        Item("gamma", gamma_label, float(gamma), True),
        Item("delta", "delta", float(delta), True),
        Item("eps_data_independent", "data-independent eps (labels only)", independent.eps, True,
             f"moment {independent.moment:g}"),
        Item("eps_data_dependent", "data-dependent eps", dependent.eps, False, dependent_note),
        Item("best_moment", "best moment (data-dependent)", dependent.moment, False),
    )


def lnmax_report(votes, gamma: float, delta: float, moments=lnmax.DEFAULT_MOMENTS,
                 beta: float = lnmax_release.DEFAULT_BETA, noise=None,
                 grid: float = lnmax_release.RELEASE_GRID, *, publishable: bool = False) -> PrivacyReport:
    """The PATE 2017 report for LNMax answers to every row of ``votes``.

    The headline ``eps`` is the total guarantee of everything released — the labels and
    the sanitised ε — at ``delta_total = delta + delta + delta_sampling`` (the answers' δ,
    the release's, and the float64 label samplers', `headline_delta`): the smaller of the
    data-independent route (ε_DI + ε_r) and the data-dependent route (the sanitised
    value + ε_r, with η added to δ: the sanitised value is an upper confidence bound on the
    data-dependent ε that fails with probability η, `analysis.sanitised.lnmax_release.sanitized_eps`).
    Both are functions of published values only.

    Args:
      votes: ``(n, num_classes)`` histograms of the answered queries (private).
      gamma: LNMax's inverse Laplace scale.
      delta: δ of every (ε, δ) figure.
      moments: orders of the moments accountant.
      beta: smoothness of the smooth-sensitivity release.
      noise: an ``analysis.core.noise.NoiseSource`` for the release; fresh OS entropy when None.
      grid: public grid step of the published sanitised ε.
      publishable: True only when the caller charges this draw, once, to the data set's ledger
        (`pate analyze` does). Otherwise the sanitised value is marked private and the headline
        takes the data-independent route: a draw outside a ledger could be redrawn until a low
        one came up (`UNCHARGED_DRAW`).
    """
    from analysis.core.noise import sampling_delta

    votes = np.asarray(votes)
    moments = lnmax.check_moments(moments)
    n = votes.shape[0]
    independent = noisy_max.LNMax(gamma).independent_eps(n, delta, moments=moments)
    if not math.isfinite(independent.eps):
        raise PateError(f"the data-independent eps of {n} LNMax answers at --gamma {gamma:g} is not "
                        "finite; lower --gamma")
    released = lnmax_release.sanitized_eps(votes, gamma, delta, beta, moments, noise=noise, grid=grid)
    dependent = released.data_dependent
    di_curve, dd_curve = lnmax.cumulative_eps(votes, gamma, delta, moments)
    routes = {"data-independent": independent.eps + released.eps_release,
              SANITISED_ROUTE: released.value + released.eps_release}
    route = min(routes, key=routes.get) if publishable else "data-independent"
    warnings, private_warnings = [], [] if publishable else [UNCHARGED_DRAW]
    extra_delta = sampling_delta(n, votes.shape[1], routes[route])
    eta = released.eta if route == SANITISED_ROUTE else 0.0
    delta_total = headline_delta(delta + released.delta_release + eta, extra_delta, warnings)
    items = (
        Item("eps", OWN_EPS_SANITISED, routes[route], True,
             f"at delta {delta_total:g}; {route} route, release included"),
        Item("delta_total", OWN_DELTA, delta_total, True,
             "answers + release + float64 label noise" + (" + eta (the upper bound's failure)" if eta else "")),
        *_moments_items(n, "gamma (Laplace noise 1/gamma)", gamma, delta, independent, dependent,
                        "depends on the votes: do not publish as is"),
        Item("smooth_sensitivity", "smooth sensitivity of eps", released.smooth_sensitivity, False,
             f"beta = {beta:g}"),
        Item("noise_scale", "discrete Laplace scale of the release", released.noise_scale, False),
        Item("eps_sanitized", "sanitised data-dependent eps", released.value, publishable,
             f"an upper bound except with probability eta {released.eta:.3g}; on the grid {grid:g} "
             "(NRS07 with exact discrete Laplace)" + ("" if publishable else "; drawn outside a ledger")),
        Item("eta", "eta: P[sanitised eps below the data-dependent eps]", released.eta, True,
             "added to delta when the sanitised route is taken"),
        Item("eps_release_cost", "eps spent by the release", released.eps_release, True,
             f"at delta {released.delta_release:g}; beta {beta:g}"),
        Item("beta", "beta", float(beta), True),
        Item("grid", "grid step of the sanitised eps", float(grid), True),
        Item("delta_sampling", "delta from float64 label noise", extra_delta, True,
             "included in this release's delta (analysis.core.noise)"),
    )
    if dependent.best_is_largest:
        private_warnings.append(
            f"the best moment is the largest one tried ({dependent.moment:g}); "
            "try more moments (--moments) for a lower data-dependent eps")
    if independent.best_is_largest:
        warnings.append(
            f"the data-independent eps is best at the largest moment tried "
            f"({independent.moment:g}); more moments may lower it")
    return PrivacyReport(noisy_max.LNMax.name, items, tuple(warnings), np.arange(1, n + 1), di_curve, dd_curve,
                         tuple(private_warnings), "answered queries")


def headline_delta(delta: float, sampling: float, warnings: list) -> float:
    """The δ of the headline: the analysis δ (``delta``: the answers', plus the release's
    for LNMax) plus the float64 label samplers' δ (``sampling``, `analysis.core.noise.sampling_delta`
    at the headline ε: the implemented mechanism is within total variation τ of the ideal
    one, so an (ε, δ) guarantee of the ideal one holds for it at (ε, δ + (1 + e^ε) τ), the
    derivation in `analysis.core.noise`). The sanitised ε adds no such term: it is drawn with
    exact discrete samplers. A δ is a probability: at 1 or above the headline guarantees
    nothing, which is said in ``warnings`` (public: it depends on public values only) and
    the δ reported is 1.
    """
    total = float(delta) + float(sampling)
    if total >= 1.0:
        warnings.append(f"this release's delta is at least 1 (delta {delta:g} + {sampling:.3g} from the float64 "
                        "label noise at this eps): this release's eps guarantees NOTHING; use more noise or "
                        "fewer queries")
        return 1.0
    return total


def gnmax_report(votes, sigma: float, delta: float, *, threshold: float | None = None,
                 sigma_threshold: float | None = None, answered=None, num_teachers: int | None = None,
                 orders=None, conversion: str = "classic", release_order: float | None = None,
                 beta: float | None = None, release_cost: float = 0.2,
                 max_answers: int | None = None, noise=None, grid: float | None = None,
                 sanitize: bool = True, offsets=None, publishable: bool = False) -> PrivacyReport:
    """The PATE 2018 report for GNMax or Confident-GNMax over the queried rows of ``votes``.

    GNMax: ``votes`` are the answered queries. Confident-GNMax (``threshold`` and
    ``sigma_threshold`` given, ``sigma`` is σ₂): ``votes`` are *all* queried rows (the
    threshold step runs on each) and ``answered`` marks which were answered; the
    data-dependent cost is the joint bound of ``analysis.bounds.confident.rdp_confident`` (a proven
    bound on the release, unlike the 2018 paper's accounting that charges GNMax only on
    the answered queries), and the data-independent cost composes the threshold step
    and GNMax on every query — or on at most ``max_answers`` of them when the labeller
    capped its answers in advance (``pate label --budget``). With ``offsets`` (one row per
    queried row, `analysis.bounds.interactive`) it is Interactive-GNMax: the threshold step tests
    max_j (n_j − o_j), the student's check, under the same bounds.

    The sanitised ε is released with GNSS at ``release_order``. Every parameter of the
    release is fixed before the votes are looked at: when ``release_order`` is None it
    is the order of the data-independent optimum (a public quantity), not the paper's
    data-dependent best order. The headline ``eps`` (at δ) is the smaller of the
    sanitised route (its own cost included) and the data-independent route with the
    release's cost composed in (`analysis.sanitised.gnss.gnss_headline_independent`), at
    ``delta_total = delta + delta_sampling`` (`headline_delta`), plus η on the sanitised route: the
    sanitised RDP is an upper confidence bound that fails with probability η (default δ,
    `analysis.sanitised.gnss.upper_bound`). ``publishable``: as in `lnmax_report` (only a caller
    that charges the draw once to the data set's ledger may publish it).
    """
    from analysis.bounds import gnmax
    from analysis.sanitised import gnss
    from analysis.accounting import rdp as rdp_mod
    from analysis.core.noise import sampling_delta

    votes = np.asarray(votes)
    orders = rdp_mod.check_orders(rdp_mod.DEFAULT_ORDERS if orders is None else orders)
    grid = gnss.RELEASE_GRID if grid is None else grid
    n = votes.shape[0]
    record = registry.from_options(gnmax.mechanism_name(threshold, sigma_threshold), sigma=sigma,
                                     threshold=threshold, sigma_threshold=sigma_threshold)
    confident = threshold is not None
    num_answered = None if answered is None else int(np.sum(answered))
    independent = record.independent_eps(n, delta, orders=orders, conversion=conversion, max_answers=max_answers)
    if not math.isfinite(independent.eps):
        raise PateError(f"the data-independent eps of these {n} queries is not finite at --sigma "
                        f"{sigma:g}" + (f", --sigma-threshold {sigma_threshold:g}" if confident else "")
                        + "; raise the noise")
    if offsets is not None and not confident:
        raise PateError("check offsets (Interactive-GNMax) apply to Confident-GNMax only")
    kwargs = dict(threshold=threshold, sigma_threshold=sigma_threshold, offsets=offsets) if confident else {}
    dependent = gnmax.data_dependent_eps(votes, sigma, delta, orders, conversion=conversion, **kwargs)
    if not sanitize:
        return _brief_gnmax_report(record.name, n, num_answered, delta, independent, dependent)
    fixed = release_order is not None
    order = float(release_order) if fixed else float(independent.order)
    beta, sigma_ss = gnss.gnss_parameters(order, beta, release_cost)
    released = gnss.sanitized_eps(votes, sigma, delta, order, beta, sigma_ss, conversion=conversion,
                                  num_teachers=num_teachers, noise=noise, grid=grid, **kwargs)
    di_route, di_route_order = gnss.gnss_headline_independent(independent, beta, sigma_ss, delta, conversion)
    routes = {"data-independent": di_route, SANITISED_ROUTE: released.eps}
    route = min(routes, key=routes.get) if publishable else "data-independent"
    warnings, private_warnings = [], [] if publishable else [UNCHARGED_DRAW]
    extra_delta = sampling_delta(n, votes.shape[1] + (1 if confident else 0), routes[route])
    eta = released.eta if route == SANITISED_ROUTE else 0.0
    delta_total = headline_delta(delta + eta, extra_delta, warnings)
    di_curve, dd_curve = _gnmax_curves(votes, record, confident, orders, delta, conversion, max_answers, offsets)
    items = [Item("eps", OWN_EPS_SANITISED, routes[route], True,
                  f"at delta {delta_total:g}; {route} route, release included"),
             Item("delta_total", OWN_DELTA, delta_total, True,
                  "answers + float64 label noise" + (" + eta (the upper bound's failure)" if eta else "")),
             Item("num_queries", "queries", n, True)]
    items += _gnmax_items(record, confident, num_answered, max_answers, delta, conversion, independent, dependent)
    if offsets is not None:
        items.append(Item("check", "threshold statistic", "max_j (n_j - o_j), o = floor(T p) of the student",
                          True, "Interactive-GNMax (2018, Algorithm 2)"))
    items += _gnss_items(released, fixed, di_route, di_route_order, extra_delta, publishable)
    return _gaussian_report(record, items, (warnings, private_warnings), (independent, dependent, orders, n),
                            (di_curve, dd_curve), confident)


def _brief_gnmax_report(name: str, n: int, num_answered, delta: float, independent, dependent) -> PrivacyReport:
    """Data-independent and data-dependent ε of GNMax / Confident-GNMax queries, without a
    sanitised release."""
    items = [Item("num_queries", "queries", n, True)]
    if num_answered is not None:
        items.append(Item("num_answered", "answered queries", num_answered, True))
    items += [Item("delta", "delta", float(delta), True),
              Item("eps_data_independent", "data-independent eps", independent.eps, True,
                   f"order {independent.order:g}"),
              Item("eps_data_dependent", "data-dependent eps", dependent.eps, False,
                   "depends on the votes: do not publish as is")]
    return PrivacyReport(name, tuple(items))


def _gnmax_items(record, confident: bool, num_answered, max_answers, delta: float, conversion: str,
                 independent, dependent) -> list:
    """The report's rows on the noise and the labels' ε (with ``confident``, the threshold's
    rows of Confident-GNMax too)."""
    items = []
    if confident:
        if num_answered is not None:
            items.append(Item("num_answered", "answered queries", num_answered, True))
        if max_answers is not None:
            items.append(Item("max_answers", "answer cap (fixed in advance)", int(max_answers), True))
        items += [Item("threshold", "threshold T", float(record.threshold), True),
                  Item("sigma_threshold", "sigma_1 (threshold noise)", float(record.sigma_threshold), True)]
    items += [
        Item("sigma", "sigma_2 (answer noise)" if confident else "sigma (Gaussian noise)", float(record.sigma), True),
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
    return items


def _gnss_items(released, fixed: bool, di_route: float, di_route_order: float, extra_delta: float,
                publishable: bool = True) -> list:
    """The report's rows on the GNSS release (``released``, `analysis.sanitised.gnss.SanitizedEps`)
    and the data-independent route with it; the sanitised values private unless ``publishable``."""
    order, beta, grid = released.order, released.beta, released.grid
    return [
        Item("smooth_sensitivity", "smooth sensitivity of the RDP", released.smooth_sensitivity, False,
             f"order {order:g}, beta {beta:.4g}"),
        Item("noise_std", "discrete Gaussian std of the release", released.noise_std, False),
        Item("rdp_sanitized", "sanitised data-dependent RDP", released.rdp_released, publishable,
             f"on the grid {grid:g}, at order {order:g}" + ("" if publishable else "; drawn outside a ledger")),
        Item("eps_sanitized", "sanitised data-dependent eps", released.eps, publishable,
             f"GNSS release, its own cost included (2018, Sec. 4.3); an upper bound except with probability "
             f"eta {released.eta:.3g}"),
        Item("eta", "eta: P[sanitised RDP below the data-dependent RDP]", released.eta, True,
             "added to delta when the sanitised route is taken"),
        Item("noise_multiplier", "noise multiplier of the release", released.noise_multiplier, True,
             f"sigma_n >= sigma_ss; centre shifted up by {released.shift:.4g} smooth sensitivities"),
        Item("eps_data_independent_with_release", "data-independent eps + release", di_route, True,
             f"order {di_route_order:g}"),
        Item("release_order", "release order", order, True,
             "fixed in advance" if fixed else "data-independent best order (public)"),
        Item("release_rdp_cost", "RDP spent by the release", released.rdp_gnss, True,
             f"sigma_ss {released.sigma_ss:.4g}"),
        Item("beta", "beta", float(beta), True),
        Item("grid", "grid step of the sanitised RDP", float(grid), True),
        Item("delta_sampling", "delta from float64 label noise", extra_delta, True,
             "included in this release's delta (analysis.core.noise)"),
    ]


def _gnmax_curves(votes, record, confident: bool, orders, delta: float, conversion: str, max_answers,
                  offsets=None, per_query_rdp=None):
    """The plot's curves: data-independent and data-dependent ε after each query (each
    per-query RDP summed up to it, converted at every prefix). ``per_query_rdp(rows, offsets)``:
    each query's data-dependent RDP (default: the float64 records' bounds)."""
    from analysis.bounds import gnmax
    from analysis.accounting import rdp as rdp_mod
    from analysis.bounds.confident import rdp_confident

    n = votes.shape[0]
    sigma = record.sigma
    if confident:
        per_query_thr = gnmax.rdp_threshold_data_independent(record.sigma_threshold, orders)
        per_query_di = per_query_thr + gnmax.rdp_data_independent(sigma, orders)
    else:
        per_query_di = gnmax.rdp_data_independent(sigma, orders)
    # Block by block of queries (`analysis.bounds.gnmax.row_blocks`): each query's bound is a
    # function of its own row, and the running sum carries over the blocks as one cumsum
    # along the queries would (row after row), so the curves are those of the whole array
    # while only one block's (rows, orders) arrays are held.
    di_curve, dd_curve, carry = np.empty(n), np.empty(n), None
    for rows in gnmax.row_blocks(votes, orders):
        if per_query_rdp is not None:
            per_query = per_query_rdp(votes[rows], None if offsets is None else np.asarray(offsets)[rows])
        elif confident:
            thr, gn, w, _ = gnmax.confident_curves(votes[rows], sigma, record.threshold, record.sigma_threshold,
                                                   orders, None if offsets is None else np.asarray(offsets)[rows])
            per_query = rdp_confident(thr, gn, w, orders)
        else:
            per_query = gnmax.rdp(gnmax.log_q(votes[rows], sigma), sigma, orders)
        if carry is None:
            running = np.cumsum(per_query, axis=0)
        else:
            running = np.cumsum(np.concatenate([carry[None], per_query]), axis=0)[1:]
        carry = running[-1]
        dd_curve[rows], _ = rdp_mod.eps_from_rdp(orders, running, delta, conversion)
        count = np.arange(rows.start + 1, rows.stop + 1, dtype=float)[:, None]
        if confident and max_answers is not None:
            di_rdp = count * per_query_thr + np.minimum(count, max_answers) * gnmax.rdp_data_independent(sigma, orders)
        else:
            di_rdp = count * per_query_di
        di_curve[rows], _ = rdp_mod.eps_from_rdp(orders, di_rdp, delta, conversion)
    return di_curve, dd_curve


def exact_gnmax_report(votes, record, delta: float, *, answered=None, max_answers: int | None = None,
                       orders=None, conversion: str = "classic", offsets=None) -> PrivacyReport:
    """The report of GNMax or Confident-GNMax drawn with exact coins (``record`` an
    `analysis.mechanisms.exact_gaussian` record; ``votes`` the answered rows, every queried row
    for Confident-GNMax, ``answered`` marking the answers; ``offsets`` Interactive-GNMax's check).

    The headline is the labels' data-independent ε at ``delta`` (the continuous GNMax's RDP
    curve, CKS20 Proposition 5; `analysis.bounds.gnmax.data_independent_eps`): the samplers are
    exact, so no sampling δ is added, and no sanitised release exists (``eps_release_cost`` 0).
    The data-dependent ε (`analysis.bounds.discrete_gnmax`: Theorem 6 with the discrete
    Gaussian's tails) is a **private** diagnostic only.
    """
    from analysis.accounting import rdp as rdp_mod
    from analysis.bounds import discrete_gnmax
    from analysis.mechanisms.exact_gaussian import float_up

    votes = np.asarray(votes)
    orders = rdp_mod.check_orders(rdp_mod.DEFAULT_ORDERS if orders is None else orders)
    confident = record.threshold_step
    if offsets is not None and not confident:
        raise PateError("check offsets (Interactive-GNMax) apply to Confident-GNMax only")
    n = votes.shape[0]
    num_answered = None if answered is None else int(np.sum(answered))
    independent = record.independent_eps(n, delta, orders=orders, conversion=conversion, max_answers=max_answers)
    if not math.isfinite(independent.eps):
        raise PateError(f"the data-independent eps of these {n} queries is not finite at {record.noise_options()}; "
                        "raise the noise")
    noise = dict(threshold=record.threshold, sigma_threshold=record.sigma_threshold,
                 variance_threshold=float_up(record.variance_threshold)) if confident else {}
    variance = float_up(record.variance)
    dependent = discrete_gnmax.data_dependent_eps(votes, record.sigma, variance, delta, orders,
                                                  conversion=conversion, offsets=offsets, **noise)

    def per_query_rdp(rows, rows_offsets):
        return discrete_gnmax.query_rdp(rows, record.sigma, variance, orders, offsets=rows_offsets, **noise)[0]

    di_curve, dd_curve = _gnmax_curves(votes, record, confident, orders, delta, conversion, max_answers, offsets,
                                       per_query_rdp)
    items = [Item("eps", f"{OWN_EPS} (labels only)", independent.eps, True,
                  f"at delta {float(delta):g}; data-independent (labels only: no sanitised eps is released)"),
             Item("delta_total", OWN_DELTA, float(delta), True, "exact discrete Gaussian coins: no floating-point delta"),
             Item("num_queries", "queries", n, True)]
    items += _gnmax_items(record, confident, num_answered, max_answers, delta, conversion, independent, dependent)
    if offsets is not None:
        items.append(Item("check", "threshold statistic", "max_j (n_j - o_j), o = floor(T p) of the student",
                          True, "Interactive-GNMax (2018, Algorithm 2)"))
    items.append(Item("eps_release_cost", "eps spent by a sanitised release", 0.0, True,
                      "none is made: no smooth sensitivity of the exact coins' data-dependent eps is proven"))
    warnings, private_warnings = [], []
    return _gaussian_report(record, items, (warnings, private_warnings), (independent, dependent, orders, n),
                            (di_curve, dd_curve), confident)


def brief_lnmax_report(votes, gamma: float, delta: float, moments=lnmax.DEFAULT_MOMENTS) -> PrivacyReport:
    """Data-independent and data-dependent ε of LNMax answers, without a sanitised release."""
    n = np.asarray(votes).shape[0]
    independent = noisy_max.LNMax(gamma).independent_eps(n, delta, moments=moments)
    dependent = lnmax.data_dependent_eps(votes, gamma, delta, moments)
    return PrivacyReport(noisy_max.LNMax.name, (
        Item("num_queries", "answered queries", n, True),
        Item("delta", "delta", float(delta), True),
        Item("eps_data_independent", "data-independent eps", independent.eps, True,
             f"moment {independent.moment:g}"),
        Item("eps_data_dependent", "data-dependent eps", dependent.eps, False,
             "depends on the votes: do not publish as is"),
    ), private_warnings=(f"the best moment is the largest one tried ({dependent.moment:g}); try more "
                         "moments (--moments) for a lower data-dependent eps",) if dependent.best_is_largest else ())


def pure_report(votes, record: PureArgmax, delta: float, moments=lnmax.DEFAULT_MOMENTS) -> PrivacyReport:
    """The report of a 2γ-DP argmax with no sanitised release (``record.sanitised`` False:
    permute-and-flip, the exponential mechanism) over the answered rows of ``votes``.

    The headline is the labels' data-independent ε (``count`` answers of an ε₀ = 2γ-DP
    mechanism: the moments accountant here, the PLD among the accountants `extend` adds) at
    ``delta``: the samplers are exact, so no sampling δ is added, and nothing else is
    released (``eps_release_cost`` 0). The data-dependent ε (PATE 2017, Theorem 3 with the
    record's bound on P[answer ≠ plurality], `analysis.bounds.lnmax.eps_from_q`) is shown as a
    **private** diagnostic only: no smooth sensitivity of it is proven, so it is never published.
    """
    votes = np.asarray(votes)
    moments = lnmax.check_moments(moments)
    n = votes.shape[0]
    independent = record.independent_eps(n, delta, moments=moments)
    if not math.isfinite(independent.eps):
        raise PateError(f"the data-independent eps of {n} {record.name} answers at --gamma {record.gamma:g} is "
                        "not finite; lower --gamma")
    q = record.q_bound(votes)
    dependent = lnmax.eps_from_q(q, record.eps0, delta, moments)
    di_curve, dd_curve = lnmax.cumulative_eps_from_q(q, record.eps0, delta, moments)
    items = (
        Item("eps", f"{OWN_EPS} (labels only)", independent.eps, True,
             f"at delta {float(delta):g}; data-independent (labels only: no sanitised eps is released)"),
        Item("delta_total", OWN_DELTA, float(delta), True, "exact sampler: no floating-point delta"),
        *_moments_items(n, f"gamma (each answer 2 gamma = {record.eps0:g}-DP)", record.gamma, delta, independent,
                        dependent, "depends on the votes: never published (no sanitised release of it exists)"),
        Item("eps_release_cost", "eps spent by a sanitised release", 0.0, True,
             "none is made: no smooth sensitivity of this mechanism's data-dependent eps is proven"),
    )
    warnings = []
    if independent.best_is_largest:
        warnings.append(f"the data-independent eps is best at the largest moment tried ({independent.moment:g}); "
                        "more moments may lower it")
    return PrivacyReport(record.name, items, tuple(warnings), np.arange(1, n + 1), di_curve, dd_curve, (),
                         "answered queries")


def extend(report: PrivacyReport, items) -> PrivacyReport:
    """``report`` with ``items`` added after its own (keys must be new).

    When the items bring a tighter data-independent ε of LNMax
    (``eps_data_independent_headline``, e.g. the PLD), the headline ``eps`` is recomputed
    with it: its data-independent route is that ε plus the release's own cost, at the
    same total δ (basic composition; its float64-sampling part, computed at the larger ε,
    still bounds that δ at the smaller one: `analysis.core.noise.sampling_delta` grows with ε).
    For GNMax the headline keeps composing the RDP curve with the GNSS release (both in
    RDP at one δ).
    """
    clash = {i.key for i in items} & {i.key for i in report.items}
    if clash:
        raise PateError(f"report already holds {', '.join(sorted(clash))}")
    report = dataclasses.replace(report, items=tuple(report.items) + tuple(items))
    keys = {i.key for i in report.items}
    # Only a release composed by basic composition (LNMax's smooth-sensitivity release)
    # reports its (ε, δ) as ``eps_release_cost``.
    if {"eps", "eps_release_cost", "eps_data_independent_headline"} <= keys:
        di_route = report.value("eps_data_independent_headline") + report.value("eps_release_cost")
        if di_route < report.value("eps"):
            how = report.value("data_independent_headline")
            delta_total = report.value("delta_total")
            report = dataclasses.replace(report, items=tuple(
                Item("eps", item.label, di_route, True,
                     f"at delta {delta_total:g}; data-independent route ({how}), release included")
                if item.key == "eps" else item for item in report.items))
    return report


def _gaussian_report(record, items, said, orders_used, curves, confident: bool) -> PrivacyReport:
    """The report of a Gaussian argmax (float64 or exact coins): its items, the warnings ``said``
    (public, private) with those of an order at the end of the grid added, its curves per
    query. ``orders_used``: the data-independent and data-dependent results, the orders tried
    and the number of queries."""
    warnings, private_warnings = said
    independent, dependent, orders, n = orders_used
    if n and dependent.order == orders.max():
        private_warnings.append(f"the best order is the largest one tried ({dependent.order:g}); "
                                "more orders may lower the data-dependent eps")
    if independent.order == orders.max():
        warnings.append(f"the data-independent eps is best at the largest order tried "
                        f"({independent.order:g}); more orders may lower it")
    di_curve, dd_curve = curves
    return PrivacyReport(record.name, tuple(items), tuple(warnings), np.arange(1, n + 1),
                         np.asarray(di_curve), np.asarray(dd_curve), tuple(private_warnings),
                         "queries (threshold steps)" if confident else "answered queries")
