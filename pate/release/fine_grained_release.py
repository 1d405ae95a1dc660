"""Fine-grained PATE as `pate label` releases it (`[aggregation] mechanism = "fine-grained"`):
labels for every point of the public pool from ONE noisy release of the private records' own
votes (`analysis.mechanisms.fine_grained`: the mechanism, its sensitivities, noise and proofs).

The steps, private values in capitals: the public map fitted on the pool
(`pate.programs.public_features`) and the pool's smoothing graph (public); each PRIVATE
record's `votes_per_record` nearest pool points, and the PRIVATE histogram of their votes,
which never leaves this function's memory; the one release (`analysis.mechanisms.fine_grained.release`:
exact discrete Laplace or Gaussian noise on every cell); the labels, post-processing of the
release. labels.npz then holds the pool's indices, its labels and this module's record of the
release (`record_arrays`); no count, vote or feature of a private record is written.

The guarantee is data-independent: pure ε (Laplace) or (ε, δ) from ρ-zCDP (Gaussian) under
replace-one, the same however many points are labelled; no data-dependent or sanitised ε
exists, so `pate analyze` reports the release's ε as its headline and draws nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from analysis.mechanisms import fine_grained
from analysis.reporting import report as report_mod
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from pate.config import Config, FineGrainedConfig
from pate.programs import public_features

#: The arrays of a fine-grained release in labels.npz besides ``indices``, ``labels`` and the
#: record's (`analysis.mechanisms.fine_grained.FineGrained.to_arrays`; `pate.release.labels.RELEASED_KEYS`
#: names them with the rest).
#: The settings that only post-process the release (the smoothing of its noisy rows): changing
#: them changes no privacy, but pate keeps the labels, not the noisy histogram, so applying them
#: to a finished release would need a new one (`pate.steps.pipeline` refuses to draw it silently).
POST_PROCESSING = ("fine_grained.smoothing", "fine_grained.smoothing_weights")
ARRAY_KEYS = ("release_eps", "release_delta", "smoothing", "smoothing_weights", "pca", "scattering", "feature_map",
              "label_noise", "label_eps")


def noise_of(cfg: FineGrainedConfig, delta: float) -> fine_grained.Noise:
    """The noise the section asks for, calibrated from public values only: discrete Laplace for
    pure ``cfg.eps``, or the discrete Gaussian for ``cfg.eps`` at ``delta`` (replace-one)."""
    if cfg.noise == "laplace":
        return fine_grained.laplace_noise(cfg.eps, cfg.votes_per_record)
    return fine_grained.gaussian_noise(cfg.eps, delta, cfg.votes_per_record)


@dataclasses.dataclass(frozen=True)
class FineGrainedRelease:
    """What one release made: labels.npz's arrays, its noise (public) and the pool's public
    margins (top smoothed score less the runner-up)."""

    arrays: dict
    noise: fine_grained.Noise
    eps: float
    delta: float
    margins: np.ndarray

    @property
    def record(self) -> fine_grained.FineGrained:
        """The release's mechanism record."""
        return fine_grained.FineGrained(self.noise)


def release(config: Config, splits, source: NoiseSource, echo=print) -> FineGrainedRelease:
    """The labels of every pool point of ``splits`` from one release of the private train
    split's votes (module docstring). ``source``: OS entropy for a real release."""
    cfg, delta = config.fine_grained, config.privacy.delta
    noise = noise_of(cfg, delta)  # refuses bad settings before any private value is read
    pool_size, num_classes = int(splits.pool_x.shape[0]), int(splits.num_classes)
    if cfg.votes_per_record > pool_size or cfg.smoothing > pool_size:
        raise PateError(f"fine_grained.votes_per_record ({cfg.votes_per_record}) and smoothing ({cfg.smoothing}) "
                        f"must be at most the {pool_size} points of the public pool")
    feature_map = config.features.map
    public_features.check_input(feature_map, splits.train_x)  # before any private value is read
    echo(f"fine-grained: the map {feature_map!r} ({_describe(cfg, feature_map)}) and a PCA to {cfg.pca} fitted on "
         f"the {pool_size} public pool points")
    fmap, pool_rows = public_features.fit(splits.pool_x, cfg.pca, scattering_j=cfg.scattering_j,
                                          scattering_l=cfg.scattering_l, groups=cfg.groups, feature_map=feature_map)
    graph = fine_grained.nearest_public(pool_rows, pool_rows, cfg.smoothing)
    echo(f"fine-grained: {splits.train_x.shape[0]} private records each vote for their {cfg.votes_per_record} "
         "nearest pool point(s)")
    neighbours = fine_grained.nearest_public(fmap.rows(splits.train_x), pool_rows, cfg.votes_per_record)
    votes_with = splits.train_y
    if cfg.label_noise == "randomized-response":  # each label randomised before it votes (label DP)
        echo(f"fine-grained: every private label replaced by k-ary randomized response at eps {cfg.label_eps:g}")
        votes_with = fine_grained.randomized_response(splits.train_y, num_classes, cfg.label_eps, source)
    noisy = fine_grained.release(fine_grained.vote_histogram(neighbours, votes_with, pool_size, num_classes),
                                 noise, source)  # the PRIVATE counts live only inside this call
    labels, margins = fine_grained.labels_and_margins(fine_grained.smooth(noisy, graph, cfg.smoothing_weights))
    if cfg.label_noise == "randomized-response":  # debiasing moves no label; margins in true votes
        margins = fine_grained.debias_margins(margins, num_classes, cfg.label_eps)
    eps = noise.eps(delta)
    used_delta = 0.0 if cfg.noise == "laplace" else float(delta)
    arrays = {"indices": np.arange(pool_size, dtype=np.int64), "labels": labels.astype(np.int32),
              **record_arrays(cfg, noise, eps, used_delta), "feature_map": np.array(feature_map)}
    return FineGrainedRelease(arrays, noise, eps, used_delta, margins)


