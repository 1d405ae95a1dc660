"""The table of steps is written once (`pate.store.stages`): `pate run`'s steps are built on its
records, and its two views of what depends on what cannot disagree - the door's (a new step
moves aside the later steps' artifacts, `Stage.aside`) and `pate run`'s (a step re-runs when
an earlier step it reads ran again, `Step.upstream`)."""

from __future__ import annotations

import dataclasses

import pytest

from pate.config import Config
from pate.steps import pipeline
from pate.store import rundir, stages

#: What a stage reads and keeps a copy of (`Stage.keeps`: round 2, round 1's student and report)
#: is not made again from it: a new one leaves the stage's output in place.
KEPT = {(name, kept) for name, record in stages.STAGES.items() for kept, _, _ in record.keeps}


def _two_rounds(run_dir: rundir.RunDir) -> tuple:
    """`pate run`'s steps with two rounds, round 2 finished (round 1's copies kept)."""
    config = Config()
    config = dataclasses.replace(config, rounds=dataclasses.replace(config.rounds, rounds=2))
    (run_dir.path / rundir.STUDENT_ROUND1_JSON).write_text("{}")
    return pipeline.steps_of(config, run_dir)


def _tables(tmp_path) -> dict:
    return {"one round": pipeline.STEPS, "two rounds": pipeline.STEPS + pipeline.ROUND2_STEPS,
            "round 2 finished": _two_rounds(rundir.RunDir(tmp_path)),
            "fine-grained": pipeline.FINE_GRAINED_STEPS}


def _disagreements(table, records: dict) -> list[str]:
    """Each step that reads an earlier one whose replacement (`records`' writer) would leave the
    step's artifacts in place, as "earlier -> step: the artifacts left"."""
    by_name = {s.name: s for s in table}
    found = []
    for step in table:
        for name in step.upstream:
            if (by_name[step.name].stage, by_name[name].stage) in KEPT:
                continue
            writer = records[by_name[name].stage]
            moved = {a for s in writer.aside for a in records[s].artifacts} | set(writer.writes)
            left = [a for a in step.artifacts if a not in moved]
            if left:
                found.append(f"{name} -> {step.name}: {', '.join(left)}")
    return found


def test_every_step_of_pate_run_is_a_record_of_the_store(tmp_path):
    for table in _tables(tmp_path).values():
        for step in table:
            record = stages.STAGES[step.stage]
            if step.kept:  # round 2's copies: artifacts round 2 writes
                assert set(step.artifacts) <= set(stages.STAGES["round2"].artifacts), step.name
                assert step.main in step.artifacts, step.name
                continue
            assert (step.artifacts, step.main) == (record.made, record.main), step.name


@pytest.mark.parametrize("name", ["one round", "two rounds", "round 2 finished", "fine-grained"])
def test_replacing_a_step_moves_aside_every_step_made_from_it(tmp_path, name):
    assert _disagreements(_tables(tmp_path)[name], stages.STAGES) == []


def test_a_table_that_disagrees_is_caught(tmp_path):
    """A check of the check: teachers that no longer move the labels aside are named."""
    records = dict(stages.STAGES)
    records["teachers"] = dataclasses.replace(records["teachers"], aside=("round2", "student", "analyze"))
    assert _disagreements(pipeline.STEPS, records) == ["teachers -> label: votes.npz, labels.npz"]


def test_a_stage_moves_aside_each_file_once_and_never_its_own():
    for name, record in stages.STAGES.items():
        later = stages.later(record)
        assert len(later) == len(set(later)) and not set(later) & set(record.artifacts), name
        assert set(record.made) <= set(record.artifacts), name
