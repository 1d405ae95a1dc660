"""Benchmark: the exact aggregators (permute-and-flip, the exponential mechanism) against LNMax and
GNMax on one ensemble's votes, at equal data-independent ε. Prints JSON, one object per
(mechanism, ε), mean and spread over draws.

At a budget ε (δ 1e-5, the PLD accountant) for the first N queries, the three 2γ-DP argmaxes get
the same γ (`analysis.planning.plan` calibrates it once: their data-independent costs are equal),
GNMax its own σ. Each mechanism answers every query; the label accuracy is against the pool's
true labels (benchmark only: a release never reads them). The votes are PRIVATE (a run's
votes.npz): what this prints is benchmark output, not a release, and the noise parameters come
from the budget alone, never from the votes.

    python bench/exact_aggregators.py --votes RUN/votes.npz --labels RUN/labels.npz \
        --config configs/fashion_mnist.toml --eps 1 2 --draws 5 [--queries 1000] [--write-labels DIR]

``--write-labels DIR`` also writes, for the first draw of each (mechanism, ε), a labels.npz with
the record's arrays (DIR/<mechanism>-eps<E>.npz) that `pate label --votes`-style runs can train a
student on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MECHANISMS = ("lnmax", "permute-and-flip", "exponential", "gnmax")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--votes", required=True, help="a run's votes.npz (private)")
    parser.add_argument("--labels", required=True, help="the run's labels.npz (for its queried pool indices)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist.toml"))
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0])
    parser.add_argument("--queries", type=int, default=None, help="the first N queried points (default: all)")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--write-labels", default=None)
    args = parser.parse_args()
    if args.draws < 1 or any(not 0 < e < 100 for e in args.eps):
        parser.error("--draws must be >= 1 and every --eps in (0, 100)")

    from analysis.core.noise import NoiseSource
    from analysis.core.votes import load_votes
    from analysis.mechanisms import registry
    from analysis.planning.plan import plan
    from pate.config import load_config
    from pate.data import load_dataset, split

    votes = load_votes(args.votes)
    indices = np.asarray(np.load(args.labels)["indices"])
    n = votes.shape[0] if args.queries is None else min(args.queries, votes.shape[0])
    votes, indices = votes[:n], indices[:n]
    config = load_config(args.config)
    truth = split(load_dataset(config.data), config.data.public_size).pool_y[indices]
    plurality = float(np.mean(np.argmax(votes, axis=1) == truth))
    out = Path(args.write_labels) if args.write_labels else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for eps in args.eps:
        pure = plan("lnmax", n, eps, 1e-5, accountant="pld").noise  # the same γ for the three 2γ-DP argmaxes
        gauss = plan("gnmax", n, eps, 1e-5, accountant="pld").noise
        for name in MECHANISMS:
            record = registry.from_options(name, **(gauss if name == "gnmax" else pure))
            accuracy, seconds = [], []
            for draw in range(args.draws):
                start = time.perf_counter()
                labels = record.sample(votes, NoiseSource())
                seconds.append(time.perf_counter() - start)
                accuracy.append(float(np.mean(labels == truth)))
                if out is not None and draw == 0:
                    np.savez(out / f"{name}-eps{eps:g}.npz", indices=indices, labels=labels, **record.to_arrays())
            print(json.dumps({
                "mechanism": name, "eps": eps, "delta": 1e-5, "queries": n, "noise": record.params(),
                "eps_data_independent": record.independent_eps(n, 1e-5, accountant="pld").eps,
                "exact_sampler": record.exact, "sanitised_release": record.sanitised,
                "label_accuracy_mean": round(float(np.mean(accuracy)), 4),
                "label_accuracy_std": round(float(np.std(accuracy)), 4),
                "plurality_accuracy": round(plurality, 4), "draws": args.draws,
                "seconds_per_draw": round(float(np.median(seconds)), 3)}), flush=True)


if __name__ == "__main__":
    main()
