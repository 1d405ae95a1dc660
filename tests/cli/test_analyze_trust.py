"""What `pate analyze` publishes and prints (issue 44): every published delta includes every
float64 sampler's delta, and private figures reach the terminal only where the user asks for
research output (a private report file or --show-private), marked as such."""

from __future__ import annotations

import json

import numpy as np

from analysis.core.noise import delta_of_sampling
from analysis.mechanisms import registry

from conftest import charged, invoke


def _small_ensemble_votes(path, rows: int = 100):
    """6 teachers, 4 classes: at sigma 3 the float64 Gaussian's delta reaches 1."""
    rng = np.random.default_rng(0)
    votes = rng.multinomial(6, rng.dirichlet(np.full(4, 0.5)), size=rows)
    np.savez(path, votes=votes)
    return votes


def test_analyze_votes_publishes_the_samplers_delta_of_labels_the_ledger_never_charged(tmp_path):
    _small_ensemble_votes(tmp_path / "votes.npz")
    result = invoke("analyze", "--votes", tmp_path / "votes.npz", "--ledger", "ext", "--mechanism", "gnmax",
                    "--sigma", 3, "--release-json", tmp_path / "release.json", "--seed", 1)
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "release.json").read_text())
    assert doc["release_delta"] == 1.0  # the release's own delta: the float64 sampler's makes it 1
    assert doc["delta"] == 1.0 and doc["data_set"]["cumulative_delta"] == 1.0, doc["data_set"]
    assert "NOTHING" in doc["data_set"].get("warning", "")


def test_analyze_workdir_publishes_the_samplers_delta_of_imported_labels(tmp_path):
    """Labels made by hand are refused until charged (`pate ledger --import`, which records
    their float64 sampler's total variation): then the published delta counts it."""
    votes = _small_ensemble_votes(tmp_path / "votes.npz")
    np.savez(tmp_path / "labels.npz", indices=np.arange(100), labels=votes.argmax(axis=1),
             mechanism=np.array("lnmax"), gamma=np.array(0.5))
    charged(tmp_path)
    result = invoke("analyze", "--workdir", tmp_path, "--seed", 1)
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "release.json").read_text())
    data_set = doc["data_set"]
    tv = registry.from_options("lnmax", gamma=0.5).sampling_tv(100, 4)
    assert tv > 0
    # the cumulative delta counts the labels' float64 sampler at the cumulative eps
    assert data_set["cumulative_delta"] >= min(1.0, 2e-5 + delta_of_sampling(tv, data_set["cumulative_eps"])) * (1 - 1e-9)
    assert doc["delta"] >= min(doc["release_delta"], data_set["cumulative_delta"])


def _votes(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "votes.npz", votes=rng.multinomial(50, rng.dirichlet(np.full(4, 0.3)), size=60))
    return tmp_path / "votes.npz"


def test_analyze_votes_prints_no_private_figure_unless_asked(tmp_path):
    result = invoke("analyze", "--votes", _votes(tmp_path), "--gamma", 0.1)
    assert result.exit_code == 0, result.output
    assert "NO (private)" not in result.output and "data-dependent eps" not in result.output.split("withheld")[0]
    assert "best moment" not in result.output
    assert "--show-private" in result.output  # says how to get them, and what they are
    asked = invoke("analyze", "--votes", _votes(tmp_path), "--gamma", 0.1, "--show-private", "--ledger", "ext")
    assert asked.exit_code == 0, asked.output
    assert asked.output.startswith("PRIVATE RESEARCH OUTPUT")
    assert "data-dependent eps" in asked.output and "NO (private)" in asked.output


def test_private_figures_shown_on_the_terminal_are_marked_in_the_ledger(tmp_path):
    """`analyze --votes --show-private` prints data-dependent values: as `plan --votes
    --on-private-votes`, the votes' ledger records it (every later release.json then says
    parameters_chosen_on_private_data); unnamed votes need --ledger for it, as plan's do."""
    from pate.store.ledger import Ledger

    line = invoke("analyze", "--votes", _votes(tmp_path), "--gamma", 0.1, "--show-private")
    assert line.exit_code == 1 and "--ledger" in line.output, line.output
    assert not Ledger("ext").exists()
    asked = invoke("analyze", "--votes", _votes(tmp_path), "--gamma", 0.1, "--show-private", "--ledger", "ext")
    assert asked.exit_code == 0, asked.output
    assert [e["kind"] for e in Ledger("ext").entries()] == ["private-tuning"] and Ledger("ext").tuned_on_private_data()
    plain = invoke("analyze", "--votes", _votes(tmp_path), "--gamma", 0.1, "--ledger", "other")
    assert plain.exit_code == 0 and not Ledger("other").exists()  # nothing private shown, nothing marked
