"""Augmentations keep shape and range, are deterministic per key, and change images."""

import jax
import numpy as np
import pytest

from pate.programs import augment


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return rng.uniform(0, 1, size=(16, 28, 28, 1)).astype(np.float32)


@pytest.mark.parametrize("name", ["weak", "strong"])
@pytest.mark.parametrize("flip", [False, True])
def test_shape_range_determinism(images, name, flip):
    fn = getattr(augment, name)
    a = np.asarray(fn(jax.random.key(1), images, flip=flip))
    b = np.asarray(fn(jax.random.key(1), images, flip=flip))
    c = np.asarray(fn(jax.random.key(2), images, flip=flip))
    assert a.shape == images.shape and a.dtype == np.float32
    assert a.min() >= 0.0 and a.max() <= 1.0
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_weak_is_a_translation():
    """Each weakly augmented image equals a shifted copy of its source (no flip)."""
    img = np.zeros((1, 10, 10, 1), np.float32)
    img[0, 4:6, 4:6, 0] = 1.0
    for seed in range(8):
        out = np.asarray(augment.weak(jax.random.key(seed), img, max_shift=2))[0, ..., 0]
        # Some shift (dy, dx) within ±2 reproduces the output exactly (the block stays inside).
        matches = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                   if np.array_equal(out, np.roll(img[0, ..., 0], (dy, dx), axis=(0, 1)))]
        assert matches, f"seed {seed}: not a shifted copy"


def test_flip_is_horizontal():
    img = np.zeros((64, 4, 4, 1), np.float32)
    img[:, :, 0, 0] = 1.0
    out = np.asarray(augment.weak(jax.random.key(0), img, max_shift=0, flip=True))
    flipped = out[:, :, 3, 0].sum(axis=1) == 4
    kept = out[:, :, 0, 0].sum(axis=1) == 4
    assert np.all(flipped | kept) and 10 < flipped.sum() < 54


def test_strong_differs_more_than_weak(images):
    w = np.asarray(augment.weak(jax.random.key(5), images, max_shift=0))
    s = np.asarray(augment.strong(jax.random.key(5), images, max_shift=0))
    assert np.array_equal(w, images)
    assert np.mean(np.abs(s - images)) > 0.05


def _zero_filled_shift(img, dy, dx):
    """`img` moved down by dy and right by dx pixels, zeros where nothing moved in."""
    out = np.zeros_like(img)
    h, w = img.shape[:2]
    out[max(dy, 0): h + min(dy, 0), max(dx, 0): w + min(dx, 0)] = \
        img[max(-dy, 0): h + min(-dy, 0), max(-dx, 0): w + min(-dx, 0)]
    return out


@pytest.mark.parametrize("flip", [False, True])
def test_weak_zero_fill_is_a_zero_filled_shift(images, flip):
    """The teachers' augmentation: each image equals its source (or its mirror image, with
    flip) shifted by some (dy, dx) within ±2 with zeros filled in, and both shifts and
    both orientations occur across the batch."""
    out = np.asarray(augment.weak_zero_fill(jax.random.key(3), images, 2, flip))
    assert out.shape == images.shape and out.dtype == np.float32
    shifts, mirrored = set(), []
    for src, got in zip(images, out):
        candidates = [(dy, dx, m) for m in ((False, True) if flip else (False,))
                      for dy in range(-2, 3) for dx in range(-2, 3)
                      if np.array_equal(got, _zero_filled_shift(src[:, ::-1] if m else src, dy, dx))]
        assert len(candidates) == 1, "not exactly one zero-filled shift of the image"
        shifts.add(candidates[0][:2])
        mirrored.append(candidates[0][2])
    assert len(shifts) > 3
    assert any(mirrored) == flip and (not flip or not all(mirrored))


def test_weak_zero_fill_without_shift_or_flip_is_the_identity(images):
    out = np.asarray(augment.weak_zero_fill(jax.random.key(0), images, 0, False))
    assert np.array_equal(out, images)


def test_strong_draws_per_image_and_cuts_one_square(images):
    """Copies of one image get different strengths and holes (draws per image, not per batch);
    each hole is one grey square of side cutout + 1 clipped at the border; cutout 0: none."""
    same = np.repeat(images[:1], 16, axis=0)
    # compiled, as training runs it (op by op it took ~11 s)
    strong = jax.jit(augment.strong, static_argnames=("max_shift", "flip", "cutout", "degrees"))
    out = np.asarray(strong(jax.random.key(7), same, max_shift=0, cutout=8))
    assert len({o.tobytes() for o in out}) == 16
    centres = set()
    for o in out:
        ys, xs = np.nonzero(o[..., 0] == 0.5)
        assert ys.size and ys.size == (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
        assert ys.max() - ys.min() <= 8 and xs.max() - xs.min() <= 8
        centres.add((ys.min(), xs.min()))
    assert len(centres) > 8
    plain = np.asarray(strong(jax.random.key(7), same, max_shift=0, cutout=0))
    assert not np.any(plain == 0.5)
