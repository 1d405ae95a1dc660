"""The privacy ledger of a data set (`pate.store.ledger`, `analysis.mechanisms.composition`): composition
checked by hand and against second implementations, the ledger file's guarantees, and
the issue's scenarios on the tiny config (two releases of the same teachers, a budget,
a second sanitised draw, every writer behind the run lock)."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from analysis.mechanisms import composition
from analysis.mechanisms import registry
from analysis.mechanisms import noisy_max
from analysis.core.errors import PateError
from analysis.accounting.rdp import DEFAULT_ORDERS, eps_from_rdp
from conftest import ROOT, TINY, invoke, own_copy, snapshot, unpublished_copy
from pate.store import ledger as ledger_mod
from pate.store.identity import default_directory, legacy_identity


# --------------------------------------------------------------------------- composition


def test_rr_rdp_matches_a_plain_loop_and_the_zcdp_bound():
    for eps0 in (0.01, 0.1, 1.0, 3.0):
        p = math.exp(eps0) / (1 + math.exp(eps0))
        for alpha in (1.5, 2.0, 8.0, 64.0):
            # D_alpha(P || Q) for P = (p, 1-p), Q = (1-p, p), summed outcome by outcome.
            loop = math.log(sum(a ** alpha * b ** (1 - alpha) for a, b in ((p, 1 - p), (1 - p, p)))) / (alpha - 1)
            assert composition.rr_rdp(eps0, [alpha])[0] == pytest.approx(loop, rel=1e-9)
            assert loop <= min(eps0, alpha * eps0 ** 2 / 2) + 1e-12  # Bun & Steinke 2016, Prop. 3.3


def test_two_gnmax_releases_compose_by_hand():
    a = composition.labels_cost(noisy_max.ConfidentGNMax(375, 150, 55), 1200)
    b = composition.labels_cost(noisy_max.GNMax(40.0), 300)
    assert a.params["mu2"] == pytest.approx(1200 / 150 ** 2 + 2 * 1200 / 55 ** 2)
    total = composition.compose([a, b], 1e-5, conversion="improved")
    # RDP: the curves add (alpha mu^2 / 2 each); one conversion at the full delta.
    by_hand = float(eps_from_rdp(DEFAULT_ORDERS, DEFAULT_ORDERS * (a.params["mu2"] + b.params["mu2"]) / 2,
                                 1e-5, "improved")[0])
    assert total.routes["rdp"] == pytest.approx(by_hand)
    # PLD: Gaussians compose to one Gaussian with mu^2 summed (exact GDP composition).
    from analysis.accounting.pld import gaussian_eps_exact

    exact = gaussian_eps_exact(math.sqrt(a.params["mu2"] + b.params["mu2"]), 1e-5)
    assert exact <= total.routes["pld"] <= exact + 0.01  # dp-accounting rounds pessimistically
    assert total.eps == min(total.routes.values())
    # More releases never cost less; a release composed with itself costs more than once.
    assert composition.compose([a, a], 1e-5).eps > composition.compose([a], 1e-5).eps


def test_single_costs_agree_with_the_per_release_accountants():
    from analysis.bounds import gnmax
    from analysis.bounds import lnmax
    from analysis.accounting import pld

    conf = composition.labels_cost(noisy_max.ConfidentGNMax(200, 150, 40), 500, max_answers=100)
    assert composition.single_eps(conf, 1e-5, conversion="classic") == pytest.approx(min(
        gnmax.data_independent_eps(500, 40, 1e-5, sigma_threshold=150, num_answered=100).eps,
        pld.gnmax_eps(500, 40, 1e-5, sigma_threshold=150, num_answered=100).eps), abs=2e-3)
    ln = composition.labels_cost(noisy_max.LNMax(0.05), 100)
    assert composition.single_eps(ln, 1e-5) <= lnmax.data_independent_eps(100, 0.05, 1e-5, range(1, 9)).eps
    assert composition.single_eps(ln, 1e-5) == pytest.approx(pld.lnmax_eps(100, 0.05, 1e-5).eps, abs=2e-3)


def test_approx_and_unexpressible_costs_add_with_their_delta():
    g = composition.labels_cost(noisy_max.GNMax(40.0), 100)
    r = composition.approx_cost(0.5, 1e-5)
    s = composition.gnss_cost(0.1 / 12, 20.0)  # RDP only: enters the PLD route at a share of delta
    total = composition.compose([g, r, s], 1e-5)
    assert total.delta == pytest.approx(2e-5)
    alone = composition.compose([g, s], 1e-5)
    assert total.eps == pytest.approx(alone.eps + 0.5)
    half = composition.single_eps(g, 0.5e-5) + composition.single_eps(s, 0.5e-5)
    assert alone.routes["pld"] <= half + 1e-9


def test_dpsgd_cost_replace_one_is_above_add_remove():
    import dp_accounting

    cost = composition.dpsgd_cost(0.01, 1.1, 1000)
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
    add_remove = acc.get_epsilon(1e-5)
    replace = composition.single_eps(cost, 1e-5)
    assert replace > add_remove


def _renyi_by_quadrature(p_means, q_means, weights, sigma, alpha):
    """D_alpha(P || Q) for two Gaussian mixtures on the line (same component weights), by
    numerical integration on a fine grid: the plain second implementation."""
    from scipy.special import logsumexp
    from scipy.stats import norm

    x = np.linspace(-40 * sigma - 5, 40 * sigma + 5, 400001)
    pairs = [(w, m) for w, m in zip(weights, p_means) if w > 0]
    log_p = logsumexp([math.log(w) + norm.logpdf(x, m, sigma) for w, m in pairs], axis=0)
    pairs = [(w, m) for w, m in zip(weights, q_means) if w > 0]
    log_q = logsumexp([math.log(w) + norm.logpdf(x, m, sigma) for w, m in pairs], axis=0)
    log_integrand = alpha * log_p + (1 - alpha) * log_q
    return float(logsumexp(log_integrand) + math.log(x[1] - x[0])) / (alpha - 1)  # Riemann sum


@pytest.mark.parametrize("q,sigma", [(0.01, 1.1), (0.2, 2.0), (0.5, 3.0), (1.0, 4.0)])
def test_sampled_gaussian_rdp_matches_dp_accounting_and_quadrature(q, sigma):
    """Add/remove RDP of one sampled Gaussian step: the closed form at integer orders
    against dp-accounting's RDP accountant (another implementation) and against the Rényi
    divergence of the pair N(0) vs (1-q)N(0) + qN(1) integrated numerically, both ways."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    orders = np.array([2.0, 3.0, 5.0, 8.0])
    ours = composition.sampled_gaussian_rdp(q, sigma, orders)
    theirs = rdp_privacy_accountant.RdpAccountant(orders=list(orders))
    theirs.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
    np.testing.assert_allclose(ours, theirs._rdp, rtol=1e-9)  # the accountant's per-order curve
    for a, value in zip(orders, ours):
        forward = _renyi_by_quadrature([0, 1], [0, 0], [1 - q, q], sigma, a)
        backward = _renyi_by_quadrature([0, 0], [0, 1], [1 - q, q], sigma, a)
        assert forward == pytest.approx(value, rel=1e-4, abs=1e-9)
        assert backward <= value * (1 + 1e-4) + 1e-9
    half = composition.sampled_gaussian_rdp(q, sigma, np.array([2.5]))  # bounded by the next integer
    assert half[0] == pytest.approx(composition.sampled_gaussian_rdp(q, sigma, np.array([3.0]))[0])


