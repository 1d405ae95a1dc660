"""`pate train-teachers --distributed`: a process that fails by pate's own error (bad data, a
shard smaller than a batch, data or settings that differ from process 0's) stops every process
with one line naming it, before anything is written. The fast tests play the other process
with an all-gather of their own (tests/programs/test_cluster.py's `Others`); the slow one
launches two real local JAX processes (gloo on CPU; two launches that stop before training,
20-40 s on the shared 2-core machine)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import TINY, Others
from pate.programs import cluster as cl
from pate.store import rundir
from pate.programs import agreement
from pate.steps.teachers import train_teachers


def told(word) -> str:
    """The failure line a status word carries."""
    return bytes(word[3:3 + word[2]].astype(np.uint8)).decode()


def test_a_process_that_fails_its_checks_stops_process_0_before_anything_is_written(tiny_config, tmp_path):
    run = tmp_path / "run"
    line = "each of 6 teachers gets 40 training points, fewer than teachers.batch_size = 64"
    gather = Others(cl.status(line))  # process 1 failed before the first agreement
    with pytest.raises(cl.Stopped) as err:
        train_teachers(tiny_config, run, show_progress=False, cluster=cl.Cluster(0, 2, gather))
    assert str(err.value) == f"process 1 of 2 failed, so every process stopped (nothing was charged or written): {line}"
    assert len(gather.sent) == 1  # the facts' agreement, and no second word (process 1 knows)
    assert not run.exists() or os.listdir(run) == []  # no config.toml, no checkpoint, no lock


def test_a_process_whose_data_differ_says_so_and_tells_the_others(tiny_config, tmp_path):
    run = tmp_path / "run"
    theirs = agreement.facts(tiny_config, data=True)
    theirs[agreement.DATA_SET] = "another data set"
    gather = Others(cl.facts_word(theirs), cl.status(), index=1)  # process 0's facts, then its word
    with pytest.raises(PateError, match="process 1's training data set \\(its records' digest\\) differs from "
                                        "process 0's: give every process the same config, data set") as err:
        train_teachers(tiny_config, run, show_progress=False, cluster=cl.Cluster(1, 2, gather))
    assert not isinstance(err.value, cl.Stopped)
    assert [w[0] for w in gather.sent] == [0, 1]  # its facts, then its failure: the others stop there
    assert told(gather.sent[1]) == str(err.value)
    assert not run.exists() or os.listdir(run) == []


@pytest.mark.slow  # trains the tiny teachers (one epoch) with a played process 1: 5-15 s
def test_a_process_that_fails_after_training_stops_process_0_before_teachers_json(tiny_config, tmp_path):
    run = tmp_path / "run"
    config = dataclasses.replace(tiny_config, teachers=dataclasses.replace(tiny_config.teachers, epochs=1,
                                                                           checkpoint_every=1))
    gather = Others(cl.facts_word(agreement.facts(config, data=True)), cl.status(), cl.status(),
                    cl.status("cannot read its teachers' evaluation split"))
    with pytest.raises(cl.Stopped, match="process 1 of 2 failed.*cannot read its teachers' evaluation split"):
        train_teachers(config, run, show_progress=False, cluster=cl.Cluster(0, 2, gather))
    assert len(gather.sent) == 4  # the facts and their word, go, before teachers.json
    assert not (run / rundir.TEACHERS_JSON).exists()
    assert (run / rundir.CONFIG_TOML).exists() and (run / rundir.TEACHERS_DIR / "1").exists()  # resumable


@pytest.mark.slow  # two launches of two JAX processes that stop before training: 20-40 s
def test_real_processes_stop_together_when_one_sees_other_data_or_a_bad_setting(tmp_path):
    from conftest import ROOT, finish_processes, start_processes

    def launch(workdir, configs):
        procs = start_processes([[ROOT / "cli.py", "train-teachers", "--config", c, "--workdir", workdir,
                                  "--no-progress"] for c in configs])
        return [(r.returncode, r.stderr.strip().splitlines()) for r in finish_processes(procs, 180)]

    text = TINY.read_text()
    other_data, big_batch = tmp_path / "other-data.toml", tmp_path / "big-batch.toml"
    other_data.write_text(text.replace("synthetic_seed = 0", "synthetic_seed = 1"))
    big_batch.write_text(text.replace("batch_size = 16\nlearning_rate", "batch_size = 128\nlearning_rate", 1))
    assert other_data.read_text() != text and big_batch.read_text() != text
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    stopped = "pate: process 1 of 2 failed, so every process stopped (nothing was charged or written): "

    # Process 1 reads another data set: it says so, process 0 stops with its line.
    (code0, err0), (code1, err1) = launch(run, [TINY, other_data])
    assert (code0, code1) == (1, 1)
    line = ("process 1's data.synthetic_seed (1) differs from process 0's (and 1 more): give every process the "
            "same config, data set and run directory")
    assert err1 == [f"pate: {line}"]
    assert err0 == [stopped + line]
    assert os.listdir(run) == []  # no config.toml, no checkpoint, no lock

    # Process 1 with another batch size: the agreement names it before its shards are read (its own
    # check, shards smaller than a batch, would come later: the fast test above plays that one).
    (code0, err0), (code1, err1) = launch(run, [TINY, big_batch])
    assert (code0, code1) == (1, 1)
    assert err1 == ["pate: process 1's teachers.batch_size (128) differs from process 0's: give every process "
                    "the same config, data set and run directory"]
    assert err0 == [stopped + err1[0].removeprefix("pate: ")]
    assert os.listdir(run) == []
