"""The ε report: data-independent, data-dependent and sanitised ε, each marked public or
private, as a terminal table, a JSON document and a plot.

What may be published: the data-independent ε, the sanitised ε and the parameters of
its release. The raw data-dependent ε, its best order, the smooth sensitivity and the
noise scale all depend on the private votes and are marked private.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile

import numpy as np

from analysis import lnmax
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
      warnings: lines a user must read.
      curve_queries: x-axis of the plot (number of answered queries).
      curve_independent: data-independent ε after each answered query (public).
      curve_dependent: data-dependent ε after each answered query (private).
    """

    mechanism: str
    items: tuple[Item, ...]
    warnings: tuple[str, ...] = ()
    curve_queries: np.ndarray | None = None
    curve_independent: np.ndarray | None = None
    curve_dependent: np.ndarray | None = None

    def value(self, key: str):
        for item in self.items:
            if item.key == key:
                return item.value
        raise KeyError(key)


def lnmax_report(votes, gamma: float, delta: float, moments=lnmax.DEFAULT_MOMENTS,
                 beta: float = 0.09, rng: np.random.Generator | None = None) -> PrivacyReport:
    """The PATE 2017 report for LNMax answers to every row of ``votes``.

    Args:
      votes: ``(n, num_classes)`` histograms of the answered queries (private).
      gamma: LNMax's inverse Laplace scale.
      delta: δ of every (ε, δ) figure.
      moments: orders of the moments accountant.
      beta: smoothness of the smooth-sensitivity release.
      rng: source of the release noise; fresh OS entropy when None.
    """
    votes = np.asarray(votes)
    moments = lnmax.check_moments(moments)
    n = votes.shape[0]
    independent = lnmax.data_independent_eps(n, gamma, delta, moments)
    released = lnmax.sanitized_eps(votes, gamma, delta, beta, moments, rng=rng)
    dependent = released.data_dependent
    di_curve, dd_curve = lnmax.cumulative_eps(votes, gamma, delta, moments)
    items = (
        Item("num_queries", "answered queries", n, True),
        Item("gamma", "gamma (Laplace noise 1/gamma)", float(gamma), True),
        Item("delta", "delta", float(delta), True),
        Item("eps_data_independent", "data-independent eps", independent.eps, True,
             f"moment {independent.moment:g}"),
        Item("eps_data_dependent", "data-dependent eps", dependent.eps, False,
             "depends on the votes: do not publish as is"),
        Item("best_moment", "best moment (data-dependent)", dependent.moment, False),
        Item("smooth_sensitivity", "smooth sensitivity of eps", released.smooth_sensitivity, False,
             f"beta = {beta:g}"),
        Item("noise_scale", "Laplace scale of the release", released.noise_scale, False),
        Item("eps_sanitized", "sanitised data-dependent eps", released.value, True,
             "smooth-sensitivity release (NRS07 Cor. 2.4)"),
        Item("eps_release_cost", "extra eps spent by the release", released.eps_release, True,
             f"at delta {released.delta_release:g}; beta {beta:g}"),
        Item("beta", "beta", float(beta), True),
    )
    warnings = []
    if dependent.best_is_largest:
        warnings.append(
            f"the best moment is the largest one tried ({dependent.moment:g}); "
            "try more moments (--moments) for a lower data-dependent eps")
    if independent.best_is_largest:
        warnings.append(
            f"the data-independent eps is best at the largest moment tried "
            f"({independent.moment:g}); more moments may lower it")
    return PrivacyReport("lnmax", items, tuple(warnings), np.arange(1, n + 1), di_curve, dd_curve)


def gnss_parameters(order: float, beta: float | None = None, release_cost: float = 0.2):
    """Public GNSS release parameters at ``order``: β (default 0.1/order) and the σ_ss
    whose release costs ``release_cost`` in RDP at that order. Functions of public
    numbers only."""
    from analysis import gnmax

    beta = 0.1 / order if beta is None else float(beta)
    return beta, gnmax.gnss_sigma_for_cost(order, beta, release_cost)


