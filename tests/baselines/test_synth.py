"""`pate synth` (PATE-GAN): one test per defect the PATE-GAN audit (Ganev, Annamalai & De
Cristofaro, arXiv 2406.13985) found in public implementations, each written to fail on it:
teachers not on disjoint, fixed shards; noise at the wrong scale or on the wrong labels; an
accountant that disagrees with a plain second implementation; data-dependent scaling; a
query count that depends on the data. Theorem 3's precondition (LNMax moments bound) has no
test because the votes use GNMax, whose data-independent RDP needs none. And the command on
the tiny config through the CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import optimize, stats

from analysis.mechanisms import composition
from analysis.mechanisms.noisy_max import GNMax
from analysis.core.noise import NoiseSource
from conftest import TINY, check_synthetic_release, invoke, spied_synth
from pate.release import aggregation
from pate.store import rundir
from pate.config import load_config
from pate.data import load_npz, partition
from pate.baselines import synth, synthetic_scores as synth_eval
from pate.baselines.pate_gan import REAL, GanSpec, PateGan, noisy_labels, teacher_shards, train

# The tiny config's GAN on data of the tiny config's shapes (8x8x1 images, 4 classes, 6
# shards of 80): the unit tests and the CLI run share every compiled program
# (`pate.baselines.pate_gan` caches them per spec; same shapes, so no retracing).
SHAPE, CLASSES, TEACHERS, POINTS = (8, 8, 1), 4, 6, 480
SPEC = GanSpec.of(load_config(TINY).synth, SHAPE, CLASSES)


def _data(seed: int = 0, n: int = POINTS):
    rng = np.random.default_rng(seed)
    return rng.random((n, *SHAPE)).astype(np.float32), rng.integers(0, CLASSES, n).astype(np.int32)


def _leaves(tree) -> list:
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _teacher(params, t: int) -> list:
    return [x[t] for x in _leaves(params)]


# --------------------------------------------------------------------------- disjoint, fixed shards


@pytest.fixture(scope="module")
def neighbour_teachers():
    """The teachers after three rounds (generator fixed) on D and on D' = D with the
    examples of shard J replaced (all of them, so that teacher J's few batches surely read
    one; a replace-one neighbour is the case of one)."""
    x, y = _data()
    part = partition(x.shape[0], TEACHERS, seed=0)
    x2 = x.copy()
    x2[part.indices[J]] = 1.0 - x2[part.indices[J]]  # shard J's examples replaced, no other
    out = []
    for data in (x, x2):
        gan = PateGan(SPEC, *teacher_shards(data, y, part.indices))
        for s in range(3):
            gan.update_teachers(s)
        out.append(gan.teacher_params())
    return out


J = 2


def test_changing_shard_j_changes_teacher_j_only(neighbour_teachers):
    """Fails on one discriminator trained on all data (every teacher changes), on a stale
    index giving every teacher the same shard (teacher J does not change) and on a new
    permutation every round (the replaced example reaches other teachers)."""
    a, b = neighbour_teachers
    for t in range(TEACHERS):
        same = all(np.array_equal(u, v) for u, v in zip(_teacher(a, t), _teacher(b, t)))
        assert same == (t != J), t


@pytest.mark.slow  # 6 s; test_changing_shard_j_changes_teacher_j_only stays fast
def test_every_teacher_holds_its_own_fixed_partition():
    x, y = _data()
    part = partition(x.shape[0], TEACHERS, seed=0)
    assert np.array_equal(part.indices, partition(x.shape[0], TEACHERS, seed=0).indices)  # fixed by the seed
    flat = part.indices.ravel()
    assert np.unique(flat).size == flat.size  # disjoint
    gan = PateGan(SPEC, *teacher_shards(x, y, part.indices))
    before = [np.array(a) for a in gan.shards]
    train(gan, 3, GNMax(2.0), NoiseSource(1))
    xs, ys = (np.asarray(a)[:TEACHERS] for a in gan.shards)
    for t in range(TEACHERS):
        assert np.array_equal(xs[t], x[part.indices[t]]) and np.array_equal(ys[t], y[part.indices[t]])
    assert all(np.array_equal(u, np.asarray(v)) for u, v in zip(before, gan.shards))  # same after training


# --------------------------------------------------------------------------- the noise on the votes


@pytest.mark.parametrize("real", [2, 7, 9])
def test_noisy_vote_matches_its_law_by_monte_carlo(real):
    """P(label real) = Φ((n_real − n_fake)/(σ√2)) for GNMax with σ on two counts; fails
    for Laplace/Gaussian scale 1/σ, σ², or noise of another size."""
    sigma, teachers, draws = 4.0, 10, 40_000
    votes = np.tile([teachers - real, real], (draws, 1))
    labels = noisy_labels(votes, GNMax(sigma), NoiseSource(11, stream=synth.NOISE_STREAM))
    p = stats.norm.cdf((2 * real - teachers) / (sigma * math.sqrt(2)))
    se = math.sqrt(p * (1 - p) / draws)
    assert abs(np.mean(labels == REAL) - p) < 5 * se
    for wrong in (1 / sigma, sigma**2, 2 * sigma):
        q = stats.norm.cdf((2 * real - teachers) / (wrong * math.sqrt(2)))
        assert abs(q - p) > 20 * se  # the test tells these scales apart


# --------------------------------------------------------------------------- the accountant


def _gdp_eps_plain(sigma: float, queries: int, delta: float) -> float:
    """Exact ε of ``queries`` Gaussian answers of L2 sensitivity √2 at σ: μ² summed over the
    queries in a loop (Dong, Roth & Su 2022, Cor. 3.3), ε from Balle & Wang 2018, Thm 8."""
    mu2 = 0.0
    for _ in range(queries):
        mu2 += (math.sqrt(2.0) / sigma) ** 2
    mu = math.sqrt(mu2)

    def excess(eps):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta

    return optimize.brentq(excess, 0.0, 200.0, xtol=1e-12)


@pytest.mark.parametrize("eps, queries", [(1.0, 50), (10.0, 400), (0.3, 7)])
def test_planned_sigma_and_eps_match_a_plain_loop(eps, queries):
    delta = 1e-5
    cfg = load_config(TINY, {"synth.eps": eps, "synth.steps": queries, "synth.batch_size": 1}).synth
    plan = synth.Plan.of(cfg, delta)
    sigma = plan.mechanism.sigma
    assert plan.queries == queries
    assert plan.cost.params["mu2"] == pytest.approx(sum(2.0 / sigma**2 for _ in range(queries)), rel=1e-12)
    exact = _gdp_eps_plain(sigma, queries, delta)
    assert exact <= plan.eps + 1e-9 and plan.eps == pytest.approx(exact, rel=2e-3)  # sound and tight
    assert plan.eps <= eps
    assert _gdp_eps_plain(sigma / 1.002, queries, delta) > eps  # the least noise that fits
    assert composition.single_eps(GNMax(sigma).cost(queries), delta) == plan.eps  # the ledger's figure


def test_query_count_is_independent_of_the_private_data(monkeypatch):
    """Two different private data sets (other values, other size): the same plan and the
    same number of noisy votes, every step; no stopping rule reads the data."""
    calls = []
    real_run = aggregation.run
    monkeypatch.setattr(aggregation, "run", lambda v, m, s: calls.append(len(v)) or real_run(v, m, s))
    cfg = load_config(TINY).synth
    counts = []
    for seed, n in ((0, POINTS), (1, POINTS + TEACHERS - 1)):  # other values, other size, same shard shape
        x, y = _data(seed, n)
        gan = PateGan(SPEC, *teacher_shards(x, y, partition(n, TEACHERS, seed=0).indices))
        calls.clear()
        counts.append((train(gan, 4, GNMax(3.0), NoiseSource(2)), list(calls)))
    assert counts[0] == counts[1] == (4 * SPEC.synth.batch_size, [SPEC.synth.batch_size] * 4)
    assert synth.Plan.of(cfg, 1e-5) == synth.Plan.of(cfg, 1e-5)  # config and delta only


# --------------------------------------------------------------------------- scaling


def test_scaling_uses_public_bounds_only(tmp_path):
    """A dark data set (pixels <= 100) is not stretched to [0, 1]: pixels / 255, each on its own."""
    rng = np.random.default_rng(0)
    dark = rng.integers(0, 101, (20, 4, 4)).astype(np.uint8)
    path = tmp_path / "d.npz"
    np.savez(path, x_train=dark, y_train=np.zeros(20, np.int64), x_test=dark[:5], y_test=np.zeros(5, np.int64))
    loaded = load_npz(str(path)).x_train
    assert np.allclose(loaded[..., 0], dark / 255.0)
    image = loaded[:1]
    alone = synth_eval.public_scale(image)
    with_bright = synth_eval.public_scale(np.concatenate([image, np.ones_like(image)]))[:1]
    assert np.array_equal(alone, image) and np.array_equal(alone, with_bright)


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def tiny_synth(tmp_path_factory):
    """`pate synth` on the tiny config through the CLI, with spies on the aggregator (votes
    in, labels out), on the student's labels and on the partition."""
    from pate import data
    from pate.baselines import pate_gan as synth_gan

    workdir = tmp_path_factory.mktemp("synth") / "run"
    ledger = tmp_path_factory.mktemp("synth-ledger")
    seen = {"votes": [], "noisy": [], "student": [], "partitions": 0, "mechanisms": set()}
    real_run, real_partition = aggregation.run, data.partition
    real_post = synth_gan.PateGan.update_student_and_generator

    def run(votes, mechanism, source):
        labels = real_run(votes, mechanism, source)
        seen["votes"].append(np.array(votes))
        seen["noisy"].append(np.array(labels))
        seen["mechanisms"].add(mechanism)
        return labels

    def post(self, s, x, y, labels):
        seen["student"].append(np.array(labels))
        return real_post(self, s, x, y, labels)

    def count_partition(*args, **kwargs):
        seen["partitions"] += 1
        return real_partition(*args, **kwargs)

    seed = 2**127 + 987654321987654321
    result = spied_synth(workdir, ledger, seed, [(aggregation, "run", run), (data, "partition", count_partition),
                                                 (synth_gan.PateGan, "update_student_and_generator", post)],
                         "--method", "gan")
    return workdir, ledger, result.output, seed, seen


