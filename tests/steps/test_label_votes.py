"""`pate label --votes`: labels from teachers trained anywhere, through the CLI; the run it
writes analyses unchanged; bad input writes nothing. Also `--accountant pld` for plan and
the budget, and the report's data-independent comparison."""

import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

from analysis.reporting import accountants
from analysis.bounds import gnmax
from analysis.sanitised import gnss
from analysis.bounds import lnmax
from analysis.sanitised import lnmax_release
from analysis.mechanisms import registry
from analysis.mechanisms import noisy_max
from analysis.accounting import pld
from analysis.planning import plan as plan_mod
from analysis.reporting import report as report_mod
from analysis.core.errors import PateError
from pate.store import ledger as ledger_mod
from pate.store.identity import default_directory
from pate.store import rundir
from pate.steps import label as label_mod
from pate.release import budget as release_budget
from pate.release import labels as release_labels
from pate.steps import label_votes as label_votes_mod
from pate.config import AggregationConfig

from conftest import invoke

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIMULATED = ROOT / "examples" / "votes_simulated_250.npz"


def listing(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else None


@pytest.mark.parametrize("args", [
    ["--mechanism", "lnmax", "--gamma", 0.05, "--queries", 100],
    ["--mechanism", "gnmax", "--sigma", 40, "--queries", 300],
    ["--mechanism", "confident-gnmax", "--threshold", 200, "--sigma-threshold", 150, "--sigma", 40],
])
def test_label_votes_then_analyze(tmp_path, args):
    run = tmp_path / "run"
    result = invoke("label", "--votes", SIMULATED, "--ledger", "simulated", "--workdir", run, "--num-classes", 10, "--seed", 5, *args)
    assert result.exit_code == 0, result.output
    assert "tightest" in result.output and "data-dependent eps" in result.output
    votes = np.load(SIMULATED)["votes"]
    assert np.array_equal(np.load(run / "votes.npz")["votes"], votes)
    with np.load(run / "labels.npz") as release:
        keys = set(release.files)
        labels, indices = release["labels"], release["indices"]
        assert str(release["mechanism"]) == args[1]
    assert keys - {"meta"} <= set(release_labels.RELEASED_KEYS)  # no votes, no seed
    meta = json.loads(str(np.load(run / "labels.npz")["meta"]))
    assert meta["config_hash"] is None and meta["ledger"] == "simulated"
    assert rundir.read_npz(run / "labels.npz")["meta"]["research_seed"] is True  # that one was used
    expected = 100 if args[1] == "lnmax" else 300 if args[1] == "gnmax" else votes.shape[0]
    assert indices.tolist() == list(range(expected))
    assert labels.min() >= -1 and labels.max() < 10
    if args[1] != "confident-gnmax":
        # Mostly the plurality at this noise: the labels come from these votes.
        assert np.mean(labels == votes[indices].argmax(axis=1)) > 0.6
    # The same seed reproduces the release.
    again = invoke("label", "--votes", SIMULATED, "--ledger", "simulated", "--workdir", run, "--num-classes", 10, "--seed", 5,
                   "--overwrite", *args)
    assert again.exit_code == 0 and np.array_equal(np.load(run / "labels.npz")["labels"], labels)
    report = invoke("analyze", "--workdir", run, "--release-order", 20)
    assert report.exit_code == 0, report.output
    doc = json.loads((run / "privacy.json").read_text())
    assert doc["public"]["data_independent_headline"] == "pld"
    assert doc["public"]["eps_data_independent_headline"] == doc["public"]["eps_data_independent_pld"]
    assert doc["public"]["eps_data_independent_headline"] <= doc["public"]["eps_data_independent"]


def test_research_seed_is_recorded_never_the_seed(tmp_path):
    """A seed makes the noise removable by whoever has it: labels.npz and release.json say
    `research_seed: true` when one was used for the labels or for the release (never the
    seed), and nothing when none was."""
    seed = 2**100 + 12345

    def labelled(name, *extra):
        run = tmp_path / name
        result = invoke("label", "--votes", SIMULATED, "--ledger", "simulated", "--workdir", run, "--num-classes", 10,
                        "--mechanism", "gnmax", "--sigma", 40, "--queries", 200, *extra)
        assert result.exit_code == 0, result.output
        return run

    def analysed(run, *extra):
        result = invoke("analyze", "--workdir", run, *extra)
        assert result.exit_code == 0, result.output
        return json.loads((run / "release.json").read_text()), result.output

    real = labelled("real")
    assert "research_seed" not in (rundir.read_npz(real / "labels.npz").get("meta") or {})
    release, output = analysed(real)
    assert "research_seed" not in release and "research seed" not in output
    seeded = labelled("seeded", "--seed", seed)
    assert rundir.read_npz(seeded / "labels.npz")["meta"]["research_seed"] is True
    release, output = analysed(seeded)  # the release's own noise is fresh; the labels' was not
    assert release["research_seed"] is True and "research seed" in output
    assert any("research seed" in w for w in release["warnings"])
    release, _ = analysed(labelled("release-seeded"), "--seed", seed)
    assert release["research_seed"] is True
    out = tmp_path / "votes-release.json"
    result = invoke("analyze", "--votes", SIMULATED, "--ledger", "ext", "--mechanism", "gnmax", "--sigma", 40, "--queries", 200,
                    "--release-json", out, "--seed", seed)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["research_seed"] is True
    for path in [*tmp_path.rglob("*")]:
        if path.is_file():
            assert str(seed) not in path.read_bytes().decode("latin-1"), path


def test_label_votes_from_predicted_labels_with_indices_and_budget(tmp_path):
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 5, size=80)
    preds = np.where(rng.random((30, 80)) < 0.8, truth, rng.integers(0, 5, size=(30, 80)))
    preds[:, 0] = 0  # class 4 may be absent from some columns; --num-classes keeps it
    np.save(tmp_path / "preds.npy", preds)
    order = rng.permutation(80)
    np.save(tmp_path / "order.npy", order)
    # The budget covers the labels and the sanitised eps `pate analyze` publishes with them.
    budget = plan_mod.published_eps(noisy_max.GNMax(sigma=8.0), 40, 1e-5)[0] + 1e-9
    run = tmp_path / "run"
    result = invoke("label", "--votes", tmp_path / "preds.npy", "--ledger", "preds", "--input-is-labels", "--num-classes", 6,
                    "--workdir", run, "--mechanism", "gnmax", "--sigma", 8, "--indices", tmp_path / "order.npy",
                    "--budget", budget, "--accountant", "pld", "--seed", 1)
    assert result.exit_code == 0, result.output
    votes = np.load(run / "votes.npz")["votes"]
    assert votes.shape == (80, 6) and np.all(votes.sum(axis=1) == 30) and np.all(votes[:, 5] == 0)
    release = np.load(run / "labels.npz")
    assert release["indices"].tolist() == order[:40].tolist()  # the budget allows exactly 40 answers
    assert np.mean(release["labels"] == truth[order[:40]]) > 0.8
    assert invoke("analyze", "--workdir", run, "--release-order", 10).exit_code == 0


