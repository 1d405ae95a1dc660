"""Fine-grained settings chosen on the public proxy with the release's noise (`pate.release.tuning`,
issues 53 and 55): `pate ceiling --tune` ranks every k × smoothing × weights (and map) candidate
from the public pool alone; `[fine_grained] votes_per_record = 0`, `smoothing = 0`,
`smoothing_weights = "auto"` are chosen by the same function when the release is drawn, recorded
in labels.npz and release.json, and a value the config sets wins."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import numpy as np
import pytest

from analysis.core.errors import PateError
from analysis.mechanisms import fine_grained as fg
from conftest import TINY, clean_and_poisoned_embeddings, invoke, one_line_error, write_embeddings
from pate import data
from pate.config import load_config
from pate.release import public_proxy, tuning
from pate.release.labels import read_labels
from pate.store import rundir

#: Rows of 16 features, 4 classes: a pool of 200 (the grid's smoothing clipped to 20), fine-grained.
ROWS = {"data.name": "npz", "data.public_size": 200, "features.map": "none", "fine_grained.pca": 8,
        "aggregation.mechanism": "fine-grained"}
#: Synthetic images, a pool of 400 (the whole grid), as tests/release/test_ceiling.py's.
IMAGES = {"data.name": "synthetic", "data.public_size": 400, "data.synthetic_train_size": 1000,
          "data.synthetic_test_size": 600, "data.synthetic_noise": 0.6, "data.synthetic_classes": 10,
          "features.map": "pixels", "fine_grained.pca": 16}
AUTO = {"fine_grained.votes_per_record": 0, "fine_grained.smoothing": 0, "fine_grained.smoothing_weights": "auto"}


def _config(path, **extra):
    return load_config(TINY, {**ROWS, "data.path": str(path), **extra})


def _sets(values: dict) -> list[str]:
    return [a for key, value in values.items() for a in ("--set", f"{key}={json.dumps(value)}")]


def _quiet(*_):
    return None


# --------------------------------------------------------------------------- the grid and the noise


def test_the_grid_is_clipped_to_the_pool_as_the_defaults_clip_the_smoothing():
    """k ∈ {1, 2, 4}, m ∈ {10, 20, 40}, both weights; m at most pool / 10, k at most m; a value
    the config sets is that value alone, unclipped."""
    full = tuning.grid(9000)
    assert len(full) == 18 and {c.votes_per_record for c in full} == {1, 2, 4}
    assert {c.smoothing for c in full} == {10, 20, 40} and {c.smoothing_weights for c in full} == {"uniform", "harmonic"}
    assert {c.smoothing for c in tuning.grid(200)} == {10, 20} and len(tuning.grid(200)) == 12
    small = tuning.grid(30)  # m: 3; k: 1, 2, 3
    assert {(c.votes_per_record, c.smoothing) for c in small} == {(1, 3), (2, 3), (3, 3)}
    cfg = load_config(TINY, {**AUTO, "fine_grained.votes_per_record": 5, "fine_grained.smoothing_weights": "uniform"})
    fixed = tuning.grid(30, cfg.fine_grained)
    assert {(c.votes_per_record, c.smoothing, c.smoothing_weights) for c in fixed} == {(5, 3, "uniform")}


def test_the_proxy_noise_is_the_releases_with_its_scale_divided_by_the_factor():
    """Votes per cell over the noise's scale match the release's: the factor is (N / P) / (n / (P - n));
    the Laplace scale (2k / eps) and the Gaussian's s.d. are divided by it, for every k."""
    assert tuning.eps_factor(60000, 9000) == pytest.approx(60000 / 9000)
    assert tuning.eps_factor(1000, 401) == pytest.approx((1000 / 401) / (200 / 201))
    cfg = load_config(TINY).fine_grained
    for k in (1, 2, 4):
        lap = tuning.proxy_noise(cfg, 1e-5, k, 6.5)
        assert lap.kind == "laplace" and lap.votes == k
        assert float(lap.parameter) == pytest.approx(float(fg.laplace_noise(cfg.eps, k).parameter) / 6.5, rel=1e-5)
        gauss_cfg = dataclasses.replace(cfg, noise="gaussian", eps=2.0)
        gauss = tuning.proxy_noise(gauss_cfg, 1e-5, k, 4.0)
        real = fg.gaussian_noise(2.0, 1e-5, k)
        assert gauss.kind == "gaussian" and abs(gauss.parameter - real.parameter / 16) <= Fraction(1, 64)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    path = write_embeddings(tmp_path_factory.mktemp("rows") / "e.npz", train=600, test=260)
    return path, data.load_public(_config(path).data)


