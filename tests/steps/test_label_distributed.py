"""`pate label --distributed` on real local processes (JAX's multi-controller runtime, gloo
collectives on CPU): two and four processes release what one does, and a process that fails stops
both with one line and nothing charged. Each launch starts two JAX processes (about 10 s of
CPU, 15-25 s on the shared 2-core machine), so those tests are slow (`pytest -m slow`);
tests/programs/test_cluster.py keeps the reduction and the agreement in the fast suite."""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import ROOT, finish_processes, invoke, kill_one_after, released, run_entries, start_processes, stopped_by
from pate.store import rundir

SEED = 7


def start(workdirs, *extra, devices: int = 1):
    """``pate label --distributed`` as len(workdirs) local processes of `devices` CPU devices
    each, process p on ``workdirs[p]`` (the same run directory for a real cluster), by process id."""
    return start_processes([[ROOT / "cli.py", "label", "--workdir", w, "--seed", SEED, *extra] for w in workdirs],
                           devices=devices)


def launch(workdirs, *extra, devices: int = 1, timeout: float = 240):
    """`start`, and wait for every process: their results by process id."""
    return finish_processes(start(workdirs, *extra, devices=devices), timeout)


#: What processes 1.. print for 6 teachers: their blocks of ceil(6 / P) (the last may be empty).
BLOCKS = {2: ["teachers 3-5 voted"], 4: ["teachers 2-3 voted", "teachers 4-5 voted", "no teachers of the 6"]}


@pytest.mark.slow  # one label in-process, one launch of 2 or 4 JAX processes: 15-40 s on the shared 2-core machine
@pytest.mark.parametrize("processes, devices", [(2, 1), (2, 2), (4, 1)])  # devices: CPU devices per process
def test_processes_release_what_one_process_does(trained_run, tmp_path, processes, devices):
    run, _ = trained_run
    one, many = tmp_path / "one", tmp_path / "many"
    shutil.copytree(run, one)
    shutil.copytree(run, many)
    alone = invoke("label", "--workdir", one, "--seed", SEED)
    assert alone.exit_code == 0, alone.output

    first, *others = launch([many] * processes, devices=devices)
    assert all(r.returncode == 0 for r in (first, *others)), "".join(r.stderr for r in (first, *others))
    assert f"voting: 6 teachers on 100 pool points ({processes} processes" in first.stdout
    for p, (other, block) in enumerate(zip(others, BLOCKS[processes]), start=1):
        assert f"process {p} of {processes}: {block}" in other.stdout, other.stdout
        assert "wrote" not in other.stdout and not other.stderr.strip()
    if devices > 1:
        assert f"({devices} device(s))" in others[0].stdout  # each block sharded again over its devices
    # The same votes and (seeded) labels, whichever processes counted them.
    for name in (rundir.VOTES_NPZ, rundir.LABELS_NPZ):
        assert released(one / name) == released(many / name), name
    assert (many / rundir.VOTES_NPZ).stat().st_mode & 0o077 == 0  # private, as one process writes it
    # Charged once by the cluster (process 0), as once by the one process: two releases in all.
    entries = run_entries(many)
    assert [e["kind"] for e in entries] == ["labels", "labels"]
    assert sorted(os.listdir(many)) == sorted(os.listdir(one))  # no staging or lock left behind


@pytest.mark.slow  # two launches of two JAX processes each: 20-40 s
def test_a_process_that_fails_stops_every_process_with_one_line_and_nothing_charged(trained_run, tmp_path):
    run, _ = trained_run
    nowhere = tmp_path / "no-teachers"
    nowhere.mkdir()
    config = run / rundir.CONFIG_TOML

    # Process 1 cannot see the teachers (a host without the shared file system).
    why = stopped_by(launch([run, nowhere], "--config", config), culprit=1)
    assert why == f"{nowhere} holds no trained teachers (teachers.json and teachers/); run `pate train-teachers` first"
    assert not (run / rundir.VOTES_NPZ).exists() and not (run / rundir.LABELS_NPZ).exists()
    assert run_entries(run) == []

    # Process 0 refuses in its door (a release is there already): process 1 stops too.
    assert invoke("label", "--workdir", run, "--seed", SEED).exit_code == 0
    before = {name: (run / name).read_bytes() for name in (rundir.VOTES_NPZ, rundir.LABELS_NPZ)}
    assert "pass --overwrite" in stopped_by(launch([run, run]), culprit=0)
    assert {name: (run / name).read_bytes() for name in before} == before
    assert [e["kind"] for e in run_entries(run)] == ["labels"]


@pytest.mark.slow  # one launch of two JAX processes, one of them killed: 15-30 s
def test_a_killed_process_stops_the_other_at_once_with_nothing_charged(trained_run):
    run, _ = trained_run
    # process 0 passed its checks: both go on to their teachers
    first, waited = kill_one_after(start([run, run]), "voting:", timeout=90)
    _, err = first.stdout, first.stderr
    # One line at once, not JAX's shutdown barrier waiting 100 s for the dead process and aborting.
    assert first.returncode == 1 and waited < 60, (waited, err[-2000:])
    (line,) = [line for line in err.splitlines() if line.startswith("pate: ")]
    assert "with the other processes" in line or "lost the other processes" in line, line
    assert "Traceback" not in err and "Check failure stack trace" not in err
    assert not (run / rundir.VOTES_NPZ).exists() and not (run / rundir.LABELS_NPZ).exists()
    assert run_entries(run) == []
    # The next command finds the run as it was and releases once.
    again = invoke("label", "--workdir", run, "--seed", SEED)
    assert again.exit_code == 0, again.output
    assert [e["kind"] for e in run_entries(run)] == ["labels"]


def test_distributed_is_refused_where_it_does_not_apply(trained_run):
    run, _ = trained_run
    result = invoke("label", "--workdir", run, "--distributed", "--votes", run / "v.npy", "--num-classes", 4)
    assert result.exit_code == 2 and "drop it with --votes" in result.output, result.output
    result = invoke("label", "--workdir", run, "--process-id", 1)
    assert result.exit_code == 2 and "need --distributed" in result.output
    assert not (run / rundir.LABELS_NPZ).exists()
