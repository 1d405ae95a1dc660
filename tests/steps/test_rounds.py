"""`pate label --round 2` (issue 22): the interactive round on a finished round 1 — ridge
heads on the round-1 student's pool-PCA features, one per teacher shard, queries chosen by
the student only, a second release charged to the ledger, the student retrained on both
rounds and a headline that composes both."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat

import numpy as np
import pytest

from analysis.mechanisms import composition
from analysis.planning.rounds import cumulative_headline, diagnostics
from pate.programs import heads
from pate.steps import ledger_import
from pate.store import ledger, rundir
from pate.release.selection import select

from conftest import ROOT, invoke, one_line, own_copy, sigkill_while_staged


QUERIES = 40


@pytest.fixture(scope="module")
def two_rounds(finished_tiny, tmp_path_factory):
    """A copy of the finished tiny run, round 1 imported into a ledger of its own, then
    round 2 (CLI), the student of both rounds and the report of both: made once."""
    base = tmp_path_factory.mktemp("rounds")
    workdir = base / "run"
    shutil.copytree(finished_tiny, workdir)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATE_LEDGER_DIR", str(base / "ledgers"))
        ledger_import.import_run(workdir, echo=lambda *_: None)
        labels1 = (workdir / rundir.LABELS_NPZ).read_bytes()
        student1 = json.loads((workdir / rundir.STUDENT_JSON).read_text())
        release1 = json.loads((workdir / rundir.RELEASE_JSON).read_text())
        calls = {}
        real = heads.fit_pca
        mp.setattr(heads, "fit_pca", lambda x, dim: calls.setdefault("pca", (np.array(x), real(x, dim)))[1])
        out = [invoke("label", "--round", 2, "--workdir", workdir, "--queries", QUERIES, "--seed", 5)]
        out.append(invoke("train-student", "--workdir", workdir, "--no-progress"))
        out.append(invoke("analyze", "--workdir", workdir, "--seed", 6))
        book = ledger.Ledger.for_run(workdir)
        entries = book.entries()
    for r in out:
        assert r.exit_code == 0, r.output
    return dict(workdir=workdir, labels1=labels1, student1=student1, release1=release1, pca_input=calls["pca"][0],
                entries=entries, outputs=[r.output for r in out])


def test_round2_end_to_end(two_rounds):
    w = two_rounds["workdir"]
    assert (w / rundir.LABELS_NPZ).read_bytes() == two_rounds["labels1"]  # round 1's release is kept
    assert stat.S_IMODE(os.stat(w / rundir.VOTES_ROUND2_NPZ).st_mode) == 0o600  # round 2's votes are private
    second = np.load(w / rundir.LABELS_ROUND2_NPZ)
    assert second["indices"].size == QUERIES and "votes" not in second.files
    assert json.loads((w / rundir.STUDENT_ROUND1_JSON).read_text()) == two_rounds["student1"]
    assert json.loads((w / rundir.RELEASE_ROUND1_JSON).read_text()) == two_rounds["release1"]
    student = json.loads((w / rundir.STUDENT_JSON).read_text())
    first = np.load(w / rundir.LABELS_NPZ)
    assert student["rounds"] == 2
    assert student["num_queries"] == first["labels"].size + QUERIES
    assert student["num_labelled"] == int(np.sum(first["labels"] >= 0) + np.sum(second["labels"] >= 0))
    release = json.loads((w / rundir.RELEASE_JSON).read_text())
    assert release["details"]["rounds"] == 2 and math.isfinite(release["eps"])
    assert "round 2:" in two_rounds["outputs"][0]


def test_round2_queries_are_new_and_chosen_by_the_student_alone(two_rounds):
    """The queries are the round-1 student's least sure pool points outside round 1:
    computed here from the student and the pool only, no vote or teacher in sight."""
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.release.selection import student_probs
    from pate.programs.student_training import load_student

    w = two_rounds["workdir"]
    first, second = np.load(w / rundir.LABELS_NPZ), np.load(w / rundir.LABELS_ROUND2_NPZ)
    assert not set(first["indices"].tolist()) & set(second["indices"].tolist())
    config = load_config(w / rundir.CONFIG_TOML)
    splits = split(load_dataset(config.data), config.data.public_size)
    student = load_student(w, record=rundir.STUDENT_ROUND1_JSON, directory=rundir.STUDENT_ROUND1_DIR)
    candidates = np.setdiff1d(np.arange(splits.pool_x.shape[0]), first["indices"])
    probs = student_probs(student.model, student.params, splits.pool_x[candidates])
    assert second["indices"].tolist() == select(probs, candidates, QUERIES, config.rounds.select).tolist()


def test_ledger_has_both_rounds_and_the_headline_composes_them(two_rounds):
    kinds = [(e["kind"], (e.get("mechanism") or {}).get("round")) for e in two_rounds["entries"]]
    assert kinds == [("labels", None), ("sanitised-eps", None), ("labels", 2), ("sanitised-eps", None)]
    w = two_rounds["workdir"]
    release = json.loads((w / rundir.RELEASE_JSON).read_text())
    first = two_rounds["release1"]
    d = release["details"]
    # The data-independent composition of the four releases the ledger charged; each round's
    # own (ex-post) headline beside it, named as such; their sums are not published.
    assert set(d) >= {"eps_round1", "eps_round2"} and d["eps_round1"] == first["release_eps"]
    assert not any(k.startswith(("eps_route", "eps_diagnostic")) for k in d)
    costs = [composition.Cost.from_json(e["cost"]) for e in two_rounds["entries"]]
    independent = composition.compose(costs, d["delta"], conversion="classic").eps
    assert release["release_eps"] == pytest.approx(independent, rel=1e-9)
    # The first figure is the data set's: all four releases composed (never the headline of one).
    assert release["eps"] == release["data_set"]["eps"] == release["data_set"]["cumulative_eps"]
    assert release["data_set"]["releases"] == 4


def test_ledger_import_of_a_two_round_run_charges_both_rounds(two_rounds, tmp_path, monkeypatch):
    """`pate ledger --import` once knew round 1 only: a two-round run imported as 82.1 where
    its own release.json said 116.3. Now both rounds' labels and draws, once."""
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "fresh"))
    w = two_rounds["workdir"]
    written = ledger_import.import_run(w, echo=lambda *_: None)
    assert [e["kind"] for e in written] == ["labels", "labels", "sanitised-eps", "sanitised-eps"]
    assert ledger_import.import_run(w, echo=lambda *_: None) == []  # once
    release = json.loads((w / rundir.RELEASE_JSON).read_text())
    book = ledger.Ledger.for_run(w)
    delta = rundir.RunDir(w).own_config().privacy.delta
    assert book.total(delta).eps == pytest.approx(release["data_set"]["cumulative_eps"], rel=1e-6)


