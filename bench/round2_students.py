"""Students of a run with two rounds over several student seeds (issue 22), and the control
without round 2: what lifts the student, round 2's labels or the extra training?

For each seed, the student `pate train-student` would train on the run's releases
(``--rounds 2``: both rounds; ``--rounds 1``: round 1's labels alone, the control), starting
from the round-1 student's weights (``student-round1/``, kept by round 2) for ``--steps``
steps — the same training function as the product (`pate.steps.student`), nothing written
into the run. Prints one JSON object per seed: labels, accuracy on the evaluation split
(EMA weights), seconds.

    python bench/round2_students.py --workdir RUN [--rounds 2] [--seeds 0 1 2 3] [--steps 4000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def student_of(workdir: str, rounds: int, seed: int, steps: int) -> dict:
    """One student (module docstring) of the run at ``workdir``; its figures."""
    from pate.store import rundir
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.release.labels import read_release
    from pate.programs.student_training import load_student
    from pate.steps import student as st

    config = load_config(Path(workdir) / rundir.CONFIG_TOML)
    config = dataclasses.replace(config, student=dataclasses.replace(config.student, steps=steps, seed=seed))
    splits = split(load_dataset(config.data), config.data.public_size)
    release = read_release(workdir, pool_size=splits.pool_x.shape[0], num_classes=splits.num_classes, rounds=rounds)
    init = load_student(workdir, record=rundir.STUDENT_ROUND1_JSON, directory=rundir.STUDENT_ROUND1_DIR).params
    start = time.time()
    result, _ = st._train(config, release, splits, False, lambda *_: None, start, init)
    return {"workdir": str(workdir), "rounds": rounds, "seed": seed, "steps": steps,
            "labels": int(release.indices.size), "accuracy": round(float(result.accuracy), 4),
            "seconds": round(time.time() - start, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", required=True, help="a run after `pate label --round 2` (student-round1/ kept)")
    ap.add_argument("--rounds", type=int, choices=(1, 2), default=2, help="1: the control, round 1's labels only")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--steps", type=int, default=4000)
    args = ap.parse_args(argv)
    for seed in args.seeds:
        print(json.dumps(student_of(args.workdir, args.rounds, seed, args.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