def test_each_candidate_is_scored_on_the_proxy_against_its_noiseless_labels(pool):
    """The noiseless column is `public_proxy.Problem`'s noiseless accuracy for every candidate;
    with almost no noise (eps 10^5 on the proxy) every draw gives exactly those labels; the draws are seeded
    (the same seed, the same table) and each row's spread is that of its draws."""
    path, public = pool
    config = _config(path, **{"fine_grained.eps": 1000.0})
    halves = public_proxy.cut(public.pool_x, public.pool_y, "none", 8)
    problem = public_proxy.Problem(halves.private_rows, halves.private_y, halves.pool_rows, halves.pool_y, 4, 4, 20)
    cands = tuning.grid(200)
    rows = tuning.score(halves, 4, config.fine_grained, 1e-5, 100.0, cands, draws=3)
    for c, r in zip(cands, rows):
        assert r["noiseless"] == problem.accuracy(c.votes_per_record, c.smoothing, None, None, c.smoothing_weights)
        assert r["mean"] == r["min"] == r["max"] == r["noiseless"] and r["std"] == 0.0
    noisy = _config(path, **{"fine_grained.eps": 0.05}).fine_grained
    once = tuning.score(halves, 4, noisy, 1e-5, 1.0, cands, draws=3)
    assert once == tuning.score(halves, 4, noisy, 1e-5, 1.0, cands, draws=3)
    assert any(r["std"] > 0 for r in once) and all(r["min"] <= r["mean"] <= r["max"] for r in once)
    assert np.mean([r["mean"] for r in once]) < np.mean([r["noiseless"] for r in once])  # noise only lowers


def test_randomized_response_at_the_source_is_drawn_on_the_stand_in_labels(pool):
    """With `label_noise = "randomized-response"` each draw randomises the stand-in labels first,
    at the config's own label_eps (not scaled): at label_eps 0.01 the labels are all but uniform,
    so even an almost noiseless release (eps 1000) labels near chance (4 classes)."""
    path, public = pool
    halves = public_proxy.cut(public.pool_x, public.pool_y, "none", 8)
    cands = tuning.grid(200)[:2]
    plain = _config(path, **{"fine_grained.eps": 1000.0}).fine_grained
    rr = _config(path, **{"fine_grained.eps": 1000.0, "fine_grained.label_noise": "randomized-response",
                          "fine_grained.label_eps": 0.01}).fine_grained
    clean = tuning.score(halves, 4, plain, 1e-5, 100.0, cands, draws=3)
    noisy = tuning.score(halves, 4, rr, 1e-5, 100.0, cands, draws=3)
    assert all(r["mean"] > 0.8 for r in clean) and all(r["mean"] < 0.45 for r in noisy)
    assert [r["noiseless"] for r in clean] == [r["noiseless"] for r in noisy]  # the cap: no randomisation


def test_the_winner_is_the_best_mean_with_ties_to_the_smaller_k_m_and_uniform(pool):
    path, public = pool
    made = tuning.tune(_config(path), public, echo=_quiet)
    means = [r["mean"] for r in made.rows]
    assert means == sorted(means, reverse=True) and made.winner == made.rows[0]
    tied = [{"mean": 0.5, "votes_per_record": k, "smoothing": m, "smoothing_weights": w}
            for k, m, w in ((2, 10, "uniform"), (1, 20, "harmonic"), (1, 20, "uniform"), (1, 10, "harmonic"))]
    best = sorted(tied, key=lambda r: tuning._order(r, 0))
    assert [(r["votes_per_record"], r["smoothing"], r["smoothing_weights"]) for r in best[:2]] == [
        (1, 10, "harmonic"), (1, 20, "uniform")]
    w = made.winner
    assert made.overrides() == (f"--set fine_grained.votes_per_record={w['votes_per_record']} --set "
                                f"fine_grained.smoothing={w['smoothing']} --set "
                                f"fine_grained.smoothing_weights='\"{w['smoothing_weights']}\"'")


