"""Histograms of oriented gradients (Dalal & Triggs, "Histograms of oriented gradients for human
detection", CVPR 2005): a fixed public map of an image, `[features] map = "hog"`
(`pate.programs.public_features.MAPS`).

Each pixel's gradient is the centred difference [-1, 0, 1] in each direction (0 on the border; of
a colour image, the channel with the largest gradient magnitude, as in the paper). Its magnitude
votes into `bins` orientation bins over 360 degrees (`signed`) or 180 (unsigned), split linearly
between the two nearest bin centres, summed over square cells of `cell` pixels. Blocks of `block`
x `block` cells, one cell apart, are each normalised by L2-Hys (L2 norm, entries clipped at 0.2,
L2 norm again; the paper's best) and concatenated.

No statistic of any other image enters: an image's row is a function of that image alone, computed
by element-wise operations and sums over its own pixels (in numpy, whose order of summation depends
on shapes only).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np

from analysis.core.errors import PateError
from pate.store.rundir import cached_rows

#: Images per numpy batch (memory: batch x pixels x bins float32).
BATCH = 1024
#: L2-Hys: the clip of a normalised block's entries, and the norm's floor (Dalal & Triggs).
CLIP, EPS = 0.2, 1e-5


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """`[features] hog_cell`, `hog_bins`, `hog_signed`, `hog_block`. Defaults: 4-pixel cells and 12
    signed bins (issue 55's probe on the Fashion-MNIST pool), blocks of 2 x 2 cells (the paper's)."""

    cell: int = 4
    bins: int = 12
    signed: bool = True
    block: int = 2

    def check(self, shape: tuple[int, ...]) -> None:
        """Refuses, in one line, settings that give no block on images of `shape` (H, W, C)."""
        h, w = shape[0], shape[1]
        cells = (h // self.cell, w // self.cell) if self.cell >= 1 else (0, 0)
        if self.cell < 1 or self.bins < 2 or self.block < 1 or min(cells) < self.block:
            raise PateError(f"features.hog_cell = {self.cell}, hog_bins = {self.bins}, hog_block = {self.block}: "
                            f"{h}x{w} images need cells of at least 1 pixel, at least 2 bins and at least one block "
                            f"of {self.block}x{self.block} cells; lower hog_cell or hog_block")

    def width(self, shape: tuple[int, ...]) -> int:
        """The row's length on images of `shape` (H, W, C)."""
        bh, bw = shape[0] // self.cell - self.block + 1, shape[1] // self.cell - self.block + 1
        return bh * bw * self.block * self.block * self.bins


def _gradients(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(b, H, W) x and y gradients of (b, H, W, C) images: centred differences, 0 on the border,
    the channel of largest magnitude."""
    gx, gy = np.zeros_like(x), np.zeros_like(x)
    gx[:, :, 1:-1] = x[:, :, 2:] - x[:, :, :-2]
    gy[:, 1:-1, :] = x[:, 2:, :] - x[:, :-2, :]
    if x.shape[-1] == 1:
        return gx[..., 0], gy[..., 0]
    pick = np.argmax(gx * gx + gy * gy, axis=-1)[..., None]
    return np.take_along_axis(gx, pick, -1)[..., 0], np.take_along_axis(gy, pick, -1)[..., 0]


def _block(x: np.ndarray, s: Settings) -> np.ndarray:
    """(b, F) rows of one batch of images (b, H, W, C)."""
    gx, gy = _gradients(x)
    magnitude = np.sqrt(gx * gx + gy * gy)
    full = 2 * np.pi if s.signed else np.pi
    angle = np.mod(np.arctan2(gy, gx), full)
    position = angle * (s.bins / full) - 0.5  # bin centres at (i + 1/2) * full / bins
    low = np.floor(position)
    upper = position - low
    low = np.mod(low.astype(np.int64), s.bins)
    high = np.mod(low + 1, s.bins)
    b, h, w = magnitude.shape
    ch, cw = h // s.cell, w // s.cell
    votes = np.zeros((b, h, w, s.bins), np.float32)
    rows = np.arange(b)[:, None, None], np.arange(h)[None, :, None], np.arange(w)[None, None, :]
    votes[(*rows, low)] += magnitude * (1 - upper)
    votes[(*rows, high)] += magnitude * upper
    cells = votes[:, :ch * s.cell, :cw * s.cell].reshape(b, ch, s.cell, cw, s.cell, s.bins).sum(axis=(2, 4))
    bh, bw = ch - s.block + 1, cw - s.block + 1
    blocks = np.stack([cells[:, i:i + bh, j:j + bw] for i in range(s.block) for j in range(s.block)], axis=3)
    blocks = blocks.reshape(b, bh, bw, -1).astype(np.float64)
    for clip in (True, False):  # L2-Hys
        blocks = blocks / np.sqrt(np.sum(blocks * blocks, axis=-1, keepdims=True) + EPS * EPS)
        if clip:
            blocks = np.minimum(blocks, CLIP)
    return blocks.reshape(b, -1).astype(np.float32)


def features(images: np.ndarray, settings: Settings = Settings(), cache_dir: str | Path | None = None,
             name: str = "") -> np.ndarray:
    """(N, F) float32 HOG rows of images (N, H, W, C) in [0, 1], cached in `cache_dir` (keyed by
    a digest of the images and the settings; owner-only: the images may be private).

    Raises:
      PateError: the settings give no block on these images.
    """
    images = np.ascontiguousarray(images, np.float32)
    if images.ndim != 4:
        raise PateError(f"the hog map takes images (N, H, W, C); got an array of shape {images.shape}")
    settings.check(images.shape[1:])
    path = None
    if cache_dir is not None:
        digest = hashlib.sha256(repr(images.shape).encode() + images.tobytes()).hexdigest()[:16]
        s = settings
        path = Path(cache_dir) / f"{name}-hog-c{s.cell}-b{s.bins}-{'s' if s.signed else 'u'}-k{s.block}-{digest}.npy"

    def compute() -> np.ndarray:
        out = [_block(images[i:i + BATCH], settings) for i in range(0, images.shape[0], BATCH)]
        return np.concatenate(out) if out else np.zeros((0, settings.width(images.shape[1:])), np.float32)

    return cached_rows(path, images.shape[0], compute)