def test_pca_is_fitted_on_the_public_pool_only(two_rounds):
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.programs.student_training import load_student

    w = two_rounds["workdir"]
    config = load_config(w / rundir.CONFIG_TOML)
    splits = split(load_dataset(config.data), config.data.public_size)
    student = load_student(w, record=rundir.STUDENT_ROUND1_JSON, directory=rundir.STUDENT_ROUND1_DIR)
    pool = heads.features(student.model, student.params, splits.pool_x)
    np.testing.assert_allclose(two_rounds["pca_input"], pool, rtol=1e-5, atol=1e-6)


def test_pca_against_numpy_svd():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)) @ rng.normal(size=(6, 6))
    pca = heads.fit_pca(x, 3)
    _, s, vt = np.linalg.svd(x - x.mean(0), full_matrices=False)
    for i in range(3):  # the same directions, up to sign
        assert abs(abs(pca.components[:, i] @ vt[i]) - 1) < 1e-8
    assert pca.scale == pytest.approx(np.sqrt(np.mean(s[:3] ** 2 / 199)))


def test_each_head_is_the_ridge_of_its_own_shard():
    """Head t against a plain numpy ridge of shard t; changing shard j changes head j only."""
    rng = np.random.default_rng(1)
    T, n, k, C, lam = 5, 12, 4, 3, 0.7
    z = rng.normal(size=(T, n, k)).astype(np.float32)
    y = rng.integers(0, C, size=(T, n))
    w, b = (np.asarray(a) for a in heads.fit_heads(z, y, lam, num_classes=C))
    for t in range(T):
        zt = np.concatenate([z[t].astype(np.float64), np.ones((n, 1))], axis=1)
        pen = lam * np.eye(k + 1)
        pen[k, k] = 0.0  # the bias is not penalised
        sol = np.linalg.solve(zt.T @ zt + pen, zt.T @ np.eye(C)[y[t]])
        np.testing.assert_allclose(w[t], sol[:k], atol=2e-4)
        np.testing.assert_allclose(b[t], sol[k], atol=2e-4)
    z2, y2 = z.copy(), y.copy()
    z2[3, 0] += 5.0
    y2[3, 1] = (y2[3, 1] + 1) % C
    w2, b2 = (np.asarray(a) for a in heads.fit_heads(z2, y2, lam, num_classes=C))
    others = [t for t in range(T) if t != 3]
    np.testing.assert_array_equal(w2[others], w[others])
    np.testing.assert_array_equal(b2[others], b[others])
    assert not np.allclose(w2[3], w[3])
    votes = np.asarray(heads.head_votes(w, b, z[0], num_classes=C))
    assert votes.shape == (n, C) and (votes.sum(axis=1) == T).all()


