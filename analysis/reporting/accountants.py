"""The data-independent ε of a label release under every accountant, side by side, and
the headline: the tightest of them.

Each accountant bounds the same mechanism at the same δ from public parameters only —
LNMax: the moments accountant (PATE 2017) and dp-accounting's PLD; GNMax and
Confident-GNMax: the RDP curve with the classic and the improved conversion (PATE 2018,
Proposition 8; `analysis.accounting.rdp`) and the PLD (`analysis.accounting.pld`) — so the smallest is a valid
(ε, δ) bound too and may be published. What each accountant computes is the record's
(`analysis.mechanisms.registry`, ``independent_eps`` and ``accountants``).
"""

from __future__ import annotations

from analysis.bounds import lnmax
from analysis.mechanisms import registry
from analysis.accounting.rdp import DEFAULT_ORDERS
from analysis.reporting.report import Item

#: Row labels of the accountants.
LABELS = {"moments": "moments accountant (PATE 2017)", "classic": "RDP, classic conversion",
          "improved": "RDP, improved conversion", "pld": "PLD (dp-accounting)"}


def data_independent_items(mechanism, num_queries: int, delta: float, *, gamma: float | None = None,
                           sigma: float | None = None, sigma_threshold: float | None = None,
                           max_answers: int | None = None, moments=lnmax.DEFAULT_MOMENTS,
                           orders=None) -> tuple[Item, ...]:
    """The data-independent ε under every accountant, and the headline: the smallest.

    ``mechanism``: an `analysis.mechanisms.registry` record, or a mechanism's name with its noise
    (``gamma``; ``sigma``; ``sigma`` and ``sigma_threshold``: `analysis.mechanisms.registry.from_noise`).
    LNMax: the moments accountant (`analysis.bounds.lnmax.data_independent_eps`) and the PLD
    (`analysis.accounting.pld.lnmax_eps`). GNMax and Confident-GNMax: the RDP curve converted
    classically and with the improved conversion (`analysis.bounds.gnmax.data_independent_eps`)
    and the PLD (`analysis.accounting.pld.gnmax_eps`); Confident-GNMax composes ``num_queries``
    threshold steps and GNMax on ``max_answers`` (default all) of them. Each is a valid
    (ε, δ) bound of the same mechanism at the same δ computed from public parameters
    only, so the smallest is valid too and is publishable: it is the headline
    (``eps_data_independent_headline``; ``data_independent_headline`` names it). All
    items are public.
    """
    if isinstance(mechanism, str):
        mechanism = registry.from_noise(mechanism, gamma=gamma, sigma=sigma, sigma_threshold=sigma_threshold)
    n = int(num_queries)
    orders = DEFAULT_ORDERS if orders is None else orders
    values = {name: mechanism.independent_eps(n, delta, moments=moments, orders=orders, max_answers=max_answers,
                                              **how).eps
              for name, how in mechanism.accountants.items()}
    items = [Item(f"eps_data_independent_{name}", f"data-independent eps, {LABELS[name]}", float(values[name]),
                  True) for name in values]
    best = min(values, key=lambda k: (values[k], k != "pld"))
    items.append(Item("eps_data_independent_headline", "data-independent eps, tightest (labels only)",
                      float(values[best]), True, f"{LABELS[best]}; a sanitised release costs more"))
    items.append(Item("data_independent_headline", "tightest data-independent accountant", best, True))
    return tuple(items)
