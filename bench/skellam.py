"""DP-FedSGD with distributed noise (`pate fedavg`, ``[fedavg] mechanism = "skellam"`` by default,
``--set fedavg.mechanism='"ddg"'`` for the exact distributed discrete Gaussian) at several total eps
and draws, one JSON object per row, then each eps's mean and spread.

The ScatterNet features of the images are computed once, by the first row, and hard-linked into
every later row's run directory (the cache is keyed by a digest of the images and settings, so a
row reads exactly what it would compute); a row's wall time therefore leaves them out, but for
the first. ``--features-from RUN`` links an earlier run's cached features into the first row too. Every row is its own `pate fedavg` release, charged to the ledger of
``$PATE_LEDGER_DIR`` (set it to a scratch folder for benchmarks).

    PATE_LEDGER_DIR=SCRATCH OPENBLAS_NUM_THREADS=1 python bench/skellam.py \\
        --config configs/fashion_mnist_silos.toml --root DIR --eps 1 2 3 --draws 3 \\
        [--set fedavg.pca=128 ...]

``--set fedavg.mechanism='"gaussian"'`` runs the same rows with noise on every silo's message instead
(the comparison on the same features).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def _link_features(first: Path, workdir: Path) -> None:
    from pate.store import rundir

    source = first / rundir.DPSGD_FEATURES_DIR
    if not source.is_dir():
        return
    target = workdir / rundir.DPSGD_FEATURES_DIR
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    for path in source.iterdir():
        if path.is_file() and not (target / path.name).exists():
            os.link(path, target / path.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/fashion_mnist_silos.toml")
    parser.add_argument("--root", required=True)
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    parser.add_argument("--draws", type=int, default=1)
    parser.add_argument("--features-from", default=None, metavar="RUN",
                        help="a run directory whose cached ScatterNet features the first row links")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="config overrides (TOML values), e.g. fedavg.pca=128")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error("--draws must be at least 1")

    import tomllib

    from pate.baselines.fedavg import train_fedavg
    from pate.config import load_config

    overrides = {"fedavg.mechanism": "skellam"}
    for item in args.settings:
        key, _, value = item.partition("=")
        overrides[key.strip()] = tomllib.loads(f"v = {value}")["v"]
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    first: Path | None = Path(args.features_from) if args.features_from else None
    linked_only = first is not None
    rows = []
    for draw in range(args.draws):
        for eps in args.eps:
            name = f"{overrides['fedavg.mechanism']}-eps{eps:g}"
            workdir = root / name if draw == 0 else root / f"{name}-d{draw}"
            if first is not None:
                _link_features(first, workdir)
            start = time.time()
            result = train_fedavg(load_config(args.config, {**overrides, "fedavg.eps": eps}), workdir,
                                  show_progress=False, overwrite=True,
                                  echo=lambda line: print(f"# {line}", file=sys.stderr))
            if linked_only:
                first, linked_only = workdir, False
            first = first or workdir
            info = json.loads((workdir / "fedavg.json").read_text())
            row = {"method": f"fedavg-{info['mechanism']}", "target_eps": eps, "eps": info["release_eps"],
                   "delta": info["release_delta"], "accuracy": info["accuracy"],
                   "accuracy_test": info["accuracy_test"], "rounds": info["rounds"], "clients": info["clients"],
                   "per_round_eps": info["per_round_eps"], "mu": (info.get("grid") or {}).get("mu"),
                   "sigma2": (info.get("grid") or {}).get("sigma2_steps"),
                   "wall_time_s": round(time.time() - start, 1), "training_s": round(result.wall_time_s, 1),
                   "workdir": str(workdir)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    for eps in args.eps:
        acc = [r["accuracy"] for r in rows if r["target_eps"] == eps]
        spread = statistics.stdev(acc) if len(acc) > 1 else 0.0
        print(json.dumps({"target_eps": eps, "draws": len(acc), "mean": round(statistics.mean(acc), 4),
                          "sd": round(spread, 4), "min": min(acc), "max": max(acc)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