def gnmax_report(votes, sigma: float, delta: float, *, threshold: float | None = None,
                 sigma_threshold: float | None = None, answered=None, num_teachers: int | None = None,
                 orders=None, conversion: str = "classic", release_order: float | None = None,
                 beta: float | None = None, release_cost: float = 0.2,
                 max_answers: int | None = None,
                 rng: np.random.Generator | None = None, sanitize: bool = True) -> PrivacyReport:
    """The PATE 2018 report for GNMax or Confident-GNMax over the queried rows of ``votes``.

    GNMax: ``votes`` are the answered queries. Confident-GNMax (``threshold`` and
    ``sigma_threshold`` given, ``sigma`` is σ₂): ``votes`` are *all* queried rows (the
    threshold step runs on each) and ``answered`` marks which were answered; the
    data-dependent cost is the joint bound of ``analysis.gnmax.rdp_confident`` (a proven
    bound on the release, unlike the 2018 paper's accounting that charges GNMax only on
    the answered queries), and the data-independent cost composes the threshold step
    and GNMax on every query — or on at most ``max_answers`` of them when the labeller
    capped its answers in advance (``pate label --budget``).

    The sanitised ε is released with GNSS at ``release_order``. When None, the order is
    the one minimising the data-dependent ε, as the 2018 paper does: that choice looks
    at the private votes and is not covered by the release's guarantee, and the report
    says so. Pass a fixed order for a release whose every choice is covered.
    """
    from analysis import gnmax
    from analysis import rdp as rdp_mod

    votes = np.asarray(votes)
    orders = rdp_mod.DEFAULT_ORDERS if orders is None else orders
    orders = rdp_mod.check_orders(orders)
    n = votes.shape[0]
    confident = threshold is not None
    num_answered = None if answered is None else int(np.sum(answered))
    independent = gnmax.data_independent_eps(n, sigma, delta, orders,
                                             sigma_threshold=sigma_threshold if confident else None,
                                             num_answered=max_answers if confident else None,
                                             conversion=conversion)
    kwargs = dict(threshold=threshold, sigma_threshold=sigma_threshold) if confident else {}
    dependent = gnmax.data_dependent_eps(votes, sigma, delta, orders, conversion=conversion, **kwargs)
    warnings = []
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
    chosen_privately = release_order is None
    order = dependent.order if chosen_privately else float(release_order)
    if chosen_privately:
        warnings.append(
            f"the release order {order:g} was chosen from the private data-dependent curve (as in "
            "the 2018 paper); that choice is not covered by the release: fix it with --release-order")
    beta, sigma_ss = gnss_parameters(order, beta, release_cost)
    released = gnmax.sanitized_eps(votes, sigma, delta, order, beta, sigma_ss, conversion=conversion,
                                   num_teachers=num_teachers, rng=rng, **kwargs)
    # Per-query RDP curves for the cumulative plot.
    if confident:
        thr, gn, w, _ = gnmax._confident_curves(votes, sigma, threshold, sigma_threshold, orders)
        per_query = gnmax.rdp_confident(thr, gn, w, orders)
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
    items = [Item("num_queries", "queries", n, True)]
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
        Item("eps_data_independent", "data-independent eps", independent.eps, True,
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
        Item("noise_std", "Gaussian std of the release", released.noise_std, False),
        Item("eps_sanitized", "sanitised data-dependent eps", released.eps, True,
             "GNSS release, its own cost included (2018, Sec. 4.3)"),
        Item("release_order", "release order", order, True,
             "chosen from private values" if chosen_privately else "fixed in advance"),
        Item("release_rdp_cost", "RDP spent by the release", released.rdp_gnss, True,
             f"sigma_ss {sigma_ss:.4g}"),
        Item("beta", "beta", float(beta), True),
    ]
    if n and dependent.order == orders.max():
        warnings.append(f"the best order is the largest one tried ({dependent.order:g}); "
                        "more orders may lower the data-dependent eps")
    return PrivacyReport(mech, tuple(items), tuple(warnings), np.arange(1, n + 1),
                         np.asarray(di_curve), np.asarray(dd_curve))


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
    ))


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
    items.append(Item("eps_data_independent_headline", "data-independent eps, headline (tightest)",
                      float(values[best]), True, f"{labels[best]}; publish this one"))
    items.append(Item("data_independent_headline", "headline data-independent accountant", best, True))
    return tuple(items)


