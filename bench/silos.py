"""A fine-grained release across silos beside central releases of the same settings (issue 54):
each draw's label accuracy over the public pool, the mean and spread per method, wall times.

- **Across silos**: `pate silos run`'s coordinator and silos (`pate.steps.label_silos`) in ONE
  process, through Flower's real SecAgg+ workflow and mod on an in-process Grid
  (`pate.programs.flower_loopback`: no SuperLink, no polling). Silo i holds the i-th of
  ``--silos`` slices of the config's train split, as `pate silos run --silos N` lays them out;
  it counts its own records' votes, adds its share of the noise, charges its records' ledger and
  sends its input; the coordinator sums, decodes and releases, one charge.
- **Central**: `pate label` of the same config (`pate.steps.label.label`, which draws with
  `pate.release.fine_grained_release`), one charge.

By docs/silos.md the two releases have exactly the same law, so their label accuracies should
agree within the central release's own spread. Every release here is real and charged, in the
ledger folder ``ROOT/ledgers`` (``$PATE_LEDGER_DIR`` is set to it for this process): the
coordinator's ``silos:`` ledger, each silo's records' ledger, the data set's; run directories
``ROOT/silos-dD`` and ``ROOT/central-dD`` (each a labels.npz; with ``--students``, once every
release is made, the config's student on each method's first draw). A root already holding a draw's run directory is refused.

The draws alternate (central, then silos, per draw). One process computes the scattering
transform of each image set once (`bench/compare.py`'s `_cache_scattering`: the private records
are mapped in the same 1000-record chunks in every layout) and the public map's fit on the pool
once (`_cache_fit`: every party fits the same map, a function of the pool alone): the first
draw pays both (``one_off_s``), later draws reuse them. Within a silos draw the silos run one
after another; ``silo_s`` is each one's own time (its ClientApp answering the request for its
input: its records mapped and counted, its share drawn, its ledger charged), what each silo's
host would spend, in parallel, in a real deployment.

    OPENBLAS_NUM_THREADS=1 python bench/silos.py [--config configs/fashion_mnist_fine.toml]
        [--set SECTION.KEY=VALUE ...] [--silos 10] [--draws 3] [--root runs/silos-bench] [--students]

Prints one JSON object per release as it is made (and per student), then one with the summary
(``"summary"``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FINE_CONFIG = ROOT / "configs" / "fashion_mnist_fine.toml"
METHODS = ("central", "silos")


def _cache_scattering() -> None:
    """bench/compare.py's: the scattering transform of the same images computed once."""
    spec = importlib.util.spec_from_file_location("bench_compare", ROOT / "bench" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._cache_scattering()


def _cache_fit(one_off: dict) -> None:
    """The public map's fit on the pool (`pate.programs.public_features.fit`) computed once per
    (pool, settings): a function of public values alone, the same for every party and draw. The
    first fit's seconds go to ``one_off["fit_s"]``."""
    from pate.programs import public_features

    real, memo = public_features.fit, {}

    def cached(pool_images, dims, **how):
        images = np.ascontiguousarray(pool_images)
        key = (hashlib.sha256(images.tobytes()).hexdigest(), images.shape, str(images.dtype), dims,
               repr(sorted(how.items())))
        if key not in memo:
            began = time.perf_counter()
            memo[key] = real(pool_images, dims, **how)
            one_off.setdefault("fit_s", time.perf_counter() - began)
        return memo[key]

    public_features.fit = cached


def _timed_silos(times: list) -> None:
    """Each silo's own time: `pate.steps.label_silos.contribute` (its ClientApp's answer to the
    request for its input) timed into `times`."""
    from pate.steps import label_silos

    real = label_silos.contribute

    def contribute(node, fit_config, echo=print):
        began = time.perf_counter()
        try:
            return real(node, fit_config, echo)
        finally:
            times.append(time.perf_counter() - began)

    label_silos.contribute = contribute


def summary(values) -> dict:
    v = np.asarray(values, float)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "min": float(v.min()), "max": float(v.max()), "draws": int(v.size)}


def central(config, workdir: Path) -> dict:
    """`pate label` of `config` (a fine-grained release) in `workdir`."""
    from pate.steps.label import label

    began = time.perf_counter()
    made = label(config, workdir, echo=lambda _line: None)
    return {"label_accuracy": made.label_accuracy, "eps": made.params["eps"],
            "wall_s": round(time.perf_counter() - began, 2)}


