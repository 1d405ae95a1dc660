"""`pate ceiling`: what a feature map can give, measured before any private record is read.

On the public proxy (`pate.release.public_proxy`: the labelled public pool cut in two, its
first half standing in for the private records, its second half for the pool, the map and its
PCA fitted on the second half alone) and in the rows of the config's `[features] map`
(coefficients, pool PCA to `[fine_grained] pca`, unit norm), three figures, each scored
against the stand-in pool's true labels:

- **fine-grained, noiseless**: the labels a fine-grained release would give with no noise (and no
  randomized response) at the config's `votes_per_record`, `smoothing` and `smoothing_weights`
  (the cap of what noise can only lower);
- **forward 10-NN**: each stand-in pool point labelled by the plurality of its 10 nearest
  stand-in private records (the non-private neighbour reference);
- **a head at the teachers' shard size**: a linear head (the config's `[teachers]` model when it
  is a head, "linear" or "mlp") trained by the teachers' own program
  (`pate.programs.teacher_training`, vmapped) on the map's rows of as many stand-in private
  records as one teacher's shard holds (the private train split's size over
  `[teachers] num_teachers`; the size is read from a file header, never a record), on a few
  disjoint shards, the mean and spread of their accuracies.

Benchmark output on public data: the pool's labels are public under the benchmark protocol
(`pate.data.Splits`), no private record is read (`pate.data.load_public`), no ε is spent and
nothing is charged or written.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from analysis.core.errors import PateError
from analysis.mechanisms import fine_grained as fg
from pate.config import Config, TeachersConfig
from pate.data import PublicPool, load_public
from pate.programs import public_features
from pate.release import public_proxy, tuning

#: The forward k-NN's neighbours (the figure the docs and issue 45 quote as "forward 10-NN").
KNN = 10
#: Heads trained by default, each on its own shard of the stand-in private half.
HEADS = 5
#: What every report says first.
BANNER = ("benchmark output on the public proxy (the labelled public pool cut in two); no private record is read, "
          "no eps is spent, nothing is charged")


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """The report: the map, the proxy's sizes, the three figures and the time taken."""

    data: str
    feature_map: str
    pca: int
    stand_in_private: int
    stand_in_pool: int
    num_classes: int
    fine_grained: dict
    forward_knn: dict
    head: dict
    seconds: dict
    whiten: bool = False

    def to_json(self) -> dict:
        """The report as one JSON object (public values only)."""
        return {"report": "ceiling", "benchmark_output": True, "spends_eps": 0.0, "reads": "the public pool only",
                "note": BANNER, "data": self.data, "feature_map": self.feature_map, "pca": self.pca,
                "whiten": self.whiten,
                "proxy": {"stand_in_private": self.stand_in_private, "stand_in_pool": self.stand_in_pool,
                          "classes": self.num_classes},
                "fine_grained_noiseless": self.fine_grained, "forward_knn": self.forward_knn, "head": self.head,
                "seconds": self.seconds}

    def render(self) -> str:
        """The report as lines of text."""
        fine, knn, head, s = self.fine_grained, self.forward_knn, self.head, self.seconds
        shard = (f"one teacher's shard: {head['train_size']} / {head['num_teachers']} teachers = "
                 f"{head['shard_size']}")
        if head["trained_on"] < head["shard_size"]:
            shard += f"; the stand-in half holds only {head['trained_on']}, so one head on all of it"
        spread = (f" ± {head['std']:.3f} [{head['min']:.3f}, {head['max']:.3f}]" if head["heads"] > 1 else "")
        return "\n".join([
            f"pate ceiling: {BANNER}",
            f"proxy              {self.stand_in_private} stand-in private records, {self.stand_in_pool} stand-in pool "
            f"points ({self.data}, {self.num_classes} classes)",
            f"map                {self.feature_map}, pool PCA to {self.pca}"
            f"{' per part, whitened, each part to unit norm' if self.whiten else ''}, unit rows (fitted on the "
            "stand-in pool)",
            f"fine-grained       {fine['accuracy']:.4f}  noiseless labels (votes_per_record {fine['votes_per_record']}, "
            f"smoothing {fine['smoothing']} {fine['smoothing_weights']}): noise only lowers it",
            f"forward {knn['k']}-NN      {knn['accuracy']:.4f}  each stand-in pool point labelled by its {knn['k']} "
            "nearest stand-in private records",
            f"{head['model'] + ' head':<19}{head['mean']:.4f}{spread}  {head['heads']} head(s), "
            f"each on {head['trained_on']} stand-in private records ({shard}), {head['epochs']} epochs",
            f"time               {s['total']:.1f} s (data {s['data']:.1f}, map {s['map']:.1f}, fine-grained and "
            f"10-NN {s['neighbours']:.1f}, heads {s['heads']:.1f})",
        ])


