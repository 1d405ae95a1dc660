"""`pate run --distributed` with ``[rounds] rounds = 2`` on real local processes: the teachers, the
labels and round 2's heads on every process; round 1's student and report on process 0 while the
other waits for its word; then the other leaves and process 0 trains the student of both rounds
and writes their report. One launch trains the tiny teachers and two students (60-90 s on the
shared 2-core machine): slow (`pytest -m slow`)."""

from __future__ import annotations

import pytest

from conftest import kill_one_after, ROOT, TINY, finish_processes, invoke, own_copy, run_entries, start_processes
from conftest import released as released_npz
from pate.store import rundir

ROUNDS = ("--set", "rounds.rounds=2", "--set", "rounds.queries=40")
GLOO = "[Gloo] Rank"  # gloo's own line on stdout when the processes connect


def released(path, drop=()) -> dict:
    """An npz's arrays and meta, less the ledger's keyed name and folder (each ledger folder has
    its own key: the same data set is named differently in two folders by design) and `drop`."""
    return released_npz(path, drop=("ledger", "ledger_directory", *drop))


@pytest.mark.slow  # two JAX processes train the tiny teachers, process 0 two students: 60-90 s
def test_two_processes_run_both_rounds_as_one_process_does(finished_tiny, tmp_path, monkeypatch):
    # One process: round 2 on the session's finished round 1 (`pate run --seed 0` of the tiny config).
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "one-ledgers"))
    one = own_copy(finished_tiny, tmp_path / "one")
    alone = invoke("run", "--config", TINY, "--workdir", one, "--seed", 0, "--no-progress", *ROUNDS)
    assert alone.exit_code == 0, alone.output

    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "many-ledgers"))
    many = tmp_path / "many"
    first, second = finish_processes(start_processes(
        [[ROOT / "cli.py", "run", "--config", TINY, "--workdir", many, "--seed", "0", "--no-progress", *ROUNDS]] * 2),
        timeout=420)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-3000:] + second.stderr[-3000:]
    assert not first.stderr.strip() and not second.stderr.strip()
    assert [line for line in second.stdout.splitlines() if not line.startswith(GLOO)] == [
        "process 1 of 2: trained its part of the teachers, voted with teachers 3-5, voted with round-2 heads 3-5; "
        "process 0 trains the student and writes the report alone"]
    for name in ("teachers", "label", "student", "analyze", "round2", "student2", "analyze2"):
        assert f"[{name}] running" in first.stdout, name
    assert "(2 processes, each its own block of heads)" in first.stdout
    # Both rounds' votes and seeded labels are one process's (round 1's of the session's run were
    # made under the config without [rounds]: their config hash differs, nothing else).
    for name in (rundir.VOTES_NPZ, rundir.LABELS_NPZ):
        assert released(one / name, ("config_hash",)) == released(many / name, ("config_hash",)), name
    for name in (rundir.VOTES_ROUND2_NPZ, rundir.LABELS_ROUND2_NPZ):
        assert released(one / name) == released(many / name), name
    # Each release charged once, by process 0: both rounds' labels and sanitised eps.
    kinds = [e["kind"] for e in run_entries(many)]
    assert kinds == [e["kind"] for e in run_entries(one)] and len(kinds) == 4, kinds

    # Run again: every step is up to date; process 1 is told so and leaves; nothing is charged.
    first, second = finish_processes(start_processes(
        [[ROOT / "cli.py", "run", "--config", TINY, "--workdir", many, "--seed", "0", "--no-progress", *ROUNDS]] * 2),
        timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-3000:] + second.stderr[-3000:]
    assert "had nothing to do" in second.stdout
    assert [e["kind"] for e in run_entries(many)] == kinds


@pytest.mark.slow  # two JAX processes train the tiny teachers, then two launches more: 2-3 min
def test_a_process_killed_while_process_0_trains_round_1s_student_stops_it_before_round_2(tmp_path):
    """Process 1 waits for process 0's word while process 0 trains round 1's student; killed
    there, process 0 finishes its own steps (the student, round 1's report: its own release,
    charged once), then stops at round 2's word with one line, round 2 neither drawn nor
    charged; the next `pate run --distributed` makes round 2 and the rest, each release once."""
    run = tmp_path / "run"
    command = [ROOT / "cli.py", "run", "--config", TINY, "--workdir", run, "--seed", "0", "--no-progress", *ROUNDS]
    # process 1 voted with process 0 and now waits for its word
    first, waited = kill_one_after(start_processes([command] * 2), "[student] running", timeout=240)
    out, err = first.stdout, first.stderr
    assert first.returncode == 1, (out[-2000:], err[-2000:])
    assert "[analyze] running" in out and "[round2] running" not in out, out[-2000:]
    (line,) = [line for line in err.splitlines() if line.startswith("pate: ")]
    assert "lost the other processes" in line, line
    assert "Traceback" not in err and "Check failure stack trace" not in err and waited < 200
    assert not (run / rundir.LABELS_ROUND2_NPZ).exists() and not (run / rundir.VOTES_ROUND2_NPZ).exists()
    assert [e["kind"] for e in run_entries(run)] == ["labels", "sanitised-eps"], run_entries(run)

    again = finish_processes(start_processes([command] * 2), timeout=300)
    assert all(r.returncode == 0 for r in again), again[0].stderr[-3000:] + again[1].stderr[-3000:]
    assert "[round2] running" in again[0].stdout and "voted with round-2 heads 3-5" in again[1].stdout
    kinds = [e["kind"] for e in run_entries(run)]
    assert kinds == ["labels", "sanitised-eps", "labels", "sanitised-eps"], kinds
