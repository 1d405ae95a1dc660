"""Benchmark of the privacy analysis. Prints JSON.

Two parts: the PATE 2017 analysis (analysis.bounds.lnmax) at paper scale, and the PATE 2018
analysis (analysis.bounds.gnmax) at Glyph scale (bench/analysis_gnmax.py; `--skip-glyph` leaves it
out).

Paper scale: 1000 queries, 250 teachers, 10 classes, moments 1..8, β = 0.09, smooth
sensitivity included. The vectorised code is timed against a plain-loop implementation
of the same computation (per query, per moment, per distance k, per class, in Python,
the way the 2017 reference code is written), timed on a subset and scaled, in one run.

    python bench/privacy_analysis.py [--queries 1000] [--teachers 250] [--classes 10] [--loop-queries 20]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import platform
import time

import os

import numpy as np


from analysis.bounds import lnmax
from analysis.sanitised import lnmax_release
from analysis.core.noise import NoiseSource


def loop_q(counts, gamma):
    """Lemma 4, as the 2017 code's compute_q_noisy_max (a loop, plain floats). Also the
    plain-loop second implementation tests/analysis/test_lnmax.py checks analysis.bounds.lnmax against."""
    counts = [float(c) for c in counts]
    winner = max(range(len(counts)), key=lambda i: (counts[i], -i))
    q = 0.0
    for i, c in enumerate(counts):
        if i == winner:
            continue
        gap = gamma * (counts[winner] - c)
        q += (gap + 2.0) / (4.0 * math.exp(gap)) if gap < 700 else 0.0
    return min(q, 1.0 - 1.0 / len(counts))


def loop_logmgf(q, eps, l):
    """Theorem 2/3 with Theorem 3 only where q < 1/(1+e^eps)."""
    data_independent = min(0.5 * eps * eps * l * (l + 1), eps * l)
    if q < 1.0 / (1.0 + math.exp(eps)):
        t = (1 - q) * ((1 - q) / (1 - math.exp(eps) * q)) ** l + q * math.exp(eps * l)
        return min(math.log(t), data_independent)
    return data_independent


def loop_analysis(votes, gamma, delta, moments, beta, grid, envelope):
    """eps, per-moment smooth sensitivity: plain Python loops over queries, l, k."""
    total = [0.0] * len(moments)
    total_ss = [0.0] * len(moments)
    grid = grid.tolist()
    for row in votes:
        counts = [float(c) for c in row]
        q = loop_q(counts, gamma)
        s = sorted(counts, reverse=True)
        k_tie = math.ceil((s[0] - s[1]) / 2)
        for li, l in enumerate(moments):
            total[li] += loop_logmgf(q, 2 * gamma, l)
            best = 0.0
            for k in range(k_tie + 1):
                if 2 * k >= s[0] - s[1]:
                    qk = 1 - 1 / len(s)
                else:
                    moved = [s[0] - k, s[1] + k] + s[2:]
                    qk = loop_q(moved, gamma)
                cell = min(bisect.bisect_left(grid, qk), len(grid) - 1)
                best = max(best, math.exp(-beta * k) * envelope[cell, li])
            total_ss[li] += best
    eps = min((a - math.log(delta)) / l for a, l in zip(total, moments))
    return eps, total_ss


def loop_envelope_cells(grid, gamma, moments, cells):
    """The smooth-sensitivity envelope's cell bounds, one cell and moment at a time."""
    eps = 2 * gamma
    out = []
    for i in cells:
        lo = 0.0 if i == 0 else float(grid[i - 1])
        hi = float(grid[i])
        row = []
        for l in moments:
            up = loop_logmgf(min(hi * math.exp(eps), 1.0), eps, l) - loop_logmgf(lo, eps, l)
            down = loop_logmgf(hi, eps, l) - loop_logmgf(lo * math.exp(-eps), eps, l)
            row.append(max(up, down))
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--teachers", type=int, default=250)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--loop-queries", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-glyph", action="store_true", help="Leave out the Glyph-scale GNMax part.")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    # Teacher agreement like a real ensemble: mostly confident, some split queries.
    conc = rng.choice([0.05, 0.3, 1.0], size=args.queries, p=[0.7, 0.2, 0.1])
    votes = np.stack([rng.multinomial(args.teachers, rng.dirichlet(np.full(args.classes, c))) for c in conc])
    gamma, delta, beta, moments = 0.05, 1e-5, 0.09, list(range(1, 9))

    grid, envelope = lnmax._sensitivity_envelope(gamma, np.asarray(moments, float))  # warm the cache
    lnmax._cached_envelope.cache_clear()
    t0 = time.perf_counter()
    grid, envelope = lnmax._sensitivity_envelope(gamma, np.asarray(moments, float))
    envelope_s = time.perf_counter() - t0

    times = []
    for _ in range(args.repeats):
        lnmax._cached_envelope.cache_clear()
        t0 = time.perf_counter()
        result = lnmax_release.sanitized_eps(votes, gamma, delta, beta, moments, noise=NoiseSource(0))
        times.append(time.perf_counter() - t0)
    vec_s = float(np.median(times))

    sub = votes[: args.loop_queries]
    t0 = time.perf_counter()
    loop_eps, loop_ss = loop_analysis(sub, gamma, delta, moments, beta, grid, envelope)
    loop_sub_s = time.perf_counter() - t0
    cells = range(0, grid.size, max(1, grid.size // 5000))
    t0 = time.perf_counter()
    loop_envelope_cells(grid, gamma, moments, cells)
    loop_envelope_s = (time.perf_counter() - t0) * grid.size / len(cells)
    loop_s = loop_sub_s * args.queries / sub.shape[0] + loop_envelope_s
    check_eps = lnmax.data_dependent_eps(sub, gamma, delta, moments).eps
    check_ss = lnmax.smooth_sensitivity(sub, gamma, moments, beta).sum(axis=0)

    out = {"lnmax_paper_scale": {
        "bench": "analysis.bounds.lnmax (PATE 2017) at paper scale",
        "queries": args.queries, "teachers": args.teachers, "classes": args.classes,
        "moments": len(moments), "beta": beta,
        "vectorised_s": round(vec_s, 4),
        "of_which_envelope_s": round(envelope_s, 4),
        "loop_s_estimated": round(loop_s, 2),
        "of_which_loop_envelope_s": round(loop_envelope_s, 2),
        "loop_measured_on_queries": int(sub.shape[0]),
        "speedup": round(loop_s / vec_s, 1),
        "loop_agrees": bool(abs(loop_eps - check_eps) < 1e-9 and np.allclose(loop_ss, check_ss, rtol=1e-9)),
        "data_dependent_eps": round(result.data_dependent.eps, 4),
        "python": platform.python_version(), "machine": platform.machine(),
    }}
    if not args.skip_glyph:  # the other benchmark, run as its own script (its default arguments)
        import subprocess
        import sys

        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "analysis_gnmax.py")
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True)
        out["gnmax_glyph_scale"] = json.loads(proc.stdout)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
