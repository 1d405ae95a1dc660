"""What a release publishes, seen as an attacker would: one headline ε that counts everything,
nothing private in release.json, no release parameter chosen from the votes, private files
owner-only, and meaningless or unaccounted settings refused before anything is written."""

import json
import math
import os
import stat

import numpy as np
import pytest

from analysis.bounds import gnmax
from analysis.sanitised import lnmax_release
from analysis.reporting import report
from analysis.reporting import report_io
from analysis.core.noise import NoiseSource

from conftest import charged, invoke

PRIVATE_KEYS = {"eps_data_dependent", "best_moment", "best_order", "smooth_sensitivity", "noise_scale",
                "noise_std", "expected_answered"}


def votes_of(seed=0, n=120, T=250, m=10, alpha=0.1):
    rng = np.random.default_rng(seed)
    return rng.multinomial(T, rng.dirichlet(np.full(m, alpha)), size=n).astype(np.int32)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


# --------------------------------------------------------------------------- headline


def test_lnmax_headline_counts_the_release_at_the_total_delta():
    votes = votes_of()
    rep = report.lnmax_report(votes, 0.05, 1e-5, range(1, 9), 0.09, noise=NoiseSource(1))
    di, san, cost = (rep.value(k) for k in ("eps_data_independent", "eps_sanitized", "eps_release_cost"))
    assert cost == pytest.approx(lnmax_release.release_eps_cost(0.09, 1e-5))
    assert rep.value("eps") == pytest.approx(min(di + cost, max(san, 0.0) + cost))
    assert rep.value("delta_total") == pytest.approx(2e-5 + rep.value("delta_sampling"), rel=1e-12)
    assert rep.value("eps") > cost  # the release's own cost is always inside the headline


@pytest.mark.parametrize("confident", [False, True])
def test_gnmax_headline_is_the_smaller_route_with_the_release_inside(confident):
    votes = votes_of(1, n=200)
    kw = dict(threshold=150.0, sigma_threshold=60.0) if confident else {}
    rep = report.gnmax_report(votes, 30.0, 1e-5, release_order=10.0, noise=NoiseSource(2), **kw)
    routes = rep.value("eps_data_independent_with_release"), rep.value("eps_sanitized")
    assert rep.value("eps") == min(routes)
    # The data-independent route pays for the release: above the labels-only figure.
    assert rep.value("eps_data_independent_with_release") > rep.value("eps_data_independent")
    assert rep.value("rdp_sanitized") == pytest.approx(round(rep.value("rdp_sanitized") / 1e-3) * 1e-3,
                                                       abs=1e-12)


@pytest.mark.parametrize("mechanism", ["lnmax", "gnmax", "confident-gnmax"])
def test_headline_delta_includes_the_float64_sampler_delta(mechanism):
    """The labels' float64 noise is within total variation tau of the ideal noise, which
    adds (1 + e^eps) tau to delta (analysis.core.noise): the headline's delta counts it."""
    votes = votes_of(6, n=150)
    if mechanism == "lnmax":
        rep = report.lnmax_report(votes, 0.05, 1e-5, range(1, 9), 0.09, noise=NoiseSource(1))
        analysis_delta, coordinates = 2e-5, 10
    else:
        kw = dict(threshold=150.0, sigma_threshold=60.0) if mechanism == "confident-gnmax" else {}
        rep = report.gnmax_report(votes, 30.0, 1e-5, noise=NoiseSource(1), **kw)
        analysis_delta, coordinates = 1e-5, 10 + bool(kw)
    sampling = rep.value("delta_sampling")
    assert sampling == pytest.approx((1 + math.exp(rep.value("eps"))) * 150 * coordinates**2 * 2.0**-51,
                                     rel=1e-12)
    assert rep.value("delta_total") == analysis_delta + sampling > analysis_delta
    assert report_io.release_json(rep)["delta"] == analysis_delta + sampling
    assert not [w for w in rep.warnings if "NOTHING" in w]


def test_headline_delta_of_one_is_said_not_hidden():
    """sigma 3 on 6 teachers (a tiny config): the headline eps is so large that the float64
    noise's delta reaches 1. The report and release.json say delta 1 and that the headline
    guarantees nothing, instead of delta 1e-5."""
    rng = np.random.default_rng(0)
    votes = rng.multinomial(6, rng.dirichlet(np.full(4, 0.5)), size=100)
    rep = report.gnmax_report(votes, 3.0, 1e-5, noise=NoiseSource(0))
    doc = report_io.release_json(rep)
    assert rep.value("delta_total") == doc["delta"] == 1.0
    assert any("guarantees NOTHING" in w for w in doc["warnings"])
    assert "guarantees NOTHING" in report_io.render_table(rep)


