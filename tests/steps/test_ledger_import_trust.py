"""`pate ledger --import` counts every release of a run (issue 44): the releases moved aside
into ``stale-*/`` folders, each release by its own identity (two separate releases whose labels
happen to be equal are two), and once whoever imports at the same time."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import numpy as np

from conftest import TINY, invoke, own_copy
from pate.store import ledger as ledger_mod, rundir


def _kinds(run) -> list[str]:
    return [e["kind"] for e in ledger_mod.Ledger.for_run(run).entries()]


def _rewrite_meta(path, **meta) -> None:
    """The same labels written again (another `meta`): a separate release with equal labels."""
    arrays = dict(np.load(path, allow_pickle=False))
    old = json.loads(str(arrays.pop("meta")))
    np.savez(path, **arrays, meta=np.array(json.dumps({**old, **meta})))


def test_a_relabelled_run_imports_the_releases_moved_aside(finished_tiny, tmp_path, monkeypatch):
    """A finished run labelled again and analysed again has made four releases: the first
    labels and their sanitised draw (the draw moved aside into stale-label-*/, the labels
    replaced), the second labels and their draw. Imported under another ledger folder, all four
    are charged (the replaced labels.npz is kept aside beside its draw), and again nothing more.
    (Relabelled under its own ledger folder: a run belongs to one ledger.)"""
    run = own_copy(finished_tiny, tmp_path / "run")
    relabel = invoke("label", "--config", TINY, "--workdir", run, "--overwrite")
    assert relabel.exit_code == 0, relabel.output
    assert invoke("analyze", "--workdir", run).exit_code == 0
    aside = [p for p in os.listdir(run) if p.startswith("stale-label-")]
    assert len(aside) == 1 and {rundir.LABELS_NPZ, rundir.RELEASE_JSON} <= set(os.listdir(run / aside[0]))
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "other-ledgers"))
    result = invoke("ledger", "--import", run)
    assert result.exit_code == 0, result.output
    assert sorted(_kinds(run)) == ["labels", "labels", "sanitised-eps", "sanitised-eps"], result.output
    again = invoke("ledger", "--import", run)
    assert again.exit_code == 0 and len(_kinds(run)) == 4, again.output


def test_two_separate_releases_with_equal_labels_are_two(finished_tiny, tmp_path):
    """Two runs whose labels.npz say the same (equal labels, same mechanism record) but were
    written separately (their files differ): two label releases, not one."""
    runs = []
    for k in range(2):
        run = tmp_path / f"run{k}"
        shutil.copytree(finished_tiny, run)
        os.unlink(run / rundir.RELEASE_JSON)
        _rewrite_meta(run / rundir.LABELS_NPZ, written_at=f"2020-01-01T00:00:0{k}+00:00")
        runs.append(run)
    for run in runs:
        result = invoke("ledger", "--import", run)
        assert result.exit_code == 0, result.output
    assert _kinds(runs[0]) == ["labels", "labels"]
    book = ledger_mod.Ledger.for_run(runs[0])
    assert len({e["release"] for e in book.entries()}) == 2


def test_a_copy_of_a_run_is_the_same_release(finished_tiny, tmp_path):
    """A byte-identical copy of a run (the same files) holds the same releases: importing both
    charges them once."""
    first, second = tmp_path / "a", tmp_path / "b"
    shutil.copytree(finished_tiny, first)
    shutil.copytree(finished_tiny, second)
    assert invoke("ledger", "--import", first).exit_code == 0
    result = invoke("ledger", "--import", second)
    assert result.exit_code == 0 and "charged:" not in result.output, result.output
    assert _kinds(first) == ["labels", "sanitised-eps"]


def test_a_release_its_own_command_charged_is_not_imported_again(trained_run):
    """label then analyze charge their releases (with their identity); an import of the run into
    the same ledger charges nothing more."""
    run, _ = trained_run
    assert invoke("label", "--config", TINY, "--workdir", run).exit_code == 0
    assert invoke("analyze", "--workdir", run).exit_code == 0
    before = _kinds(run)
    result = invoke("ledger", "--import", run)
    assert result.exit_code == 0 and "charged:" not in result.output, result.output
    assert _kinds(run) == before == ["labels", "sanitised-eps"]


def test_three_concurrent_imports_charge_once_and_all_succeed(finished_tiny, tmp_path, monkeypatch):
    """Three imports of one run at the same time (each slowed between its look-up and its
    charge): exactly one charges each release, the others say it is already imported, none fails."""
    from pate.steps.ledger_import import import_run

    run = tmp_path / "run"
    shutil.copytree(finished_tiny, run)
    real = ledger_mod.Ledger.entries

    def slow_entries(self):
        found = real(self)
        time.sleep(0.2)  # what another import does meanwhile is not in `found`
        return found

    monkeypatch.setattr(ledger_mod.Ledger, "entries", slow_entries)
    outcomes, lines = [], []
    barrier = threading.Barrier(3)

    def one():
        barrier.wait()
        try:
            outcomes.append(len(import_run(run, echo=lines.append)))
        except Exception as err:  # noqa: BLE001 - the outcome under test
            outcomes.append(err)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(outcomes, key=str) == [0, 0, 2], (outcomes, lines)
    assert _kinds(run) == ["labels", "sanitised-eps"]
    assert sum("already in the ledger" in line for line in lines) == 4, lines
