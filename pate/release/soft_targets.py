"""The student's soft targets (`[student] targets = "posterior"`, issue 55): from a fine-grained
release's noisy histogram, each labelled pool point's posterior over the label the release would
have given without its noise (`analysis.mechanisms.fine_grained.label_posterior`: ALIBI-style,
under a flat prior on the counts), instead of the released label alone.

Everything here is public: the released `noisy_counts` (labels.npz), the release's noise law (its
record), and the smoothing graph, which is recomputed from the public pool under the map the config
names, exactly as the release computed it (`pate.release.fine_grained_release.public_side`). The
recomputed graph must give back every released label, else the targets are refused: a config whose
map is not the release's would otherwise train the student on another release's neighbourhoods.
Post-processing of the release: no ε, nothing charged.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import fine_grained, registry
from pate.config import Config
from pate.release import fine_grained_release
from pate.release.labels import Release, read_labels

#: Monte Carlo draws of the noise (each draw one argmax per pool point): each target probability p
#: has a standard error sqrt(p (1 - p) / DRAWS), at most 1/(2 sqrt(DRAWS)) = 0.0625.
DRAWS = 64

#: The stream of the student's seed the draws come from (post-processing: a fixed seed leaks nothing).
STREAM = 1 << 40


def check_config(config: Config) -> None:
    """Refuses, in one line and before any step runs, soft targets no release of this config can give:
    only a fine-grained release keeps its noisy histogram."""
    if config.student.targets == "posterior" and not registry.record_type(config.aggregation.mechanism).noisy_histogram:
        raise PateError(f'student.targets = "posterior" needs the fine-grained release\'s noisy histogram, but '
                        f'aggregation.mechanism = {config.aggregation.mechanism!r} releases labels alone; set '
                        'student.targets = "hard" or aggregation.mechanism = "fine-grained"')


def with_targets(config: Config, release: Release, labels_path: str | Path, pool_x: np.ndarray,
                 num_classes: int, echo=print) -> Release:
    """`release` with its soft targets when `[student] targets` asks for them (else as it is).

    Raises:
      PateError: the labels are not one fine-grained release holding its noisy histogram (a teachers'
        release, a second round, or one written before pate kept it), or the config's map and
        smoothing do not give back the released labels (not the release's map).
    """
    if config.student.targets == "hard":
        return release
    check_config(config)
    path = Path(labels_path)
    arrays = read_labels(path, num_classes=num_classes, pool_size=pool_x.shape[0])
    counts = arrays.get(fine_grained_release.NOISY_COUNTS)
    record = None if counts is None else registry.from_arrays(arrays, str(path))
    if release.rounds != 1 or record is None or not record.noisy_histogram:
        raise PateError(f'{path} holds no fine-grained noisy histogram to take soft targets from (a teachers\' '
                        'release, two rounds, or a release written before pate kept it): set student.targets = '
                        '"hard", or label again')
    counts = np.asarray(counts, np.int64)
    noise = record.noise  # a noisy histogram's record: its noise law (`fine_grained.FineGrained`)
    smoothing, weights = int(np.asarray(arrays["smoothing"])), str(np.asarray(arrays["smoothing_weights"]))
    section = dataclasses.replace(config.fine_grained, smoothing=smoothing, smoothing_weights=weights)
    side = fine_grained_release.public_side(dataclasses.replace(config, fine_grained=section), pool_x,
                                            num_classes, noise, echo=lambda _line: None)
    labels, _ = fine_grained.labels_and_margins(fine_grained.smooth(counts, side.graph, weights))
    released = np.full(pool_x.shape[0], -1, np.int64)
    released[np.asarray(arrays["indices"])] = np.asarray(arrays["labels"])
    if not np.array_equal(labels[release.indices], released[release.indices]):
        raise PateError(f"{path}: the map and smoothing of this config ([features], fine_grained.pca) do not give "
                        "back the released labels from its noisy histogram: it was labelled under another map; "
                        'set them as the release had them, or student.targets = "hard"')
    posterior = fine_grained.label_posterior(counts, side.graph, noise, DRAWS,
                                             NoiseSource(config.student.seed, stream=STREAM), weights)
    targets = posterior[release.indices].astype(np.float32)
    kept = float(np.mean(targets.max(axis=1)))
    echo(f"student: soft targets from the release's noise posterior ({DRAWS} draws; mean top probability {kept:.3f})")
    return dataclasses.replace(release, targets=targets)
