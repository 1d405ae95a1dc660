"""A Glyph-scale simulated run of `pate label --votes` and `pate analyze`: 5000 simulated
teachers, 150 classes, N pool points (the 2018 paper's Glyph: 5000 teachers, 150 classes).
Prints JSON: each step's wall time and peak resident memory, the answered queries, the
labels' accuracy against the simulated truth, and the published ε.

The teachers are simulated, not trained (numpy, seeded; no data). Each point has a true
class and an ease e_i ~ Beta(3, 1.5) (mean 0.67: most points easy, some ambiguous); each
teacher an accuracy a_t ~ Beta(6, 4) (mean 0.6: Glyph's teachers each see 1/5000 of the
data). Teacher t votes the true class of point i with probability a_t·e_i; a wrong vote goes,
with probability 0.8, to one of the true class's 4 confusable classes (a fixed random map,
like glyphs that look alike; shares 0.55, 0.25, 0.12, 0.08, so a hard point's votes can
make its first confusable class the plurality), else to any other class. Every (teacher, point) vote is
drawn, in blocks of points, and counted into an (N, 150) int32 histogram: each row sums
to the number of teachers.

The release is Confident-GNMax at the paper's Glyph setting (Papernot et al. 2018, Table 2;
`bench/analysis_gnmax.py` uses it too): threshold T = 1000 (a fifth of the 5000 teachers: a
point is answered when the noisy top count clears it), σ₁ = 500 on the threshold check
(the check costs little per query, so it can be noisy) and σ₂ = 100 on the answer (2% of
the teachers: well under the margin of a point most teachers agree on), δ = 1e-8 (below
1/records for millions of records). These are fixed from public numbers (the teacher count
and the paper), never from the simulated votes.

Each step runs as the user runs it, one `pate` subprocess each (`cli.py label --votes FILE
--num-classes 150 ...`, then `cli.py analyze --workdir RUN`), so its peak RSS is its own
(os.wait4's ru_maxrss). The ledger lives in a temporary folder ($PATE_LEDGER_DIR) under the
name `glyph-sim`; a research `--seed` makes the noise (never for a real release).

With ``--coins exact`` the release is Confident-GNMax with exact discrete Gaussian coins
(`confident-gnmax-exact`, `analysis.mechanisms.exact_gaussian`): the same σ₁, σ₂ and threshold,
no float64 sampling δ, and no sanitised release (its headline is the data-independent ε).

    python bench/glyph_scale.py [--points 1000 10000] [--teachers 5000] [--classes 150] [--seed 0]
                                [--coins float64|exact]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFUSABLE = 4  # classes each class is confused with
CONFUSED_SHARE = 0.8  # of the wrong votes, the share that goes to a confusable class
CONFUSED_WEIGHTS = (0.55, 0.25, 0.12, 0.08)  # how a class's confusable classes share those votes
GLYPH = dict(mechanism="confident-gnmax", threshold=1000.0, sigma_threshold=500.0, sigma=100.0, delta=1e-8)
#: The record each kind of coins releases with (the same noise, threshold and δ).
MECHANISM_OF_COINS = {"float64": "confident-gnmax", "exact": "confident-gnmax-exact"}


def simulate_votes(points: int, teachers: int = 5000, classes: int = 150, seed: int = 0,
                   block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Vote histogram (points, classes) int32 of `teachers` simulated teachers, and the true
    class of each point (points,) — the model in this module's docstring. Deterministic in
    `seed`; every row sums to `teachers`."""
    if classes < CONFUSABLE + 2:
        raise ValueError(f"need at least {CONFUSABLE + 2} classes, got {classes}")
    rng = np.random.default_rng(seed)
    accuracy = rng.beta(6.0, 4.0, size=teachers)
    truth = rng.integers(0, classes, size=points)
    ease = rng.beta(3.0, 1.5, size=points)
    # class c's confusable classes: CONFUSABLE distinct others, fixed for the whole run
    others = np.argsort(rng.random((classes, classes - 1)), axis=1)[:, :CONFUSABLE]
    confusable = others + (others >= np.arange(classes)[:, None])  # skip the class itself
    votes = np.zeros((points, classes), np.int32)
    for start in range(0, points, block):
        rows = slice(start, min(start + block, points))
        y, n = truth[rows], truth[rows].size
        right = rng.random((n, teachers)) < ease[rows, None] * accuracy[None, :]
        near = confusable[y][np.arange(n)[:, None], rng.choice(CONFUSABLE, size=(n, teachers), p=CONFUSED_WEIGHTS)]
        far = rng.integers(1, classes, size=(n, teachers))
        far = (y[:, None] + far) % classes  # any class but the true one
        wrong = np.where(rng.random((n, teachers)) < CONFUSED_SHARE, near, far)
        vote = np.where(right, y[:, None], wrong)
        flat = vote + classes * np.arange(n)[:, None]
        votes[rows] = np.bincount(flat.ravel(), minlength=n * classes).reshape(n, classes)
    return votes, truth


