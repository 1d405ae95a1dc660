"""Free post-processing of a fine-grained release, measured on finished runs (issue 55): the run's
CNN student, a neighbour student (each evaluation point labelled by its K nearest labelled pool
points in the release's own public map, the r-th nearest weighted 1/r), and the two averaged
(the student's softmax and the neighbours' weighted vote fractions, equal weights).

Everything here is post-processing of the released labels with public inputs: the map is the
run's (`[features]`, fitted on the public pool alone), the neighbours are pool points, the
evaluation split is public. No ε is spent and no private record is read. The evaluation split's
labels only score.

    OPENBLAS_NUM_THREADS=1 python bench/student_ensemble.py RUN [RUN ...] [--k 10 20 40]

Prints one JSON object a run (accuracy of the student, of each neighbour student and of each
average), then the mean per method over the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(run: Path, ks: list[int], cache: dict) -> dict:
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.programs import public_features
    from pate.programs.neighbour_student import NeighbourVote, combine
    from pate.programs.student_training import load_student, probabilities

    config = load_config(run / "config.toml")
    key = (config.features.map, config.features.whiten, config.features.filters, config.fine_grained.pca)
    if key not in cache:
        splits = split(load_dataset(config.data), config.data.public_size)
        fitted, _ = public_features.fit(splits.pool_x, config.fine_grained.pca, feature_map=config.features.map,
                                        settings=public_features.MapSettings.of(config),
                                        whiten=config.features.whiten)
        cache[key] = (splits, fitted, fitted.unit_rows(fitted.coefficients(splits.pool_x)))
    splits, fitted, pool_rows = cache[key]
    with np.load(run / "labels.npz", allow_pickle=False) as f:
        indices, labels = f["indices"], f["labels"]
    answered = labels >= 0
    indices, labels = indices[answered], labels[answered]
    student = load_student(run)
    probs = probabilities(student.model, student.params, splits.eval_x)
    y = splits.eval_y
    row = {"run": str(run), "released_labels": float(np.mean(labels == splits.pool_y[indices])),
           "student": float(np.mean(probs.argmax(1) == y))}
    for k in ks:  # the product's neighbour student (`[student] neighbours = k`) on the same fitted map
        votes = NeighbourVote(fitted, pool_rows[indices], labels, k, splits.num_classes).votes(splits.eval_x)
        row[f"neighbours_{k}"] = float(np.mean(votes.argmax(1) == y))
        row[f"average_{k}"] = float(np.mean(combine(probs, votes) == y))
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--k", type=int, nargs="+", default=[10, 20, 40])
    args = parser.parse_args(argv)
    rows, cache = [], {}
    for run in args.runs:
        row = measure(Path(run), args.k, cache)
        print(json.dumps(row), flush=True)
        rows.append(row)
    methods = [m for m in rows[0] if m != "run"]
    print(json.dumps({"mean": {m: statistics.fmean(r[m] for r in rows) for m in methods}, "runs": len(rows)}))


if __name__ == "__main__":
    main()
