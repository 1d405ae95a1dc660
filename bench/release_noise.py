"""What a Confident-GNMax release is expected to publish, before spending it: for each
setting, over several aggregator draws on one trained ensemble, the answered queries,
their label accuracy and class counts, and the *expected* headline ε with the spread of
its GNSS noise (the published value is one draw: a setting whose noise std is ~1 in RDP
publishes anything from the floor to twice the mean).

Research harness, not the product: it reads the run's private votes (computing them for
the first N pool points when votes.npz is shorter) and the pool's true labels, and
releases nothing. Choosing a release's parameters from these figures looks at private
data; do it on a data set you will not publish from (or accept that leak knowingly), as
the papers did.

    python bench/release_noise.py --workdir RUN [--config configs/fashion_mnist.toml]
        [--rows "threshold:sigma_threshold:sigma:queries" ...] [--draws 3] [--seed 0]
    python bench/release_noise.py --simulate [--teachers 500 --classes 10 --accuracy 0.7
        --concentration 2 --confusion 0.5] [--rows ...] [--target 2.0]

``--simulate`` reads no data at all: the votes are drawn from a public model fixed before
looking at any vote (`analysis.planning.simulated_votes.simulate_votes`), so settings chosen on them are chosen without
private values — how the default release settings of configs/fashion_mnist.toml are
justified (docs/privacy.md, threat model). With ``--target E`` the row with the most expected
correct answers among those whose expected headline is at most E is printed last.

The expectation (`analysis.planning.release_expectation.release_expectation`) is over the release noise
Z ~ N(0, 1) (Gauss-Hermite, 40 nodes) at the config's fixed release order, cost and β:
E[min(DI route, conv(max(0, f + s Z) + cost))] with f the data-dependent RDP at that order
and s the GNSS noise std (both private), the grid rounding ignored. One JSON object per
row, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.planning.simulated_votes import simulate_votes  # noqa: E402  (the public model of teacher agreement)


def parse_row(text: str) -> tuple[float, float, float, int]:
    threshold, sigma_threshold, sigma, queries = text.split(":")
    return float(threshold), float(sigma_threshold), float(sigma), int(queries)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None, help="a run with trained teachers (reads its private votes)")
    parser.add_argument("--config", default=None,
                        help="[privacy] settings (default: the run's config; with --simulate: "
                             "configs/fashion_mnist.toml)")
    parser.add_argument("--simulate", action="store_true", help="simulated votes from a public model instead")
    parser.add_argument("--teachers", type=int, default=500, help="--simulate: ensemble size")
    parser.add_argument("--classes", type=int, default=10, help="--simulate: number of classes")
    parser.add_argument("--accuracy", type=float, default=0.7, help="--simulate: mean teacher accuracy")
    parser.add_argument("--concentration", type=float, default=2.0,
                        help="--simulate: Beta concentration of a query's teacher accuracy")
    parser.add_argument("--confusion", type=float, default=0.5,
                        help="--simulate: share of wrong votes on the query's confusable class")
    parser.add_argument("--target", type=float, default=None,
                        help="print the row with the most expected correct answers at E[headline] <= this")
    parser.add_argument("--rows", nargs="+", default=None,
                        help="threshold:sigma_threshold:sigma:queries (default: the config's [aggregation])")
    parser.add_argument("--draws", type=int, default=3, help="aggregator draws per row")
    parser.add_argument("--seed", type=int, default=0, help="aggregator noise seed (benchmark only)")
    args = parser.parse_args(argv)

    from analysis.planning.release_expectation import release_expectation
    from pate.release import aggregation
    from pate.store import rundir
    from pate.config import load_config
    from pate.data import load_dataset, split

    if args.simulate == (args.workdir is not None):
        parser.error("give either --workdir RUN or --simulate")
    run = None if args.simulate else rundir.RunDir(args.workdir)
    stored = None if args.simulate else run.read_config()
    config = load_config(args.config or str(ROOT / "configs" / "fashion_mnist.toml")) if (
        args.config or args.simulate) else stored
    a, p = config.aggregation, config.privacy
    rows = [parse_row(r) for r in args.rows] if args.rows else [
        (a.threshold, a.sigma_threshold, a.sigma, a.queries)]
    need = max(q for *_, q in rows)
    if args.simulate:
        votes, pool_y = simulate_votes(np.random.default_rng(args.seed), need, args.teachers, args.classes,
                                       args.accuracy, args.concentration, args.confusion)
    else:
        splits = split(load_dataset(stored.data), stored.data.public_size)
        pool_y = splits.pool_y
        votes = run.read_npz(rundir.VOTES_NPZ, required=("votes",))["votes"] if run.exists(rundir.VOTES_NPZ) else None
    if votes is None or votes.shape[0] < need:
        from pate.programs import public_features
        from pate.programs.teacher_training import load_teachers
        from pate.programs.voting import predict_votes

        teachers = load_teachers(run.path)
        votes = predict_votes(teachers.params, teachers.model, public_features.teacher_inputs(teachers.config, splits.pool_x[:need],
                                                             splits.pool_x),
                              teachers.num_classes,
                              batch_size=stored.teachers.eval_batch_size)
    T = int(votes[0].sum())
    order = p.release_order or 12.0
    out = []
    for i, (thr, s1, s2, q) in enumerate(rows):
        v, truth = votes[:q], pool_y[:q]
        draws = []
        for d in range(args.draws):
            noise = aggregation.noise_source(args.seed + 1000 * i + d)
            labels = aggregation.confident_gnmax(v, thr, s1, s2, noise)
            answered = labels >= 0
            mean, tail, san = release_expectation(v, answered, thr, s1, s2, p, args.seed + d)
            right = float(np.mean(labels[answered] == truth[answered])) if answered.any() else math.nan
            draws.append((int(answered.sum()), right, mean,
                          san.noise_std, tail, np.bincount(labels[answered], minlength=votes.shape[1])))
        ans, acc, mean, std, tail, counts = (np.mean([d[k] for d in draws], axis=0) for k in range(6))
        row = {"teachers": T, "threshold": thr, "sigma_threshold": s1, "sigma": s2, "queries": q,
               "answered": float(ans), "label_accuracy": float(acc), "expected_headline_eps": float(mean),
               "release_noise_std_rdp": float(std), "p_headline_above_mean_plus_0.5": float(tail),
               "headline_floor": report_floor(order, p.delta, p.conversion, san.rdp_gnss),
               "answered_per_class": [round(float(c), 1) for c in counts], "delta": p.delta,
               "release_order": order, "draws": args.draws,
               "expected_correct": float(ans * acc) if ans > 0 else 0.0, "votes": "simulated" if args.simulate else "private"}
        out.append(row)
        print(json.dumps(row), flush=True)
    lines = ["| teachers | threshold, σ₁, σ₂ | queries | answered | label acc. | E[headline ε] | release noise std (RDP) | fewest answers in a class |",
             "|---|---|---|---|---|---|---|---|"]
    for r in out:
        lines.append(f"| {r['teachers']} | {r['threshold']:g}, {r['sigma_threshold']:g}, {r['sigma']:g} | "
                     f"{r['queries']} | {r['answered']:.0f} | {r['label_accuracy']:.3f} | "
                     f"{r['expected_headline_eps']:.2f} | {r['release_noise_std_rdp']:.2f} | "
                     f"{min(r['answered_per_class']):.0f} |")
    print("\n".join(lines), file=sys.stderr)
    if args.target is not None:
        fits = [r for r in out if r["expected_headline_eps"] <= args.target]
        best = max(fits, key=lambda r: r["expected_correct"]) if fits else None
        print(json.dumps({"choice": best, "target": args.target}), flush=True)
    return 0


def report_floor(order: float, delta: float, conversion: str, cost: float) -> float:
    """The smallest headline the sanitised route can publish (released RDP 0)."""
    from analysis.accounting.rdp import eps_from_rdp

    return float(eps_from_rdp([order], [cost], delta, conversion)[0]) if math.isfinite(cost) else math.inf


if __name__ == "__main__":
    sys.exit(main())
