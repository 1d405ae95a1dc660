"""Privacy auditing: an empirical lower bound on ε from the outputs of a mechanism run on
neighbouring inputs (the statistics of `pate audit`; the runner is `pate.steps.audit`).

**Method** (Jagielski, Ullman, Oprea, "Auditing differentially private machine learning:
how private is private SGD?", NeurIPS 2020; Nasr, Song, Thakurta, Papernot, Carlini,
"Adversary instantiation: lower bounds for differentially private machine learning",
IEEE S&P 2021; the audit of PATE-GAN implementations by Ganev, Annamalai, De Cristofaro,
arXiv 2406.13985, applies it). If a mechanism M is (ε, δ)-DP then for every pair of
neighbours (D, D') and every output event S, ``P[M(D) ∈ S] <= e^ε P[M(D') ∈ S] + δ``, so

    ε >= log((P[M(D) ∈ S] - δ) / P[M(D') ∈ S]).

The audit runs M many times on each side, bounds P[M(D) ∈ S] from below and P[M(D') ∈ S]
from above with one-sided Clopper–Pearson intervals (Clopper & Pearson, Biometrika 1934:
exact for binomial counts, :func:`clopper_pearson`) and reports the largest bound over a
family of events and pairs fixed before sampling, in both directions (D, D') and (D', D).
**Confidence**: every one of the 4·M one-sided intervals (M events × both sides × lower
and upper) is taken at level (1 − confidence)/(4M) (Bonferroni), so with probability at
least ``confidence`` all hold at once and the maximum, :func:`audit`, is a lower bound on
the ε of every (ε, δ) guarantee the mechanism has.

**Neighbours** (replace-one, as everywhere in pate): one teacher's vote changes, so the
histogram n becomes n' with n'_i = n_i − 1 and n'_j = n_j + 1 (:func:`candidate_pairs`).
**Queries**: with ``queries`` = k the same pair is queried k times independently (what a
claim for k queries covers); an output is the k labels.

**Events**: each label falls in one of a few categories fixed in advance — class i (the
one that loses the vote), class j (the one that gains it), any other class (when there
are more than two), unanswered (Confident-GNMax) — and the events are "category c came
up at least m times" and "at most m times" among the k labels, m = 0..k. With two live
classes the count of one of them is a sufficient statistic of the k labels, so these are
the likelihood-ratio (Neyman–Pearson) tests of that pair.

This module uses numpy and scipy only (no JAX, no `pate`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import numpy as np
from scipy import stats

from analysis.mechanisms.record import Mechanism, PureArgmax
from analysis.core import noise
from analysis.reporting.accountants import LABELS, data_independent_items
from analysis.core.errors import PateError

UNANSWERED = "unanswered"
MAX_TEACHERS, MAX_CLASSES = 10**9, 10**4
#: The candidate gaps d = 2a - T of the two counts, in units of the noise scale of their
#: difference: Laplace tails fall like e^{-x}, so its rare events sit further out than Gaussian ones.
LAPLACE_STEPS = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
GAUSSIAN_STEPS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
#: Confident-GNMax: top counts at the threshold + z · sigma_threshold.
THRESHOLD_STEPS = (-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0)


def clopper_pearson(successes, trials, alpha):
    """One-sided Clopper–Pearson bounds ``(lower, upper)`` on a binomial probability.

    ``lower`` is the smallest p with P_p[X >= k] >= α and ``upper`` the largest p with
    P_p[X <= k] >= α (X ~ Bin(trials, p), k = ``successes``): each holds with probability
    at least 1 − α whatever p is (Clopper & Pearson 1934), through the beta quantiles
    ``Beta(k, n − k + 1).ppf(α)`` and ``Beta(k + 1, n − k).ppf(1 − α)``; 0 and 1 at the
    ends. Arrays broadcast.
    """
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(k < 0) or np.any(k > n) or np.any(n < 1):
        raise PateError("Clopper-Pearson needs 0 <= successes <= trials and trials >= 1")
    if not 0.0 < float(alpha) < 1.0:
        raise PateError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    with np.errstate(invalid="ignore", divide="ignore"):
        lower = np.where(k > 0, stats.beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)
        upper = np.where(k < n, stats.beta.ppf(1.0 - alpha, k + 1, np.maximum(n - k, 1)), 1.0)
    return lower, upper


def eps_lower_bound(p_lower, p_upper, delta):
    """``log((p_lower − δ) / p_upper)``: the ε an event forces when ``p_lower`` bounds its
    probability on one side from below and ``p_upper`` on the other from above; −inf where
    ``p_lower <= δ`` (the event says nothing)."""
    p_lower, p_upper = np.asarray(p_lower, dtype=np.float64), np.asarray(p_upper, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p_lower > delta, np.log(np.maximum(p_lower - delta, 1e-300)) - np.log(p_upper), -np.inf)


@dataclasses.dataclass(frozen=True)
class Pair:
    """Neighbouring vote histograms: ``n_prime`` moves one vote of ``n`` from class 0 to class 1."""

    n: np.ndarray
    n_prime: np.ndarray
    what: str


def _histogram(top: int, num_teachers: int, num_classes: int) -> np.ndarray:
    row = np.zeros(num_classes, dtype=np.int64)
    row[0], row[1] = top, num_teachers - top
    return row


def candidate_pairs(record: Mechanism, num_teachers: int, num_classes: int) -> tuple[Pair, ...]:
    """The neighbouring histograms audited, chosen from the public noise alone.

    Every pair puts all ``num_teachers`` votes on classes 0 and 1, ``n = (a, T − a)`` and
    ``n' = (a − 1, T − a + 1)``: one teacher moves from class 0 to class 1, the other
    classes stay empty (the most that can keep them out of the argmax). The gap
    ``d = 2a − T`` of the two counts moves by 2 — the whole L1 sensitivity — and is placed
    at the tie (d = 0 or 1) and at ``z`` noise scales of the difference of the two noisy
    counts (√2·σ for GNMax; 1/γ for LNMax) for z in :data:`GAUSSIAN_STEPS` /
    :data:`LAPLACE_STEPS`, where one label becomes rare and the likelihood ratio of the
    noise is largest. Confident-GNMax adds pairs whose top count ``a`` (which falls by 1,
    the threshold step's sensitivity) sits at ``threshold + z·sigma_threshold`` for z in
    :data:`THRESHOLD_STEPS`. Gaps and tops beyond the teachers are dropped.
    """
    num_teachers, num_classes = int(num_teachers), int(num_classes)
    if not 1 <= num_teachers <= MAX_TEACHERS:
        raise PateError(f"the audit needs 1 to {MAX_TEACHERS} teachers, got {num_teachers}")
    if not 2 <= num_classes <= MAX_CLASSES:
        raise PateError(f"the audit needs 2 to {MAX_CLASSES} classes, got {num_classes}")
    if isinstance(record, PureArgmax):  # LNMax, permute-and-flip, the exponential mechanism: scale 1/γ
        scale, steps = 1.0 / record.gamma, LAPLACE_STEPS
    else:
        scale, steps = math.sqrt(2.0) * record.sigma, GAUSSIAN_STEPS
    low = (num_teachers + 1) // 2  # a >= T - a: class 0 leads in n
    tops = {}
    for z in steps:
        half = z * scale / 2.0 if z else 0.0  # a noise scale too large for the teachers: the last pair
        a = min(num_teachers, low + int(round(half))) if half < num_teachers else num_teachers
        tops.setdefault(a, f"gap {2 * a - num_teachers} = {(2 * a - num_teachers) / scale:.2g} noise scales")
    if record.threshold_step:
        for z in THRESHOLD_STEPS:
            top = record.threshold + z * record.sigma_threshold
            a = int(round(top)) if abs(top) <= 2 * num_teachers else -1
            if max(low, 1) <= a <= num_teachers:
                tops.setdefault(a, f"top at threshold {z:+g} sigma_threshold")
    pairs = []
    for a in sorted(tops):
        if a < 1:
            continue
        n, n_prime = _histogram(a, num_teachers, num_classes), _histogram(a - 1, num_teachers, num_classes)
        pairs.append(Pair(n, n_prime, f"({a}, {num_teachers - a}) -> ({a - 1}, {num_teachers - a + 1}) {tops[a]}"))
    return tuple(pairs)


def categories(record: Mechanism, num_classes: int) -> tuple[str, ...]:
    """The label categories counted: class 0 (loses the vote), class 1 (gains it), any other
    class when there are more than two, and unanswered for Confident-GNMax."""
    names = ["class 0", "class 1"] + (["other class"] if num_classes > 2 else [])
    return tuple(names + ([UNANSWERED] if record.threshold_step else []))


def categorise(labels: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Labels (−1 = unanswered) as indices into ``names`` (:func:`categories`)."""
    labels = np.asarray(labels)
    out = np.where(labels >= 2, 2, labels)
    if UNANSWERED in names:
        out = np.where(labels < 0, names.index(UNANSWERED), out)
    elif np.any(labels < 0):
        raise PateError("an unanswered label from a mechanism that answers every query")
    return out.astype(np.int64)


def count_histogram(cats: np.ndarray, num_categories: int) -> np.ndarray:
    """``hist[c, v]``: how many trials (rows of ``cats``, trials × queries) had category c
    exactly v times."""
    cats = np.asarray(cats)
    k = cats.shape[1]
    return np.stack([np.bincount((cats == c).sum(axis=1), minlength=k + 1) for c in range(num_categories)])


def event_counts(hist: np.ndarray) -> np.ndarray:
    """Trials in each event of one side, ``(categories, 2, k)``: ``[:, 0, m-1]`` "at least m"
    (m = 1..k) and ``[:, 1, m]`` "at most m" (m = 0..k−1), from :func:`count_histogram`."""
    hist = np.asarray(hist, dtype=np.int64)
    at_least = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1][:, 1:]
    at_most = np.cumsum(hist, axis=1)[:, :-1]
    return np.stack([at_least, at_most], axis=1)


