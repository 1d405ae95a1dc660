"""Benchmark of the PATE 2018 analysis (analysis.bounds.gnmax) at Glyph scale. Prints JSON.

Glyph scale (2018 paper, Section 5): 5000 teachers, 10,000 queries, 150 classes, Rényi
orders up to 100, Confident-GNMax (threshold 1000, σ₁ = 500, σ₂ = 100). Timed: the
data-dependent RDP curve of all queries at every order, plus the smooth-sensitivity
release (`sanitized_eps`) at the best order. Votes are synthetic (a consensus class
with Beta-distributed agreement and a few confusable classes).

The plain-loop comparison does the same work the way the paper's code does — per query,
per order, scalar Theorem 6; per query, per distance d, move one vote, recompute the
union bound over classes and the local sensitivity with scalar calls — on a subset of
queries, and is scaled to the full count.

    python bench/analysis_gnmax.py [--queries 10000] [--teachers 5000] [--classes 150] [--loop-queries 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

import numpy as np


from scipy.special import log_ndtr, ndtri_exp

from analysis.bounds import gnmax
from analysis.sanitised import gnmax_sensitivity
from analysis.sanitised import gnss
from analysis.core.noise import NoiseSource


def synthetic_votes(n, teachers, classes, seed=0):
    rng = np.random.default_rng(seed)
    votes = np.zeros((n, classes), np.int64)
    agree = rng.beta(2.0, 1.2, size=n)
    for i in range(n):
        k = int(rng.integers(2, 8))
        cls = rng.choice(classes, size=k, replace=False)
        p = np.full(classes, (1 - agree[i]) * 0.2 / classes)
        p[cls[0]] += agree[i]
        p[cls[1:]] += (1 - agree[i]) * 0.8 / (k - 1)
        votes[i] = rng.multinomial(teachers, p / p.sum())
    return votes


# ----------------------------------------------------------------------------- plain loops


def loop_theorem6(logq, sigma, lam):
    indep = lam / sigma**2
    if logq == -math.inf:
        return 0.0
    mu2 = sigma * math.sqrt(-logq)
    mu1 = mu2 + 1
    e1, e2 = mu1 / sigma**2, mu2 / sigma**2
    if not (mu2 > 1 and lam < mu1 and logq + e2 < 0):
        return indep
    if logq > (mu2 - 1) * e2 - mu2 * math.log(mu1 / (mu1 - 1) * mu2 / (mu2 - 1)):
        return indep
    log1q = math.log1p(-math.exp(logq))
    log_a = log1q - math.log1p(-math.exp((logq + e2) * (mu2 - 1) / mu2))
    log_b = e1 - logq / (mu1 - 1)
    x, y = log1q + (lam - 1) * log_a, logq + (lam - 1) * log_b
    return min((max(x, y) + math.log1p(math.exp(-abs(x - y)))) / (lam - 1), indep)


def loop_log_q(counts, sigma):
    top = max(range(len(counts)), key=lambda i: counts[i])
    terms = [float(log_ndtr(-(counts[top] - c) / (math.sqrt(2) * sigma))) for j, c in enumerate(counts) if j != top]
    mx = max(terms)
    return min(mx + math.log(sum(math.exp(t - mx) for t in terms)), math.log(1 - 1 / len(counts)))


def loop_ls(logq, sigma, lam, m):
    z = float(ndtri_exp(logq - math.log(m - 1)))
    up = min(math.log(1 - 1 / m), math.log(m - 1) + float(log_ndtr(z + math.sqrt(2) / sigma)))
    down = math.log(m - 1) + float(log_ndtr(z - math.sqrt(2) / sigma))
    b = loop_theorem6(logq, sigma, lam)
    return max(loop_theorem6(up, sigma, lam) - b, b - loop_theorem6(down, sigma, lam))


def loop_query(counts, sigma, lam, orders, teachers, logq_stop):
    """One query: the RDP curve, then LS at distances 0.. until the union bound passes logq_stop."""
    logq = loop_log_q(counts, sigma)
    curve = [loop_theorem6(logq, sigma, o) for o in orders]
    v = sorted(counts, reverse=True)
    ls = []
    for d in range(teachers + 1):
        if logq >= logq_stop or v[1] >= v[0]:
            break
        ls.append(loop_ls(logq, sigma, lam, len(counts)))
        v[0] -= 1
        v[1] += 1
        logq = loop_log_q(v, sigma)
    return curve, ls


def parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--teachers", type=int, default=5000)
    ap.add_argument("--classes", type=int, default=150)
    ap.add_argument("--loop-queries", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main():
    print(json.dumps(run(parser().parse_args()), indent=1))


def run(args) -> dict:
    """The benchmark's figures as a dict (bench/privacy_analysis.py reports them too)."""

    threshold, s1, s2, delta = 1000.0, 500.0, 100.0, 1e-8
    orders = np.concatenate([np.arange(2.0, 10.0, 0.5), np.geomspace(10.0, 100.0, 44)])
    votes = synthetic_votes(args.queries, args.teachers, args.classes, args.seed)

    t0 = time.perf_counter()
    dd = gnmax.data_dependent_eps(votes, s2, delta, orders, threshold=threshold, sigma_threshold=s1)
    t1 = time.perf_counter()
    order = float(dd.order)
    beta = 0.2 / order
    sigma_ss = gnss.gnss_sigma_for_cost(order, beta, 0.05)
    san = gnss.sanitized_eps(votes, s2, delta, order, beta, sigma_ss, threshold=threshold, sigma_threshold=s1,
                             noise=NoiseSource(args.seed))
    t2 = time.perf_counter()

    # plain loop on a subset (GNMax part, which dominates), scaled to all queries
    ls_model = gnmax_sensitivity._GNMaxLS(s2, order, args.classes, args.teachers)
    k = min(args.loop_queries, args.queries)
    t3 = time.perf_counter()
    for row in votes[:k]:
        loop_query([int(c) for c in row], s2, order, orders, args.teachers, ls_model.cut_lo)
    t4 = time.perf_counter()
    loop_estimate = (t4 - t3) * args.queries / k

    vec = t2 - t0
    return {
        "benchmark": "analysis.bounds.gnmax, Confident-GNMax data-dependent eps + smooth-sensitivity release",
        "queries": args.queries, "teachers": args.teachers, "classes": args.classes,
        "orders": int(orders.size), "max_order": float(orders.max()),
        "threshold": threshold, "sigma_threshold": s1, "sigma": s2, "delta": delta,
        "seconds_total": round(vec, 3),
        "seconds_data_dependent_curve": round(t1 - t0, 3),
        "seconds_smooth_sensitivity_release": round(t2 - t1, 3),
        "plain_loop_seconds_estimated": round(loop_estimate, 1),
        "plain_loop_measured_on_queries": k,
        "speedup_vs_plain_loop": round(loop_estimate / vec, 1),
        "eps_data_dependent_private": round(dd.eps, 4), "order": round(order, 3),
        "expected_answered": round(dd.expected_answered, 1),
        "eps_sanitized": round(san.eps, 4), "beta": beta, "sigma_ss": round(sigma_ss, 3),
        "rdp_gnss": san.rdp_gnss,
        "eps_data_independent": round(gnmax.data_independent_eps(args.queries, s2, delta, orders,
                                                                 sigma_threshold=s1).eps, 4),
        "python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    main()