def test_select_against_a_plain_loop():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=50)
    candidates = np.arange(100, 150)
    top = [max(row) for row in probs]
    gap = [sorted(row)[-1] - sorted(row)[-2] for row in probs]
    assert select(probs, candidates, 7, "uncertain").tolist() == [
        candidates[i] for i in sorted(range(50), key=lambda i: top[i])[:7]]
    assert select(probs, candidates, 7, "margin").tolist() == [
        candidates[i] for i in sorted(range(50), key=lambda i: gap[i])[:7]]
    with pytest.raises(ValueError):
        select(probs, candidates, 7, "random")


def _exact_eps(delta_of, delta: float) -> float:
    """The least ε with ``delta_of(ε) <= delta`` (``delta_of`` decreasing), by bisection."""
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if delta_of(mid) <= delta else (mid, hi)
    return hi


def _randomized_response_delta(eps0: float, k: int):
    """δ(ε) of k adaptively composed ε₀-DP answers, exactly: k-fold binary randomized response
    is the worst case (Kairouz, Oh & Viswanath 2015, Theorem 3.3); its privacy loss is
    (k − 2j)ε₀ with probability C(k, j) p^(k−j) (1 − p)^j, p = e^ε₀/(1 + e^ε₀)."""
    p = math.exp(eps0) / (1 + math.exp(eps0))
    terms = [(math.comb(k, j) * p ** (k - j) * (1 - p) ** j, (k - 2 * j) * eps0) for j in range(k + 1)]
    return lambda eps: sum(w * max(0.0, 1 - math.exp(eps - loss)) for w, loss in terms)


def _gaussian_delta(mu: float):
    """δ(ε) of μ-GDP, exactly (Balle & Wang 2018, Theorem 8)."""
    from scipy.stats import norm

    return lambda eps: norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("every, delta_of", [
    ([composition.Cost("pure", {"eps0": 0.1, "count": 30}), composition.Cost("pure", {"eps0": 0.1, "count": 20})],
     _randomized_response_delta(0.1, 50)),
    ([composition.Cost("gaussian", {"mu2": 0.5}), composition.Cost("gaussian", {"mu2": 0.3})],
     _gaussian_delta(math.sqrt(0.8))),
])
def test_headline_of_both_rounds_against_exact_composition(every, delta_of):
    """Small cases whose adaptive composition is known exactly: the published headline is
    never below it (sound) and close to it; its δ adds both rounds' float64-sampler δ."""
    delta = 1e-5
    first, second = {"delta_sampling": 1e-6}, {"delta_sampling": 2e-6}
    got = cumulative_headline(first, second, every, delta, "improved")
    exact = _exact_eps(delta_of, delta)
    assert exact * (1 - 1e-9) <= got.eps <= exact + 0.05, (got.eps, exact)
    assert got.delta == pytest.approx(delta + 3e-6)