def published_by_hand(mechanism, queries, answers=None, accountant="rdp", delta=1e-5):
    """The data-independent eps with the release, composed here from the report's pieces:
    LNMax the labels' eps plus the smooth-sensitivity release's cost (beta 0.09); GNMax the
    labels' RDP curve with the GNSS release at its order (0.2 of RDP, beta 0.1/order)."""
    if mechanism == "lnmax":
        labels = (pld.lnmax_eps(queries, 0.05, delta).eps if accountant == "pld"
                  else lnmax.data_independent_eps(queries, 0.05, delta).eps)
        return labels + lnmax_release.release_eps_cost(0.09, delta)
    kw = dict(sigma_threshold=150.0, num_answered=answers) if mechanism == "confident-gnmax" else {}
    curve = gnmax.data_independent_eps(queries, 40.0, delta, **kw)
    beta, sigma_ss = gnss.gnss_parameters(curve.order, None, 0.2)
    return gnss.gnss_headline_independent(curve, beta, sigma_ss, delta, "classic")[0]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("mechanism", ["lnmax", "gnmax", "confident-gnmax"])
def test_budget_covers_the_labels_and_the_published_release(mechanism, accountant):
    """`--budget B` plans against what is published: the labels and the sanitised eps of
    `pate analyze`. Within B, and one more query (answer, for Confident-GNMax) would not be."""
    from pate.config import PrivacyConfig

    cfg = AggregationConfig(mechanism=mechanism, queries=5000, gamma=0.05, sigma=40.0, threshold=200,
                            sigma_threshold=150.0)
    # LNMax's release costs 3.44 since it publishes an upper bound (issue 51): a budget of 4 left room for no answer
    budget = 6.0 if mechanism == "lnmax" else 4.0
    plan = release_budget.budget_plan(registry.from_config(cfg), cfg.queries, budget, 1e-5, accountant=accountant,
                                      privacy=PrivacyConfig())
    if mechanism == "confident-gnmax":
        total = published_by_hand(mechanism, plan.num_queries, plan.max_answers)
        assert plan.max_answers < plan.num_queries
        more = published_by_hand(mechanism, plan.num_queries, plan.max_answers + 1)
    else:
        total = published_by_hand(mechanism, plan.num_queries, accountant=accountant)
        more = published_by_hand(mechanism, plan.num_queries + 1, accountant=accountant)
    assert plan.eps_published == pytest.approx(total, rel=1e-9)
    assert plan.eps < total <= budget < more
    assert plan.delta_published == (2e-5 if mechanism == "lnmax" else 1e-5)


