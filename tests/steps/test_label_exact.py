"""Permute-and-flip and the exponential mechanism end to end through the CLI on the tiny run: `pate
label` releases with the exact sampler and charges the data-independent cost (no float64 δ), `pate
analyze` publishes the data-independent headline and draws nothing (no second charge; the
data-dependent ε stays in privacy.json), `pate audit` and `pate plan` take the mechanism, `pate
ledger --import` counts the release once, and a second round, which would compose a sanitised
release these mechanisms do not make, is refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest

from analysis.core.errors import PateError
from conftest import assert_imported_once, invoke, one_line_error
from pate.config import load_config
from pate.store import ledger as ledger_mod


@pytest.fixture(scope="module")
def exact_run(_trained_tiny, tmp_path_factory):
    """The tiny teachers labelled by permute-and-flip (γ 0.5), then analysed, under a ledger of its own."""
    import os

    folder = tmp_path_factory.mktemp("exact")
    run = folder / "run"
    shutil.copytree(_trained_tiny[0], run)
    ledgers = folder / "ledgers"
    old = os.environ.get("PATE_LEDGER_DIR")
    os.environ["PATE_LEDGER_DIR"] = str(ledgers)
    try:
        labelled = invoke("label", "--workdir", run, "--mechanism", "permute-and-flip", "--gamma", 0.5, "--seed", 3)
        analysed = invoke("analyze", "--workdir", run)
    finally:
        os.environ["PATE_LEDGER_DIR"] = old
    return run, ledgers, labelled, analysed


def test_label_and_analyze_publish_the_data_independent_headline(exact_run, monkeypatch):
    run, ledgers, labelled, analysed = exact_run
    assert labelled.exit_code == 0, labelled.output
    assert analysed.exit_code == 0, analysed.output
    assert "no sanitised eps" in labelled.output
    release = json.loads((run / "release.json").read_text())
    assert release["mechanism"] == "permute-and-flip" and release["release_delta"] == pytest.approx(1e-5)
    assert "eps_data_dependent" not in json.dumps(release)  # private: privacy.json only
    assert release["details"]["eps_release_cost"] == 0.0
    assert release["release_eps"] == pytest.approx(release["details"]["eps_data_independent_headline"])
    private = json.loads((run / "privacy.json").read_text())
    assert "eps_data_dependent" in json.dumps(private)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(ledgers))
    entries = ledger_mod.Ledger.for_run(run).entries()
    assert [e["kind"] for e in entries if e.get("cost")] == ["labels"]  # analyze drew and charged nothing
    assert all(not e.get("sampling_tv") for e in entries)  # exact: no floating-point delta
    assert json.loads(json.dumps(release["dp_event"]))["read_by"] == ["rdp"]


def test_import_audit_and_plan_take_the_mechanism(exact_run, tmp_path, monkeypatch):
    run = exact_run[0]
    assert_imported_once(run, monkeypatch, tmp_path / "other")
    audit = invoke("audit", "--workdir", run, "--trials", 2000, "--seed", 1)
    assert audit.exit_code == 0, audit.output
    assert "permute-and-flip" in audit.output and "no violation found" in audit.output
    plan = invoke("plan", "--mechanism", "exponential", "--queries", 100, "--eps", 2)
    assert plan.exit_code == 0, plan.output
    assert "publishes no sanitised eps" in plan.output and "exact" in plan.output


def test_a_second_round_is_refused_for_a_mechanism_without_a_sanitised_release(exact_run):
    from pate.release.target import check_round2

    line = one_line_error(invoke("label", "--workdir", exact_run[0], "--round", 2), 1)
    assert "publishes none" in line and "permute-and-flip" in line
    config = load_config("tiny", {"aggregation.mechanism": "exponential", "rounds.rounds": 2})
    with pytest.raises(PateError, match="sanitised release"):
        check_round2(config)
    check_round2(load_config("tiny", {"rounds.rounds": 2}))  # lnmax has one


def test_noise_options_that_do_not_belong_are_refused(exact_run):
    line = one_line_error(invoke("label", "--workdir", exact_run[0], "--mechanism", "exponential", "--sigma", 3), 2)
    assert "--sigma" in line and "exponential" in line