def across_silos(config, config_path: Path, workdir: Path, silo_times: list) -> dict:
    """`pate silos run`'s coordinator and `config.silos.silos` silos, each the slice of the train
    split of its index (node config ``slice``), on an in-process Grid."""
    from pate.programs.flower_loopback import loopback_grid, server_context
    from pate.steps import label_silos

    nodes = [{"pate_config": str(config_path), "silo": i, "slice": True} for i in range(config.silos.silos)]
    del silo_times[:]
    began = time.perf_counter()
    made = label_silos.coordinate(config, workdir, loopback_grid(label_silos.client_app, nodes), server_context(),
                                  echo=lambda _line: None)
    return {"label_accuracy": made.label_accuracy, "eps": made.eps, "present": made.present,
            "wall_s": round(time.perf_counter() - began, 2), "silo_s": [round(t, 2) for t in silo_times]}


def student(config, workdir: Path) -> dict:
    """The config's student on `workdir`'s labels."""
    from pate.steps.student import train_student

    began = time.perf_counter()
    made = train_student(config, workdir, show_progress=False, echo=lambda _line: None)
    return {"student_accuracy": made.accuracy, "student_wall_s": round(time.perf_counter() - began, 1)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(FINE_CONFIG))
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a config override, as `pate --set` takes it (repeatable)")
    ap.add_argument("--silos", type=int, default=10)
    ap.add_argument("--draws", type=int, default=3, help="releases per method")
    ap.add_argument("--root", default=str(ROOT / "runs" / "silos-bench"))
    ap.add_argument("--students", action="store_true",
                    help="after the releases, also train the config's student on each method's first draw")
    args = ap.parse_args(argv)
    if args.draws < 1 or args.silos < 2:
        ap.error("--draws must be at least 1 and --silos at least 2")

    root = Path(args.root).expanduser().resolve()
    runs = [root / f"{method}-d{d}" for d in range(1, args.draws + 1) for method in METHODS]
    taken = [str(p) for p in runs if p.exists()]
    if taken:
        ap.error(f"{taken[0]} exists: give a fresh --root (every draw is a new release)")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["PATE_LEDGER_DIR"] = str(root / "ledgers")  # this bench's releases, charged apart

    from pate.config import config_to_toml, load_config, parse_override
    from pate.programs.data_facts import with_data_defaults

    config = load_config(args.config, {**dict(parse_override(item) for item in args.sets),
                                       "silos.silos": args.silos})
    config = with_data_defaults(config)
    config_path = root / "silos.toml"  # what every silo reads (`pate silos run` writes the same)
    config_path.write_text(config_to_toml(config), encoding="utf-8")

    one_off: dict = {}
    silo_times: list = []
    _cache_scattering()
    _cache_fit(one_off)
    _timed_silos(silo_times)
    began = time.perf_counter()
    rows = []
    for d in range(1, args.draws + 1):
        for method in METHODS:
            workdir = root / f"{method}-d{d}"
            made = central(config, workdir) if method == "central" else across_silos(config, config_path, workdir,
                                                                                      silo_times)
            row = {"method": method, "draw": d, **made, "workdir": str(workdir)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    by = {m: [r for r in rows if r["method"] == m] for m in METHODS}
    for method in METHODS if args.students else ():  # after every release: the labels' figures come first
        first = by[method][0]
        first.update(student(config, Path(first["workdir"])))
        print(json.dumps({"method": method, "draw": 1, "student_accuracy": first["student_accuracy"],
                          "student_wall_s": first["student_wall_s"], "workdir": first["workdir"]}), flush=True)
    out = {"summary": {m: {"label_accuracy": summary([r["label_accuracy"] for r in by[m]]),
                           "wall_s": [round(r["wall_s"], 1) for r in by[m]],
                           **({"student_accuracy": by[m][0]["student_accuracy"]} if args.students else {})}
                       for m in METHODS},
           "config": str(args.config), "sets": args.sets, "silos": args.silos, "data": config.data.name,
           "pool": config.data.public_size, "eps": rows[0]["eps"], "feature_map": config.features.map,
           "one_off_s": {k: round(v, 1) for k, v in one_off.items()},
           "total_s": round(time.perf_counter() - began, 1), "root": str(root)}
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    from analysis.core.errors import PateError

    try:
        main()
    except PateError as err:  # the product's one line (settings the data cannot take, a ledger's refusal)
        sys.exit(f"bench/silos.py: {err}")
