"""Privacy–accuracy table of the student on one trained teacher ensemble: for each
aggregator setting, the labelled queries, the accuracy of the released labels, the
student's accuracy (FixMatch and supervised) and the data-independent / data-dependent
ε. Prints one JSON object per row, then a Markdown table.

Benchmark harness, not the product: it reads the run's private votes (to release labels
for many settings from one vote) and the pool's true labels (to score the release).
Each student is trained by `pate.steps.student.train_student` in a fresh run directory that
holds only `config.toml` and `labels.npz`, as a user's student would be.

    python bench/student.py --workdir runs/fm250 [--config configs/fashion_mnist.toml]
        [--rows "lnmax:100:gamma=0.05" "gnmax:500:sigma=40" ...] [--seed 0] [--methods fixmatch,supervised]

A row is ``mechanism:queries:key=value,...`` with the `[aggregation]` keys, or
``true:N``: the first N pool points with their *true* labels, no privacy at all — the
ceiling of the student model, for comparison only. The run's
votes.npz must cover the largest query count (``pate label --queries N``), or the bench
computes the votes itself from the teachers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_ROWS = [
    "lnmax:100:gamma=0.05",
    "lnmax:200:gamma=0.03",
    "gnmax:400:sigma=40",
    "gnmax:500:sigma=40",
    "confident-gnmax:800:threshold=200,sigma_threshold=150,sigma=40",
    "confident-gnmax:1000:threshold=225,sigma_threshold=200,sigma=40",
    "confident-gnmax:3000:threshold=200,sigma_threshold=150,sigma=40",
]


def parse_row(text: str):
    mechanism, queries, *rest = text.split(":")
    params = {}
    for item in (rest[0].split(",") if rest and rest[0] else []):
        key, value = item.split("=")
        params[key] = float(value)
    return mechanism, int(queries), params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a run with trained teachers (and votes.npz)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist.toml"),
                        help="its [student] and [privacy] sections are used")
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS)
    parser.add_argument("--seed", type=int, default=0, help="aggregator noise seed (benchmark only)")
    parser.add_argument("--methods", default="fixmatch,supervised")
    parser.add_argument("--steps", type=int, help="override student.steps")
    args = parser.parse_args()

    from analysis.core.noise import RELEASE_STREAM, NoiseSource
    from pate.release import aggregation
    from pate.store import rundir
    from pate.release.privacy_report import report_for_release
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.steps.student import train_student

    run = rundir.RunDir(args.workdir)
    base = load_config(args.config)
    stored = run.read_config()
    if stored.data != base.data or stored.teachers != base.teachers:
        print(f"note: {args.workdir} was trained with other [data]/[teachers] than {args.config}",
              file=sys.stderr)
    config = dataclasses.replace(base, data=stored.data, teachers=stored.teachers)
    if args.steps:
        config = dataclasses.replace(config, student=dataclasses.replace(config.student, steps=args.steps))
    rows = [parse_row(r) for r in args.rows]
    need = max([q for m, q, _ in rows if m != "true"], default=0)
    splits = split(load_dataset(config.data), config.data.public_size)
    votes = run.read_npz(rundir.VOTES_NPZ, required=("votes",))["votes"] if run.exists(rundir.VOTES_NPZ) else None
    if need and (votes is None or votes.shape[0] < need):
        from pate.programs import public_features
        from pate.programs.teacher_training import load_teachers
        from pate.programs.voting import predict_votes

        teachers = load_teachers(run.path)
        votes = predict_votes(teachers.params, teachers.model, public_features.teacher_inputs(teachers.config, splits.pool_x[:need],
                                                             splits.pool_x),
                              teachers.num_classes,
                              batch_size=config.teachers.eval_batch_size)
    teachers_info = run.read_json(rundir.TEACHERS_JSON)
    p = config.privacy
    results = []
    for i, (mechanism, queries, params) in enumerate(rows):
        truth = splits.pool_y[:queries]
        if mechanism == "true":  # the no-privacy ceiling
            released = truth.astype(np.int32)
            labels = {"indices": np.arange(queries), "labels": released, "mechanism": np.array("true-labels")}
            eps = {"eps_data_independent": None, "eps_data_dependent_private": None,
                   "eps_sanitized": None, "eps": None, "delta_total": None}  # no privacy at all
            mechanism, params = config.aggregation.mechanism, {}
        else:
            v = votes[:queries]
            released = aggregation.aggregate(v, mechanism, aggregation.noise_source(args.seed + i), **params)
            labels = {"indices": np.arange(queries), "labels": released.astype(np.int32),
                      "mechanism": np.array(mechanism), **{k: np.array(x) for k, x in params.items()}}
            # The same report `pate analyze` writes, sanitised release included (its noise is
            # drawn from --seed): LNMax with its default beta, GNMax with the config's fixed
            # release order and beta.
            lnmax = mechanism == "lnmax"
            rep = report_for_release(v, labels, delta=p.delta, moments=p.moments, conversion=p.conversion,
                                     beta=p.lnmax_beta if lnmax else (p.gnss_beta or None),
                                     release_order=None if lnmax else (p.release_order or None),
                                     release_cost=p.release_cost,
                                     noise=NoiseSource(args.seed + i, RELEASE_STREAM))
            eps = {"eps_data_independent": float(rep.value("eps_data_independent")),
                   "eps_data_dependent_private": float(rep.value("eps_data_dependent")),
                   "eps_sanitized": float(rep.value("eps_sanitized")),
                   # The headline: everything released, the sanitised value's own cost included.
                   "eps": float(rep.value("eps")), "delta_total": float(rep.value("delta_total"))}
        answered = released >= 0
        row = {"mechanism": str(labels["mechanism"]), "queries": queries, **params,
               "answered": int(answered.sum()),
               "label_accuracy": float(np.mean(released[answered] == truth[answered])),
               **eps, "delta": p.delta}
        for method in args.methods.split(","):
            cfg = dataclasses.replace(config, student=dataclasses.replace(config.student, method=method),
                                      aggregation=dataclasses.replace(config.aggregation, mechanism=mechanism,
                                                                      queries=queries, **params))
            with tempfile.TemporaryDirectory() as tmp:
                student_run = rundir.RunDir(tmp)
                student_run.write_config(cfg)
                student_run.write_npz(rundir.LABELS_NPZ, labels, cfg)
                start = time.time()
                result = train_student(cfg, tmp, show_progress=False, echo=lambda *_: None)
            row[f"student_{method}"] = result.accuracy
            row[f"student_{method}_seconds"] = round(time.time() - start, 1)
        print(json.dumps(row), flush=True)
        results.append(row)

    print(f"\nteachers: {teachers_info['num_teachers']}, ensemble accuracy "
          f"{teachers_info['ensemble_accuracy']:.4f}; student: {config.student.steps} steps; "
          f"delta {p.delta:g}; one noise draw (seed {args.seed})\n")
    methods = args.methods.split(",")
    header = ["mechanism", "parameters", "queries", "labelled", "label acc."] + \
             [f"student ({m})" for m in methods] + ["eps data-indep.", "eps data-dep. (private)",
                                                     "headline eps (everything released; publishable)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in results:
        params = ", ".join(f"{k} {r[k]:g}" for k in ("gamma", "sigma", "threshold", "sigma_threshold") if k in r)
        cells = [r["mechanism"], params, str(r["queries"]), str(r["answered"]), f"{r['label_accuracy']:.3f}"] + \
                [f"{r[f'student_{m}']:.3f}" for m in methods] + \
                ["none (true labels)" if r[k] is None else f"{r[k]:.2f}"
                 for k in ("eps_data_independent", "eps_data_dependent_private", "eps")]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