@pytest.mark.parametrize("q,sigma,steps", [(0.05, 1.0, 30), (0.3, 2.0, 5), (1.0, 3.0, 10)])
def test_dpsgd_replace_one_rdp_bounds_the_replaced_pair(q, sigma, steps):
    """The replace-one curve: the weak triangle inequality computed by a plain loop, and
    never below the divergence of a replace-one pair that occurs (an example whose clipped
    gradient is +C replaced by one whose is -C: (1-q)N(0) + qN(1) against
    (1-q)N(0) + qN(-1), per step, composed over `steps` by adding, the pair being fixed);
    at q = 1 never below the exact Gaussian of sensitivity 2."""
    orders = np.array([1.5, 2.0, 3.0, 4.0, 6.0])
    curve = composition.dpsgd_replace_one_rdp(q, sigma, steps, orders)
    for a, value in zip(orders, curve):
        one = lambda order: composition.sampled_gaussian_rdp(q, sigma, np.array([order]))[0]
        assert value == pytest.approx(steps * ((a - 0.5) / (a - 1) * one(2 * a) + one(2 * a - 1)))
        pair = steps * _renyi_by_quadrature([0, 1], [0, -1], [1 - q, q], sigma, a)
        assert pair <= value * (1 + 1e-6)
        if q == 1.0:
            assert steps * a * 4 / (2 * sigma ** 2) <= value * (1 + 1e-9)
    assert composition.rdp(composition.dpsgd_cost(q, sigma, steps), orders) == pytest.approx(curve)
    assert composition.pld(composition.dpsgd_cost(q, sigma, steps)) is None  # no single-pair PLD


