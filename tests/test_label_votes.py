"""`pate label --votes`: labels from teachers trained anywhere, through the CLI; the run it
writes analyses unchanged; bad input writes nothing. Also `--accountant pld` for plan and
the budget, and the report's data-independent comparison."""

import json
import os
import pathlib

import numpy as np
import pytest
from click.testing import CliRunner

from analysis import gnmax, lnmax, pld
from analysis import report as report_mod
from cli import main
from pate.steps import label as label_mod
from pate.config import AggregationConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIMULATED = ROOT / "examples" / "votes_simulated_250.npz"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def listing(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else None


@pytest.mark.parametrize("args", [
    ["--mechanism", "lnmax", "--gamma", 0.05, "--queries", 100],
    ["--mechanism", "gnmax", "--sigma", 40, "--queries", 300],
    ["--mechanism", "confident-gnmax", "--threshold", 200, "--sigma-threshold", 150, "--sigma", 40],
])
def test_label_votes_then_analyze(tmp_path, args):
    run = tmp_path / "run"
    result = invoke("label", "--votes", SIMULATED, "--workdir", run, "--num-classes", 10, "--seed", 5, *args)
    assert result.exit_code == 0, result.output
    assert "tightest" in result.output and "data-dependent eps" in result.output
    votes = np.load(SIMULATED)["votes"]
    assert np.array_equal(np.load(run / "votes.npz")["votes"], votes)
    with np.load(run / "labels.npz") as release:
        keys = set(release.files)
        labels, indices = release["labels"], release["indices"]
        assert str(release["mechanism"]) == args[1]
    assert keys <= set(label_mod.RELEASED_KEYS)  # no votes, no seed, no meta from a config
    expected = 100 if args[1] == "lnmax" else 300 if args[1] == "gnmax" else votes.shape[0]
    assert indices.tolist() == list(range(expected))
    assert labels.min() >= -1 and labels.max() < 10
    if args[1] != "confident-gnmax":
        # Mostly the plurality at this noise: the labels come from these votes.
        assert np.mean(labels == votes[indices].argmax(axis=1)) > 0.6
    # The same seed reproduces the release.
    again = invoke("label", "--votes", SIMULATED, "--workdir", run, "--num-classes", 10, "--seed", 5,
                   "--overwrite", *args)
    assert again.exit_code == 0 and np.array_equal(np.load(run / "labels.npz")["labels"], labels)
    report = invoke("analyze", "--workdir", run, "--release-order", 20)
    assert report.exit_code == 0, report.output
    doc = json.loads((run / "privacy.json").read_text())
    assert doc["public"]["data_independent_headline"] == "pld"
    assert doc["public"]["eps_data_independent_headline"] == doc["public"]["eps_data_independent_pld"]
    assert doc["public"]["eps_data_independent_headline"] <= doc["public"]["eps_data_independent"]


def test_label_votes_from_predicted_labels_with_indices_and_budget(tmp_path):
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 5, size=80)
    preds = np.where(rng.random((30, 80)) < 0.8, truth, rng.integers(0, 5, size=(30, 80)))
    preds[:, 0] = 0  # class 4 may be absent from some columns; --num-classes keeps it
    np.save(tmp_path / "preds.npy", preds)
    order = rng.permutation(80)
    np.save(tmp_path / "order.npy", order)
    budget = pld.gnmax_eps(40, 8.0, 1e-5).eps + 1e-9
    run = tmp_path / "run"
    result = invoke("label", "--votes", tmp_path / "preds.npy", "--input-is-labels", "--num-classes", 6,
                    "--workdir", run, "--mechanism", "gnmax", "--sigma", 8, "--indices", tmp_path / "order.npy",
                    "--budget", budget, "--accountant", "pld", "--seed", 1)
    assert result.exit_code == 0, result.output
    votes = np.load(run / "votes.npz")["votes"]
    assert votes.shape == (80, 6) and np.all(votes.sum(axis=1) == 30) and np.all(votes[:, 5] == 0)
    release = np.load(run / "labels.npz")
    assert release["indices"].tolist() == order[:40].tolist()  # the budget allows exactly 40 answers
    assert np.mean(release["labels"] == truth[order[:40]]) > 0.8
    assert invoke("analyze", "--workdir", run, "--release-order", 10).exit_code == 0