def test_release_json_holds_only_public_values():
    votes = votes_of()
    rep = report.lnmax_report(votes, 0.05, 1e-5, range(1, 3), 0.09, noise=NoiseSource(1), publishable=True)
    assert rep.private_warnings  # moments 1..2: the private best moment is the largest
    doc = report_io.release_json(rep)
    text = json.dumps(doc)
    assert doc["eps"] == rep.value("eps") and doc["delta"] == rep.value("delta_total")
    assert not PRIVATE_KEYS & set(doc["details"])
    assert "best moment" not in text  # private warnings stay in privacy.json
    assert doc["details"]["grid"] == 1e-3
    assert doc["details"]["eps_sanitized"] == pytest.approx(round(doc["details"]["eps_sanitized"] / 1e-3) * 1e-3)
    private_doc = report_io.to_json(rep)
    assert private_doc["private"]["warnings"] and "best moment" in json.dumps(private_doc["private"])


def test_every_published_figure_names_its_neighbouring_relation(tmp_path):
    """PATE's guarantee is for replace-one neighbours (one example replaced: one teacher's
    votes change), not add/remove (which can move every shard): release.json, the table
    and `pate plan` say so."""
    rep = report.lnmax_report(votes_of(), 0.05, 1e-5, range(1, 9), 0.09, noise=NoiseSource(1))
    doc = report_io.release_json(rep)
    assert doc["neighbouring_relation"] == "replace-one"
    assert "replacing one example" in doc["neighbouring_relation_note"]
    assert "Adding or removing" in doc["neighbouring_relation_note"]
    assert "Neighbouring relation: replace-one" in report_io.render_table(rep)
    _make_labelled_run(tmp_path)
    result = invoke("analyze", "--workdir", tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "release.json").read_text())["neighbouring_relation"] == "replace-one"
    plan = invoke("plan", "--mechanism", "gnmax", "--queries", 100, "--eps", 2)
    assert plan.exit_code == 0 and "replace-one neighbours" in plan.output


# --------------------------------------------------------------------------- no private choices


def test_gnmax_release_parameters_do_not_depend_on_the_votes():
    """Without --release-order the order (and so β and σ_ss) comes from the public
    data-independent curve: neighbouring vote sets get the same parameters (the 2018 code's
    data-dependent choice gave 11.0 and 8.75 on neighbours)."""
    a = votes_of(3, n=150, alpha=0.05)
    b = a.copy()
    top = int(np.argmax(b[0]))
    b[0, top] -= 1
    b[0, (top + 1) % b.shape[1]] += 1  # one teacher changes its vote
    params = []
    for votes in (a, b, votes_of(4, n=150, alpha=5.0)):
        rep = report.gnmax_report(votes, 40.0, 1e-5, noise=NoiseSource(0))
        params.append((rep.value("release_order"), rep.value("beta"), rep.value("release_rdp_cost")))
        assert rep.value("release_order") == gnmax.data_independent_eps(150, 40.0, 1e-5).order
    assert params[0] == params[1] == params[2]


# --------------------------------------------------------------------------- files


def _make_labelled_run(tmp_path, mechanism="lnmax"):
    votes = votes_of(5, n=100, T=50)
    np.savez(tmp_path / "votes.npz", votes=votes)
    fields = dict(indices=np.arange(60), labels=votes[:60].argmax(axis=1), mechanism=np.array(mechanism))
    fields.update(gamma=np.array(0.1)) if mechanism == "lnmax" else fields.update(sigma=np.array(20.0))
    np.savez(tmp_path / "labels.npz", **fields)
    charged(tmp_path)


@pytest.mark.parametrize("mechanism", ["lnmax", "gnmax"])
def test_analyze_workdir_writes_release_json_and_owner_only_private_files(tmp_path, mechanism):
    _make_labelled_run(tmp_path, mechanism)
    result = invoke("analyze", "--workdir", tmp_path, "--seed", 7)
    assert result.exit_code == 0, result.output
    assert "the HEADLINE" in result.output.splitlines()[0]  # one headline: the data set's, leading
    release = json.loads((tmp_path / "release.json").read_text())
    private = json.loads((tmp_path / "privacy.json").read_text())
    assert release["release_eps"] == private["public"]["eps"]
    # The first figure is the data set's: here this release alone (its labels were never
    # charged, so they count now), composed, or its own headline where that is smaller.
    assert list(release)[:2] == ["eps", "delta"] and release["eps"] == release["data_set"]["eps"]
    assert release["eps"] <= release["release_eps"] and result.output.startswith("PUBLISH: eps")
    assert not PRIVATE_KEYS & set(release["details"])
    assert mode(tmp_path / "privacy.json") == 0o600 and mode(tmp_path / "privacy.png") == 0o600
    assert mode(tmp_path / "release.json") & 0o044  # published: readable as usual (umask permitting)
    # The seed is written nowhere.
    for name in ("release.json", "privacy.json"):
        assert '"seed"' not in (tmp_path / name).read_text()