def _pate(args: list[str], env: dict, logs: Path) -> tuple[float, float, str]:
    """Runs `pate ARGS` as its own process: wall time (s), peak RSS (MiB, os.wait4), stdout."""
    out_path, err_path = logs / f"{args[0]}.out", logs / f"{args[0]}.err"
    start = time.perf_counter()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT, env=env,
                                stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"pate {args[0]} failed ({proc.returncode}): {err_path.read_text().strip()[-800:]}")
    return wall, usage.ru_maxrss / 1024, out_path.read_text()


def run(points: int, teachers: int, classes: int, seed: int, tmp: Path, coins: str = "float64") -> dict:
    """Simulates, writes the vote file, labels and analyses; one JSON row."""
    start = time.perf_counter()
    votes, truth = simulate_votes(points, teachers, classes, seed)
    simulate_s = time.perf_counter() - start
    votes_file, workdir = tmp / f"votes-{points}.npz", tmp / f"run-{points}"
    np.savez(votes_file, votes=votes)
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
           "PATE_LEDGER_DIR": str(tmp / f"ledgers-{points}")}
    g = {**GLYPH, "mechanism": MECHANISM_OF_COINS[coins]}
    label_s, label_rss, _ = _pate([
        "label", "--votes", str(votes_file), "--num-classes", str(classes), "--workdir", str(workdir),
        "--mechanism", g["mechanism"], "--threshold", str(g["threshold"]), "--sigma-threshold",
        str(g["sigma_threshold"]), "--sigma", str(g["sigma"]), "--delta", str(g["delta"]),
        "--ledger", "glyph-sim", "--seed", str(seed)], env, tmp)
    analyze_s, analyze_rss, _ = _pate(["analyze", "--workdir", str(workdir), "--delta", str(g["delta"]),
                                       "--seed", str(seed)], env, tmp)
    with np.load(workdir / "labels.npz", allow_pickle=False) as f:
        indices, labels = f["indices"], f["labels"]
    answered = labels >= 0
    release = json.loads((workdir / "release.json").read_text())
    return {
        "points": points, "teachers": teachers, "classes": classes, "coins": coins, **g,
        "votes_file_mib": round(votes_file.stat().st_size / 2**20, 2),
        "simulate_s": round(simulate_s, 2),
        "label_s": round(label_s, 2), "label_peak_rss_mib": round(label_rss, 1),
        "analyze_s": round(analyze_s, 2), "analyze_peak_rss_mib": round(analyze_rss, 1),
        "answered": int(answered.sum()), "queries": int(labels.size),
        "label_accuracy": round(float(np.mean(labels[answered] == truth[indices[answered]])), 4)
        if answered.any() else None,
        "teachers_plurality_accuracy": round(float(np.mean(votes.argmax(1) == truth)), 4),
        "published_eps": round(release["eps"], 4), "published_delta": release["delta"],
        "published_release_eps": round(release["release_eps"], 4),
        "delta_float64_sampling": release["details"].get("delta_sampling"),
        "eps_data_independent": round(release["details"]["eps_data_independent_headline"], 4),
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--teachers", type=int, default=5000)
    parser.add_argument("--classes", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0, help="Simulation and research noise seed.")
    parser.add_argument("--coins", choices=tuple(MECHANISM_OF_COINS), default="float64",
                        help="float64 noise (confident-gnmax) or exact discrete Gaussian coins (confident-gnmax-exact).")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pate-glyph-") as tmp:
        for points in args.points:
            row = run(points, args.teachers, args.classes, args.seed, Path(tmp), args.coins)
            row.update(load_average=[round(x, 1) for x in os.getloadavg()], cpus=os.cpu_count())
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