def test_tiny_run_through_the_cli(tiny_synth):
    workdir, ledger, output, seed, _ = tiny_synth
    cfg = load_config(TINY)
    info = json.loads((workdir / rundir.SYNTH_JSON).read_text())
    queries = cfg.synth.steps * cfg.synth.batch_size
    assert info["queries"] == queries and info["teachers"] == cfg.teachers.num_teachers
    assert info["neighbouring_relation"] == "replace-one" and info["mechanism"]["num_classes"] == 2
    assert info["sigma"] == pytest.approx(synth.calibrate_sigma(cfg.synth.eps, cfg.privacy.delta, queries))
    assert 0.99 * cfg.synth.eps < info["release_eps"] <= cfg.synth.eps and info["release_delta"] == cfg.privacy.delta
    tstr = info["train_on_synthetic_test_on_real"]
    assert 0 <= tstr["logistic_regression"] <= 1 and 0 <= tstr["cnn"] <= 1
    assert info["research_seed"] is True and not [k for k in info if "time" in k or "vote" in k]
    entries = check_synthetic_release(workdir, ledger, seed, cfg.synth.samples)
    assert entries[0]["cost"] == {"kind": "gaussian", "mu2": pytest.approx(2 * queries / info["sigma"] ** 2)}
    # the float64 votes' total variation counts in the data set's δ, as a label release's does
    from analysis.core.noise import sampling_tv
    assert sampling_tv(queries, 2) > 0 and entries[0]["sampling_tv"] == pytest.approx(sampling_tv(queries, 2))
    assert "synth eps" in output