# --------------------------------------------------------------------------- the ledger file


def test_ledger_file_is_owner_only_append_only_and_refuses_damage(tmp_path):
    book = ledger_mod.Ledger("synthetic:test", tmp_path / "ledgers")
    cost = composition.labels_cost(noisy_max.GNMax(40.0), 100)
    book.charge("labels", cost, subject="a")
    first = book.path.read_bytes()
    book.charge("labels", cost, subject="b")
    assert book.path.read_bytes().startswith(first)
    assert [e["seq"] for e in book.entries()] == [1, 2]
    assert stat.S_IMODE(os.stat(book.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(book.directory).st_mode) == 0o700
    assert book.total(1e-5).eps == pytest.approx(composition.compose([cost, cost], 1e-5).eps)
    # Nothing private in it: no votes, no seed; only public parameters and digests.
    text = book.path.read_text()
    assert "votes" not in text and "seed" not in text
    # A second draw of the same subject is refused when asked to be once-only.
    book.charge("sanitised-eps", composition.gnss_cost(0.01, 20.0), subject="L", once=True)
    with pytest.raises(PateError, match="already records"):
        book.charge("sanitised-eps", composition.gnss_cost(0.01, 20.0), subject="L", once=True)
    # A budget below the cumulative eps refuses, and writes nothing.
    before = book.path.read_bytes()
    with pytest.raises(PateError, match="total_budget"):
        book.charge("labels", cost, budget=0.5, delta=1e-5)
    assert book.path.read_bytes() == before
    # A damaged ledger is never silently reset.
    book.path.write_bytes(before[:-5])
    with pytest.raises(PateError, match="damaged at line"):
        book.entries()
    # A link in its place is not written through.
    victim = tmp_path / "victim"
    victim.write_text("x")
    book.path.unlink()
    book.path.symlink_to(victim)
    with pytest.raises(PateError, match="not a plain file"):
        book.charge("labels", cost)
    assert victim.read_text() == "x"


def test_ledger_identity_is_the_data_source_not_the_run(tiny_config, tmp_path, monkeypatch):
    from pate.config import load_config

    a = ledger_mod.Ledger.for_config(tiny_config)
    other = load_config(TINY, {"data.synthetic_seed": 7})
    assert ledger_mod.Ledger.for_config(other).path != a.path
    # The pool size is public: changing it does not make a new data set.
    pool = load_config(TINY, {"data.public_size": 100})
    assert ledger_mod.Ledger.for_config(pool).path == a.path
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "elsewhere"))
    assert ledger_mod.Ledger.for_config(tiny_config).directory == tmp_path / "elsewhere"


# --------------------------------------------------------------------------- end to end on the tiny config


