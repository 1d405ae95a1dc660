"""Image augmentations for the teachers and the semi-supervised student, in jax.numpy
and jittable.

Images are float32 in [0, 1], shape ``(batch, height, width, channels)``. Every function
takes a key and a batch, draws per-image parameters from the key, and returns a batch of
the same shape and range: the same key gives the same output.

Rows of features (N, F) (a data set of embeddings, `pate.data.is_embedding`) have no image
augmentation: every function returns them as they are (the models' input checks,
`pate.programs.models.check_input`, refuse image augmentation settings on them).

``weak`` (the student's): random translation by up to ``max_shift`` pixels (edge
padding), and a horizontal flip with probability 1/2 when ``flip`` is on (off for digits).
``weak_zero_fill`` (the teachers'; their accuracies were measured with it): the same
transform with zero padding, its shifts and flips drawn for the whole batch from one key.
``strong`` (the FixMatch-style policy, Sohn et al. 2020, built from RandAugment-like
operations that need no image library): the weak transform, optionally a random affine
map (rotation, shear, scale), then brightness, contrast, sharpness (blend with a blurred
copy) and Gaussian noise at random strengths, then cutout of a random square.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def _translate(image, key, max_shift: int):
    h, w, _ = image.shape
    padded = jnp.pad(image, ((max_shift, max_shift), (max_shift, max_shift), (0, 0)), mode="edge")
    dy, dx = jax.random.randint(key, (2,), 0, 2 * max_shift + 1)
    return jax.lax.dynamic_slice(padded, (dy, dx, 0), image.shape)


def _flip(image, key):
    return jnp.where(jax.random.bernoulli(key), image[:, ::-1, :], image)


def _weak_one(image, key, max_shift: int, flip: bool):
    k_shift, k_flip = jax.random.split(key)
    out = _translate(image, k_shift, max_shift) if max_shift > 0 else image
    return _flip(out, k_flip) if flip else out


@functools.partial(jax.jit, static_argnames=("max_shift", "flip"))
def weak(key, images, max_shift: int = 2, flip: bool = False):
    """Random translation (and optional horizontal flip) per image."""
    if images.ndim == 2:
        return images
    keys = jax.random.split(key, images.shape[0])
    return jax.vmap(_weak_one, in_axes=(0, 0, None, None))(images, keys, max_shift, flip)


def weak_zero_fill(key, images, max_shift: int, flip: bool):
    """Random translation by up to `max_shift` pixels, the uncovered pixels set to 0, and
    (with `flip`) a horizontal flip with probability 1/2, per image.

    The teachers' augmentation: unlike `weak`, the offsets and flips of the whole batch
    come from one flat draw each (multi-dimensional draws compile slowly on XLA:CPU,
    and this runs vmapped over hundreds of teachers).
    """
    if images.ndim == 2:
        return images
    n, h, w, c = images.shape
    k_shift, k_flip = jax.random.split(key)
    if max_shift:
        padded = jnp.pad(images, ((0, 0), (max_shift, max_shift), (max_shift, max_shift), (0, 0)))
        offsets = jax.random.randint(k_shift, (2 * n,), 0, 2 * max_shift + 1).reshape(n, 2)
        images = jax.vmap(lambda img, o: jax.lax.dynamic_slice(img, (o[0], o[1], 0), (h, w, c)))(
            padded, offsets)
    if flip:
        flips = jax.random.bernoulli(k_flip, 0.5, (n,)).reshape(n, 1, 1, 1)
        images = jnp.where(flips, images[:, :, ::-1, :], images)
    return images


def _blur(images):
    """A 3x3 binomial blur of each image of a batch (edge values outside)."""
    kernel = jnp.array([1.0, 2.0, 1.0]) / 4.0
    padded = jnp.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
    rows = kernel[0] * padded[:, :-2] + kernel[1] * padded[:, 1:-1] + kernel[2] * padded[:, 2:]
    return kernel[0] * rows[:, :, :-2] + kernel[1] * rows[:, :, 1:-1] + kernel[2] * rows[:, :, 2:]


def _affine(image, key, degrees: float):
    """Rotation by up to ±`degrees`, scaling by 0.9–1.1 and shear up to ±`degrees`/2,
    about the image centre (bilinear, edge values outside)."""
    h, w, _ = image.shape
    k_rot, k_scale, k_shear = jax.random.split(key, 3)
    angle = jnp.deg2rad(jax.random.uniform(k_rot, (), minval=-degrees, maxval=degrees))
    shear = jnp.deg2rad(jax.random.uniform(k_shear, (), minval=-degrees / 2, maxval=degrees / 2))
    scale = jax.random.uniform(k_scale, (), minval=0.9, maxval=1.1)
    c, s = jnp.cos(angle), jnp.sin(angle)
    # output pixel (y, x) samples the input at centre + A^-1 (p - centre)
    inv = jnp.array([[c, s], [-s, c]]) @ jnp.array([[1.0, 0.0], [-jnp.tan(shear), 1.0]]) / scale
    ys, xs = jnp.meshgrid(jnp.arange(h, dtype=jnp.float32), jnp.arange(w, dtype=jnp.float32), indexing="ij")
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    src = inv @ jnp.stack([(ys - cy).ravel(), (xs - cx).ravel()])
    coords = [src[0].reshape(h, w) + cy, src[1].reshape(h, w) + cx]
    return jnp.stack([jax.scipy.ndimage.map_coordinates(image[..., ch], coords, order=1, mode="nearest")
                      for ch in range(image.shape[-1])], axis=-1)


@functools.partial(jax.jit, static_argnames=("max_shift", "flip", "cutout", "degrees"))
def strong(key, images, max_shift: int = 2, flip: bool = False, cutout: int = 8, degrees: float = 0.0):
    """The weak transform, an optional random affine map (rotation up to ±`degrees`,
    shear up to ±`degrees`/2, scale 0.9–1.1), then brightness, contrast, sharpness,
    noise and cutout, each at its own random strength per image.

    Whole-batch operations: the strengths of each image come from one uniform draw for the
    batch, the noise from one normal draw, and each image is blurred once (the per-image
    version this replaced blurred twice). `cutout` 0: no cutout.
    """
    if images.ndim == 2:
        return images
    n, h, w, c = images.shape
    k_weak, k_affine, k_strength, k_noise, k_cut = jax.random.split(key, 5)
    out = weak(k_weak, images, max_shift=max_shift, flip=flip)
    if degrees > 0:
        out = jax.vmap(_affine, in_axes=(0, 0, None))(out, jax.random.split(k_affine, n), degrees)
    u = jax.random.uniform(k_strength, (4 * n,)).reshape(4, n, 1, 1, 1)
    # Brightness: scale by a factor in [0.6, 1.4].
    out = out * (0.6 + 0.8 * u[0])
    # Contrast: move away from / towards the image's mean by a factor in [0.5, 1.5].
    mean = jnp.mean(out, axis=(1, 2, 3), keepdims=True)
    out = mean + (out - mean) * (0.5 + u[1])
    # Sharpness: blend with a blurred copy (factor < 1 blurs, > 1 sharpens), factor in [0, 2].
    blurred = _blur(out)
    out = blurred + 2.0 * u[2] * (out - blurred)
    # Gaussian noise of a random strength up to 0.1.
    out = out + 0.1 * u[3] * jax.random.normal(k_noise, (n * h * w * c,)).reshape(n, h, w, c)
    out = jnp.clip(out, 0.0, 1.0)
    if cutout <= 0:
        return out
    # Cutout: a square of side `cutout` at a random centre set to grey.
    centre = jax.random.randint(k_cut, (2 * n,), 0, jnp.tile(jnp.array([h, w]), n)).reshape(n, 2)
    half = cutout // 2
    hole = ((jnp.abs(jnp.arange(h)[None, :, None] - centre[:, 0, None, None]) <= half)
            & (jnp.abs(jnp.arange(w)[None, None, :] - centre[:, 1, None, None]) <= half))
    return jnp.where(hole[..., None], 0.5, out)
