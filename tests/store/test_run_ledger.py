"""A run belongs to one ledger (issue 44): a command on a run whose labels were charged to a
ledger the current ledger folder does not hold refuses in one line and charges nothing (it
used to charge a fresh, empty ledger there), and the "once" guard of the sanitised draw sees
the same labels' draw in every ledger folder it can see."""

from __future__ import annotations

import os
import shutil

from conftest import TINY, invoke, one_line
from pate.store import ledger as ledger_mod, rundir


def _ledger_files(folder) -> list[str]:
    return sorted(p.name for p in folder.glob("*.jsonl")) if folder.exists() else []


def _labelled(trained_run, ledger_dir):
    """The tiny run labelled under ``ledger_dir`` (the test's own PATE_LEDGER_DIR)."""
    run, _ = trained_run
    result = invoke("label", "--config", TINY, "--workdir", run)
    assert result.exit_code == 0, result.output
    assert _ledger_files(ledger_dir)
    return run


def test_analyze_under_another_ledger_folder_refuses_in_one_line(trained_run, ledger_dir, tmp_path, monkeypatch):
    run = _labelled(trained_run, ledger_dir)
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
    draw: the guard looks in the folder the run was labelled under too."""
    run = _labelled(trained_run, ledger_dir)
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