def _release(run, *extra, seed=1):
    result = invoke("label", "--workdir", run, "--seed", seed, *extra)
    assert result.exit_code == 0, result.output
    return result


def test_two_label_releases_of_the_same_teachers_add_up(trained_run, tiny_config, tmp_path):
    run, _ = trained_run
    second = tmp_path / "second"
    shutil.copytree(run, second)  # a second run directory on the same teachers
    _release(run)
    assert invoke("analyze", "--workdir", run).exit_code == 0
    _release(run, "--overwrite")  # the same queries released again
    # Another seed: with the same one the labels are the same and, written within the zip
    # format's 2-second timestamp, labels.npz is byte-identical, so the ledger rightly calls
    # a second sanitised draw of it a repeat (the test failed at random so).
    _release(second, seed=2)
    analyzed = invoke("analyze", "--workdir", second)
    assert analyzed.exit_code == 0, analyzed.output

    book = ledger_mod.Ledger.for_config(tiny_config)
    kinds = [e["kind"] for e in book.entries()]
    assert kinds == ["labels", "sanitised-eps", "labels", "labels", "sanitised-eps"]
    labels_cost = composition.labels_cost(registry.from_config(tiny_config.aggregation),
                                          tiny_config.aggregation.queries)
    costs = [composition.Cost.from_json(e["cost"]) for e in book.entries()]
    assert costs[0] == costs[2] == costs[3] == labels_cost
    delta = tiny_config.privacy.delta
    by_hand = composition.compose(costs, delta)
    assert by_hand.eps >= composition.compose([labels_cost, labels_cost, labels_cost], delta).eps
    doc = json.loads((second / "release.json").read_text())
    assert doc["data_set"]["releases"] == 5
    assert doc["data_set"]["cumulative_eps"] == pytest.approx(by_hand.eps)
    assert doc["data_set"]["relation"] == "replace-one" == doc["neighbouring_relation"]
    listed = invoke("ledger", "--workdir", second)
    assert listed.exit_code == 0 and f"cumulative eps {by_hand.eps:.4g}" in listed.output

    # Moving release.json aside does not allow a second sanitised draw of the same labels.
    os.rename(second / "release.json", tmp_path / "kept.json")
    again = invoke("analyze", "--workdir", second)
    assert again.exit_code == 1 and "already records a sanitised eps" in again.output
    assert not (second / "release.json").exists()


def test_total_budget_refuses_a_release_before_the_teachers_vote(trained_run, tiny_config, tmp_path):
    run, _ = trained_run
    second = tmp_path / "second"
    shutil.copytree(run, second)
    _release(run)
    _release(second)
    book = ledger_mod.Ledger.for_config(tiny_config)
    spent = book.total(tiny_config.privacy.delta).eps
    # A budget just above what is spent: the same release once more would go over it.
    plain = (second / "config.toml").read_text()
    assert "total_budget = 0.0" in plain  # (the old replacement wrote the key twice: invalid TOML, whose error
    # message passed the check below through this test's own folder name)
    (second / "config.toml").write_text(plain.replace("total_budget = 0.0", f"total_budget = {spent * 1.01}"))
    before = snapshot(second)
    refused = invoke("label", "--workdir", second, "--seed", 1, "--overwrite")
    assert refused.exit_code == 1 and "over [privacy] total_budget" in refused.output, refused.output
    assert "voting:" not in refused.output  # refused before any teacher voted
    assert snapshot(second) == before
    assert [e["kind"] for e in book.entries()] == ["labels", "labels", "budget"], refused.output
    # The next command without the setting is held to the budget the ledger recorded.
    (second / "config.toml").write_text(plain)
    again = invoke("label", "--workdir", second, "--seed", 1, "--overwrite")
    assert again.exit_code == 1 and "recorded in its ledger" in again.output, again.output
    assert len(book.releases()) == 2