def describe_event(names: Sequence[str], index: tuple[int, int, int], queries: int) -> str:
    c, kind, m = index
    if kind == 0:
        return f"{names[c]} at least {m + 1} of {queries}" if queries > 1 else names[c]
    return f"{names[c]} at most {m} of {queries}" if queries > 1 else f"not {names[c]}"


@dataclasses.dataclass(frozen=True)
class Bound:
    """The audit's result: ``eps`` >= 0, the largest lower bound (0 when no event bounds ε
    above 0), and where it came from (pair, event, direction, the rates and their bounds)."""

    eps: float
    confidence: float
    delta: float
    trials: int
    events: int
    pair: int | None = None
    event: str = ""
    direction: str = ""
    rates: tuple[float, float] = (math.nan, math.nan)
    bounds: tuple[float, float] = (math.nan, math.nan)
    per_pair: tuple[float, ...] = ()


def audit(histograms: Sequence[tuple[np.ndarray, np.ndarray]], trials: int, delta: float, confidence: float,
          names: Sequence[str]) -> Bound:
    """The ε lower bound from ``(hist_n, hist_n')`` of every pair (:func:`count_histogram`
    summed over ``trials`` trials per side), valid with probability >= ``confidence``
    simultaneously over all events, pairs and both directions (module docstring)."""
    if not 0.0 < confidence < 1.0:
        raise PateError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    counts = [(event_counts(h), event_counts(h2)) for h, h2 in histograms]
    num_events = sum(c.size for c, _ in counts)
    alpha = (1.0 - confidence) / (4.0 * num_events)
    best = Bound(0.0, confidence, delta, trials, num_events, per_pair=())
    per_pair = []
    for p, (side, other) in enumerate(counts):
        lo, hi = clopper_pearson(side, trials, alpha)
        lo2, hi2 = clopper_pearson(other, trials, alpha)
        pair_best = 0.0
        for direction, (a, b, ka, kb) in {"n vs n'": (lo, hi2, side, other), "n' vs n": (lo2, hi, other, side)}.items():
            eps = eps_lower_bound(a, b, delta)
            i = np.unravel_index(int(np.argmax(eps)), eps.shape)
            pair_best = max(pair_best, float(eps[i]))
            if eps[i] > best.eps:
                best = dataclasses.replace(best, eps=float(eps[i]), pair=p, direction=direction,
                                           event=describe_event(names, i, side.shape[2]),
                                           rates=(ka[i] / trials, kb[i] / trials), bounds=(float(a[i]), float(b[i])))
        per_pair.append(pair_best)
    return dataclasses.replace(best, per_pair=tuple(per_pair))


@functools.lru_cache(maxsize=64)
def claimed_eps(record: Mechanism, queries: int, delta: float) -> tuple[float, str]:
    """The claim the audit is held against: the tightest data-independent ε of ``queries``
    answers of ``record`` at ``delta`` over its accountants (`analysis.reporting.accountants`, the
    labels' headline; replace-one), and the accountant's name."""
    items = {i.key: i.value for i in data_independent_items(record, queries, delta)}
    return float(items["eps_data_independent_headline"]), LABELS[items["data_independent_headline"]]


def audit_delta(record: Mechanism, queries: int, num_classes: int, delta: float, eps: float) -> float:
    """The δ the audit subtracts: the claim's δ plus the float64 samplers' remaining δ
    (`analysis.core.noise.sampling_delta`; a threshold step is one more noise coordinate), so
    the bound is held against the guarantee the implementation actually has."""
    coordinates = num_classes + (1 if record.threshold_step else 0)
    return delta + noise.sampling_delta(queries, coordinates, eps)
