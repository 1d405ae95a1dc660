"""Round 2 by selection mode (issue 22): a thin harness over `pate label --round 2`
(`pate.steps.label_round2.label_round2`), the product code, comparing how the round-1 student
picks the round-2 queries: ``uncertain`` (lowest top probability), ``margin`` (smallest gap
between the top two) or ``next`` (the next pool points, the non-interactive baseline).

For each mode, a copy of the run (without its round-1 teachers, which round 2 does not
read) gets round 2 with ``--queries`` queries, the run's ``[aggregation]`` (or ``--row
THR:S1:S2``) and a research seed, charged to a scratch ledger (never the user's); prints
one JSON object per mode: queries, answered, label accuracy (the pool's true labels: a
benchmark figure), the heads' accuracy on the evaluation split, and the data-independent
ε of round 2's labels. With ``--out DIR`` the first mode's copy is kept at DIR, ready for
``pate train-student --workdir DIR`` and ``pate analyze --workdir DIR``.

    python bench/query_selection.py --workdir RUN --queries 1200 [--modes uncertain margin next]
        [--row 400:200:70] [--ridge 10] [--pca-dim 256] [--out DIR] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("uncertain", "margin", "next")


def run_mode(config, source: Path, target: Path, mode: str, seed: int) -> dict:
    """Round 2 in a copy of `source` at `target` with selection `mode`; its figures."""
    from analysis.mechanisms import composition
    from analysis.mechanisms import registry
    from analysis.mechanisms.composition import single_eps
    from pate.steps.label_round2 import label_round2

    shutil.copytree(source, target, ignore=shutil.ignore_patterns("teachers", "stale-*", ".pate.lock*"))
    cfg = dataclasses.replace(config, rounds=dataclasses.replace(config.rounds, rounds=2, select=mode))
    result = label_round2(cfg, target, seed=seed, echo=lambda *_: None)
    cost = composition.labels_cost(registry.from_config(cfg.aggregation), result.num_queries)
    return {"mode": mode, **dataclasses.asdict(result),
            "eps_round2_labels_data_independent": single_eps(cost, cfg.privacy.delta)}


def main(argv=None) -> int:
    from pate.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="a finished round 1 (labels, student, release.json)")
    parser.add_argument("--queries", type=int, required=True, help="round-2 queries")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--row", default=None, help="THR:S1:S2 (default: the run's [aggregation])")
    parser.add_argument("--ridge", type=float, default=None, help="[rounds] ridge (default: the run's)")
    parser.add_argument("--pca-dim", type=int, default=None, help="[rounds] pca_dim (default: the run's)")
    parser.add_argument("--out", default=None, help="keep the first mode's copy here")
    parser.add_argument("--seed", type=int, default=0, help="aggregator noise seed (benchmark only)")
    args = parser.parse_args(argv)

    source = Path(args.workdir)
    overrides = {"rounds.queries": args.queries}
    if args.row:
        thr, s1, s2 = (float(x) for x in args.row.split(":"))
        overrides.update({"aggregation.threshold": thr, "aggregation.sigma_threshold": s1, "aggregation.sigma": s2})
    overrides.update({k: v for k, v in (("rounds.ridge", args.ridge), ("rounds.pca_dim", args.pca_dim))
                      if v is not None})
    config = load_config(source / "config.toml", overrides)
    with tempfile.TemporaryDirectory(prefix="pate-rounds-") as scratch:
        os.environ["PATE_LEDGER_DIR"] = str(Path(scratch) / "ledgers")  # never the user's ledger
        for i, mode in enumerate(args.modes):
            target = Path(args.out) if args.out and i == 0 else Path(scratch) / mode
            print(json.dumps(run_mode(config, source, target, mode, args.seed + i)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
