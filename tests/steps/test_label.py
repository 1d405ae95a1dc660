"""`pate label` end to end on the tiny synthetic run, the release's contents, --budget,
and bad input (the run directory is left unchanged)."""

import json
import os

import numpy as np
import pytest

from analysis.bounds import gnmax
from analysis.bounds import lnmax
from analysis.sanitised import lnmax_release
from analysis.mechanisms import registry
from pate.steps import label as label_mod
from pate.release import budget as release_budget
from pate.release import labels as release_labels
from pate.config import AggregationConfig

from conftest import invoke


def snapshot(workdir):
    return {name: os.path.getmtime(os.path.join(workdir, name)) for name in sorted(os.listdir(workdir))}


@pytest.mark.parametrize("args", [
    ["--mechanism", "lnmax", "--gamma", 0.5],
    ["--mechanism", "gnmax", "--sigma", 2.0],
    pytest.param(["--mechanism", "confident-gnmax", "--threshold", 4, "--sigma-threshold", 1.0, "--sigma", 1.0],
                 marks=pytest.mark.slow),  # 15 s
])
def test_label_end_to_end(trained_run, args):
    workdir, _ = trained_run
    result = invoke("label", "--workdir", workdir, "--queries", 60, "--seed", 123, *args)
    assert result.exit_code == 0, result.output
    assert "accuracy of released labels" in result.output and "data-dependent eps" in result.output
    votes = np.load(workdir / "votes.npz")["votes"]
    assert votes.shape == (60, 4) and np.all(votes.sum(axis=1) == 6)
    with np.load(workdir / "labels.npz") as release:
        keys = set(release.files)
        labels, indices = release["labels"], release["indices"]
        mechanism = str(release["mechanism"])
    # The release holds the labels and the mechanism's parameters: no votes, no noise, no seed.
    assert keys <= set(release_labels.RELEASED_KEYS) | {"meta"}
    assert mechanism == args[1]
    assert indices.tolist() == list(range(60)) and labels.shape == (60,)
    assert labels.min() >= -1 and labels.max() < 4
    with np.load(workdir / "labels.npz") as release:
        meta = json.loads(str(release["meta"]))
    ledger = meta.pop("ledger")  # the data set's ledger (pate.store.ledger): a public name
    assert ledger.startswith("synthetic:")  # the source, then a keyed digest of its content
    assert "123" not in json.dumps(meta)
    assert set(meta) <= {"config_hash", "pate_version", "written_at", "research_seed"}
    assert meta["research_seed"] is True  # a seed made the noise: said, never the seed
    # The same seed reproduces the labels; analysis reads the run.
    again = invoke("label", "--workdir", workdir, "--queries", 60, "--seed", 123, "--overwrite", *args)
    assert again.exit_code == 0
    assert np.array_equal(np.load(workdir / "labels.npz")["labels"], labels)
    report = invoke("analyze", "--workdir", workdir, "--release-order", 4)
    assert report.exit_code == 0, report.output


def test_refuses_to_overwrite_and_bad_input_leaves_run_unchanged(trained_run):
    workdir, _ = trained_run
    assert invoke("label", "--workdir", workdir, "--queries", 20, "--seed", 1).exit_code == 0
    before = snapshot(workdir)
    cases = [
        (["--queries", 20], 1, "--overwrite"),
        (["--queries", 500, "--overwrite"], 1, "at most 200"),
        (["--mechanism", "confident-gnmax", "--threshold", 7, "--overwrite"], 1, "above the 6 teachers"),
        (["--gamma", 0, "--overwrite"], 2, "--gamma"),
        (["--sigma", -1, "--mechanism", "gnmax", "--overwrite"], 2, "--sigma"),
        (["--queries", 0, "--overwrite"], 2, "--queries"),
    ]
    for extra, code, needle in cases:
        result = invoke("label", "--workdir", workdir, *extra)
        assert result.exit_code == code, (extra, result.output)
        assert needle in result.output
        assert len(result.output.strip().splitlines()) == 1
        assert snapshot(workdir) == before


def test_label_before_teachers(tmp_path):
    result = invoke("label", "--workdir", tmp_path)
    assert result.exit_code == 1 and "train-teachers" in result.output
    (tmp_path / "config.toml").write_text("")
    result = invoke("label", "--workdir", tmp_path)
    assert result.exit_code == 1 and "train-teachers" in result.output
    assert sorted(os.listdir(tmp_path)) == ["config.toml"]


@pytest.mark.parametrize("mechanism", ["lnmax", "gnmax", "confident-gnmax"])
def test_budget_plan_is_largest_within_budget(mechanism):
    cfg = AggregationConfig(mechanism=mechanism, queries=5000, gamma=0.05, sigma=40.0, threshold=200,
                            sigma_threshold=150.0)
    plan = release_budget.budget_plan(registry.from_config(cfg), cfg.queries, 4.0, 1e-5)
    assert plan.eps <= 4.0
    if mechanism == "lnmax":
        assert lnmax.data_independent_eps(plan.num_queries + 1, 0.05, 1e-5).eps > 4.0
        assert plan.max_answers is None
    elif mechanism == "gnmax":
        assert gnmax.data_independent_eps(plan.num_queries + 1, 40.0, 1e-5).eps > 4.0
    else:
        more = gnmax.data_independent_eps(plan.num_queries, 40.0, 1e-5, sigma_threshold=150.0,
                                          num_answered=plan.max_answers + 1)
        assert plan.max_answers < plan.num_queries or plan.num_queries == 5000
        assert more.eps > 4.0 or plan.max_answers == plan.num_queries


def test_cap_answers():
    labels = np.array([2, -1, 0, 1, -1, 3, 1])
    assert release_labels.cap_answers(labels, 2).tolist() == [2, -1, 0, -1, -1, -1, -1]
    assert release_labels.cap_answers(labels, None) is labels


def test_label_with_budget(trained_run):
    workdir, _ = trained_run
    # The budget covers the labels and the sanitised eps `pate analyze` publishes with them.
    budget = lnmax.data_independent_eps(25, 0.5, 1e-5).eps + lnmax_release.release_eps_cost(0.09, 1e-5) + 1e-9
    result = invoke("label", "--workdir", workdir, "--queries", 100, "--gamma", 0.5, "--budget", budget)
    assert result.exit_code == 0, result.output
    assert "budget" in result.output
    assert np.load(workdir / "labels.npz")["indices"].size == 25
    tiny = invoke("label", "--workdir", workdir, "--gamma", 0.5, "--budget", 0.01, "--overwrite")
    assert tiny.exit_code == 1 and "allows no" in tiny.output