def test_analyze_votes_charges_every_draw(tmp_path):
    votes = ROOT / "examples" / "votes_simulated_250.npz"
    args = ["analyze", "--votes", votes, "--mechanism", "gnmax", "--sigma", 40, "--queries", 100,
            "--ledger", "external"]
    first = invoke(*args, "--release-json", tmp_path / "r1.json")
    second = invoke(*args, "--release-json", tmp_path / "r2.json")
    assert first.exit_code == 0 and second.exit_code == 0, second.output
    book = ledger_mod.Ledger("external", default_directory())
    assert [e["kind"] for e in book.entries()] == ["sanitised-eps", "sanitised-eps"]
    r2 = json.loads((tmp_path / "r2.json").read_text())
    # Both draws, and the answers' own cost (pate cannot tell whether they were charged when made).
    assert r2["data_set"]["releases"] == 3
    # (the release's own figure is a noisy draw under the report's conversion: it may lie on
    # either side of the ledger's composition, which is itself a guarantee; asserting >= here
    # failed about one run in ten)
    assert r2["eps"] == r2["data_set"]["eps"] == r2["data_set"]["cumulative_eps"] > 0
    # Without an output file nothing is drawn, so nothing is charged.
    assert invoke(*args).exit_code == 0
    assert len(book.entries()) == 2


def test_import_charges_an_old_run_once(finished_tiny, tmp_path, tiny_config):
    old = tmp_path / "old"
    shutil.copytree(finished_tiny, old)
    first = invoke("ledger", "--import", old)
    assert first.exit_code == 0, first.output
    assert "charged: labels" in first.output and "charged: sanitised eps" in first.output
    again = invoke("ledger", "--import", old)
    assert again.exit_code == 0 and "charged" not in again.output.replace("already", "")
    book = ledger_mod.Ledger.for_run(old)
    assert [e["kind"] for e in book.entries()] == ["labels", "sanitised-eps"]


# --------------------------------------------------------------------------- one door: the run lock


@pytest.fixture
def held_lock(tmp_path):
    """A run directory whose lock another process holds."""
    run = tmp_path / "locked"
    run.mkdir()
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from pate.store.runlock import RunLock\n"
            f"with RunLock({str(run)!r}, 'test'):\n    print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield run
    proc.kill()
    proc.wait()


def test_every_writer_is_refused_under_a_held_lock(held_lock):
    votes = ROOT / "examples" / "votes_simulated_250.npz"
    before = snapshot(held_lock)
    cases = [
        ["label", "--votes", votes, "--workdir", held_lock, "--num-classes", 10, "--gamma", 0.05],
        ["dpsgd", "--config", TINY, "--workdir", held_lock],
        ["analyze", "--workdir", held_lock],
    ]
    for args in cases:
        result = invoke(*args)
        assert result.exit_code == 1, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "is in use by pid" in lines[0], result.output
        assert "--gamma" not in lines[0]  # the holder's arguments are never shown
    import pate

    with pytest.raises(PateError, match="is in use"):
        pate.label_votes(np.load(votes)["votes"], held_lock, num_classes=10, gamma=0.05)
    assert snapshot(held_lock) == before


def test_pate_run_refuses_over_budget_before_training(tiny_config, tmp_path):
    book = ledger_mod.Ledger.for_config(tiny_config)
    book.charge("labels", composition.Cost("gaussian", {"mu2": 100.0}))  # a large earlier release (eps ~92)
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--set", "privacy.total_budget=5",
                    "--no-progress")
    assert result.exit_code == 1 and "total_budget" in result.output, result.output
    assert not (run / "teachers").exists()


# --------------------------------------------------------------------------- second hunt (issue 21)


