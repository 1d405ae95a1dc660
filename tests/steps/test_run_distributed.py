"""`pate run --distributed` on real local processes (JAX's multi-controller runtime, gloo on
CPU): the teachers and the labels on every process, by their own distributed paths; the
student and the report on process 0 alone, the other process leaving after the labels with
one line. Each launch starts two JAX processes and trains the tiny teachers (30-50 s on the
shared 2-core machine), so these tests are slow (`pytest -m slow`)."""

from __future__ import annotations

import os

import pytest

from conftest import ROOT, TINY, finish_processes, invoke, kill_one_after, run_entries, start_processes, stopped_by
from conftest import released as released_npz
from pate.store import rundir

GLOO = "[Gloo] Rank"  # gloo's own line on stdout when the processes connect


def launch(workdir, *extra, processes: int = 2, timeout: float = 300, config=TINY):
    """``pate run --distributed`` as `processes` local processes on one run directory; their
    results by process id."""
    return finish_processes(start_processes(
        [[ROOT / "cli.py", "run", "--config", config, "--workdir", workdir, "--seed", "0", "--no-progress", *extra]]
        * processes), timeout)


def lines(result) -> list[str]:
    return [line for line in result.stdout.splitlines() if not line.startswith(GLOO)]


def released(path) -> dict:
    """An npz's arrays and meta (`conftest.released`), less the ledger's keyed name and folder
    (each test's ledger folder has its own key: the same data set is named differently in two
    folders by design; the folder each test's ledger is in (issue 44) is not the release)."""
    return released_npz(path, drop=("ledger", "ledger_directory"))


@pytest.mark.slow  # two JAX processes train the tiny teachers, then process 0 the student: 30-50 s
def test_two_processes_run_the_job_one_process_runs(finished_tiny, tmp_path):
    many = tmp_path / "many"
    first, second = launch(many)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert not first.stderr.strip() and not second.stderr.strip()
    # Process 1 took the teachers and the labels with process 0, then left with one line.
    assert lines(second) == ["process 1 of 2: trained its part of the teachers, voted with teachers 3-5; "
                             "process 0 trains the student and writes the report alone"]
    out = first.stdout
    for name in ("teachers", "label", "student", "analyze"):
        assert f"[{name}] running" in out
    assert "voting: 6 teachers on 100 pool points (2 processes" in out
    assert "pate run: teachers ran" in out and "HEADLINE eps" in out
    # The same votes, byte for byte, and the same seeded labels as one process's `pate run --seed 0`
    # (the session's finished tiny run: its teachers trained from the same config, one process).
    for name in (rundir.VOTES_NPZ, rundir.LABELS_NPZ):
        assert released(finished_tiny / name) == released(many / name), name
    assert sorted(os.listdir(many)) == sorted(os.listdir(finished_tiny))  # no staging or lock left
    # Each release charged once, by process 0: the labels and the report's sanitised eps.
    kinds = [e["kind"] for e in run_entries(many)]
    assert kinds == [e["kind"] for e in run_entries(finished_tiny)] and len(kinds) == 2

    # Run again: every step is up to date; process 1 is told so and leaves; nothing is charged.
    first, second = launch(many)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert lines(second) == ["process 1 of 2: had nothing to do (the teachers and labels are up to date); "
                             "process 0 trains the student and writes the report alone"]
    assert all(f"[{n}] up to date: skipped" in first.stdout for n in ("teachers", "label", "student", "analyze"))
    assert [e["kind"] for e in run_entries(many)] == kinds


@pytest.mark.slow  # one launch of two JAX processes that stop before any training: 10-20 s
def test_process_0_refusing_the_run_stops_the_other_with_its_line(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / rundir.CONFIG_TOML).write_text("# pate config\n[data]\nname = \"mnist\"\n")  # another data set's run
    before = sorted(os.listdir(other))
    stopped_by(launch(other), culprit=0)
    assert sorted(os.listdir(other)) == before  # nothing written, no lock left


@pytest.mark.slow  # a launch killed while the teachers train, then a whole run: 30-60 s
def test_a_process_killed_while_the_teachers_train_stops_the_other_and_pate_run_resumes(finished_tiny, tmp_path):
    run = tmp_path / "run"
    procs = start_processes([[ROOT / "cli.py", "run", "--config", TINY, "--workdir", run, "--seed", "0",
                               "--no-progress"]] * 2)
    # "[teachers] running": process 0 has told process 1 to train with it; a second later, they train
    first, waited = kill_one_after(procs, "[teachers] running", timeout=90, pause=1.0)
    err = first.stderr
    assert first.returncode == 1 and waited < 30, err  # not JAX's 100 s heartbeat timeout and abort
    (line,) = err.strip().splitlines()
    assert line.startswith("pate: the teachers' training across the processes failed (") or \
        line.startswith("pate: lost the other processes"), line
    assert run_entries(run) == []  # nothing released, nothing charged

    first, second = launch(run)  # pate run resumes: the same job as one process's
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    for name in (rundir.VOTES_NPZ, rundir.LABELS_NPZ):
        assert released(finished_tiny / name) == released(run / name), name
    assert len(run_entries(run)) == 2


@pytest.mark.slow  # one fine-grained run in-process, one launch of two JAX processes: 20-40 s
def test_a_fine_grained_run_on_two_processes_releases_what_one_process_does(tmp_path):
    """No teachers: the label step is the distributed fine-grained release (each process counts
    its slice of the records, process 0 draws), then process 0 trains the student alone."""
    config = tmp_path / "fine.toml"
    config.write_text(TINY.read_text().replace('mechanism = "lnmax"', 'mechanism = "fine-grained"', 1)
                      + "\n[fine_grained]\npca = 16\nvotes_per_record = 3\n")
    one, many = tmp_path / "one", tmp_path / "many"
    alone = invoke("run", "--config", config, "--workdir", one, "--seed", "0", "--no-progress")
    assert alone.exit_code == 0, alone.output
    first, second = launch(many, config=config)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert lines(second) == ["process 1 of 2: counted the votes of its slice of the private records; "
                             "process 0 trains the student and writes the report alone"]
    assert "(2 processes, each its own slice)" in first.stdout and "[student] running" in first.stdout
    assert released(one / rundir.LABELS_NPZ) == released(many / rundir.LABELS_NPZ)
    # One ledger (the same data set): the one process's release and the cluster's, once each.
    assert [e["kind"] for e in run_entries(many)] == ["labels", "labels"]