def test_ledger_import_of_a_synth_run_charges_it_once(tiny_synth):
    """`pate ledger --import` once refused a synth run; now it knows it by its samples: the
    run's own charge is recognised, and a fresh ledger is charged once."""
    from pate.steps.ledger_import import import_run

    workdir, _, _, _, _ = tiny_synth
    assert import_run(workdir, echo=lambda *_: None) == []  # `pate synth` charged it already
    written = import_run(workdir, name="fresh", echo=lambda *_: None)
    info = json.loads((workdir / rundir.SYNTH_JSON).read_text())
    assert [(e["kind"], e["cost"]) for e in written] == [("synth", info["cost"])]
    assert import_run(workdir, name="fresh", echo=lambda *_: None) == []


def test_the_noise_is_on_the_votes_and_the_student_learns_the_noisy_labels(tiny_synth):
    """The aggregator gets whole-teacher vote histograms (integers, rows summing to T, no
    noise added before) at the planned σ, once a step; the student trains on exactly what
    it returned (no noise on the discriminators' labels instead)."""
    workdir, _, _, _, seen = tiny_synth
    cfg = load_config(TINY)
    info = json.loads((workdir / rundir.SYNTH_JSON).read_text())
    assert len(seen["votes"]) == cfg.synth.steps
    for votes in seen["votes"]:
        assert votes.shape == (cfg.synth.batch_size, 2) and np.issubdtype(votes.dtype, np.integer)
        assert (votes.sum(axis=1) == cfg.teachers.num_teachers).all()
    assert [np.array_equal(a, b) for a, b in zip(seen["noisy"], seen["student"])] == [True] * cfg.synth.steps
    assert seen["mechanisms"] == {GNMax(info["sigma"])}
    assert seen["partitions"] == 1  # cut once, before training


