"""A user's small data set, as issue 53 tried it: scikit-learn's bundled handwritten digits (1797
rows of 8 x 8 pixels as 64 features, 10 classes) cut into 1000 private records, a 500-row public
pool and a 297-row evaluation split (one fixed permutation, seed 0: a public choice). Every row
of the table is a run of the product with the keys the data decides left out:

- fine-grained PATE through the arrays API (`pate.fit`, `aggregation.mechanism = "fine-grained"`,
  `fine_grained.eps = E`, k, smoothing and weights left to the public proxy, `[student] neighbours`
  `--neighbours`): the released labels' accuracy on the pool and the student's on the evaluation
  split (the published predictor, and the network alone), pure ε E under replace-one;
- DP-SGD (`pate dpsgd`, the data's default model for rows) at the same replace-one ε
  (`dpsgd.relation = "replace-one"`, δ 1e-5).

One JSON object per row, then each method's mean and spread per ε. Noise from OS entropy (no
seed). The private records are written owner-only under ``--root``; every run is charged to one
ledger (``ROOT/ledgers``), the data set's: its figure grows with the rows, as it should.

    python bench/small_data.py --digits PATH [--root runs/small-data] [--eps 1 2] [--draws 3]

PATH: scikit-learn's ``sklearn/datasets/data/digits.csv.gz`` (in any scikit-learn wheel: ``pip
download scikit-learn --no-deps`` and unzip that one file); without ``--digits`` it is read
through an installed scikit-learn.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def digits(path: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(x (1797, 64) float32 in [0, 1], y (1797,) int) of scikit-learn's digits."""
    if path is None:
        from sklearn.datasets import load_digits  # optional: not a dependency of pate

        x, y = load_digits(return_X_y=True)
    else:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",")
        x, y = table[:, :-1], table[:, -1]
    return (np.asarray(x) / 16.0).astype(np.float32), np.asarray(y).astype(np.int64)


def splits(x, y):
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1000], y[:1000]), (x[1000:1500], y[1000:1500]), (x[1500:], y[1500:])


def fine_grained_row(data, eps: float, workdir: Path, neighbours: int) -> dict:
    import pate

    (xp, yp), (xq, yq), (xe, ye) = data
    start = time.time()
    # k, the smoothing and its weights chosen on the public proxy with the release's noise
    result = pate.fit(xp, yp, xq, y_public=yq, x_eval=xe, y_eval=ye,
                      overrides={"aggregation.mechanism": "fine-grained", "fine_grained.eps": eps,
                                 "fine_grained.votes_per_record": 0, "fine_grained.smoothing": 0,
                                 "fine_grained.smoothing_weights": "auto", "student.neighbours": neighbours},
                      workdir=workdir, echo=lambda line: print(f"# {line}", file=sys.stderr))
    info = json.loads((workdir / "student.json").read_text())
    return {"method": "pate-fine-grained", "target_eps": eps, "eps_replace_one": eps,
            "label_accuracy": result.label_accuracy, "accuracy": result.student_accuracy,
            "accuracy_network": info.get("accuracy_network", info.get("accuracy")),
            "data_set_eps": result.eps, "wall_time_s": round(time.time() - start, 1), "workdir": str(workdir)}


def dpsgd_row(npz: Path, eps: float, workdir: Path) -> dict:
    import subprocess

    config = workdir.parent / f"{workdir.name}.toml"
    config.write_text(f'[data]\nname = "npz"\npath = "{npz}"\npublic_size = 500\n\n'
                      f'[dpsgd]\nrelation = "replace-one"\neps = {eps}\n')
    start = time.time()
    done = subprocess.run([str(Path(sys.executable).parent / "pate"), "dpsgd", "--config", str(config),
                           "--workdir", str(workdir), "--no-progress"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"small_data.py: pate dpsgd failed: {done.stdout[-500:]}{done.stderr[-500:]}")
    info = json.loads((workdir / "dpsgd.json").read_text())
    return {"method": f"dpsgd-{info.get('model')}", "target_eps": eps, "eps_replace_one": info.get("eps_replace_one"),
            "label_accuracy": None, "accuracy": info.get("accuracy"),
            "wall_time_s": round(time.time() - start, 1), "workdir": str(workdir)}


def summary(rows):
    groups = {}
    for r in rows:
        groups.setdefault((r["method"], r["target_eps"]), []).append(r)
    out = []
    for (method, eps), rs in sorted(groups.items()):
        acc = [r["accuracy"] for r in rs]
        labels = [r["label_accuracy"] for r in rs if r["label_accuracy"] is not None]
        network = [r["accuracy_network"] for r in rs if r.get("accuracy_network") is not None]
        out.append({"method": method, "target_eps": eps, "draws": len(rs), "mean": statistics.fmean(acc),
                    "std": statistics.stdev(acc) if len(acc) > 1 else 0.0,
                    "label_mean": statistics.fmean(labels) if labels else None,
                    "network_mean": statistics.fmean(network) if network else None})
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--digits", default=None, help="scikit-learn's digits.csv.gz (default: through sklearn)")
    parser.add_argument("--root", default=str(ROOT / "runs" / "small-data"))
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--neighbours", type=int, default=20,
                        help="[student] neighbours of the fine-grained rows (0: the network alone)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ.setdefault("PATE_LEDGER_DIR", str(root / "ledgers"))
    data = splits(*digits(args.digits))
    (xp, yp), (xq, yq), (xe, ye) = data
    npz = root / "digits.npz"  # the private records: owner-only
    with open(os.open(npz, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        np.savez(f, x_train=xp, y_train=yp, x_test=np.concatenate([xq, xe]), y_test=np.concatenate([yq, ye]))
    rows = []
    for eps in args.eps:
        for d in range(1, args.draws + 1):
            for row in (fine_grained_row(data, eps, root / f"fine-eps{eps:g}-d{d}", args.neighbours),
                        dpsgd_row(npz, eps, root / f"dpsgd-eps{eps:g}-d{d}")):
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(json.dumps({"summary": summary(rows)}, indent=1))


if __name__ == "__main__":
    main()
