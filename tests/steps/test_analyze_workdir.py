"""`pate analyze --workdir`: the report of a labelled run directory."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.bounds import lnmax
from cli import main
from conftest import charged


def make_run(tmp_path, labels_override=None, charge=True):
    """Votes and labels.npz written by hand, the labels charged (`conftest.charged`) unless
    ``charge`` is False (labels the import itself refuses)."""
    rng = np.random.default_rng(0)
    votes = rng.multinomial(50, rng.dirichlet(np.full(10, 0.1)), size=200).astype(np.int32)
    np.savez(tmp_path / "votes.npz", votes=votes)
    indices = np.arange(60)
    labels = votes[indices].argmax(axis=1)
    fields = dict(indices=indices, labels=labels, mechanism=np.array("lnmax"), gamma=np.array(0.1))
    fields.update(labels_override or {})
    np.savez(tmp_path / "labels.npz", **{k: v for k, v in fields.items() if v is not None})
    if charge:
        charged(tmp_path)
    return votes


def test_workdir_report_written(tmp_path):
    votes = make_run(tmp_path)
    result = CliRunner().invoke(main, ["analyze", "--workdir", str(tmp_path), "--seed", "1"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "privacy.json").read_text())
    assert doc["public"]["num_queries"] == 60
    assert doc["private"]["eps_data_dependent"] == pytest.approx(
        lnmax.data_dependent_eps(votes[:60], 0.1, 1e-5).eps)
    assert (tmp_path / "privacy.png").exists()


def test_workdir_skips_unanswered(tmp_path):
    labels = np.zeros(60, dtype=np.int32)
    labels[::2] = -1
    votes = make_run(tmp_path, {"labels": labels})
    result = CliRunner().invoke(main, ["analyze", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "privacy.json").read_text())
    assert doc["public"]["num_queries"] == 30
    assert doc["private"]["eps_data_dependent"] == pytest.approx(
        lnmax.data_dependent_eps(votes[1:60:2], 0.1, 1e-5).eps)


def test_workdir_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["analyze", "--workdir", str(tmp_path / "none")])
    assert result.exit_code == 1 and "run directory" in result.output and "does not exist" in result.output
    assert not (tmp_path / "none").exists()  # a mistyped run directory is not created
    result = runner.invoke(main, ["analyze", "--workdir", str(tmp_path)])
    assert result.exit_code == 1 and "pate label" in result.output
    make_run(tmp_path)
    result = runner.invoke(main, ["analyze", "--workdir", str(tmp_path), "--gamma", "0.3"])
    assert result.exit_code == 2 and "labels.npz" in result.output
    assert not (tmp_path / "privacy.json").exists()
    make_run(tmp_path, {"indices": np.arange(150, 210)}, charge=False)
    result = runner.invoke(main, ["analyze", "--workdir", str(tmp_path)])
    assert result.exit_code == 1 and "index 200" in result.output


@pytest.mark.parametrize("mechanism", ["gnmax", "confident-gnmax"])
def test_workdir_gnmax_reports(tmp_path, mechanism):
    from analysis.bounds import gnmax

    labels = np.arange(60) % 10
    fields = {"mechanism": np.array(mechanism), "sigma": np.array(20.0)}
    if mechanism == "confident-gnmax":
        labels[::3] = -1
        fields.update(threshold=np.array(35.0), sigma_threshold=np.array(10.0))
    votes = make_run(tmp_path, dict(fields, labels=labels))
    result = CliRunner().invoke(main, ["analyze", "--workdir", str(tmp_path), "--release-order", "8"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "privacy.json").read_text())
    if mechanism == "gnmax":
        expected = gnmax.data_dependent_eps(votes[:60], 20.0, 1e-5)
        assert doc["public"]["num_queries"] == 60
    else:
        expected = gnmax.data_dependent_eps(votes[:60], 20.0, 1e-5, threshold=35.0, sigma_threshold=10.0)
        assert doc["public"]["num_answered"] == 40
    assert doc["private"]["eps_data_dependent"] == pytest.approx(expected.eps)
    assert doc["public"]["release_order"] == 8
    assert "eps_sanitized" in doc["public"] and "smooth_sensitivity" in doc["private"]


@pytest.mark.parametrize("mechanism, gnss_beta, expected", [
    ("gnmax", 0.0, 0.1 / 8),  # 0: the 2018 paper's 0.1 / release order, never LNMax's beta
    ("gnmax", 0.004, 0.004),
    ("lnmax", 0.004, 0.07),  # LNMax takes lnmax_beta; gnss_beta is GNMax's alone
])
def test_workdir_takes_one_beta_per_mechanism_from_the_run_config(tmp_path, mechanism, gnss_beta, expected):
    fields = {"mechanism": np.array(mechanism)}
    fields.update({"sigma": np.array(20.0)} if mechanism == "gnmax" else {"gamma": np.array(0.1)})
    (tmp_path / "config.toml").write_text(  # first: the run's config names the ledger its labels are charged to
        f"[privacy]\nrelease_order = 8.0\nlnmax_beta = 0.07\ngnss_beta = {gnss_beta}\n")
    make_run(tmp_path, fields)
    result = CliRunner().invoke(main, ["analyze", "--workdir", str(tmp_path), "--seed", "1"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "release.json").read_text())
    assert doc["details"]["beta"] == pytest.approx(expected)


@pytest.mark.parametrize("override, message", [
    ({"labels": np.r_[np.full(59, 2), 10]}, "10 classes"),  # label 10 of a 10-class histogram
    ({"indices": np.r_[np.arange(59), 0]}, "repeats a pool point"),
    ({"labels": np.r_[np.full(59, 2), -2]}, "-1 = unanswered"),
])
def test_workdir_refuses_a_release_other_readers_refuse(tmp_path, override, message):
    """One validation of labels.npz for every reader (issue 21): an out-of-range label or a
    repeated index is refused by `analyze --workdir` as by train-student (and `pate ledger
    --import`), before any draw."""
    make_run(tmp_path, override, charge=False)
    result = CliRunner().invoke(main, ["analyze", "--workdir", str(tmp_path)])
    assert result.exit_code == 1 and message in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.npz", "votes.npz"]


@pytest.mark.parametrize("record", ["permute-and-flip", "exponential", "gnmax-exact"])
def test_a_second_analyze_of_a_release_without_a_sanitised_draw_reports_it_again(tmp_path, record):
    """Permute-and-flip, the exponential mechanism and exact-coin GNMax draw no sanitised eps, yet
    a second `pate analyze` was refused as if it would draw one again (issue 52). It reports the
    same release again: exit 0, the same headline, no draw, nothing charged."""
    from analysis.mechanisms import exact_gaussian, exponential, permute_flip
    from conftest import run_entries

    made = {"permute-and-flip": permute_flip.PermuteAndFlip(0.5), "exponential": exponential.ExponentialMechanism(0.5),
            "gnmax-exact": exact_gaussian.GNMaxExact(20.0)}[record]
    make_run(tmp_path, {"mechanism": None, "gamma": None, **made.to_arrays()})
    entries = run_entries(tmp_path)
    heads = []
    for _ in range(2):
        result = CliRunner().invoke(main, ["analyze", "--workdir", str(tmp_path)])
        assert result.exit_code == 0, result.output
        heads.append(json.loads((tmp_path / "release.json").read_text())["eps"])
    assert heads[0] == heads[1] and run_entries(tmp_path) == entries