def test_headline_of_both_rounds_never_publishes_an_ex_post_sum():
    """Both rounds' own headlines and sanitised RDPs far below the data-independent composition:
    the headline is still the composition; the sums are diagnostics (plain sums, converted once:
    classic ε = ρ + log(1/δ)/(λ − 1)), not the published figure."""
    delta, order = 1e-5, 12.0
    first = {"eps": 0.2, "delta": 1.1e-5, "rdp_sanitized": 0.01, "release_rdp_cost": 0.02, "release_order": order}
    second = {"eps": 0.3, "delta": 1.2e-5, "rdp_sanitized": 0.015, "release_rdp_cost": 0.02, "release_order": order}
    every = [composition.Cost("gaussian", {"mu2": 8.0})] * 2
    got = cumulative_headline(first, second, every, delta, "classic")
    assert got.eps == pytest.approx(composition.compose(every, delta, conversion="classic").eps) and got.eps > 5
    assert got.delta == pytest.approx(delta)
    seen = diagnostics(first, second, delta, "classic")
    assert seen["basic"] == pytest.approx(0.5)
    assert seen["rdp"] == pytest.approx(0.01 + 0.02 + 0.015 + 0.02 + math.log(1 / delta) / (order - 1))
    assert "rdp" not in diagnostics(first, dict(second, release_order=10.0), delta, "classic")  # two orders


# --------------------------------------------------------------------------- bad input


def test_round2_needs_a_finished_round1(trained_run, finished_tiny, tmp_path):
    workdir, _ = trained_run
    line = one_line(r := invoke("label", "--round", 2, "--workdir", workdir, "--queries", 5))
    assert r.exit_code == 1 and "labels.npz" in line
    unanalysed = tmp_path / "unanalysed"
    shutil.copytree(finished_tiny, unanalysed)
    (unanalysed / rundir.RELEASE_JSON).unlink()
    line = one_line(r := invoke("label", "--round", 2, "--workdir", unanalysed, "--queries", 5))
    assert r.exit_code == 1 and "pate analyze" in line
    assert not (unanalysed / rundir.LABELS_ROUND2_NPZ).exists()
    line = one_line(r := invoke("label", "--round", 2, "--workdir", tmp_path / "nothing"))
    assert r.exit_code == 1 and "not a run directory" in line


def test_round2_bad_options(finished_tiny, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished_tiny, run)
    for args, code, words in (
            (["--round", 2, "--queries", 1000], 1, "not queried in round 1"),
            (["--round", 3], 2, "--round"),
            (["--select", "margin"], 2, "--round 2"),
            (["--round", 2, "--gamma", 0.3], 2, "--gamma"),
            (["--round", 2, "--budget", 1.0], 2, "--budget")):
        r = invoke("label", "--workdir", run, *args)
        assert r.exit_code == code and words in one_line(r), (args, r.output)
    assert not (run / rundir.LABELS_ROUND2_NPZ).exists()


def test_round2_queries_default_to_what_the_pool_has_left():
    """The config's [rounds] queries is a cap; --queries is asked exactly (public values only)."""
    from analysis.core.errors import PateError
    from pate.steps.label_round2 import round2_queries

    assert round2_queries(800, None, 100) == 100 and round2_queries(40, None, 100) == 40
    assert round2_queries(800, 100, 100) == 100
    with pytest.raises(PateError, match="only 100 pool points"):
        round2_queries(10, 101, 100)
    with pytest.raises(PateError, match="none is left"):
        round2_queries(800, None, 0)


@pytest.mark.slow  # 8 s
def test_round2_without_options_fits_the_tiny_pool(finished_tiny, tmp_path):
    """`pate label --round 2` with no option on configs/tiny.toml: round 1 left 100 of the 200
    pool points and rounds.queries is 800 by default, so round 2 asks those 100."""
    run = own_copy(finished_tiny, tmp_path / "run")
    r = invoke("label", "--round", 2, "--workdir", run)
    assert r.exit_code == 0, r.output
    second = np.load(run / rundir.LABELS_ROUND2_NPZ)
    first = np.load(run / rundir.LABELS_NPZ)
    assert second["indices"].size == 200 - first["indices"].size == 100