def test_cli_votes_mode_writes_release_json(tmp_path):
    votes = votes_of()
    np.savez(tmp_path / "v.npz", votes=votes)
    out = tmp_path / "release.json"
    result = invoke("analyze", "--votes", tmp_path / "v.npz", "--ledger", "ext", "--gamma", 0.05, "--release-json", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["eps"] > 0


def test_private_run_artifacts_are_owner_only(trained_run):
    from pate.store import rundir
    from pate.config import load_config
    from pate.steps.label import label

    workdir, _ = trained_run
    assert mode(workdir / "teachers") == 0o700
    assert mode(workdir / "teachers.json") == 0o600
    label(load_config(workdir / "config.toml"), workdir, seed=1, echo=lambda *a: None)
    assert mode(workdir / rundir.VOTES_NPZ) == 0o600
    assert mode(workdir / rundir.LABELS_NPZ) & 0o044


def test_student_checkpoint_carries_no_absolute_path(tmp_path):
    import jax.numpy as jnp

    from pate.store.checkpoints import save_params

    target = tmp_path / "student"
    save_params(target, {"w": jnp.ones(3)})
    for path in target.rglob("*"):
        if path.is_file():
            assert str(tmp_path).encode() not in path.read_bytes(), path


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("args,needle,code", [
    (["--gamma", 0.05, "--beta", 1e308], "--beta", 1),
    (["--mechanism", "confident-gnmax", "--sigma", 20, "--threshold", 150, "--sigma-threshold", 1e-300],
     "--sigma-threshold", 2),
    (["--mechanism", "gnmax", "--sigma", 1e-300], "--sigma", 2),
    (["--mechanism", "gnmax", "--sigma", 1e-90], "not finite", 1),
    (["--gamma", 0.05, "--delta", 0.99], "delta", 1),
])
def test_meaningless_releases_are_refused_before_writing(tmp_path, args, needle, code):
    np.savez(tmp_path / "v.npz", votes=votes_of())
    out = tmp_path / "out.json"
    result = invoke("analyze", "--votes", tmp_path / "v.npz", "--ledger", "ext", *args, "--json", out, "--release-json",
                    tmp_path / "r.json")
    assert result.exit_code == code, result.output
    assert needle in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("seed", [-1, 2**128, -5])
def test_seed_out_of_range_is_a_usage_error(tmp_path, seed):
    np.savez(tmp_path / "v.npz", votes=votes_of())
    result = invoke("analyze", "--votes", tmp_path / "v.npz", "--ledger", "ext", "--gamma", 0.05, "--seed", seed)
    assert result.exit_code == 2 and "2**128" in result.output


def test_full_128_bit_seed_accepted(tmp_path):
    np.savez(tmp_path / "v.npz", votes=votes_of())
    result = invoke("analyze", "--votes", tmp_path / "v.npz", "--ledger", "ext", "--gamma", 0.05, "--seed", 2**128 - 1)
    assert result.exit_code == 0, result.output


def test_input_is_labels_requires_num_classes(tmp_path):
    preds = np.random.default_rng(0).integers(0, 9, size=(50, 40))  # class 9 never predicted
    np.save(tmp_path / "preds.npy", preds)
    result = invoke("analyze", "--votes", tmp_path / "preds.npy", "--ledger", "ext", "--input-is-labels", "--gamma", 0.05)
    assert result.exit_code == 2 and "--num-classes" in result.output
    ok = invoke("analyze", "--votes", tmp_path / "preds.npy", "--ledger", "ext", "--input-is-labels", "--num-classes", 10,
                "--gamma", 0.05)
    assert ok.exit_code == 0, ok.output


def test_label_refuses_an_unaccountable_noise_before_writing(trained_run):
    workdir, _ = trained_run
    before = sorted(p.name for p in workdir.iterdir())
    result = invoke("label", "--workdir", workdir, "--mechanism", "gnmax", "--sigma", 1e-300)
    assert result.exit_code == 1 and "--sigma" in result.output, result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in workdir.iterdir()) == before
    result = invoke("label", "--workdir", workdir, "--seed", 2**128)
    assert result.exit_code == 2
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_label_seed_uses_every_bit(trained_run, tmp_path):
    """`pate label --seed` with seeds that differ only above bit 64 releases different labels."""
    import shutil

    from pate.config import load_config
    from pate.steps.label import label

    workdir, _ = trained_run
    other = tmp_path / "other"
    shutil.copytree(workdir, other)
    cfg = load_config(workdir / "config.toml", {"aggregation.mechanism": "gnmax", "aggregation.sigma": 3.0})
    seed = 12345
    label(cfg, workdir, seed=seed, echo=lambda *a: None)
    label(cfg, other, seed=seed | (1 << 100), echo=lambda *a: None)
    a = np.load(workdir / "labels.npz")["labels"]
    b = np.load(other / "labels.npz")["labels"]
    assert not np.array_equal(a, b)
    assert math.isfinite(float(np.load(workdir / "labels.npz")["sigma"]))