def test_the_same_labels_written_again_are_the_same_release(labelled_tiny, tmp_path):
    """The ledger keys a sanitised draw on what the labels say, not on the bytes of
    labels.npz: the same labels written again (another `meta`, other zip timestamps, as
    when the same teachers are labelled with the same research --seed seconds later, in
    another run directory) are refused a second draw."""
    from pate.release.labels import content_digest, read_labels

    runs = []
    for k, when in enumerate(("2020-01-01T00:00:00+00:00", "2020-01-01T00:00:09+00:00")):
        run = own_copy(labelled_tiny, tmp_path / f"run{k}")
        arrays = dict(np.load(run / "labels.npz", allow_pickle=False))
        meta = json.loads(str(arrays.pop("meta")))
        np.savez(run / "labels.npz", **arrays, meta=np.array(json.dumps({**meta, "written_at": when})))
        runs.append(run)
    first, second = (run / "labels.npz" for run in runs)
    assert first.read_bytes() != second.read_bytes()
    assert content_digest(read_labels(first)) == content_digest(read_labels(second))
    assert invoke("analyze", "--workdir", runs[0], "--seed", 3).exit_code == 0
    result = invoke("analyze", "--workdir", runs[1], "--seed", 3)
    assert result.exit_code == 1 and "already records" in result.output, result.output
    assert not (runs[1] / "release.json").exists()
    assert [e["kind"] for e in ledger_mod.Ledger.for_run(runs[1]).entries()] == ["labels", "sanitised-eps"]


def test_a_failed_report_write_charges_nothing_and_leaves_nothing(labelled_tiny, tmp_path, monkeypatch):
    """A failed analyze (issue 21) leaves none of its outputs and no temp file, and charges
    no draw (the report is staged before the charge): the next attempt is not refused."""
    from analysis.core import files

    run = unpublished_copy(labelled_tiny, tmp_path)
    before = snapshot(run)
    real, calls = files.write_temp, []

    def full_on_the_second(path, data, private):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(path))
        return real(path, data, private)

    monkeypatch.setattr(files, "write_temp", full_on_the_second)
    result = invoke("analyze", "--workdir", run)
    assert result.exit_code == 1 and "No space left" in result.output, result.output
    assert snapshot(run) == before and not [p for p in os.listdir(run) if p.endswith(".tmp")]
    assert [e["kind"] for e in ledger_mod.Ledger.for_run(run).entries()] == ["labels"]
    monkeypatch.setattr(files, "write_temp", real)
    assert invoke("analyze", "--workdir", run).exit_code == 0


# --------------------------------------------------------------------------- a ledger that cannot split or forget