def test_round2_twice_needs_overwrite(two_rounds, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_rounds["workdir"], run)
    r = invoke("label", "--round", 2, "--workdir", run, "--queries", 5)
    assert r.exit_code == 1 and "--overwrite" in one_line(r)
    assert (run / rundir.LABELS_ROUND2_NPZ).read_bytes() == (two_rounds["workdir"] / rundir.LABELS_ROUND2_NPZ
                                                            ).read_bytes()


def test_round2_target_on_an_lnmax_round1_is_refused_in_one_line(finished_tiny, tmp_path):
    """A target for both rounds needs round 1's sanitised RDP at one order (tests/release/test_rounds_target.py
    tests the plan itself)."""
    run = own_copy(finished_tiny, tmp_path / "run")
    text = (run / rundir.CONFIG_TOML).read_text()
    (run / rundir.CONFIG_TOML).write_text(text.replace("target_eps = 0.0", "target_eps = 3.0"))
    assert "target_eps = 3.0" in (run / rundir.CONFIG_TOML).read_text()
    r = invoke("label", "--round", 2, "--workdir", run, "--queries", 5)
    assert r.exit_code == 1 and "GNSS release" in one_line(r), r.output
    assert not (run / rundir.LABELS_ROUND2_NPZ).exists()
    assert json.loads((run / rundir.RELEASE_JSON).read_text())["mechanism"] == "lnmax"


@pytest.mark.slow  # 10 s
def test_student_of_both_rounds_can_start_from_the_round1_student(two_rounds, tmp_path):
    """`[rounds] student_init = "round1"`: the student of both rounds starts from the kept
    round-1 weights (at a learning rate of ~0 it ends there) and trains `student_steps`."""
    from pate.programs.student_training import load_student

    run = own_copy(two_rounds["workdir"], tmp_path / "run")  # with its ledger: a run belongs to one
    text = (run / rundir.CONFIG_TOML).read_text()
    text = text.replace('student_init = "scratch"', 'student_init = "round1"').replace("student_steps = 0",
                                                                                     "student_steps = 3")
    (run / rundir.CONFIG_TOML).write_text(text)
    r = invoke("train-student", "--workdir", run, "--overwrite", "--no-progress", "--set", "student.learning_rate=1e-12")
    assert r.exit_code == 0, r.output
    assert "starting from the round-1 student's weights" in r.output
    assert json.loads((run / rundir.STUDENT_JSON).read_text())["steps"] == 3
    first = load_student(run, record=rundir.STUDENT_ROUND1_JSON, directory=rundir.STUDENT_ROUND1_DIR).params
    both = load_student(run).params
    import jax

    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(both)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    shutil.rmtree(run / rundir.STUDENT_ROUND1_DIR)  # nothing to start from: one line, the student kept
    before = (run / rundir.STUDENT_JSON).read_bytes()
    r = invoke("train-student", "--workdir", run, "--overwrite", "--no-progress")
    assert r.exit_code == 1 and "student-round1" in one_line(r)
    assert (run / rundir.STUDENT_JSON).read_bytes() == before


def test_killed_round2_then_any_command(two_rounds, tmp_path):
    """SIGKILL while `label --round 2 --overwrite` writes its staging folder (private votes
    inside): round 2's release is untouched unless the swap finished, and the next command
    leaves no trace of the killed one."""
    import signal

    run = tmp_path / "run"
    shutil.copytree(two_rounds["workdir"], run)
    labels = (run / rundir.LABELS_ROUND2_NPZ).read_bytes()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATE_LEDGER_DIR": str(tmp_path / "ledgers")}
    staged, code = sigkill_while_staged(["label", "--round", "2", "--workdir", run, "--queries", 5, "--overwrite"],
                                        run, "round2", env, timeout=120)
    assert staged and code == -signal.SIGKILL  # killed while writing, not finished or refused
    assert (run / rundir.LABELS_ROUND2_NPZ).read_bytes() == labels  # the old release is whole
    r = invoke("analyze", "--workdir", run)  # the next command to take the run's lock cleans up
    assert "Traceback" not in r.output
    assert sorted(n for n in os.listdir(run) if n.startswith((".new-", ".old-")) or n.endswith(".tmp")) == []