def test_budget_bounds_the_published_headline_and_both_paths_say_so(tmp_path, trained_run):
    """The measured case: GNMax at sigma 40 on the simulated votes with `--budget 2` published a
    headline of 2.29 when the budget covered the labels only. Now release.json stays within
    it, and `pate label` from a run's teachers prints the same line as `--votes`."""
    run = tmp_path / "from-votes"
    result = invoke("label", "--votes", SIMULATED, "--ledger", "simulated", "--workdir", run, "--num-classes", 10,
                    "--mechanism", "gnmax", "--sigma", 40, "--budget", 2)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("budget eps 2 (rdp): "))
    assert "for the labels and the sanitised eps `pate analyze` publishes with them" in line
    assert invoke("analyze", "--workdir", run).exit_code == 0
    assert json.loads((run / "release.json").read_text())["eps"] <= 2.0
    workdir, _ = trained_run
    own = invoke("label", "--workdir", workdir, "--mechanism", "gnmax", "--sigma", 40, "--budget", 2,
                 "--allow-near-chance")  # σ 40 on the tiny run's 6 teachers: near chance, released on purpose
    assert own.exit_code == 0, own.output
    mine = next(x for x in own.output.splitlines() if x.startswith("budget eps 2 (rdp): "))
    numbers = re.compile(r"[0-9][0-9.e-]*")
    assert numbers.sub("#", mine) == numbers.sub("#", line)


def test_label_votes_python_api_takes_arrays(tmp_path):
    votes = np.load(SIMULATED)["votes"][:50]
    out = label_votes_mod.label_votes(votes, tmp_path / "run", num_classes=10, mechanism="gnmax", sigma=30.0,
                                      seed=2, ledger="simulated", echo=lambda *_: None)
    assert out.num_queries == 50 and out.num_answered == 50 and out.labels.dtype == np.int32
    assert np.array_equal(np.load(tmp_path / "run" / "labels.npz")["labels"], out.labels)


def test_in_memory_votes_must_name_their_data_set(tmp_path):
    """All arrays once shared one ledger, ``votes:in-memory``: two data sets' releases were
    composed together, and one data set's spread over it with others'. Now an array names
    its data set or is refused, before anything is written."""
    votes = np.load(SIMULATED)["votes"][:50]
    with pytest.raises(PateError, match="in-memory votes need the name"):
        label_votes_mod.label_votes(votes, tmp_path / "run", num_classes=10, mechanism="gnmax", sigma=30.0,
                                    echo=lambda *_: None)
    assert not (tmp_path / "run" / "labels.npz").exists()


