"""GNMax and Confident-GNMax with exact coins end to end through the CLI on the tiny run (issue 43):
`pate label` releases with exact discrete Gaussian coins and charges the data-independent cost with
no float64 δ, a research seed reproduces the labels, `pate analyze` publishes the data-independent
headline and draws nothing (no sanitised release of the exact coins' data-dependent ε is proven),
and `pate audit` takes the records."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from conftest import assert_imported_once, invoke
from pate.store import ledger as ledger_mod

CONFIDENT = ("--mechanism", "confident-gnmax-exact", "--threshold", 3, "--sigma-threshold", 2, "--sigma", 1.5)


@pytest.fixture(scope="module")
def exact_gaussian_runs(_trained_tiny, tmp_path_factory):
    """The tiny teachers labelled twice with the same seed by Confident-GNMax with exact coins
    (and once by GNMax-exact), the first run analysed; each under a ledger of its own."""
    folder = tmp_path_factory.mktemp("exact-gaussian")
    runs = {}
    old = os.environ.get("PATE_LEDGER_DIR")
    try:
        for name, options in (("a", CONFIDENT), ("b", CONFIDENT), ("g", ("--mechanism", "gnmax-exact", "--sigma", 2))):
            run = folder / name
            shutil.copytree(_trained_tiny[0], run)
            os.environ["PATE_LEDGER_DIR"] = str(folder / f"ledgers-{name}")
            labelled = invoke("label", "--workdir", run, *options, "--seed", 9)
            assert labelled.exit_code == 0, labelled.output
            runs[name] = run, labelled
        os.environ["PATE_LEDGER_DIR"] = str(folder / "ledgers-a")
        analysed = invoke("analyze", "--workdir", runs["a"][0])
    finally:
        if old is None:
            os.environ.pop("PATE_LEDGER_DIR", None)
        else:
            os.environ["PATE_LEDGER_DIR"] = old
    return folder, runs, analysed


def test_a_seed_reproduces_the_exact_labels(exact_gaussian_runs):
    _, runs, _ = exact_gaussian_runs
    with np.load(runs["a"][0] / "labels.npz") as a, np.load(runs["b"][0] / "labels.npz") as b:
        np.testing.assert_array_equal(a["labels"], b["labels"])
        assert str(a["mechanism"]) == "confident-gnmax-exact"
        assert (a["labels"] >= -1).all()


def test_analyze_publishes_the_data_independent_headline_with_no_sampling_delta(exact_gaussian_runs, monkeypatch):
    folder, runs, analysed = exact_gaussian_runs
    run = runs["a"][0]
    assert analysed.exit_code == 0, analysed.output
    assert "no sanitised eps" in runs["a"][1].output
    release = json.loads((run / "release.json").read_text())
    assert release["mechanism"] == "confident-gnmax-exact"
    assert release["release_delta"] == pytest.approx(1e-5)  # the analysis δ only: no float64 term
    assert "delta_sampling" not in release["details"] and release["details"]["eps_release_cost"] == 0.0
    assert release["release_eps"] == pytest.approx(release["details"]["eps_data_independent_headline"])
    assert "eps_data_dependent" not in json.dumps(release)
    assert "eps_data_dependent" in (run / "privacy.json").read_text()
    monkeypatch.setenv("PATE_LEDGER_DIR", str(folder / "ledgers-a"))
    entries = ledger_mod.Ledger.for_run(run).entries()
    assert [e["kind"] for e in entries if e.get("cost")] == ["labels"]  # analyze drew and charged nothing
    assert all(not e.get("sampling_tv") for e in entries)
    assert [e["cost"]["kind"] for e in entries if e.get("cost")] == ["discrete-gaussian"]


def test_audit_takes_the_exact_gaussian_record(exact_gaussian_runs):
    run = exact_gaussian_runs[1]["g"][0]
    audit = invoke("audit", "--workdir", run, "--trials", 500, "--seed", 1)
    assert audit.exit_code == 0, audit.output
    assert "gnmax-exact" in audit.output and "no violation found" in audit.output


@pytest.mark.parametrize("mechanism", ["gnmax-exact", "permute-and-flip"])
def test_a_budget_check_counts_no_sanitised_draw_for_a_record_without_one(mechanism, tmp_path, monkeypatch):
    """`pate run`'s budget check before any work counts the labels alone for a record that makes
    no sanitised release (it asked that record for a sanitised cost, which it refuses)."""
    from pate.config import load_config
    from pate.steps.pipeline import check_budget
    from pate.store import rundir
    from analysis.mechanisms import registry

    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledgers"))
    config = load_config("tiny", {"aggregation.mechanism": mechanism, "aggregation.sigma": 40.0,
                                  "aggregation.gamma": 0.05, "privacy.total_budget": 1000.0})
    check_budget(config, rundir.RunDir(tmp_path / "run"), registry.from_config(config.aggregation))
    tight = load_config("tiny", {"aggregation.mechanism": mechanism, "privacy.total_budget": 0.01})
    with pytest.raises(Exception, match="budget"):
        check_budget(tight, rundir.RunDir(tmp_path / "run"), registry.from_config(tight.aggregation))


def test_ledger_import_counts_the_exact_release_once(exact_gaussian_runs, tmp_path, monkeypatch):
    run = exact_gaussian_runs[1]["a"][0]
    assert_imported_once(run, monkeypatch, tmp_path / "other")
