"""Two rounds through `pate run` (issue 32): finished work is never lost nor released twice.
A second `pate run` of the same config skips every step; a run killed right after a step's
commit resumes from what was committed and charges nothing twice; a rounds = 1 config, or a
config that would release round 2 again, is refused in one line and touches nothing."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from pate.steps import pipeline
from pate.steps import ledger_import
from pate.store import digests, ledger, rundir
from pate.store.door import STALE_PREFIX

from conftest import ROOT, TINY, invoke, one_line, snapshot

#: The tiny config with two rounds: round 2's queries left at their default (800, more than
#: the 100 the tiny pool leaves: the default fits the run), a short student of both rounds.
TWO_ROUNDS = '\n[rounds]\nrounds = 2\nstudent_init = "round1"\nstudent_steps = 5\n'


class Killed(BaseException):
    """A kill at a step boundary: raised where `pate run` records a step it has committed."""


def kill_after(monkeypatch, name: str) -> None:
    """`pate run` dies right after step ``name`` committed its artifacts, before its record."""
    real = pipeline._Manifest.record

    def record(self, step_, config, figures):
        if step_.name == name:
            raise Killed(name)
        real(self, step_, config, figures)

    monkeypatch.setattr(pipeline._Manifest, "record", record)


def charges(run) -> list[tuple]:
    """The ledger's entries of a run: (kind, round, subject)."""
    return [(e["kind"], (e.get("mechanism") or {}).get("round"), e.get("subject"))
            for e in ledger.Ledger.for_run(run).entries()]


def stale(run) -> list[str]:
    """The folders of artifacts moved aside."""
    return sorted(n for n in os.listdir(run) if n.startswith(STALE_PREFIX))


@pytest.fixture(scope="module")
def two_round_run(finished_tiny, tmp_path_factory):
    """A finished tiny round 1, then `pate run` with two rounds killed right after round 2's
    commit, then resumed: what each stage left. Round 1's release.json says a headline δ of 1
    (an unseeded tiny run's float64 noise): the headline of both rounds still composes."""
    from pate.config import load_config

    base = tmp_path_factory.mktemp("rounds-pipeline")
    config_path = base / "two.toml"
    config_path.write_text(TINY.read_text() + TWO_ROUNDS)
    run = base / "run"
    shutil.copytree(finished_tiny, run)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATE_LEDGER_DIR", str(base / "ledgers"))
        ledger_import.import_run(run, echo=lambda *_: None)
        release1 = json.loads((run / rundir.RELEASE_JSON).read_text())
        (run / rundir.RELEASE_JSON).write_text(json.dumps(dict(release1, delta=1.0, release_delta=1.0)))
        labels1 = (run / rundir.LABELS_NPZ).read_bytes()
        kill_after(mp, "round2")
        lines: list[str] = []
        with pytest.raises(Killed):
            pipeline.run(load_config(config_path), run, seed=3, show_progress=False, echo=lines.append)
        mp.undo()
        mp.setenv("PATE_LEDGER_DIR", str(base / "ledgers"))
        killed = dict(charges=charges(run), labels2=(run / rundir.LABELS_ROUND2_NPZ).read_bytes(), stale=stale(run),
                      output="\n".join(lines))
        resumed = invoke("run", "--config", config_path, "--workdir", run, "--no-progress", "--seed", 4)
        done = dict(charges=charges(run), snapshot=snapshot(run), stale=stale(run))
    return dict(run=run, config=config_path, ledgers=base / "ledgers", killed=killed, resumed=resumed, done=done,
                release1=release1, labels1=labels1)


def test_two_rounds_on_a_finished_round1_run_round2_only(two_round_run):
    """`pate run` with two rounds on a finished round 1: round 1's steps are skipped, round 2
    runs and asks what the tiny pool has left ([rounds] queries defaults to more)."""
    out, run = two_round_run["killed"]["output"], two_round_run["run"]
    assert "[label] running" not in out and "[student] running" not in out and "[round2] running" in out
    assert (run / rundir.LABELS_NPZ).read_bytes() == two_round_run["labels1"]  # not relabelled
    assert np.load(run / rundir.LABELS_ROUND2_NPZ)["indices"].size == 200 - 100  # the pool's rest
    details = json.loads((run / rundir.RELEASE_JSON).read_text())["details"]
    assert details["rounds"] == 2 and details["eps_round1"] == two_round_run["release1"]["release_eps"]


def test_a_run_killed_after_round2_commits_resumes_without_releasing_it_again(two_round_run):
    killed, done, out = two_round_run["killed"], two_round_run["done"], two_round_run["resumed"]
    assert out.exit_code == 0, out.output
    for name in ("teachers", "label", "student", "analyze", "round2"):
        assert f"[{name}] up to date: skipped" in out.output, out.output
    assert "[student2] running" in out.output and "[analyze2] running" in out.output
    run = two_round_run["run"]
    assert (run / rundir.LABELS_ROUND2_NPZ).read_bytes() == killed["labels2"]  # the committed release stands
    assert done["stale"] == killed["stale"]  # nothing else moved aside
    rounds2 = [c for c in done["charges"] if c[:2] == ("labels", 2)]
    assert len(rounds2) == 1  # one round-2 release, charged once ...
    new = done["charges"][len(killed["charges"]):]
    assert [c[0] for c in new] == ["sanitised-eps"]  # ... and the resume charged only the report of both rounds
    release = json.loads((run / rundir.RELEASE_JSON).read_text())
    assert release["details"]["rounds"] == 2
    assert json.loads((run / rundir.STUDENT_JSON).read_text())["rounds"] == 2