# --------------------------------------------------------------------------- pate ceiling --tune


def test_ceiling_tune_reads_the_public_pool_only(tmp_path, monkeypatch, ledger_dir):
    """`pate ceiling --tune --json` on an .npz whose private rows are NaN (its loaders replaced by
    failures) prints the clean data set's very table; it leads with what it is, prints the
    winner and the `--set` line, spends nothing and writes nothing."""
    clean, poisoned = clean_and_poisoned_embeddings(tmp_path, train=600)
    expected = invoke("ceiling", "--config", TINY, *_sets({**ROWS, "data.path": clean}), "--tune", "--json")
    assert expected.exit_code == 0, expected.output
    text = invoke("ceiling", "--config", TINY, *_sets({**ROWS, "data.path": clean}), "--tune", "--draws", 2)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].startswith("pate ceiling --tune: benchmark output on the public proxy") and "no eps" in lines[0]
    assert lines[-3].startswith("best: votes_per_record") and lines[-2].startswith("use:  --set fine_grained.")

    def no_private_data(*_args, **_kw):
        raise AssertionError("the private split was loaded")

    monkeypatch.setattr(data, "load_dataset", no_private_data)
    monkeypatch.setattr(data, "load_npz", no_private_data)
    monkeypatch.chdir(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = invoke("ceiling", "--config", TINY, *_sets({**ROWS, "data.path": str(poisoned)}), "--tune", "--json")
    assert result.exit_code == 0, result.output
    out, reference = json.loads(result.stdout), json.loads(expected.stdout)
    assert out["benchmark_output"] is True and out["spends_eps"] == 0.0 and out["reads"] == "the public pool only"
    out.pop("seconds"), reference.pop("seconds")
    assert out == reference and len(out["candidates"]) == 12 and out["proxy"]["train_size"] == 600
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert not any(p.is_file() for p in ledger_dir.rglob("*"))


def test_ceiling_tune_with_maps_ranks_every_map_and_candidate_in_one_table():
    """`--tune --maps A,B --whiten both`: every map × whitening × candidate, best first; the
    winner's `--set` line names its map and whitening; a map's rows are its own tuning's."""
    from pate.release.ceiling import tune_maps

    config = load_config(TINY, IMAGES)
    ranked = tune_maps(config, ["pixels", "hog"], (False, True), draws=2, echo=_quiet)
    assert len(ranked.rows) == 4 * 18 and ranked.ranked
    assert [r["mean"] for r in ranked.rows] == sorted((r["mean"] for r in ranked.rows), reverse=True)
    assert {(r["map"], r["whiten"]) for r in ranked.rows} == {(m, w) for m in ("pixels", "hog") for w in (False, True)}
    w = ranked.winner
    assert ranked.settings()["features.map"] == w["map"] and f"--set features.whiten={str(w['whiten']).lower()}" in (
        ranked.overrides())
    alone = tune_maps(config, draws=2, echo=_quiet)
    mine = [{k: v for k, v in r.items() if k not in ("map", "whiten")} for r in ranked.rows
            if (r["map"], r["whiten"]) == ("pixels", False)]
    assert mine == [{k: v for k, v in r.items() if k not in ("map", "whiten")} for r in alone.rows]
    assert "features.map" not in alone.settings() and "map" not in alone.render().splitlines()[2]


def test_plain_ceiling_refuses_settings_left_to_the_proxy_in_one_line(tmp_path):
    path = write_embeddings(tmp_path / "e.npz", train=600, test=260)
    line = one_line_error(invoke("ceiling", "--config", TINY, *_sets({**ROWS, "data.path": path, **AUTO})), 1)
    assert "`pate ceiling --tune` chooses them" in line and "votes_per_record, smoothing, smoothing_weights" in line
    line = one_line_error(invoke("ceiling", "--config", TINY, *_sets({**ROWS, "data.path": path}), "--draws", 3), 2)
    assert "--draws applies with --tune" in line


# --------------------------------------------------------------------------- chosen when the release is drawn


def _release(path, run, **sets):
    """`pate label` of the rows' config with `sets` (as `pate run` calls it): its lines and labels.npz."""
    from pate.steps.label import label

    lines = []
    label(_config(path, **sets), run, echo=lines.append)
    return "\n".join(lines), read_labels(run / rundir.LABELS_NPZ)


def test_settings_left_to_the_proxy_are_chosen_there_recorded_and_published(tmp_path):
    """votes_per_record = 0, smoothing = 0, weights "auto": the release uses `tune`'s winner on the
    public pool (labels.npz's record and meta say which), config.toml keeps them left to the
    proxy, release.json says chosen-on-public-proxy; a data set whose private rows all differ
    (same count, same pool) gets the same choice."""
    path = write_embeddings(tmp_path / "e.npz", train=600, test=260)
    run = tmp_path / "run"
    output, labels = _release(path, run, **AUTO)
    expected = tuning.tune(_config(path), data.load_public(_config(path).data), echo=_quiet).winner
    meta = labels["meta"][tuning.META_KEY]
    assert (meta["votes_per_record"], meta["smoothing"], meta["smoothing_weights"]) == (
        expected["votes_per_record"], expected["smoothing"], expected["smoothing_weights"])
    assert meta["settings"] == "chosen-on-public-proxy" and meta["proxy_label_accuracy"] == expected["mean"]
    assert meta["chosen"] == ["votes_per_record", "smoothing", "smoothing_weights"] and meta["candidates"] == 12
    assert int(labels["votes_per_record"]) == expected["votes_per_record"]
    assert int(labels["smoothing"]) == expected["smoothing"]
    assert str(labels["smoothing_weights"]) == expected["smoothing_weights"]
    assert "chosen on the public proxy" in output and "no private record read" in output
    stored = load_config(run / rundir.CONFIG_TOML).fine_grained
    assert (stored.votes_per_record, stored.smoothing, stored.smoothing_weights) == (0, 0, "auto")
    result = invoke("analyze", "--workdir", run)
    assert result.exit_code == 0, result.output
    details = json.loads((run / rundir.RELEASE_JSON).read_text())["details"]
    assert details["settings_chosen"] == "chosen-on-public-proxy"
    assert details["settings_chosen_keys"] == "votes_per_record, smoothing, smoothing_weights"
    assert details["votes_per_record"] == expected["votes_per_record"] and details["smoothing"] == expected["smoothing"]

    with np.load(path) as f:
        arrays = dict(f)
    other = tmp_path / "other" / "e.npz"
    other.parent.mkdir()
    rng = np.random.default_rng(9)
    np.savez(other, **{**arrays, "x_train": rng.normal(size=arrays["x_train"].shape).astype(np.float32),
                       "y_train": rng.integers(0, 4, arrays["y_train"].shape)})
    _, relabelled = _release(other, tmp_path / "run-other", **AUTO)
    assert relabelled["meta"][tuning.META_KEY] == meta


@pytest.mark.slow
def test_a_run_with_settings_left_to_the_proxy_chooses_once(tmp_path):
    """`pate run` keeps the keys left to the proxy in config.toml as written, so a second run of the
    same config skips every step: no choice, release or charge again (slow: it trains a student)."""
    from pate.store import ledger as ledger_mod

    path = write_embeddings(tmp_path / "e.npz", train=240, test=150)
    config = tmp_path / "auto.toml"
    config.write_text(f'[data]\nname = "npz"\npath = {json.dumps(path)}\npublic_size = 100\n[aggregation]\n'
                      'mechanism = "fine-grained"\n[fine_grained]\nvotes_per_record = 0\nsmoothing = 0\n'
                      'smoothing_weights = "auto"\n[student]\nmethod = "supervised"\nsteps = 5\n')
    run = tmp_path / "run"
    first = invoke("run", "--config", config, "--workdir", run, "--no-progress")
    assert first.exit_code == 0, first.output
    assert "chosen on the public proxy" in first.output
    assert json.loads((run / rundir.RELEASE_JSON).read_text())["details"]["settings_chosen"] == tuning.CHOSEN
    second = invoke("run", "--config", config, "--workdir", run, "--no-progress")
    assert second.exit_code == 0, second.output
    assert "chosen on the public proxy" not in second.output and "[label] up to date: skipped" in second.output
    assert len(ledger_mod.Ledger.for_config(load_config(config)).releases()) == 1


def test_a_value_the_config_sets_wins_over_the_proxy(tmp_path):
    path = write_embeddings(tmp_path / "e.npz", train=600, test=260)
    _, labels = _release(path, tmp_path / "run", **{**AUTO, "fine_grained.votes_per_record": 3,
                                                   "fine_grained.smoothing_weights": "uniform"})
    meta = labels["meta"][tuning.META_KEY]
    assert meta["chosen"] == ["smoothing"] and meta["candidates"] == 2  # m ∈ {10, 20}
    assert int(labels["votes_per_record"]) == 3 and str(labels["smoothing_weights"]) == "uniform"
    _, fixed = _release(path, tmp_path / "fixed", **{"fine_grained.smoothing": 7})
    assert tuning.META_KEY not in fixed["meta"] and int(fixed["smoothing"]) == 7


def test_a_distributed_release_agrees_on_the_choice_before_any_record_is_read(tmp_path):
    """Every process settles from the same public values and says its choice at one agreement."""
    path = write_embeddings(tmp_path / "e.npz", train=600, test=260)
    said = []

    class Cluster:
        def agree_on(self, facts):
            said.append(dict(facts))

    config, made = tuning.settle(_config(path, **AUTO), Cluster(), echo=_quiet)
    assert len(said) == 1 and said[0]["fine_grained.votes_per_record (chosen on the public proxy)"] == str(
        config.fine_grained.votes_per_record)
    assert config.fine_grained.auto == () and made.winner["smoothing"] == config.fine_grained.smoothing
    assert tuning.settle(config, Cluster(), echo=_quiet) == (config, None) and len(said) == 1


def test_plan_and_audit_say_what_is_chosen_later(tmp_path):
    """`pate plan --config` prints the release's eps and charge (every candidate k's at most) and
    which keys the proxy chooses later; `pate audit --config` cannot audit an unchosen k."""
    fine = {"aggregation.mechanism": "fine-grained", "fine_grained.pca": 16}
    result = invoke("plan", "--config", TINY, *_sets({**fine, **AUTO}))
    assert result.exit_code == 0, result.output
    assert "chosen later      votes_per_record, smoothing, smoothing_weights" in result.output
    assert "pure eps 1 (delta 0)" in result.output and "k of 1, 2, 4" in result.output
    config = tmp_path / "c.toml"
    config.write_text(TINY.read_text().replace('mechanism = "lnmax"', 'mechanism = "fine-grained"', 1)
                      + "\n[fine_grained]\nvotes_per_record = 0\n")
    assert load_config(config).aggregation.mechanism == "fine-grained"
    line = one_line_error(invoke("audit", "--config", config, "--trials", 100), 2)
    assert "chosen on the public proxy when the release is drawn" in line


def test_the_config_takes_0_and_auto_and_refuses_the_rest():
    cfg = load_config(TINY, AUTO).fine_grained
    assert cfg.auto == ("votes_per_record", "smoothing", "smoothing_weights")
    assert load_config(TINY).fine_grained.auto == ()
    for key, value, match in (("fine_grained.votes_per_record", -1, "must be >= 1, or 0 (chosen on the public proxy)"),
                              ("fine_grained.smoothing", -2, "must be >= 1, or 0"),
                              ("fine_grained.smoothing_weights", "best", "fine_grained.smoothing_weights")):
        with pytest.raises(PateError, match=match.replace("(", r"\(").replace(")", r"\)")):
            load_config(TINY, {key: value})