def test_bad_options_and_config_are_one_line_errors(tmp_path):
    result = invoke("synth", "--config", TINY, "--workdir", tmp_path / "r", "--eps", "-1")
    assert result.exit_code == 2 and "--eps" in result.output
    result = invoke("synth", "--config", TINY, "--workdir", tmp_path / "r", "--set", "synth.batch_size=0")
    assert result.exit_code == 1 and "synth.batch_size" in result.output
    assert not (tmp_path / "r" / rundir.SYNTH_JSON).exists()


# --------------------------------------------------------------------------- the public-pool student

PUBLIC_SPEC = dataclasses.replace(SPEC, synth=dataclasses.replace(SPEC.synth, public_real=True, gan_steps=2,
                                                                      warmup_steps=1, teacher_fakes="both"))


@pytest.mark.slow  # 12 s; the tiny run's noise-on-the-votes test (test_the_noise_is_on_the_votes_...) stays fast
def test_the_generator_reads_the_private_data_only_through_the_votes(monkeypatch):
    """public_real: the same noisy labels replayed on a run whose private images are all NaN
    give the same generator and students, to the bit (the teachers, which read the shards,
    do change): the public pool, the config and the released labels are all the student
    and the generator see. Fails if either reads a shard, a vote or a teacher."""
    x, y = _data()
    public = np.random.default_rng(5).random((40, *SHAPE)).astype(np.float32)
    indices = partition(x.shape[0], TEACHERS, seed=0).indices
    released, real_run = [], aggregation.run
    monkeypatch.setattr(aggregation, "run", lambda v, m, s: released.append(real_run(v, m, s)) or released[-1])
    a = PateGan(PUBLIC_SPEC, *teacher_shards(x, y, indices), public_x=public)
    assert train(a, 3, GNMax(2.0), NoiseSource(3)) == 3 * SPEC.synth.batch_size
    replay = iter(released)
    monkeypatch.setattr(aggregation, "run", lambda v, m, s: next(replay))
    b = PateGan(PUBLIC_SPEC, *teacher_shards(np.full_like(x, np.nan), y, indices), public_x=public)
    train(b, 3, GNMax(2.0), NoiseSource(3))
    assert len(released) == 3 and 0 < np.mean(np.concatenate(released)) < 1  # both labels occur
    for left, right in ((a.generator, b.generator), (a.student, b.student), (a.public_student, b.public_student)):
        assert all(np.array_equal(u, v) and np.isfinite(u).all() for u, v in zip(_leaves(left), _leaves(right)))
    assert all(np.isnan(leaf).any() for leaf in _leaves(b.teacher_params()) if leaf.ndim == 3)  # kernels
    assert not np.array_equal(_leaves(a.generator)[0], _leaves(PateGan(PUBLIC_SPEC, *teacher_shards(x, y, indices),
                                                                       public_x=public).generator)[0])