def test_votes_unnamed_are_refused_and_a_copy_of_pates_votes_charges_its_data_set(tmp_path):
    """Votes once charged ``votes:<path>``: a copy of the file started a fresh ledger. Now a
    votes.npz written by pate carries its data set, so a copy anywhere charges that ledger,
    and a file that names no data set needs --ledger."""
    refused = invoke("label", "--votes", SIMULATED, "--workdir", tmp_path / "r0", "--num-classes", 10,
                     "--gamma", 0.05, "--queries", 20)
    assert refused.exit_code == 1 and "pass --ledger NAME" in refused.output
    assert not (tmp_path / "r0").exists()
    first = invoke("label", "--votes", SIMULATED, "--ledger", "simulated", "--workdir", tmp_path / "r1",
                   "--num-classes", 10, "--gamma", 0.05, "--queries", 20)
    assert first.exit_code == 0, first.output
    copy = tmp_path / "elsewhere" / "copied.npz"
    copy.parent.mkdir()
    shutil.copy(tmp_path / "r1" / "votes.npz", copy)
    second = invoke("label", "--votes", copy, "--workdir", tmp_path / "r2", "--num-classes", 10,
                    "--gamma", 0.05, "--queries", 20)
    assert second.exit_code == 0, second.output
    book = ledger_mod.Ledger("simulated", default_directory())
    assert [e["kind"] for e in book.entries()] == ["labels", "labels"]
    other = invoke("label", "--votes", copy, "--ledger", "another", "--workdir", tmp_path / "r3",
                   "--num-classes", 10, "--gamma", 0.05, "--queries", 20, "--overwrite")
    assert other.exit_code == 1 and "would charge another ledger" in other.output


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
    first = invoke("label", "--votes", SIMULATED, "--ledger", "simulated", "--workdir", run, "--num-classes", 10, "--gamma", 0.05,
                   "--queries", 20)
    assert first.exit_code == 0
    before = {n: (run / n).read_bytes() for n in listing(run)}
    result = invoke("label", "--votes", SIMULATED, "--ledger", "simulated", "--workdir", run, *extra)
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
    result = invoke("label", "--votes", tmp_path / "v.npy", "--ledger", "v", "--workdir", run, "--gamma", 0.1, *args)
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
    from analysis.planning import plan as plan_mod

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
    by_rdp = release_budget.budget_plan(registry.from_config(cfg), cfg.queries, 4.0, 1e-5)
    by_pld = release_budget.budget_plan(registry.from_config(cfg), cfg.queries, 4.0, 1e-5, accountant="pld")
    assert by_pld.eps <= 4.0
    if mechanism == "confident-gnmax":
        assert (by_pld.num_queries, by_pld.max_answers) >= (by_rdp.num_queries, by_rdp.max_answers)
        more = pld.gnmax_eps(by_pld.num_queries, 40.0, 1e-5, sigma_threshold=150.0,
                             num_answered=by_pld.max_answers + 1).eps
        assert more > 4.0 or by_pld.max_answers == by_pld.num_queries
    else:
        assert by_pld.num_queries > by_rdp.num_queries
        more = (pld.lnmax_eps(by_pld.num_queries + 1, 0.05, 1e-5) if mechanism == "lnmax"
                else pld.gnmax_eps(by_pld.num_queries + 1, 40.0, 1e-5))
        assert more.eps > 4.0


# ------------------------------------------------------------------ report items


def test_data_independent_items_mark_the_smallest():
    items = {i.key: i for i in accountants.data_independent_items("gnmax", 1000, 1e-5, sigma=100.0)}
    assert round(items["eps_data_independent_classic"].value, 4) == 2.2478
    assert round(items["eps_data_independent_improved"].value, 4) == 1.9165
    assert round(items["eps_data_independent_pld"].value, 4) == 1.7601
    assert items["data_independent_headline"].value == "pld"
    assert items["eps_data_independent_headline"].value == items["eps_data_independent_pld"].value
    assert all(i.public for i in items.values())
    ln = {i.key: i.value for i in accountants.data_independent_items("lnmax", 100, 1e-5, gamma=0.05)}
    assert ln["eps_data_independent_moments"] == pytest.approx(lnmax.data_independent_eps(100, 0.05, 1e-5).eps)
    assert ln["data_independent_headline"] == "pld" and round(ln["eps_data_independent_headline"], 3) == 4.307
    cg = {i.key: i.value for i in accountants.data_independent_items(
        "confident-gnmax", 500, 1e-5, sigma=40.0, sigma_threshold=150.0, max_answers=100)}
    assert cg["eps_data_independent_classic"] == pytest.approx(gnmax.data_independent_eps(
        500, 40.0, 1e-5, sigma_threshold=150.0, num_answered=100).eps)
    assert cg["eps_data_independent_headline"] == min(cg["eps_data_independent_classic"],
                                                      cg["eps_data_independent_improved"],
                                                      cg["eps_data_independent_pld"])
