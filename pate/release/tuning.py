"""Fine-grained PATE's votes per record (k), smoothing (m) and smoothing weights chosen on the
public proxy with the release's own noise: `pate ceiling --tune`, and `[fine_grained]
votes_per_record = 0`, `smoothing = 0`, `smoothing_weights = "auto"` resolved when a release
is drawn (`settle`).

**The proxy** (`pate.release.public_proxy`): the labelled public pool cut in two, its first half
standing in for the private records, its second half for the pool, the map and its PCA fitted on
the second half alone, as a release fits them on the pool.

**The noise, scaled.** A release of N private records on a P-point pool with k votes a record puts
about N k / P votes in a point's cells; the discrete Laplace noise's scale is b = Δ₁/ε = 2k/ε
(replace-one), the discrete Gaussian's σ ∝ Δ₂ = √(2k) at a fixed (ε, δ). The proxy has n = ⌊P/2⌋
stand-in records for P − n stand-in points, about one a point where Fashion-MNIST's release has
60000 / 9000 ≈ 6.7. So the proxy draws the release's own noise (`fine_grained_release.noise_of`
at the config's ε, δ and each candidate k) with its scale divided by

    factor = (N / P) / (n / (P − n))          (`eps_factor`)

(Laplace: the scale 2k / (ε · factor), i.e. ε · factor; Gaussian: σ² / factor², on the sampler's
grid): the votes a cell gets over the noise's scale then match the real release's for every k, as
`bench/fine_grained.py --proxy-eps matched` matches them. Randomized response at the source, when
the config asks for it, randomises the stand-in labels at its own `label_eps` (local: no scaling).

**The choice.** Each candidate (k, m, weights) is scored by the stand-in pool's label accuracy
after one release of the stand-in histogram, `draws` times, by the exact samplers a release draws
with (`analysis.mechanisms.fine_grained.release`), from a seeded source: every figure here is
benchmark output on public data (no private value meets this noise), so the choice is
reproducible. A draw's one release at each k serves every (m, weights) of that k (paired
comparisons). The winner is the best mean; ties go to the smaller k, then the smaller m, then
uniform weights (`bench/fine_grained.py`'s rule), then the map named first.

**The grid**: k ∈ {1, 2, 4}, m ∈ {10, 20, 40}, weights uniform and harmonic, m at most the pool's
P / 10 (at least 1) and k at most m, as `pate.config.data_defaults` clips a left-out smoothing.
At release time (`settle`) a key the config sets keeps its value: the grid has that one.

What it reads: the public pool, its labels and the train split's record count
(`pate.data.load_public`: a file header's, public under replace-one); never a private record.
Nothing is charged or written.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import fine_grained as fg
from pate.config import Config, FineGrainedConfig
from pate.config.data_defaults import POOL_PER_NEIGHBOUR
from pate.programs import public_features
from pate.release import public_proxy

#: The candidates of each key (`grid`; the weights: every one of `fine_grained.SMOOTHING_WEIGHTS`).
VOTES = (1, 2, 4)
SMOOTHING = (10, 20, 40)
#: Noise draws per candidate, and the seed of the public benchmarking source.
DRAWS = 5
SEED = 0
#: What every report and record says first.
BANNER = ("benchmark output on the public proxy (the labelled public pool cut in two) with the release's noise; "
          "no private record is read, no eps is spent, nothing is charged")
#: labels.npz's meta key and release.json's value for settings chosen here.
META_KEY = "fine_grained_tuning"
CHOSEN = "chosen-on-public-proxy"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One setting of the release: k votes a record, m smoothing neighbours, their weights."""

    votes_per_record: int
    smoothing: int
    smoothing_weights: str