def extend(report: PrivacyReport, items) -> PrivacyReport:
    """``report`` with ``items`` added after its own (keys must be new)."""
    clash = {i.key for i in items} & {i.key for i in report.items}
    if clash:
        raise PateError(f"report already holds {', '.join(sorted(clash))}")
    return dataclasses.replace(report, items=tuple(report.items) + tuple(items))


# --------------------------------------------------------------------------- output


def _format(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:.3f}"


def render_table(report: PrivacyReport) -> str:
    """The report as a plain-text table with a 'publish?' column, then its warnings."""
    rows = [(item.label, _format(item.value), "yes" if item.public else "NO (private)", item.note)
            for item in report.items]
    header = ("quantity", "value", "publish?", "")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(3)]
    lines = [f"Privacy report — {report.mechanism}"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header[:3], widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        text = "  ".join(c.ljust(w) for c, w in zip(row[:3], widths))
        lines.append((text + ("  " + row[3] if row[3] else "")).rstrip())
    lines.append("Publish only the rows marked 'yes'; the others depend on the private votes.")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    return value


def to_json(report: PrivacyReport, extra: dict | None = None) -> dict:
    """The report as a JSON-able dict: ``public`` and ``private`` sections.

    Every value sits in exactly one of the two; ``public`` is safe to publish as a whole.
    """
    doc = {
        "mechanism": report.mechanism,
        "public": {i.key: _jsonable(i.value) for i in report.items if i.public},
        "private": {i.key: _jsonable(i.value) for i in report.items if not i.public},
        "notes": "Values under 'private' depend on the private votes: never publish them.",
        "warnings": list(report.warnings),
    }
    if extra:
        doc.update(extra)
    return doc


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temp file in the same folder and a rename."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PateError(f"cannot write {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_bytes(report: PrivacyReport, extra: dict | None = None) -> bytes:
    return (json.dumps(to_json(report, extra), indent=2, sort_keys=False) + "\n").encode()


def plot_bytes(report: PrivacyReport) -> bytes:
    """PNG of cumulative ε against answered queries (data-independent and -dependent)."""
    if report.curve_queries is None:
        raise PateError("this report has no per-query curve to plot")
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    try:
        ax.plot(report.curve_queries, report.curve_independent, label="data-independent (public)")
        ax.plot(report.curve_queries, report.curve_dependent,
                label="data-dependent (PRIVATE: do not publish)")
        ax.set_xlabel("answered queries")
        ax.set_ylabel("ε")
        delta = report.value("delta")
        ax.set_title(f"{report.mechanism}: cumulative ε at δ = {delta:g}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


def write_outputs(report: PrivacyReport, json_path=None, plot_path=None,
                  extra: dict | None = None) -> None:
    """Renders every requested output first, then writes each atomically, so a failure
    leaves no half-written file."""
    blobs = []
    if json_path is not None:
        blobs.append((json_path, json_bytes(report, extra)))
    if plot_path is not None:
        blobs.append((plot_path, plot_bytes(report)))
    for path, _ in blobs:
        folder = os.path.dirname(os.path.abspath(os.fspath(path)))
        if not os.path.isdir(folder):
            raise PateError(f"cannot write {path}: folder {folder} does not exist; create it first")
    for path, data in blobs:
        write_atomic(path, data)
