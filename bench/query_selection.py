"""Choosing the next queries from the student's uncertainty (the 2018 paper's interactive
setting; a lever of issue 14): after a first release and its student, query N more pool
points chosen by that student, and see what the teachers answer there and what it costs.

Round 1 is the run's own release (``labels.npz``, its votes and its student). Round 2 picks N
of the pool points after round 1's by the round-1 student (public: it is post-processing of
round 1's release and the public pool): ``uncertain`` (lowest top probability), ``margin``
(smallest gap between the top two) or ``next`` (the next N points, the non-interactive
baseline). The teachers vote on them, Confident-GNMax (the run's ``[aggregation]``, or
``--row THR:S1:S2``) answers, and the expected headline ε of both rounds together is computed
as in ``bench/release_noise.py`` (`release_expectation`) (RDP composes over adaptively chosen queries; the sanitised
release covers the union). With ``--out DIR``, DIR gets a ``labels.npz`` of both rounds and
the run's config.toml, ready for ``pate train-student --workdir DIR``.

Research harness, not the product: it reads the private votes and the pool's true labels
(for the label accuracy), and releases nothing.

    python bench/query_selection.py --workdir RUN --queries 800 [--modes uncertain margin next]
        [--row 375:150:55] [--out DIR] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("uncertain", "margin", "next")


def select(probs: np.ndarray, candidates: np.ndarray, n: int, mode: str) -> np.ndarray:
    """The `n` of `candidates` (pool indices, rows of `probs`) to query next, most wanted first."""
    if mode == "uncertain":
        order = np.argsort(probs.max(axis=1), kind="stable")
    elif mode == "margin":
        top2 = np.sort(probs, axis=1)[:, -2:]
        order = np.argsort(top2[:, 1] - top2[:, 0], kind="stable")
    elif mode == "next":
        order = np.arange(candidates.size)
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return candidates[order[:n]]


def student_probs(student, images: np.ndarray, batch_size: int = 500) -> np.ndarray:
    import jax

    out = [np.asarray(jax.nn.softmax(student.model.apply(student.params, images[i: i + batch_size], train=False)))
           for i in range(0, images.shape[0], batch_size)]
    return np.concatenate(out) if out else np.zeros((0, 0))


def main(argv=None) -> int:
    from analysis.release_expectation import release_expectation
    from pate import aggregation, rundir
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.released_labels import read_labels
    from pate.steps.student import load_student
    from pate.steps.teachers import load_teachers
    from pate.voting import predict_votes

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="a run with teachers, labels, votes and a student")
    parser.add_argument("--queries", type=int, required=True, help="round-2 queries")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--row", default=None, help="THR:S1:S2 (default: the run's [aggregation])")
    parser.add_argument("--out", default=None, help="write both rounds' labels.npz here (first mode only)")
    parser.add_argument("--seed", type=int, default=0, help="aggregator noise seed (benchmark only)")
    args = parser.parse_args(argv)

    run = rundir.RunDir(args.workdir)
    config = load_config(run / rundir.CONFIG_TOML)
    a, p = config.aggregation, config.privacy
    thr, s1, s2 = (float(x) for x in args.row.split(":")) if args.row else (a.threshold, a.sigma_threshold, a.sigma)
    splits = split(load_dataset(config.data), config.data.public_size)
    first = read_labels(run / rundir.LABELS_NPZ)
    votes1 = run.read_npz(rundir.VOTES_NPZ, required=("votes",))["votes"]
    candidates = np.setdiff1d(np.arange(splits.pool_x.shape[0]), first["indices"])
    probs = student_probs(load_student(run.path), splits.pool_x[candidates])
    teachers = load_teachers(run.path)
    for i, mode in enumerate(args.modes):
        chosen = select(probs, candidates, args.queries, mode)
        votes2 = predict_votes(teachers.params, teachers.model, splits.pool_x[chosen], teachers.num_classes,
                               batch_size=config.teachers.eval_batch_size)
        labels2 = aggregation.confident_gnmax(votes2, thr, s1, s2, aggregation.noise_source(args.seed + i))
        answered2 = labels2 >= 0
        votes = np.concatenate([votes1, votes2])
        labels = np.concatenate([first["labels"], labels2]).astype(first["labels"].dtype)
        mean, _, san = release_expectation(votes, labels >= 0, thr, s1, s2, p, args.seed + i)
        truth = splits.pool_y[chosen]
        print(json.dumps({
            "mode": mode, "round2_queries": int(chosen.size), "round2_answered": int(answered2.sum()),
            "round2_label_accuracy": float(np.mean(labels2[answered2] == truth[answered2])) if answered2.any() else None,
            "round2_classes_true": np.bincount(truth, minlength=teachers.num_classes).tolist(),
            "round2_classes_answered": np.bincount(labels2[answered2], minlength=teachers.num_classes).tolist(),
            "answered_both_rounds": int(np.sum(labels >= 0)), "expected_headline_eps": mean,
            "release_noise_std_rdp": san.noise_std}), flush=True)
        if args.out and i == 0:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            arrays = {k: v for k, v in first.items() if k != "meta"}
            arrays.update(indices=np.concatenate([first["indices"], chosen]), labels=labels)
            np.savez(out / rundir.LABELS_NPZ, **arrays)
            shutil.copy2(run / rundir.CONFIG_TOML, out / rundir.CONFIG_TOML)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