def grid(pool_size: int, cfg: FineGrainedConfig | None = None) -> tuple[Candidate, ...]:
    """The candidates for a pool of `pool_size` points (module docstring): `VOTES` × `SMOOTHING`
    × every smoothing weights, m clipped to max(1, pool // 10), k to m, duplicates dropped. With `cfg`, each
    key it sets (not 0 / "auto": `FineGrainedConfig.auto`) is that value alone, unclipped."""
    free = ("votes_per_record", "smoothing", "smoothing_weights") if cfg is None else cfg.auto
    cap = max(1, pool_size // POOL_PER_NEIGHBOUR)
    ks = VOTES if "votes_per_record" in free else (cfg.votes_per_record,)
    ms = tuple(min(m, cap) for m in SMOOTHING) if "smoothing" in free else (cfg.smoothing,)
    ws = fg.SMOOTHING_WEIGHTS if "smoothing_weights" in free else (cfg.smoothing_weights,)
    clip = "votes_per_record" in free
    return tuple(dict.fromkeys(Candidate(min(k, m) if clip else k, m, w) for k in ks for m in ms for w in ws))


def eps_factor(train_size: int, pool_size: int) -> float:
    """The proxy's scaling of the noise (module docstring): (N / P) / (n / (P − n)), n = ⌊P/2⌋."""
    half = pool_size // 2
    return (train_size / pool_size) / (half / (pool_size - half))


def proxy_noise(cfg: FineGrainedConfig, delta: float, votes: int, factor: float) -> fg.Noise:
    """The release's noise at k = `votes` (its ε, δ and kind: `fine_grained_release.noise_of`)
    with its scale divided by `factor` (module docstring)."""
    if cfg.noise == "laplace":
        return fg.laplace_noise(cfg.eps * factor, votes)
    real = fg.gaussian_noise(cfg.eps, delta, votes)
    return fg.Noise.gaussian(fg.variance_on_grid(float(real.parameter) / factor**2), votes)


def score(halves: public_proxy.Halves, num_classes: int, cfg: FineGrainedConfig, delta: float, factor: float,
          candidates: Sequence[Candidate], draws: int = DRAWS, seed: int = SEED) -> list[dict]:
    """Each candidate's stand-in pool label accuracy on the proxy `halves`: `draws` releases
    (a draw's release at each k shared by that k's candidates), mean, sample s.d., min, max, and
    the noiseless labels' accuracy (the cap noise only lowers), in the candidates' order."""
    if draws < 1:
        raise PateError(f"draws = {draws}: score at least one draw")
    n_pool = int(halves.pool_rows.shape[0])
    ks = sorted({c.votes_per_record for c in candidates})
    if max(ks) > n_pool or max(c.smoothing for c in candidates) > n_pool:
        raise PateError(f"the public proxy's stand-in pool holds {n_pool} points, too few for "
                        f"votes_per_record {max(ks)} and smoothing {max(c.smoothing for c in candidates)}: raise "
                        "data.public_size, or leave them to the proxy (0)")
    neighbours = fg.nearest_public(halves.private_rows, halves.pool_rows, max(ks))
    graph = fg.nearest_public(halves.pool_rows, halves.pool_rows, max(c.smoothing for c in candidates))
    truth = np.asarray(halves.pool_y)

    def accuracy(rows, c: Candidate) -> float:
        labels = fg.labels_and_margins(fg.smooth(rows, graph[:, :c.smoothing], c.smoothing_weights))[0]
        return float(np.mean(labels == truth))

    plain = {k: fg.vote_histogram(neighbours[:, :k], halves.private_y, n_pool, num_classes) for k in ks}
    noiseless = [accuracy(plain[c.votes_per_record], c) for c in candidates]
    noises = {k: proxy_noise(cfg, delta, k, factor) for k in ks}
    source = NoiseSource(seed)
    accs: list[list[float]] = [[] for _ in candidates]
    for _ in range(draws):
        voted = halves.private_y
        if cfg.label_noise == "randomized-response":
            voted = fg.randomized_response(halves.private_y, num_classes, cfg.label_eps, source)
        for k in ks:
            counts = plain[k] if voted is halves.private_y else fg.vote_histogram(neighbours[:, :k], voted, n_pool,
                                                                                  num_classes)
            released = fg.release(counts, noises[k], source)
            for i, c in enumerate(candidates):
                if c.votes_per_record == k:
                    accs[i].append(accuracy(released, c))
    rows = []
    for c, a, cap in zip(candidates, accs, noiseless):
        v = np.asarray(a)
        rows.append({**dataclasses.asdict(c), "mean": float(v.mean()),
                     "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "min": float(v.min()),
                     "max": float(v.max()), "noiseless": cap})
    return rows


def _order(row: dict, position: int) -> tuple:
    """Best first: the mean, then the smaller k, m, uniform weights, the earlier map."""
    return (-row["mean"], row["votes_per_record"], row["smoothing"], row["smoothing_weights"] != "uniform", position)


@dataclasses.dataclass(frozen=True)
class Tuning:
    """What the proxy chose: every candidate (best first; with several maps, each map ×
    candidate), the proxy's sizes and scaling, the draws."""

    data: str
    pca: int
    noise: str
    eps: float
    delta: float
    label_noise: str
    label_eps: float
    train_size: int
    pool_size: int
    factor: float
    draws: int
    seed: int
    rows: tuple[dict, ...]
    maps: tuple[tuple[str, bool], ...]
    chosen: tuple[str, ...]  # the keys the proxy chose (the grid's free ones)
    seconds: float
    ranked: bool = False  # candidate maps named (`pate ceiling --tune --maps`): the map is chosen too

    @property
    def winner(self) -> dict:
        return self.rows[0]

    @property
    def stand_in(self) -> tuple[int, int]:
        half = self.pool_size // 2
        return half, self.pool_size - half

    @property
    def proxy_eps(self) -> float:
        return self.eps * self.factor

    def settings(self) -> dict:
        """The winner as `--set` values (the map's too when several were ranked)."""
        w = self.winner
        out = {f"fine_grained.{key}": w[key] for key in ("votes_per_record", "smoothing", "smoothing_weights")}
        if self.ranked:
            out.update({"features.map": w["map"], "features.whiten": w["whiten"]})
        return out

    def overrides(self) -> str:
        """The `--set` options that use the winner (shell-quoted TOML values)."""
        def shown(v):
            return f"'\"{v}\"'" if isinstance(v, str) else str(v).lower()
        return " ".join(f"--set {key}={shown(v)}" for key, v in self.settings().items())

    def meta(self) -> dict:
        """labels.npz's record of a choice made at release time (public values only)."""
        w = self.winner
        return {"settings": CHOSEN, "chosen": list(self.chosen), "votes_per_record": w["votes_per_record"],
                "smoothing": w["smoothing"], "smoothing_weights": w["smoothing_weights"],
                "proxy_label_accuracy": w["mean"], "proxy_label_std": w["std"], "draws": self.draws,
                "candidates": len(self.rows), "proxy_eps": self.proxy_eps, "eps_factor": self.factor,
                "stand_in_private": self.stand_in[0], "stand_in_pool": self.stand_in[1]}

    def describe(self) -> str:
        """One line: what was chosen, on what."""
        w = self.winner
        return (f"fine-grained: {', '.join(self.chosen)} chosen on the public proxy: votes_per_record "
                f"{w['votes_per_record']}, smoothing {w['smoothing']} {w['smoothing_weights']} (best of "
                f"{len(self.rows)}: proxy labels {w['mean']:.4f} ± {w['std']:.4f} over {self.draws} seeded draws of "
                f"the release's noise scaled to the proxy, eps {self.eps:g} x {self.factor:.3g}); no private record read")

    def to_json(self) -> dict:
        half, rest = self.stand_in
        return {"report": "ceiling-tune", "benchmark_output": True, "spends_eps": 0.0,
                "reads": "the public pool only", "note": BANNER, "data": self.data, "pca": self.pca,
                "noise": self.noise, "eps": self.eps, "delta": self.delta, "label_noise": self.label_noise,
                "label_eps": self.label_eps,
                "proxy": {"stand_in_private": half, "stand_in_pool": rest, "train_size": self.train_size,
                          "pool_size": self.pool_size, "eps_factor": self.factor, "proxy_eps": self.proxy_eps},
                "draws": self.draws, "seed": self.seed, "winner": self.winner, "settings": self.settings(),
                "overrides": self.overrides(), "candidates": list(self.rows), "seconds": self.seconds}

    def render(self) -> str:
        half, rest = self.stand_in
        several = self.ranked
        width = max([len("map")] + [len(r["map"]) for r in self.rows])
        noise = f"{self.noise} noise at eps {self.eps:g}" + ("" if self.noise == "laplace" else f", delta {self.delta:g}")
        rr = (f"; each stand-in label randomised at label_eps {self.label_eps:g} first"
              if self.label_noise == "randomized-response" else "")
        lines = [f"pate ceiling --tune: {BANNER}",
                 f"proxy: {half} stand-in private records, {rest} stand-in pool points ({self.data}); the release's "
                 f"{noise}, its scale divided by {self.factor:.4g} = ({self.train_size} / {self.pool_size}) / "
                 f"({half} / {rest}) so votes per cell over the noise match the release{rr}; {self.draws} seeded "
                 f"draws each; pool PCA to {self.pca}",
                 (f"{'rank':<5}" + (f"{'map':<{width + 2}}{'whiten':<8}" if several else "")
                  + f"{'k':>3}{'m':>5}  {'weights':<10}{'labels':>8}{'s.d.':>8}{'min':>8}{'noiseless':>11}")]
        for i, r in enumerate(self.rows, 1):
            lines.append(f"{i:<5}" + (f"{r['map']:<{width + 2}}{'yes' if r['whiten'] else 'no':<8}" if several else "")
                         + f"{r['votes_per_record']:>3}{r['smoothing']:>5}  {r['smoothing_weights']:<10}"
                         f"{r['mean']:>8.4f}{r['std']:>8.4f}{r['min']:>8.4f}{r['noiseless']:>11.4f}")
        w = self.winner
        lines.append(f"best: " + (f"{w['map']}{' whitened' if w['whiten'] else ''}, " if several else "")
                     + f"votes_per_record {w['votes_per_record']}, smoothing {w['smoothing']} "
                     f"{w['smoothing_weights']}: proxy labels {w['mean']:.4f} ± {w['std']:.4f}")
        lines.append(f"use:  {self.overrides()}")
        lines.append(f"time: {self.seconds:.1f} s")
        return "\n".join(lines)


def tune(config: Config, pool, *, maps: Sequence[tuple[str, bool]] = (), candidates=None, draws: int = DRAWS,
         seed: int = SEED, chosen: tuple[str, ...] = ("votes_per_record", "smoothing", "smoothing_weights"),
         echo=print) -> Tuning:
    """Every candidate (the whole `grid` of the pool by default) on the public proxy of `pool`
    (a `pate.data.PublicPool`: the pool, its labels, the train split's count), for each map of
    `maps` ((name, whiten) pairs; empty: the config's `[features] map` and `whiten`), at the
    config's `[fine_grained]` noise, ε, δ (`[privacy] delta`) and randomized response; best first
    (module docstring). Each map part's coefficients of the pool are computed once. Named
    `maps` are ranked: the winner's map is part of the choice (`Tuning.settings`).

    Raises:
      PateError: a pool too small for the proxy, a map that does not take its inputs, or a set
        value the stand-in pool cannot hold.
    """
    start = time.perf_counter()
    cfg = config.fine_grained
    n = int(pool.pool_y.shape[0])
    ranked = bool(maps)
    maps = tuple(maps) or ((config.features.map, bool(config.features.whiten)),)
    candidates = grid(n, None) if candidates is None else tuple(candidates)
    settings = public_features.MapSettings.of(config)
    for name, _ in maps:
        public_features.check_ready(name, settings)
        public_features.check_input(name, pool.pool_x)
    factor = eps_factor(int(pool.train_size), n)
    parts: dict = {}
    rows = []
    for name, whiten in maps:
        echo(f"tune: {name}{' whitened' if whiten else ''}: {len(candidates)} candidates x {draws} draws on the "
             "public proxy")
        halves = public_proxy.cut(pool.pool_x, pool.pool_y, name, cfg.pca, settings=settings, whiten=whiten,
                                  parts=parts)
        scored = score(halves, int(pool.num_classes), cfg, config.privacy.delta, factor, candidates, draws, seed)
        rows += [{"map": name, "whiten": bool(whiten), **r} for r in scored]
    position = {m: i for i, m in enumerate(maps)}
    rows.sort(key=lambda r: _order(r, position[(r["map"], r["whiten"])]))
    return Tuning(pool.name, cfg.pca, cfg.noise, float(cfg.eps), float(config.privacy.delta), cfg.label_noise,
                  float(cfg.label_eps), int(pool.train_size), n, factor, draws, seed, tuple(rows), maps, chosen,
                  round(time.perf_counter() - start, 1), ranked)


def settle(config: Config, cluster=None, echo=print) -> tuple[Config, Tuning | None]:
    """``config`` with the `[fine_grained]` keys left to the proxy (`FineGrainedConfig.auto`)
    chosen by `tune` on the config's own map, over the grid of those keys (a key the config sets
    keeps its value), and the tuning (None, and nothing read, when no key is left to it). Reads
    the public pool alone (`pate.data.load_public`). With `cluster` (a distributed release), every
    process computes the same choice from the same public values and seed, and they agree on it
    (`pate.programs.cluster.Cluster.agree_on`) before any private record is read."""
    cfg = config.fine_grained
    if not cfg.auto:
        return config, None
    from pate.data import load_public

    public_features.check_ready(config.features.map, public_features.MapSettings.of(config))  # before any data
    pool = load_public(config.data)
    made = tune(config, pool, candidates=grid(int(pool.pool_y.shape[0]), cfg), chosen=cfg.auto, echo=echo)
    w = made.winner
    values = {key: w[key] for key in ("votes_per_record", "smoothing", "smoothing_weights")}
    if cluster is not None:
        cluster.agree_on({f"fine_grained.{k} (chosen on the public proxy)": str(v) for k, v in values.items()})
    echo(made.describe())
    return dataclasses.replace(config, fine_grained=dataclasses.replace(cfg, **values)), made
