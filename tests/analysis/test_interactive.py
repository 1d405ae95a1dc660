"""Interactive-GNMax (issue 22; the 2018 paper's Algorithm 2): the threshold step of
Confident-GNMax on the student's check max_j (n_j − ⌊T·p_j⌋). Its statistic against a plain
loop and brute force (range, replace-one sensitivity), P[answered] against Monte Carlo of the
aggregator, the joint bound against the exact Rényi divergence of the released pair, the
smooth-sensitivity profile against brute-force local sensitivities at every distance."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from analysis.bounds import gnmax as g
from analysis.sanitised import gnmax_sensitivity
from analysis.core.errors import PateError
from analysis.bounds.interactive import check_offsets, check_statistic
from analysis.core.noise import NoiseSource
from pate.release import aggregation

from conftest import invoke, one_line
from conftest import vote_histograms as all_histograms, vote_neighbours as neighbours
from test_gnmax import gnmax_probs


def loop_statistic(h, o):
    return max(h[j] - o[j] for j in range(len(h)))


def offsets_up_to(T, m):
    """Every offset row of m whole numbers summing to at most T."""
    return [o for o in itertools.product(range(T + 1), repeat=m) if sum(o) <= T]


def test_statistic_plain_loop_range_and_replace_one_sensitivity_brute_force():
    T, m = 5, 3
    H = list(all_histograms(T, m))
    O = offsets_up_to(T, m)
    hs = np.array([h for h in H for _ in O])
    os_ = np.array([o for _ in H for o in O])
    got = check_statistic(hs, os_)
    assert got.tolist() == [loop_statistic(h, o) for h, o in zip(hs.tolist(), os_.tolist())]
    assert got.min() == 0 and got.max() == T  # both ends reached, nothing outside
    moved = 0
    for h in H:
        for o in O:
            s = loop_statistic(h, o)
            for hp in neighbours(h):
                d = abs(loop_statistic(hp, o) - s)
                assert d <= 1
                moved = max(moved, d)
    assert moved == 1
    # without offsets: the top vote count
    assert check_statistic(np.array(H)).tolist() == [max(h) for h in H]


def test_check_offsets_floor_and_sum():
    p = np.array([[0.61, 0.29, 0.1], [1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 1.0]])
    o = check_offsets(p, 10)
    assert o.tolist() == [[6, 2, 1], [3, 3, 3], [0, 0, 10]]
    rng = np.random.default_rng(0)
    for T in (6, 250, 500):
        q = rng.dirichlet(np.full(10, 0.3), size=2000).astype(np.float32) * np.float32(1.0000002)  # float32 softmax
        o = check_offsets(q, T)
        assert np.all(o >= 0) and np.all(o.sum(axis=1) <= T)
        assert np.all(np.abs(o - T * q / q.sum(axis=1, keepdims=True)) <= 1 + 1e-9)
    for bad in ([[np.nan, 1.0]], [[-0.1, 1.1]], [[0.0, 0.0]], [0.5]):
        with pytest.raises(PateError):
            check_offsets(np.array(bad), 6)


def test_statistic_refuses_offsets_that_are_not_a_check():
    v = np.array([[4, 2, 0]])
    for bad in (np.array([[1, 1]]), np.array([[-1, 0, 0]]), np.array([[3, 3, 1]]), np.array([[0.5, 0, 0]])):
        with pytest.raises(PateError):
            check_statistic(v, bad)
    with pytest.raises(PateError, match="Confident-GNMax only"):
        g.data_dependent_eps(v, 1.0, 1e-5, [2.0], offsets=np.zeros_like(v))


def test_pr_answered_with_offsets_against_monte_carlo_of_the_aggregator():
    votes = np.array([[150, 50, 0], [120, 100, 30], [200, 50, 0], [40, 200, 10]])
    offsets = np.array([[0, 0, 0], [100, 100, 0], [200, 40, 0], [200, 0, 50]])
    t, s1, n = 100.0, 30.0, 40_000
    lp = g.log_pr_answered(t, s1, votes, offsets)
    assert np.allclose(np.exp(lp), stats.norm.cdf(([150, 30, 10, 200] - np.full(4, t)) / s1), rtol=1e-12)
    labels = aggregation.confident_gnmax(np.repeat(votes, n, axis=0), t, s1, 5.0, NoiseSource(3),
                                         offsets=np.repeat(offsets, n, axis=0)).reshape(4, n)
    for p, row in zip(np.exp(lp), labels):
        rate = np.mean(row >= 0)
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-4


def _exact_joint(h, hp, o, t, s1, s2, lam):
    """The exact Rényi divergence of the released (answered?, label) pair at h against hp."""
    P1 = stats.norm.cdf((loop_statistic(h, o) - t) / s1)
    Q1 = stats.norm.cdf((loop_statistic(hp, o) - t) / s1)
    p, q = gnmax_probs(h, s2), gnmax_probs(hp, s2)
    s = P1**lam * Q1 ** (1 - lam) * np.sum(p**lam * q ** (1 - lam)) + (1 - P1) ** lam * (1 - Q1) ** (1 - lam)
    return math.log(s) / (lam - 1)


@pytest.mark.parametrize("h, o, t, s1, s2", [
    ((7, 3, 0), (0, 9, 0), 6.0, 2.0, 1.0),   # the student proposes the wrong class: answered
    ((7, 3, 0), (9, 0, 0), 3.0, 2.0, 1.0),   # the student agrees: rarely answered
    ((5, 5, 0), (4, 4, 2), 2.0, 1.0, 1.0),
    ((10, 0, 0), (3, 3, 3), 8.0, 2.0, 2.0)])
def test_joint_bound_with_offsets_is_above_the_exact_divergence(h, o, t, s1, s2):
    for lam in (2.0, 5.0, 10.0):
        bound = float(g.data_dependent_eps(np.array([h]), s2, 1e-5, [lam], threshold=t, sigma_threshold=s1,
                                           offsets=np.array([o])).rdp[0])
        for hp in neighbours(h):
            assert _exact_joint(h, hp, o, t, s1, s2, lam) <= bound + 1e-9


def test_zero_offsets_are_confident_gnmax():
    rng = np.random.default_rng(1)
    votes = rng.multinomial(50, [0.6, 0.2, 0.1, 0.1], size=30)
    kw = dict(threshold=30.0, sigma_threshold=10.0)
    plain = g.data_dependent_eps(votes, 5.0, 1e-5, **kw)
    zero = g.data_dependent_eps(votes, 5.0, 1e-5, offsets=np.zeros_like(votes), **kw)
    assert np.array_equal(plain.rdp, zero.rdp)
    F0, f0 = gnmax_sensitivity.total_profile(votes, 5.0, 10.0, 50, answered_mask=None, accounting="joint", **kw)
    F1, f1 = gnmax_sensitivity.total_profile(votes, 5.0, 10.0, 50, answered_mask=None, accounting="joint",
                                             offsets=np.zeros_like(votes), **kw)
    assert np.array_equal(F0, F1) and f0 == f1


def _per_query_table(H, o, sigma, s1, t, order):
    """f_i(h) for every histogram h of the space, the check offsets of query i fixed."""
    rows = np.array(H)
    thr, gn, w, _ = g.confident_curves(rows, sigma, t, s1, [order], np.repeat(np.array([o]), len(H), axis=0))
    from analysis.bounds.confident import rdp_confident

    return dict(zip(H, rdp_confident(thr, gn, w, [order])[:, 0]))


def test_profile_with_offsets_bounds_brute_force_local_sensitivity_at_every_distance():
    """Two queries with their own offsets: for every vote set within distance d of D (one
    teacher change moves at most one vote per query), its local sensitivity of the total
    data-dependent RDP is at most F(d) of `total_profile` — the smooth bound's premise."""
    T, m, sigma, s1, t, order = 5, 3, 1.0, 1.5, 3.0, 3.0
    H = list(all_histograms(T, m))
    dist = {(a, b): sum(abs(x - y) for x, y in zip(a, b)) // 2 for a in H for b in H}
    rng = np.random.default_rng(0)
    for _ in range(6):
        rows = [H[i] for i in rng.choice(len(H), 2)]
        offs = [offsets_up_to(T, m)[i] for i in rng.choice(len(offsets_up_to(T, m)), 2)]
        tables = [_per_query_table(H, o, sigma, s1, t, order) for o in offs]
        F, f = gnmax_sensitivity.total_profile(np.array(rows), sigma, order, T, threshold=t, sigma_threshold=s1,
                                               answered_mask=None, accounting="joint", offsets=np.array(offs))
        assert f == pytest.approx(sum(tab[r] for tab, r in zip(tables, rows)), rel=1e-12)

        def ls(y):  # each query moves by one vote or none, independently
            up = sum(max(tab[n] - tab[yi] for n in list(neighbours(yi)) + [yi]) for tab, yi in zip(tables, y))
            down = sum(max(tab[yi] - tab[n] for n in list(neighbours(yi)) + [yi]) for tab, yi in zip(tables, y))
            return max(up, down)

        for d in range(T + 1):
            ball = [[h for h in H if dist[(r, h)] <= d] for r in rows]
            worst = max(ls(y) for y in itertools.product(*ball))
            assert worst <= F[d] * (1 + 1e-9) + 1e-15, (rows, offs, d)


# --------------------------------------------------------------------------- the plan's student model


def test_simulated_student_names_the_truth_at_its_calibrated_rate():
    from analysis.planning.simulated_votes import StudentModel, VoteModel, simulate_votes

    T, m, n = 50, 4, 20000
    rng = np.random.default_rng(0)
    o = check_offsets(rng.dirichlet(np.full(m, 0.5), size=n), T)
    cal = (0.1, 0.3, 0.6, 0.9)
    student = StudentModel(o, cal)
    votes, sim = VoteModel(T, m).draw_checked(7, n, student)
    _, truth = simulate_votes(np.random.default_rng(7), n, T, m, 0.7, 2.0, 0.5)  # the same first draws
    assert np.array_equal(np.sort(sim, axis=1), np.sort(o, axis=1))  # each row keeps its offsets
    assert np.all(sim.sum(axis=1) <= T) and votes.shape == (n, m)
    named = sim.argmax(axis=1)
    k = np.minimum(o.max(axis=1) * 4 // T, 3)
    for b, c in enumerate(cal):
        sel = k == b
        if sel.sum() > 500:
            rate = np.mean(named[sel] == truth[sel])
            # ties for the largest offset can move argmax off the named class: allow their share
            ties = np.mean((np.sort(o[sel], axis=1)[:, -1] == np.sort(o[sel], axis=1)[:, -2]))
            assert abs(rate - c) < 4 * math.sqrt(c * (1 - c) / sel.sum()) + ties + 1e-3, (b, rate, c)


def test_prefix_profiles_with_offsets_equal_total_profile_of_each_prefix():
    rng = np.random.default_rng(3)
    T, m = 40, 5
    votes = np.stack([rng.multinomial(T, rng.dirichlet(np.full(m, 0.4))) for _ in range(60)])
    offs = check_offsets(rng.dirichlet(np.full(m, 0.4), size=60), T)
    ends = [7, 30, 60]
    kw = dict(threshold=25.0, sigma_threshold=8.0)
    F, f = gnmax_sensitivity.prefix_profiles(votes, 4.0, 10.0, T, ends, offsets=offs, **kw)
    for j, e in enumerate(ends):
        Fe, fe = gnmax_sensitivity.total_profile(votes[:e], 4.0, 10.0, T, answered_mask=None, accounting="joint",
                                                 offsets=offs[:e], **kw)
        np.testing.assert_allclose(F[j], Fe, rtol=1e-12, atol=1e-15)
        assert f[j] == pytest.approx(fe, rel=1e-12)


def test_a_checked_student_that_is_mostly_right_leaves_room_for_more_queries():
    """The plan of round 2 (the default config's noise, 500 teachers, round 1's RDP 0.558 at
    order 12): checking a student that is right where it is sure spends less per query, so
    more queries meet the same target; the plan records the calibration and reads back."""
    from analysis.planning import headline_target
    from analysis.mechanisms import registry
    from analysis.planning.simulated_votes import StudentModel, VoteModel
    from pate.config import load_config

    from conftest import ROOT

    record = registry.from_config(load_config(ROOT / "configs" / "fashion_mnist.toml").aggregation)
    rng = np.random.default_rng(0)
    offsets = check_offsets(rng.dirichlet(np.full(10, 0.1), size=3000), 500)
    student = StudentModel(offsets, tuple(np.linspace(0.3, 0.95, 10)))
    kw = dict(model=VoteModel(500, 10, accuracy=0.7), conversion="improved", orders=(12.0,), offset=0.558)
    plain = headline_target.choose_release(record, 3000, 2.0, 1e-5, **kw)
    checked = headline_target.choose_release(record, 3000, 2.0, 1e-5, student=student, **kw)
    assert checked.num_queries > plain.num_queries and checked.probability >= 0.95
    assert checked.student_calibration == student.calibration and plain.student_calibration == ()
    assert headline_target.ReleaseChoice.from_meta(checked.meta()) == checked
    release = headline_target.release_parameters(checked.order, checked.beta, checked.release_cost)
    p, _, _, _ = headline_target.headline_probability(record, checked.num_queries, release, 2.0, 1e-5,
                                                      student=StudentModel(offsets[:checked.num_queries],
                                                                           student.calibration),
                                                      model=kw["model"], conversion="improved", offset=0.558,
                                                      max_queries=3000)
    assert p == checked.probability  # the report's P, from the released offsets only, is the plan's
    with pytest.raises(PateError, match="covers 10 queries"):
        headline_target.choose_release(record, 3000, 2.0, 1e-5, student=StudentModel(offsets[:10], (0.5,)), **kw)


def test_student_calibration_against_a_plain_loop():
    from pate.release.target import CALIBRATION_BINS, student_model

    rng = np.random.default_rng(5)
    T, n = 20, 400
    probs = rng.dirichlet(np.full(4, 0.3), size=n)
    y = np.where(rng.random(n) < probs.max(axis=1), probs.argmax(axis=1), rng.integers(4, size=n))
    model = student_model(np.zeros((3, 4), np.int64), probs, y, T)
    hits, count = [0] * CALIBRATION_BINS, [0] * CALIBRATION_BINS
    for p, label in zip(probs.tolist(), y.tolist()):
        o = [math.floor(T * v / sum(p)) for v in p]
        b = min(max(o) * CALIBRATION_BINS // T, CALIBRATION_BINS - 1)
        count[b] += 1
        hits[b] += int(max(range(4), key=lambda j: p[j]) == label)
    overall = (sum(hits) + 0.5) / (sum(count) + 1)
    want = [(h + 0.5) / (c + 1) if c else overall for h, c in zip(hits, count)]
    assert model.calibration == pytest.approx(want, rel=1e-12)


# --------------------------------------------------------------------------- the CLI, end to end


#: The target for both rounds of `interactive_run`: above round 1's releases (their data-independent
#: composition, eps ~158), below round 2's 60 queries' (~272), so round 2's plan binds (21 queries).
TARGET = 200.0


@pytest.fixture(scope="module")
def interactive_run(_trained_tiny, tmp_path_factory):
    """Tiny teachers, round 1 by Confident-GNMax with its student and report, then round 2
    with the teachers checking that student under a target for both rounds, and the report
    of both: made once."""
    import shutil

    from pate.store import ledger

    base = tmp_path_factory.mktemp("interactive")
    w = base / "run"
    shutil.copytree(_trained_tiny[0], w)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATE_LEDGER_DIR", str(base / "ledgers"))
        out = [invoke("label", "--workdir", w, "--mechanism", "confident-gnmax", "--threshold", 3,
                      "--sigma-threshold", 1, "--sigma", 1, "--queries", 60, "--seed", 1),
               invoke("train-student", "--workdir", w, "--no-progress", "--steps", 30),
               invoke("analyze", "--workdir", w, "--seed", 2)]
        config = w / "config.toml"
        config.write_text(config.read_text().replace("target_eps = 0.0", f"target_eps = {TARGET}"))
        out += [invoke("label", "--round", 2, "--check", "interactive", "--workdir", w, "--queries", 60,
                       "--seed", 3),
                invoke("analyze", "--workdir", w, "--seed", 4)]
        entries = ledger.Ledger.for_run(w).entries()
    for r in out:
        assert r.exit_code == 0, r.output
    return dict(workdir=w, outputs=[r.output for r in out], entries=entries)


@pytest.mark.slow  # a second round on the tiny run (the module's fixture, ~12 s)
def test_round2_checks_the_round1_student_with_its_own_offsets(interactive_run):
    """The released offsets are ⌊T·p⌋ of the round-1 student on the queried pool points, in
    order, and the release is the aggregator run on them (same research seed); it asks the
    queries its plan allows under the target, fewer than it could."""
    import json

    from pate.store import rundir
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.release.selection import student_probs
    from pate.programs.student_training import load_student

    w = interactive_run["workdir"]
    second = dict(np.load(w / rundir.LABELS_ROUND2_NPZ))
    votes = np.load(w / rundir.VOTES_ROUND2_NPZ)["votes"]
    config = load_config(w / rundir.CONFIG_TOML)
    student = load_student(w, record=rundir.STUDENT_ROUND1_JSON, directory=rundir.STUDENT_ROUND1_DIR)
    pool = split(load_dataset(config.data), config.data.public_size).pool_x
    probs = student_probs(student.model, student.params, pool[second["indices"]])
    assert np.array_equal(second["check_offsets"], check_offsets(probs, 6))
    again = aggregation.aggregate(votes, "confident-gnmax", aggregation.noise_source(3), second["check_offsets"],
                                  threshold=3.0, sigma_threshold=1.0, sigma=1.0)
    assert np.array_equal(again, second["labels"])
    plan = json.loads(str(second["meta"]))["release_plan"]
    # planned for the published headline of both rounds, exactly (docs/rounds.md): no simulated student
    assert plan["route"] == "data-independent" and plan["target_eps"] == TARGET
    assert plan["num_queries"] == second["indices"].size < 60
    said = interactive_run["outputs"][3]
    assert "queries answered (interactive-gnmax)" in said
    assert "the round-1 student on the queries" in said and "outvoted it" in said


@pytest.mark.slow  # the same two-round fixture
def test_the_report_of_both_rounds_names_the_check_and_its_planned_headline(interactive_run):
    """The report names the statistic the threshold tested; round 2 was planned for the
    published headline of both rounds (every cost data-independent), so the report publishes
    the planned figure itself, within the target, and claims no probability."""
    import json

    from pate.store import rundir

    w = interactive_run["workdir"]
    doc = json.loads((w / rundir.RELEASE_JSON).read_text())
    details = doc["details"]
    assert details["check"].startswith("max_j (n_j - o_j)") and details["rounds"] == 2
    assert details["target_eps"] == TARGET
    assert doc["release_eps"] == pytest.approx(details["expected_headline_eps"], rel=1e-12)
    assert doc["release_eps"] <= TARGET
    assert "p_headline_within_target" not in details and not any(k.startswith("eps_route") for k in details)
    round2 = [e for e in interactive_run["entries"] if (e.get("mechanism") or {}).get("round") == 2]
    assert round2 and round2[0]["mechanism"]["check"] == "interactive"


def test_the_check_needs_confident_gnmax_and_round_2(finished_tiny, tmp_path):
    import shutil

    from pate.store import rundir

    w = tmp_path / "run"
    shutil.copytree(finished_tiny, w)  # round 1 by LNMax
    r = invoke("label", "--round", 2, "--check", "interactive", "--workdir", w, "--queries", 10)
    assert r.exit_code == 1 and "confident-gnmax" in one_line(r)
    assert not (w / rundir.LABELS_ROUND2_NPZ).exists()
    r = invoke("label", "--check", "interactive", "--workdir", w)
    assert r.exit_code == 2 and "--round 2" in r.output


@pytest.mark.slow  # a research harness; the fast suite is near its 7 minutes
def test_bench_round2_students_trains_the_control(interactive_run):
    """bench/round2_students.py on the tiny interactive run: the control (round 1's labels),
    one seed, a few steps from the round-1 student's weights; nothing written into the run."""
    from conftest import bench_module, snapshot

    bench = bench_module("round2_students")
    w = interactive_run["workdir"]
    before = snapshot(w)
    control = bench.student_of(str(w), 1, 0, 3)  # round 1's labels only (both rounds: the same path)
    first = np.load(w / "labels.npz")["labels"]
    assert control["labels"] == int((first >= 0).sum()) and control["rounds"] == 1
    assert 0 <= control["accuracy"] <= 1 and control["steps"] == 3
    assert snapshot(w) == before


def test_pate_run_refuses_the_check_without_confident_gnmax_before_any_training(tmp_path):
    from conftest import TINY

    r = invoke("run", "--config", TINY, "--workdir", tmp_path / "run", "--set", "rounds.rounds=2",
               "--set", "rounds.queries=20", "--set", "rounds.check=interactive")
    assert r.exit_code == 1 and "confident-gnmax" in one_line(r)
    assert not (tmp_path / "run").exists()


def test_pate_plan_refuses_the_check_without_confident_gnmax(tmp_path):
    from conftest import TINY

    r = invoke("plan", "--config", TINY, "--target-eps", 400, "--set", "rounds.rounds=2", "--set",
               "rounds.check=interactive")
    assert r.exit_code == 1 and "confident-gnmax" in one_line(r)