@pytest.mark.slow  # 6 s; the default fakes' partition test (test_changing_shard_j_changes_teacher_j_only) stays fast
def test_mismatched_teachers_change_with_their_own_shard_only():
    """teacher_fakes = "mismatched" (the teachers' own images under a wrong class as fakes):
    replacing shard J's examples still changes teacher J alone."""
    spec = dataclasses.replace(PUBLIC_SPEC, synth=dataclasses.replace(PUBLIC_SPEC.synth, teacher_fakes="mismatched"))
    x, y = _data()
    part = partition(x.shape[0], TEACHERS, seed=0)
    x2 = x.copy()
    x2[part.indices[J]] = 1.0 - x2[part.indices[J]]
    out = []
    for data in (x, x2):
        gan = PateGan(spec, *teacher_shards(data, y, part.indices), public_x=x[:10])
        for s in range(2):
            gan.update_teachers(s)
        out.append(gan.teacher_params())
    for t in range(TEACHERS):
        same = all(np.array_equal(u, v) for u, v in zip(_teacher(out[0], t), _teacher(out[1], t)))
        assert same == (t != J), t


PUBLIC_OPTIONS = ("--set", "synth.public_real=true", "--set", "synth.gan_steps=2", "--set", "synth.warmup_steps=1",
                  "--set", "synth.teacher_fakes=\"mismatched\"")


@pytest.mark.slow  # 14 s; the pool's privacy test stays fast
def test_tiny_public_pool_run_through_the_cli_is_charged_as_before(tmp_path):
    """The public-pool PATE-GAN through the CLI: the planned steps x batch_size votes (the
    warm-up and the gan_steps add none), the student's labels are the aggregator's, and the
    ledger's charge is the same GNMax cost as without the public pool."""
    seen = {"votes": [], "noisy": []}
    real_run = aggregation.run

    def run(votes, mechanism, source):
        seen["votes"].append(np.array(votes))
        seen["noisy"].append(real_run(votes, mechanism, source))
        return seen["noisy"][-1]

    seed = 2**126 + 123456789
    workdir, ledger = tmp_path / "run", tmp_path / "ledger"
    spied_synth(workdir, ledger, seed, [(aggregation, "run", run)], "--method", "gan", *PUBLIC_OPTIONS)
    cfg = load_config(TINY).synth
    info = json.loads((workdir / rundir.SYNTH_JSON).read_text())
    queries = cfg.steps * cfg.batch_size
    assert info["queries"] == queries and len(seen["votes"]) == cfg.steps
    assert info["synth"]["public_real"] is True and info["synth"]["teacher_fakes"] == "mismatched"
    assert info["sigma"] == pytest.approx(synth.calibrate_sigma(cfg.eps, load_config(TINY).privacy.delta, queries))
    entries = check_synthetic_release(workdir, ledger, seed, cfg.samples)
    assert entries[0]["cost"] == {"kind": "gaussian", "mu2": pytest.approx(2 * queries / info["sigma"] ** 2)}


@pytest.mark.parametrize("setting, key", [("synth.public_real=\"yes\"", "synth.public_real"),
                                          ("synth.gan_steps=0", "synth.gan_steps"),
                                          ("synth.warmup_steps=-1", "synth.warmup_steps"),
                                          ("synth.teacher_fakes=\"real\"", "synth.teacher_fakes"),
                                          ("synth.gan_steps=5", "synth.gan_steps")])  # without public_real
def test_public_pool_settings_are_one_line_refusals(tmp_path, setting, key):
    result = invoke("synth", "--config", TINY, "--workdir", tmp_path / "r", "--method", "gan", "--set", setting)
    assert result.exit_code == 1 and key in result.output and result.output.strip().count("\n") == 0, result.output
    assert not (tmp_path / "r" / rundir.SYNTH_JSON).exists()


def test_a_bad_method_option_is_a_usage_error(tmp_path):
    result = invoke("synth", "--config", TINY, "--workdir", tmp_path / "r", "--method", "public-gan")
    assert result.exit_code == 2 and "--method" in result.output