def test_a_second_run_of_the_same_config_skips_every_step(two_round_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(two_round_run["run"], run)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(two_round_run["ledgers"]))
    before, charged = snapshot(run), charges(run)
    r = invoke("run", "--config", two_round_run["config"], "--workdir", run, "--no-progress")
    assert r.exit_code == 0, r.output
    assert r.output.count("up to date: skipped") == 7, r.output
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k != rundir.PIPELINE_JSON} == {
        k: v for k, v in before.items() if k != rundir.PIPELINE_JSON}
    assert charges(run) == charged


def test_a_rounds1_config_on_a_two_round_run_is_refused_and_touches_nothing(two_round_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(two_round_run["run"], run)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(two_round_run["ledgers"]))
    before, charged = snapshot(run), charges(run)
    r = invoke("run", "--config", TINY, "--workdir", run, "--no-progress")
    line = one_line(r)
    assert r.exit_code == 1 and "rounds = 1" in line and rundir.LABELS_ROUND2_NPZ in line and "--overwrite" in line
    assert snapshot(run) == before and charges(run) == charged


def test_a_config_that_would_release_round2_again_is_refused(two_round_run, tmp_path, monkeypatch):
    """Another [rounds] would draw a second round-2 release over the first: refused, named."""
    run = tmp_path / "run"
    shutil.copytree(two_round_run["run"], run)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(two_round_run["ledgers"]))
    before = snapshot(run)
    r = invoke("run", "--config", two_round_run["config"], "--workdir", run, "--no-progress",
               "--set", "rounds.ridge=3.0")
    line = one_line(r)
    assert r.exit_code == 1 and rundir.LABELS_ROUND2_NPZ in line and "[rounds]" in line
    assert "pate label --round 2" in line and "--overwrite" in line
    assert snapshot(run) == before


def test_round1_student_kept_by_round2_is_a_folder_checked_against_its_record(two_round_run, tmp_path, monkeypatch):
    """student-round1/ is a checkpoint folder (never "damaged" for not being a file); a changed
    one is refused in one line, never trained again in place over round 2's."""
    run = tmp_path / "run"
    shutil.copytree(two_round_run["run"], run)
    kept = (rundir.STUDENT_ROUND1_DIR, rundir.STUDENT_ROUND1_JSON)
    assert digests.damaged(run, kept) is None
    victim = next(p for p in sorted((run / rundir.STUDENT_ROUND1_DIR).rglob("*")) if p.is_file())
    victim.write_bytes(victim.read_bytes() + b"x")
    assert "student checkpoint" in digests.damaged(run, kept)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(two_round_run["ledgers"]))
    before = snapshot(run)
    r = invoke("run", "--config", two_round_run["config"], "--workdir", run, "--no-progress")
    line = one_line(r)
    assert r.exit_code == 1 and rundir.STUDENT_ROUND1_JSON in line and "--overwrite" in line
    assert snapshot(run) == before


#: Run as ``python -c DRIVER STEP ARGS...``: `pate ARGS` that dies (os._exit, as SIGKILL: no
#: cleanup, the lock left to the next command) right after step STEP committed its artifacts.
DRIVER = """
import os, sys
from pate.steps import pipeline
real = pipeline._Manifest.record
def record(self, step_, config, figures):
    if step_.name == sys.argv[1]:
        os._exit(137)
    real(self, step_, config, figures)
pipeline._Manifest.record = record
from cli import main
main(sys.argv[2:])
"""

BOUNDARIES = ("teachers", "label", "student", "analyze", "round2", "student2", "analyze2")


@pytest.mark.slow  # a whole two-round tiny run in 8 processes: about 2 min of CPU
def test_two_rounds_killed_at_every_step_boundary(tmp_path, monkeypatch):
    """`pate run` with two rounds, killed right after each step's commit in turn, each time
    resumed by the next: every committed step is recognised and none runs twice, the ledger
    holds each release once; then a second run skips all, and a rounds = 1 config is refused."""
    import subprocess
    import sys

    config = tmp_path / "two.toml"
    config.write_text(TINY.read_text().replace("\nsteps = 100\n", "\nsteps = 30\n") + TWO_ROUNDS)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATE_LEDGER_DIR": str(tmp_path / "ledgers")}
    monkeypatch.setenv("PATE_LEDGER_DIR", env["PATE_LEDGER_DIR"])
    args = ["run", "--config", config, "--workdir", run, "--no-progress", "--seed", 3]
    made: dict[str, bytes] = {}
    for name in BOUNDARIES:
        done = subprocess.run([sys.executable, "-c", DRIVER, name, *map(str, args)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 137, done.stdout + done.stderr
        ran = [ln.split("]")[0][1:] for ln in done.stdout.splitlines() if "] running" in ln]
        assert ran == [name], (name, done.stdout)  # every step before was recognised as committed
        main = next(s for s in (*pipeline.STEPS, *pipeline.ROUND2_STEPS) if s.name == name).main
        made[name] = (run / main).read_bytes()
    kinds = [(k, r) for k, r, _ in charges(run)]
    assert kinds == [("labels", None), ("sanitised-eps", None), ("labels", 2), ("sanitised-eps", None)]
    r = invoke(*args)
    assert r.exit_code == 0 and r.output.count("up to date: skipped") == 7, r.output
    for name in ("label", "round2", "student2", "analyze2"):  # the committed work, not made again
        main = next(s for s in (*pipeline.STEPS, *pipeline.ROUND2_STEPS) if s.name == name).main
        assert (run / main).read_bytes() == made[name], name
    assert len(charges(run)) == 4
    before = snapshot(run)
    r = invoke("run", "--config", TINY, "--workdir", run, "--no-progress")
    assert r.exit_code == 1 and "rounds = 1" in one_line(r)
    assert snapshot(run) == before and len(charges(run)) == 4