@pytest.mark.parametrize("value", ["myledgers", " ", "./here"])
def test_a_relative_or_blank_ledger_folder_is_refused_in_one_line(monkeypatch, tmp_path, value):
    """A relative folder would follow the working directory: `cd` elsewhere and the data set's
    spending (and its total_budget) starts again from nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATE_LEDGER_DIR", value)
    with pytest.raises(PateError, match=r"\$PATE_LEDGER_DIR = .* is not an absolute folder"):
        default_directory()
    result = invoke("ledger", "--config", TINY)
    assert result.exit_code == 1 and "is not an absolute folder" in result.output
    assert not (tmp_path / "myledgers").exists() and not (tmp_path / "here").exists()


def test_a_relative_xdg_state_home_is_ignored_as_the_spec_says(monkeypatch, tmp_path):
    monkeypatch.delenv("PATE_LEDGER_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert default_directory() == tmp_path / ".local" / "state" / "pate" / "ledgers"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_directory() == tmp_path / "state" / "pate" / "ledgers"
    monkeypatch.setenv("PATE_LEDGER_DIR", "~/pate-ledgers")
    assert default_directory() == tmp_path / "pate-ledgers"


def test_a_relative_privacy_ledger_is_refused_by_the_config(tmp_path):
    from pate.config import load_config

    with pytest.raises(PateError, match="privacy.ledger must be an absolute folder"):
        load_config(TINY, {"privacy.ledger": "myledgers"})
    assert load_config(TINY, {"privacy.ledger": str(tmp_path)}).privacy.ledger == str(tmp_path)


def test_a_folder_given_keeps_its_mode_and_one_made_is_owner_only(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    book = ledger_mod.Ledger("data", shared)
    book.charge("labels", composition.Cost("pure", {"eps0": 1.0, "count": 1}))
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777  # sticky bit and the others' access kept
    made = tmp_path / "made" / "here"
    ledger_mod.Ledger("data", made).charge("labels", composition.Cost("pure", {"eps0": 1.0, "count": 1}))
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


@pytest.mark.parametrize("damage, message", [
    (lambda lines: [], "is empty"),
    (lambda lines: lines[:1] + [json.dumps({k: v for k, v in json.loads(lines[1]).items() if k != "cost"})],
     r"damaged at line 2 \(not a cost record"),
    (lambda lines: lines[:1] + [json.dumps({**json.loads(lines[1]), "kind": "gift"})],
     r"damaged at line 2 \(unknown entry kind 'gift'\)"),
    (lambda lines: lines[:1] + [json.dumps({**json.loads(lines[1]), "cost": {"kind": "magic"}})],
     r"damaged at line 2 \(unknown cost kind 'magic'"),
])
def test_a_damaged_ledger_is_refused_naming_its_file_and_line_never_read_as_new(tmp_path, damage, message):
    book = ledger_mod.Ledger("data", tmp_path)
    book.charge("labels", composition.Cost("pure", {"eps0": 1.0, "count": 1}))
    lines = book.path.read_text().splitlines()
    book.path.write_text("".join(line + "\n" for line in damage(lines)))
    with pytest.raises(PateError, match=message) as err:
        book.entries()
    assert str(book.path) in str(err.value)
    with pytest.raises(PateError, match=message):  # a new release is refused too, not charged over it
        book.charge("labels", composition.Cost("pure", {"eps0": 1.0, "count": 1}))


# --------------------------------------------------------------------------- identity, budget, published figure


def _npz_config(path):
    from pate.config import load_config

    return load_config(TINY, {"data.name": "npz", "data.path": str(path)})


def _write_npz_data(path, flip: bool = False):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 40)
    if flip:
        y[0] = (y[0] + 1) % 3
    np.savez(path, x_train=rng.integers(0, 256, (40, 8, 8), dtype=np.uint8), y_train=y,
             x_test=rng.integers(0, 256, (30, 8, 8), dtype=np.uint8), y_test=rng.integers(0, 3, 30))


def test_a_copy_of_the_data_elsewhere_is_the_same_data_set(tmp_path):
    """The identity was the files' path: a copy of the same data elsewhere started a fresh
    ledger (and budget). Now it is the training split's content, keyed: a copy is the same
    data set, one changed label another; the name shows no plain digest of the data; a
    ledger an older pate named by the path still counts."""
    first, copy, changed = tmp_path / "a.npz", tmp_path / "elsewhere" / "b.npz", tmp_path / "c.npz"
    _write_npz_data(first)
    copy.parent.mkdir()
    shutil.copy(first, copy)
    _write_npz_data(changed, flip=True)
    a, b, c = (ledger_mod.Ledger.for_config(_npz_config(p)) for p in (first, copy, changed))
    # One changed label: 39 of its 40 records are a's, so it is a's data set (issue 44).
    assert a.name == b.name == c.name and a.path == b.path
    digest = a.source.rsplit(":", 1)[1]  # the plain sha256 of the split's records: private files only
    assert a.source.startswith("npz:sha256:") and digest[:8] not in a.name and a.name.startswith("npz:")
    # Under another ledger folder the same source has that folder's keyed name.
    elsewhere = ledger_mod.Ledger(a.source, tmp_path / "other-ledgers")
    assert elsewhere.source == a.source and elsewhere.name != a.name
    # An older pate's ledger of this data (named by its path) counts in the new one.
    old = ledger_mod.Ledger(legacy_identity(_npz_config(first).data), a.directory)
    cost = composition.labels_cost(noisy_max.GNMax(40.0), 100)
    old.charge("labels", cost, subject="old")
    assert [e["kind"] for e in a.entries()] == ["labels"] and a.total(1e-5).count == 1
    a.charge("labels", cost, subject="new")
    assert a.total(1e-5).count == 2 and len(old.entries()) == 1  # the old file is never written
    assert "older pate" in ledger_mod.render(a, 1e-5)


def test_the_budget_lives_in_the_ledger_and_holds_for_every_later_command(tmp_path):
    """total_budget was read from each command's config: after a refusal at its budget the next
    command without the setting spent on, and the --votes commands had no budget at all.
    Now the first budget is recorded in the ledger; a lower config tightens it, a higher one
    does not raise it, only `pate ledger --set-budget` does, never below what is spent."""
    book = ledger_mod.Ledger("votes-set", default_directory())
    cost = composition.labels_cost(noisy_max.GNMax(40.0), 300)  # 2.5 alone; three compose to 4.69, four 5.54
    for _ in range(3):
        book.charge("labels", cost, budget=5.0, delta=1e-5)
    with pytest.raises(PateError, match="total_budget"):
        book.charge("labels", cost, budget=5.0, delta=1e-5)
    with pytest.raises(PateError, match="recorded in its ledger"):  # no setting: the ledger's holds
        book.charge("labels", cost)
    with pytest.raises(PateError, match="recorded in its ledger"):  # a higher config does not raise it
        book.check_budget([cost], 50.0, 1e-5, "this release")
    # A --votes command, which has no config, is held to it too.
    refused = invoke("label", "--votes", ROOT / "examples" / "votes_simulated_250.npz", "--ledger", "votes-set",
                     "--workdir", tmp_path / "run", "--num-classes", 10, "--mechanism", "gnmax", "--sigma", 40,
                     "--queries", 300)
    assert refused.exit_code == 1 and "recorded in its ledger" in refused.output, refused.output
    assert not (tmp_path / "run" / "labels.npz").exists()
    spent = book.total(1e-5).eps
    low = invoke("ledger", "--name", "votes-set", "--set-budget", spent / 2)
    assert low.exit_code == 1 and "already spent" in low.output
    raised = invoke("ledger", "--name", "votes-set", "--set-budget", 20)
    assert raised.exit_code == 0 and "budget: eps 20" in raised.output, raised.output
    book.charge("labels", cost)
    book.check_budget([], 15.0, 1e-5, "nothing")  # a lower config tightens it, for good
    assert book.budget() == (15.0, 1e-5)
    assert [e["kind"] for e in book.entries()].count("budget") == 3


def test_release_json_leads_with_what_the_data_set_has_spent(tmp_path):
    """release.json's first figure was one release's: three relabel-and-analyze releases of
    the same votes read about 2.1 each while the data set's cumulative eps grew in a
    sub-object. Now the first figure is the data set's, growing, never below the release's
    own; the release's stays beside it, named; its delta counts the float64 label noise."""
    votes = ROOT / "examples" / "votes_simulated_250.npz"
    run = tmp_path / "run"
    firsts = []
    for k in range(3):
        labelled = invoke("label", "--votes", votes, "--ledger", "relabelled", "--workdir", run, "--num-classes", 10,
                          "--mechanism", "gnmax", "--sigma", 40, "--queries", 200, "--overwrite", "--seed", k + 1)
        assert labelled.exit_code == 0, labelled.output
        analyzed = invoke("analyze", "--workdir", run)
        assert analyzed.exit_code == 0, analyzed.output
        assert analyzed.output.startswith("PUBLISH: eps")
        doc = json.loads((run / "release.json").read_text())
        assert list(doc)[:2] == ["eps", "delta"] and doc["eps"] == doc["data_set"]["eps"]
        assert doc["data_set"]["releases"] == 2 * (k + 1)
        if k:
            assert doc["eps"] > doc["release_eps"]
        firsts.append(doc["eps"])
    assert firsts[0] < firsts[1] < firsts[2]
    book = ledger_mod.Ledger("relabelled", default_directory())
    labels = [e for e in book.entries() if e["kind"] == "labels"]
    assert len(labels) == 3 and all(e["sampling_tv"] > 0 for e in labels)
    total = book.total(1e-5)
    without = composition.compose(book.costs(), 1e-5)
    assert total.delta > without.delta  # the float64 samplers' delta is counted
