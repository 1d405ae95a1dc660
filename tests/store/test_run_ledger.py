"""A run belongs to one ledger (issue 44): a command on a run whose labels were charged to a
ledger the current ledger folder does not hold refuses in one line and charges nothing (it
used to charge a fresh, empty ledger there), and the "once" guard of the sanitised draw sees
the same labels' draw in every ledger folder it can see."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from conftest import TINY, invoke, one_line, own_copy, snapshot, unpublished_copy
from pate.store import ledger as ledger_mod, rundir


def _ledger_files(folder) -> list[str]:
    return sorted(p.name for p in folder.glob("*.jsonl")) if folder.exists() else []


def _labelled(labelled_tiny, ledger_dir, tmp_path):
    """A copy of the tiny run, its labels charged to ``ledger_dir`` (the test's own PATE_LEDGER_DIR)."""
    run = unpublished_copy(labelled_tiny, tmp_path)
    assert _ledger_files(ledger_dir)
    return run


def test_analyze_under_another_ledger_folder_refuses_in_one_line(labelled_tiny, ledger_dir, tmp_path, monkeypatch):
    run = _labelled(labelled_tiny, ledger_dir, tmp_path)
    other = tmp_path / "other-ledgers"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(other))
    result = invoke("analyze", "--workdir", run)
    line = one_line(result)
    assert result.exit_code == 1 and "ledger" in line and str(other) in line, result.output
    assert "--import" in line
    assert _ledger_files(other) == [] and not (run / rundir.RELEASE_JSON).exists()
    # counted there on purpose, the run belongs to that folder's ledger too
    assert invoke("ledger", "--import", run).exit_code == 0
    again = invoke("analyze", "--workdir", run)
    assert again.exit_code == 0, again.output


def test_a_second_draw_of_the_same_labels_is_refused_from_another_ledger_folder(trained_run, ledger_dir, tmp_path,
                                                                                monkeypatch):
    """The labels' draw is recorded under the first folder; a copy of the run without its
    release.json, imported under a second folder (its labels counted there), is refused a second
    draw: the guard looks in the folder the run was labelled under too (labelled here, under
    the test's folder: a shared run's labelling folder is read-only)."""
    run, _ = trained_run
    assert invoke("label", "--config", TINY, "--workdir", run).exit_code == 0
    assert invoke("analyze", "--workdir", run).exit_code == 0
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    os.unlink(copy / rundir.RELEASE_JSON)
    other = tmp_path / "other-ledgers"
    monkeypatch.setenv("PATE_LEDGER_DIR", str(other))
    assert invoke("ledger", "--import", copy).exit_code == 0
    result = invoke("analyze", "--workdir", copy)
    line = one_line(result)
    assert result.exit_code == 1 and "already records" in line and str(ledger_dir) in line, result.output
    assert not (copy / rundir.RELEASE_JSON).exists()
    assert [e["kind"] for e in ledger_mod.Ledger.for_run(copy).entries()] == ["labels"]


def test_analyze_under_another_home_refuses_and_charges_the_runs_own_ledger_back_home(labelled_tiny, ledger_dir,
                                                                                       tmp_path, monkeypatch):
    """Under another HOME (no $PATE_LEDGER_DIR, no XDG_STATE_HOME: the default ledger folder is
    the new home's) the run's labels belong to a ledger that folder does not hold: one line
    naming that ledger and what to do, nothing drawn or charged anywhere. Pointed back at the
    run's own ledger folder, the same command charges that ledger."""
    run = _labelled(labelled_tiny, ledger_dir, tmp_path)
    named = json.loads(str(np.load(run / rundir.LABELS_NPZ)["meta"]))["ledger"]
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.delenv("PATE_LEDGER_DIR")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    result = invoke("analyze", "--workdir", run)
    line = one_line(result)
    assert result.exit_code == 1 and named in line and str(home) in line, result.output
    assert "PATE_LEDGER_DIR" in line and "[privacy] ledger" in line and "--import" in line
    assert not (run / rundir.RELEASE_JSON).exists() and not list(home.rglob("*.jsonl"))
    monkeypatch.setenv("PATE_LEDGER_DIR", str(ledger_dir))
    assert invoke("analyze", "--workdir", run).exit_code == 0
    assert [e["kind"] for e in ledger_mod.Ledger.for_run(run).entries()] == ["labels", "sanitised-eps"]


def test_round2_under_another_ledger_folder_refuses_in_one_line(finished_tiny, tmp_path, monkeypatch):
    """Round 2 composes with round 1, whose releases are charged to the run's ledger: under a
    folder that does not hold it, `pate label --round 2` refuses before drawing anything."""
    run = own_copy(finished_tiny, tmp_path / "run")
    before = snapshot(run)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "other-ledgers"))
    result = invoke("label", "--round", 2, "--workdir", run, "--queries", 5)
    line = one_line(result)
    assert result.exit_code == 1 and "--import" in line and str(tmp_path / "other-ledgers") in line, result.output
    assert snapshot(run) == before and not list((tmp_path / "other-ledgers").glob("*.jsonl"))