def test_label_votes_python_api_takes_arrays(tmp_path):
    votes = np.load(SIMULATED)["votes"][:50]
    out = label_mod.label_votes(votes, tmp_path / "run", num_classes=10, mechanism="gnmax", sigma=30.0,
                                seed=2, echo=lambda *_: None)
    assert out.num_queries == 50 and out.num_answered == 50 and out.labels.dtype == np.int32
    assert np.array_equal(np.load(tmp_path / "run" / "labels.npz")["labels"], out.labels)


@pytest.mark.parametrize("extra, code, needle", [
    (["--num-classes", 10, "--gamma", 0.05], 1, "already holds"),  # existing release, no --overwrite
    (["--gamma", 0.05], 2, "--num-classes"),
    (["--num-classes", 12, "--gamma", 0.05, "--overwrite"], 1, "--num-classes is 12"),
    (["--num-classes", 10, "--overwrite"], 1, "--gamma"),
    (["--num-classes", 10, "--mechanism", "gnmax", "--sigma", 5, "--gamma", 1, "--overwrite"], 1, "--gamma"),
    (["--num-classes", 10, "--mechanism", "confident-gnmax", "--threshold", 300, "--sigma-threshold", 1,
      "--sigma", 1, "--overwrite"], 1, "above the 250 teachers"),
    (["--num-classes", 10, "--gamma", 0.05, "--queries", 5000, "--overwrite"], 1, "--queries 5000"),
    (["--num-classes", 10, "--gamma", 0.05, "--budget", 0.001, "--overwrite"], 1, "allows no"),
])
def test_bad_input_one_line_nothing_written(tmp_path, extra, code, needle):
    run = tmp_path / "run"
    first = invoke("label", "--votes", SIMULATED, "--workdir", run, "--num-classes", 10, "--gamma", 0.05,
                   "--queries", 20)
    assert first.exit_code == 0
    before = {n: (run / n).read_bytes() for n in listing(run)}
    result = invoke("label", "--votes", SIMULATED, "--workdir", run, *extra)
    assert result.exit_code == code, result.output
    assert needle in result.output and len(result.output.strip().splitlines()) == 1
    assert {n: (run / n).read_bytes() for n in listing(run)} == before


def _one_row_short(v):
    v = v.copy()
    v[3, np.argmax(v[3])] -= 1
    return v


@pytest.mark.parametrize("make, args, needle", [
    (_one_row_short, [], "not summing to"),
    (lambda v: np.array([[0, 1, 2, 3]] * 5), ["--input-is-labels", "--num-classes", 3], "up to class"),
    (lambda v: v.astype(float) + 0.5, [], "fractional"),
])
def test_bad_votes_write_nothing(tmp_path, make, args, needle):
    np.save(tmp_path / "v.npy", make(np.load(SIMULATED)["votes"][:20]))
    run = tmp_path / "run"
    if "--num-classes" not in args:
        args = args + ["--num-classes", 10]
    result = invoke("label", "--votes", tmp_path / "v.npy", "--workdir", run, "--gamma", 0.1, *args)
    assert result.exit_code == 1, result.output
    assert needle in result.output and len(result.output.strip().splitlines()) == 1
    assert not run.exists()


def test_votes_only_options_need_votes(tmp_path):
    result = invoke("label", "--workdir", tmp_path, "--num-classes", 3)
    assert result.exit_code == 2 and "only with --votes" in result.output
    assert listing(tmp_path) == []


# ------------------------------------------------------------------ --accountant pld


@pytest.mark.parametrize("mechanism, extra", [("lnmax", {}), ("gnmax", {}),
                                              ("confident-gnmax", dict(threshold=200, num_answered=300))])