def ceiling(config: Config, *, heads: int = HEADS, echo=print) -> Ceiling:
    """The ceilings of the config's `[features] map` on the public proxy (module docstring).

    Args:
      config: the run config: `[data]` (the pool), `[features] map`, `[fine_grained]` (votes,
        smoothing, PCA, scattering), `[teachers]` (the shard size and the heads' training).
      heads: heads to train, each on its own shard (fewer when the stand-in half holds fewer).
      echo: where progress lines go.

    Raises:
      PateError: a setting the proxy cannot honour (more votes or smoothing neighbours than the
        stand-in pool holds, a map that does not take the data), or a head that diverged.
    """
    if heads < 1:
        raise PateError(f"heads = {heads}: train at least one head")
    _check_fixed(config.fine_grained, "pate ceiling")
    settings = public_features.MapSettings.of(config)
    public_features.check_ready(config.features.map, settings)  # before any data
    start = time.perf_counter()
    seconds = {}
    cfg = config.fine_grained
    pool = load_public(config.data)
    seconds["data"] = time.perf_counter() - start
    n = int(pool.pool_y.shape[0])
    half = n // 2
    _check_proxy(cfg, n)
    public_features.check_input(config.features.map, pool.pool_x)  # one line before any work
    echo(f"ceiling: the map {config.features.map!r} and a PCA to {cfg.pca}"
         f"{' (whitened, one per part)' if config.features.whiten else ''} fitted on the stand-in pool "
         f"({n - half} public points)")
    t = time.perf_counter()
    proxy = public_proxy.cut(pool.pool_x, pool.pool_y, config.features.map, cfg.pca, settings=settings,
                             whiten=config.features.whiten)
    seconds["map"] = time.perf_counter() - t
    t = time.perf_counter()
    fine, knn = _neighbour_figures(cfg, proxy, pool.num_classes)
    seconds["neighbours"] = time.perf_counter() - t
    t = time.perf_counter()
    echo(f"ceiling: training {heads} head(s) at the teachers' shard size")
    head = head_accuracy(config.teachers, pool, proxy, heads)
    seconds["heads"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - start
    return Ceiling(pool.name, config.features.map, cfg.pca, half, n - half, pool.num_classes, fine, knn, head,
                   seconds, config.features.whiten)


@dataclasses.dataclass(frozen=True)
class Ranking:
    """`pate ceiling --maps`: candidate maps ranked on the public proxy by their noiseless
    fine-grained labels (then the forward 10-NN), each row a map, whether whitened, its width and
    its two figures and seconds."""

    data: str
    pca: int
    stand_in_private: int
    stand_in_pool: int
    fine_grained: dict  # the settings the noiseless labels used
    rows: tuple[dict, ...]
    seconds: float

    def to_json(self) -> dict:
        return {"report": "ceiling-ranking", "benchmark_output": True, "spends_eps": 0.0,
                "reads": "the public pool only", "note": BANNER, "data": self.data, "pca": self.pca,
                "proxy": {"stand_in_private": self.stand_in_private, "stand_in_pool": self.stand_in_pool},
                "fine_grained_noiseless": self.fine_grained, "forward_knn": {"k": KNN}, "ranking": list(self.rows),
                "seconds": self.seconds}

    def render(self) -> str:
        fine = self.fine_grained
        width = max([len("map")] + [len(r["map"]) for r in self.rows])
        lines = [f"pate ceiling: {BANNER}",
                 f"proxy: {self.stand_in_private} stand-in private records, {self.stand_in_pool} stand-in pool points "
                 f"({self.data}); pool PCA to {self.pca} (whitened: per part, each part to unit norm); noiseless "
                 f"fine-grained at votes_per_record {fine['votes_per_record']}, smoothing {fine['smoothing']} "
                 f"{fine['smoothing_weights']}; ranked by it",
                 f"{'rank':<5}{'map':<{width + 2}}{'whiten':<8}{'dims':>5}  {'fine-grained':>12}  "
                 f"{f'fwd {KNN}-NN':>10}  {'seconds':>8}"]
        for i, r in enumerate(self.rows, 1):
            lines.append(f"{i:<5}{r['map']:<{width + 2}}{'yes' if r['whiten'] else 'no':<8}{r['dims']:>5}  "
                         f"{r['fine_grained']:>12.4f}  {r['forward_knn']:>10.4f}  {r['seconds']:>8.1f}")
        lines.append(f"time: {self.seconds:.1f} s (each part's coefficients computed once for every map that joins it)")
        return "\n".join(lines)


def rank(config: Config, maps: list[str], whiten: tuple[bool, ...] = (), echo=print) -> Ranking:
    """Ranks candidate maps (`[features] map` values, each with the config's settings) on the
    public proxy by their noiseless fine-grained labels, then the forward 10-NN (module
    docstring; no heads); `whiten`: the whitening settings to try each map with (empty: the
    config's). Each part's coefficients of the pool are computed once for all the maps.

    Raises:
      PateError: a map name that is not one, a map whose public weights are missing, or settings the
        proxy cannot honour; before any data is read where it can be.
    """
    from pate.config.checks import check_map

    if not maps:
        raise PateError("--maps names no map; name one or more, e.g. --maps scattering,hog,scattering+hog")
    for name in maps:
        check_map("ceiling", "maps", name)
    _check_fixed(config.fine_grained, "pate ceiling --maps")
    settings = public_features.MapSettings.of(config)
    for name in maps:
        public_features.check_ready(name, settings)  # before any data
    whiten = tuple(whiten) or (config.features.whiten,)
    start = time.perf_counter()
    cfg = config.fine_grained
    pool = load_public(config.data)
    n = int(pool.pool_y.shape[0])
    half = n // 2
    _check_proxy(cfg, n)
    for name in maps:
        public_features.check_input(name, pool.pool_x)
    parts: dict = {}
    rows = []
    for name in maps:
        for w in whiten:
            echo(f"ceiling: {name}{' whitened' if w else ''}")
            t = time.perf_counter()
            proxy = public_proxy.cut(pool.pool_x, pool.pool_y, name, cfg.pca, settings=settings, whiten=w,
                                     parts=parts)
            fine, knn = _neighbour_figures(cfg, proxy, pool.num_classes)
            rows.append({"map": name, "whiten": bool(w), "dims": int(proxy.pool_rows.shape[1]),
                         "fine_grained": fine["accuracy"], "forward_knn": knn["accuracy"],
                         "seconds": round(time.perf_counter() - t, 1)})
    rows.sort(key=lambda r: (-r["fine_grained"], -r["forward_knn"]))
    fine = {"votes_per_record": cfg.votes_per_record, "smoothing": cfg.smoothing,
            "smoothing_weights": cfg.smoothing_weights}
    return Ranking(pool.name, cfg.pca, half, n - half, fine, tuple(rows), round(time.perf_counter() - start, 1))


def tune_maps(config: Config, maps: list[str] | None = None, whiten: tuple[bool, ...] = (), *,
              draws: int = tuning.DRAWS, echo=print) -> tuning.Tuning:
    """`pate ceiling --tune`: fine-grained PATE's k, smoothing and smoothing weights chosen on the
    public proxy with the release's own noise (`pate.release.tuning`), over the whole grid
    whatever the config sets (the table says what to set); with `maps`, every map (each with
    each of `whiten`; empty: the config's) × candidate in one table, best first. Reads the
    public pool alone; spends nothing, writes nothing.

    Raises:
      PateError: a map name that is not one, a map whose public weights are missing, a pool too
        small for the proxy; before any data is read where it can be.
    """
    from pate.config.checks import check_map

    names = list(maps) if maps else [config.features.map]
    for name in names:
        check_map("ceiling", "maps", name)
    settings = public_features.MapSettings.of(config)
    for name in names:
        public_features.check_ready(name, settings)  # before any data
    tries = tuple(whiten) or (config.features.whiten,)
    pool = load_public(config.data)
    pairs = [(name, bool(w)) for name in names for w in tries] if maps else []  # []: the config's map
    return tuning.tune(config, pool, maps=pairs, draws=draws, echo=echo)


def _check_fixed(cfg, command: str) -> None:
    """Refuses, in one line, settings left to the public proxy where `command` needs them fixed."""
    if cfg.auto:
        raise PateError(f"{command} measures the config's settings and fine_grained {', '.join(cfg.auto)} are left to "
                        "the public proxy (0 / \"auto\"): `pate ceiling --tune` chooses them, or set them")


def _check_proxy(cfg, n: int) -> None:
    """Refuses, in one line, settings the proxy of an `n`-point pool cannot honour."""
    half = n // 2
    too_many = [what for what, value, cap in (
        (f"fine_grained.votes_per_record = {cfg.votes_per_record}", cfg.votes_per_record, n - half),
        (f"fine_grained.smoothing = {cfg.smoothing}", cfg.smoothing, n - half),
        (f"the forward k-NN's {KNN} neighbours", KNN, half)) if value > cap]
    if too_many:
        raise PateError(f"the public proxy cuts the {n}-point pool into {half} stand-in private records and "
                        f"{n - half} stand-in pool points, too few for {' and '.join(too_many)}; raise "
                        "data.public_size (or lower the setting)")


def _neighbour_figures(cfg, proxy: public_proxy.Halves, num_classes: int) -> tuple[dict, dict]:
    """The noiseless fine-grained labels' and the forward 10-NN's accuracies on the proxy."""
    problem = public_proxy.Problem(proxy.private_rows, proxy.private_y, proxy.pool_rows, proxy.pool_y,
                                   num_classes, cfg.votes_per_record, cfg.smoothing)
    fine = {"votes_per_record": cfg.votes_per_record, "smoothing": cfg.smoothing,
            "smoothing_weights": cfg.smoothing_weights,
            "accuracy": problem.accuracy(cfg.votes_per_record, cfg.smoothing, None, None, cfg.smoothing_weights)}
    knn = {"k": KNN, "accuracy": public_proxy.forward_knn(proxy.private_rows, proxy.private_y, proxy.pool_rows,
                                                          proxy.pool_y, num_classes, KNN)}
    return fine, knn


def head_config(teachers: TeachersConfig, shard: int) -> TeachersConfig:
    """The `[teachers]` section the heads train with: its model when it is a head ("linear" or
    "mlp"), else a linear head, with its training keys; no image augmentation (the heads see
    rows of features); batches no larger than the shard."""
    model = teachers.model if teachers.model in ("linear", "mlp") else "linear"
    return dataclasses.replace(teachers, model=model, hidden=teachers.hidden if model == "mlp" else (), module="",
                               eval_flip=False, augment_shift=0, augment_flip=False,
                               batch_size=min(teachers.batch_size, shard))


def head_rows(rows: np.ndarray) -> np.ndarray:
    """The heads' inputs: the map's quantised unit rows as float32, scaled by √dims so that a
    coordinate's mean square is 1 (the rows the neighbour searches compare)."""
    return (np.asarray(rows, np.float64) * (math.sqrt(rows.shape[1]) / 2**fg.FEATURE_BITS)).astype(np.float32)


def head_accuracy(teachers: TeachersConfig, pool: PublicPool, proxy: public_proxy.Halves, heads: int) -> dict:
    """Heads trained by the teachers' program on disjoint shards of the stand-in private half,
    each of one teacher's shard size, scored on the stand-in pool (`ceiling`)."""
    import jax
    import jax.numpy as jnp

    from pate.programs.models import make_model
    from pate.programs.placement import Placement, unpad
    from pate.programs.teacher_training import init_teachers, make_epoch_fn, make_optimizer
    from pate.programs.voting import teacher_predictions

    shard = max(pool.train_size // teachers.num_teachers, 1)
    half = proxy.private_rows.shape[0]
    used = min(shard, half)
    count = max(min(heads, half // used), 1)
    tc = head_config(teachers, used)
    x_all, x_eval = head_rows(proxy.private_rows), head_rows(proxy.pool_rows)
    order = np.arange(count * used).reshape(count, used)
    placement = Placement(count)
    model = make_model(tc, pool.num_classes, placement.platform)
    tx = make_optimizer(tc, used // tc.batch_size)
    params, opt_state = init_teachers(model, tx, x_all.shape[1:], tc.seed, placement)
    x = placement.put(x_all[order])
    y = placement.put(proxy.private_y[order].astype(np.int32))
    ids = placement.teacher_ids()
    epoch_fn = make_epoch_fn(model, tx, tc, used, placement)
    finite = None
    for epoch in range(tc.epochs):
        params, opt_state, _, finite = epoch_fn(params, opt_state, x, y, ids, jnp.int32(epoch))
    jax.block_until_ready(params)
    if finite is not None and not bool(np.all(np.asarray(finite)[:count])):
        raise PateError(f"a head's training diverged (NaN or inf) at teachers.learning_rate = {tc.learning_rate:g}; "
                        "lower it")
    preds = teacher_predictions(unpad(params, count), model, x_eval, tc.eval_batch_size)
    accs = (preds == proxy.pool_y[None]).mean(axis=1)
    return {"model": tc.model, "heads": count, "train_size": pool.train_size, "num_teachers": teachers.num_teachers,
            "shard_size": shard, "trained_on": used, "epochs": tc.epochs, "batch_size": tc.batch_size,
            "learning_rate": tc.learning_rate, "mean": float(accs.mean()),
            "std": float(accs.std(ddof=1)) if count > 1 else 0.0, "min": float(accs.min()), "max": float(accs.max()),
            "accuracies": [float(a) for a in accs]}