def _describe(cfg: FineGrainedConfig, feature_map: str) -> str:
    return " + ".join(f"scattering J {cfg.scattering_j}, L {cfg.scattering_l}" if p.name == "scattering" else p.describe
                      for p in public_features.parts(feature_map))


def record_arrays(cfg: FineGrainedConfig, noise: fine_grained.Noise, eps: float, delta: float) -> dict:
    """labels.npz's record of the release: the mechanism, its exact noise and its guarantee."""
    return {**fine_grained.FineGrained(noise).to_arrays(),
            "release_eps": np.array(float(eps)), "release_delta": np.array(float(delta)),
            "smoothing": np.array(cfg.smoothing), "smoothing_weights": np.array(cfg.smoothing_weights),
            "pca": np.array(cfg.pca),
            "scattering": np.array(f"J {cfg.scattering_j}, L {cfg.scattering_l}, groups {cfg.groups}"),
            "label_noise": np.array(cfg.label_noise), "label_eps": np.array(float(cfg.label_eps))}


def report(labels: Mapping, delta: float, source: str = "labels.npz") -> report_mod.PrivacyReport:
    """`pate analyze`'s report of a fine-grained release: its ε is data-independent, computed
    from the recorded noise alone (no vote read); no data-dependent or sanitised row exists."""
    noise = fine_grained.FineGrained.from_arrays(labels, source).noise
    gaussian = noise.kind == "gaussian"
    eps = noise.eps(delta)
    headline_delta = float(delta) if gaussian else 0.0
    n = int(np.asarray(labels["indices"]).size)
    kind = (f"(eps, delta) from rho-zCDP, rho {float(noise.rho):.6g} (discrete Gaussian, sigma^2 {noise.parameter})"
            if gaussian else f"pure eps (discrete Laplace, scale {noise.parameter})")
    items = (
        report_mod.Item("eps", f"{report_mod.OWN_EPS} (one noisy histogram)", eps, True,
                        "data-independent: one release labels every pool point"),
        report_mod.Item("delta_total", report_mod.OWN_DELTA, headline_delta, True,
                        "pure: no delta" if not gaussian else "the discrete Gaussian's"),
        report_mod.Item("guarantee", "kind of guarantee", kind, True,
                        "no data-dependent or smooth-sensitivity analysis: none is needed"),
        report_mod.Item("labelled_points", "labelled pool points", n, True, "all of them, from one release"),
        report_mod.Item("votes_per_record", "votes per private record (k)", noise.votes, True,
                        f"L1 sensitivity {fine_grained.l1_sensitivity(noise.votes)} (replace-one)"),
        report_mod.Item("smoothing", "smoothing neighbours (public graph)", int(np.asarray(labels["smoothing"])), True,
                        f"post-processing; weights {str(np.asarray(labels.get('smoothing_weights', 'uniform')))}"),
        report_mod.Item("delta", "delta", float(delta), True),
    )
    if str(np.asarray(labels.get("label_noise", "none"))) == "randomized-response":
        label_eps = float(np.asarray(labels["label_eps"]))
        items += (report_mod.Item("label_eps", "label-DP eps of randomized response at the source", label_eps, True,
                                  "each private label randomised (k-ary RR, exact) before it voted: "
                                  "one record's label, its features kept; not the replace-one figure"),)
    return report_mod.PrivacyReport(mechanism=fine_grained.FineGrained.name, items=items)


def describe_plan(config: Config) -> str:
    """`pate plan --config` of a fine-grained config: the release's noise and its ε, fixed by
    the config alone (public values; no vote or private record is read)."""
    cfg, delta = config.fine_grained, config.privacy.delta
    noise = noise_of(cfg, delta)
    k = noise.votes
    guarantee = (f"pure eps {noise.eps():.6g} (delta 0)" if noise.kind == "laplace"
                 else f"eps {noise.eps(delta):.6g} at delta {delta:g} (rho-zCDP, rho {float(noise.rho):.6g})")
    return "\n".join([
        f"fine-grained: one release labels all {config.data.public_size} pool points; each private record votes for "
        f"its {k} nearest pool point(s) (replace-one sensitivity {fine_grained.l1_sensitivity(k)})",
        f"noise             exact discrete {noise.kind}, {'scale' if noise.kind == 'laplace' else 'variance'} "
        f"{noise.parameter}",
        f"headline          {guarantee}, replace-one: known now, whatever the data (nothing to plan)",
        f"ledger charge     {noise.cost().describe()}",
    ])