def test_plan_pld_is_the_least_noise_within_budget(mechanism, extra):
    from analysis import plan as plan_mod

    p = plan_mod.plan(mechanism, 1000, 2.0, 1e-5, accountant="pld", **extra)
    rdp = plan_mod.plan(mechanism, 1000, 2.0, 1e-5, **extra)
    assert p.conversion == "pld" and p.eps <= 2.0
    if mechanism == "lnmax":
        gamma = p.noise["gamma"]
        assert pld.lnmax_eps(1000, gamma, 1e-5).eps == pytest.approx(p.eps) and p.eps <= 2.0
        assert pld.lnmax_eps(1000, gamma * (1 + 1e-5), 1e-5).eps > 2.0
        assert gamma > rdp.noise["gamma"]  # the tighter accountant allows less noise
    else:
        sigma = p.noise["sigma"]
        kw = {} if mechanism == "gnmax" else dict(sigma_threshold=5 * sigma, num_answered=300)
        assert pld.gnmax_eps(1000, sigma, 1e-5, **kw).eps <= 2.0
        kw_less = {} if mechanism == "gnmax" else dict(sigma_threshold=5 * sigma / (1 + 1e-5), num_answered=300)
        assert pld.gnmax_eps(1000, sigma / (1 + 1e-5), 1e-5, **kw_less).eps > 2.0
        assert sigma < rdp.noise["sigma"]
    assert "PLD accountant" in plan_mod.render(p)


def test_cli_plan_accountant(tmp_path):
    r = invoke("plan", "--mechanism", "gnmax", "--queries", 1000, "--eps", 2, "--accountant", "pld")
    assert r.exit_code == 0 and "PLD accountant" in r.output and "sigma            89.166" in r.output
    bad = invoke("plan", "--mechanism", "gnmax", "--queries", 1000, "--eps", 2, "--accountant", "x")
    assert bad.exit_code == 2


@pytest.mark.parametrize("mechanism", ["lnmax", "gnmax", "confident-gnmax"])
def test_budget_plan_pld_allows_more_and_stays_within(mechanism):
    cfg = AggregationConfig(mechanism=mechanism, queries=5000, gamma=0.05, sigma=40.0, threshold=200,
                            sigma_threshold=150.0)
    by_rdp = label_mod.budget_plan(cfg, 4.0, 1e-5)
    by_pld = label_mod.budget_plan(cfg, 4.0, 1e-5, accountant="pld")
    assert by_pld.eps <= 4.0
    if mechanism == "confident-gnmax":
        assert (by_pld.num_queries, by_pld.max_answers) >= (by_rdp.num_queries, by_rdp.max_answers)
        more = pld.gnmax_eps(by_pld.num_queries, 40.0, 1e-5, sigma_threshold=150.0,
                             num_answered=by_pld.max_answers + 1).eps
        assert more > 4.0 or by_pld.max_answers == by_pld.num_queries
    else:
        assert by_pld.num_queries > by_rdp.num_queries
        kw = dict(gamma=0.05) if mechanism == "lnmax" else dict(sigma=40.0)
        assert pld.data_independent_eps(mechanism, by_pld.num_queries + 1, 1e-5, **kw).eps > 4.0


# ------------------------------------------------------------------ report items


def test_data_independent_items_mark_the_smallest():
    items = {i.key: i for i in report_mod.data_independent_items("gnmax", 1000, 1e-5, sigma=100.0)}
    assert round(items["eps_data_independent_classic"].value, 4) == 2.2478
    assert round(items["eps_data_independent_improved"].value, 4) == 1.9165
    assert round(items["eps_data_independent_pld"].value, 4) == 1.7601
    assert items["data_independent_headline"].value == "pld"
    assert items["eps_data_independent_headline"].value == items["eps_data_independent_pld"].value
    assert all(i.public for i in items.values())
    ln = {i.key: i.value for i in report_mod.data_independent_items("lnmax", 100, 1e-5, gamma=0.05)}
    assert ln["eps_data_independent_moments"] == pytest.approx(lnmax.data_independent_eps(100, 0.05, 1e-5).eps)
    assert ln["data_independent_headline"] == "pld" and round(ln["eps_data_independent_headline"], 3) == 4.307
    cg = {i.key: i.value for i in report_mod.data_independent_items(
        "confident-gnmax", 500, 1e-5, sigma=40.0, sigma_threshold=150.0, max_answers=100)}
    assert cg["eps_data_independent_classic"] == pytest.approx(gnmax.data_independent_eps(
        500, 40.0, 1e-5, sigma_threshold=150.0, num_answered=100).eps)
    assert cg["eps_data_independent_headline"] == min(cg["eps_data_independent_classic"],
                                                      cg["eps_data_independent_improved"],
                                                      cg["eps_data_independent_pld"])
