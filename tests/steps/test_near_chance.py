"""A release expected near chance (`pate.release.outcome`): `pate plan --config`, `pate label`
(from a run's teachers and from `--votes`) and `pate run` refuse it in one line naming the
override, before any training, vote or charge; the override releases it and release.json's
warnings say so; what `pate label` prints holds for the release it then makes; binary tasks
plan a target as ten-class ones do."""

import json
import re

import numpy as np
import pytest

from analysis.planning.simulated_votes import VoteModel
from pate.store import rundir

from conftest import TINY, invoke, one_line, one_line_error

#: configs/tiny.toml with 20 teachers of 10 classes at the default LNMax γ 0.05 (noise scale 20).
TWENTY = ["--set", "data.synthetic_classes=10", "--set", "teachers.num_teachers=20", "--set", "aggregation.gamma=0.05"]
ALLOW = ["--set", "aggregation.allow_near_chance=true"]


def _votes(path, teachers: int, classes: int, seed: int, queries: int = 100):
    """Votes (and their true classes) of the public model, written where `pate label --votes` reads them."""
    votes, truth = VoteModel(teachers, classes).draw_with_truth(seed, queries)
    np.savez(path, votes=votes)
    return truth


def _ledger_kinds(ledger_dir) -> list[str]:
    return [e.get("kind") for p in ledger_dir.rglob("*") if p.is_file() and p.suffix == ".jsonl"
            for e in map(json.loads, p.read_text().splitlines()) if e.get("kind") != "budget"]


def test_plan_refuses_twenty_teachers_at_the_default_gamma_naming_the_override():
    line = one_line_error(invoke("plan", "--config", TINY, *TWENTY), 1)
    assert "near chance" in line and "allow_near_chance" in line and "20 teachers, 10 classes" in line, line
    allowed = invoke("plan", "--config", TINY, *TWENTY, *ALLOW)
    assert allowed.exit_code == 0, allowed.output
    assert "expected outcome: 100 ± 0 of 100 queries answered, label accuracy" in allowed.output
    assert "released anyway" in allowed.output
    fine = invoke("plan", "--config", TINY)  # tiny's own 6 teachers at γ 0.5: said, not refused
    assert fine.exit_code == 0 and "expected outcome:" in fine.output and "near chance" not in fine.output


def test_run_refuses_before_training_and_charges_nothing(tmp_path, ledger_dir):
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress", *TWENTY)
    line = one_line_error(result, 1)
    assert "near chance" in line and "allow_near_chance" in line, line
    assert not (run / rundir.TEACHERS_DIR).exists() and not (run / rundir.TEACHERS_JSON).exists()
    assert _ledger_kinds(ledger_dir) == []


def test_label_votes_refuses_then_the_override_releases_and_release_json_warns(tmp_path, ledger_dir):
    _votes(tmp_path / "v.npz", 20, 10, seed=3)
    args = ["label", "--votes", tmp_path / "v.npz", "--ledger", "sim", "--workdir", tmp_path / "run",
            "--num-classes", 10, "--gamma", 0.05, "--seed", 1]
    line = one_line_error(invoke(*args), 1)
    assert "near chance" in line and "--allow-near-chance" in line, line
    assert not (tmp_path / "run" / rundir.LABELS_NPZ).exists() and _ledger_kinds(ledger_dir) == []
    made = invoke(*args, "--allow-near-chance")
    assert made.exit_code == 0, made.output
    analysed = invoke("analyze", "--workdir", tmp_path / "run")
    assert analysed.exit_code == 0, analysed.output
    warnings = json.loads((tmp_path / "run" / rundir.RELEASE_JSON).read_text())["warnings"]
    said = [w for w in warnings if "near chance" in w]
    assert len(said) == 1 and "20 teachers, 10 classes" in said[0], warnings


def test_label_on_a_run_refuses_before_any_vote(trained_run):
    workdir, _ = trained_run
    result = invoke("label", "--workdir", workdir, "--mechanism", "gnmax", "--sigma", 40)  # σ 40 on 6 teachers
    line = one_line_error(result, 1)
    assert "near chance" in line and "--allow-near-chance" in line, line
    assert not (workdir / rundir.VOTES_NPZ).exists() and not (workdir / rundir.LABELS_NPZ).exists()


@pytest.mark.parametrize("mechanism", [["--mechanism", "lnmax", "--gamma", 0.1],
                                       ["--mechanism", "confident-gnmax", "--threshold", 35, "--sigma-threshold", 8,
                                        "--sigma", 8]])
def test_what_label_prints_holds_for_the_release_it_makes(tmp_path, mechanism):
    """Statistical: votes of the public model the plan simulates (a seed it never drew), released
    by `pate label --votes`; the released labels' accuracy against the model's true classes lies
    within four of the printed spreads (one fresh draw against a mean of eight) of the printed
    expectation."""
    for seed in (11, 12):
        run = tmp_path / f"run{seed}"
        truth = _votes(tmp_path / f"v{seed}.npz", 50, 10, seed=1000 + seed, queries=300)
        made = invoke("label", "--votes", tmp_path / f"v{seed}.npz", "--ledger", f"sim{seed}", "--workdir", run,
                      "--num-classes", 10, "--seed", seed, *mechanism)
        assert made.exit_code == 0, made.output
        found = re.search(r"expected outcome: (\d+) ± (\d+) of 300 queries answered, label accuracy "
                          r"([0-9.]+) ± ([0-9.]+)", made.output)
        assert found, made.output
        answered, answered_spread, accuracy, spread = map(float, found.groups())
        labels = np.load(run / rundir.LABELS_NPZ)["labels"]
        got = labels >= 0
        width = 4.0 * np.sqrt(1 + 1 / 8)
        assert abs(np.mean(labels[got] == truth[got]) - accuracy) <= width * max(spread, 0.005)
        assert abs(got.sum() - answered) <= width * answered_spread + 1.0  # printed to the unit


def test_a_binary_task_plans_a_target_as_ten_classes_do():
    """The target planner refused 2 classes ("needs ... 3 classes"); now it plans them."""
    noise = ["--set", 'aggregation.mechanism="confident-gnmax"', "--set", "aggregation.threshold=4.0",
             "--set", "aggregation.sigma_threshold=2.0", "--set", "aggregation.sigma=2.0"]
    result = invoke("plan", "--config", TINY, "--set", "data.synthetic_classes=2", *noise, "--target-eps", 20)
    assert result.exit_code == 0, result.output
    assert "P[this release's eps <= 20]" in result.output and "2 classes" in result.output
    assert "expected outcome:" in result.output
