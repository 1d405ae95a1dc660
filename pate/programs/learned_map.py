"""A feature map **learned** from the public pool's images alone: a small convolutional encoder
trained self-supervised (SimCLR: Chen et al., "A simple framework for contrastive learning of
visual representations", ICML 2020) by `pate features`, then loaded by digest as
`[features] map = "learned"` (`pate.programs.public_features.MAPS`).

Training sees the pool's images and nothing else: no private record, no label. Each pool
image gives two augmented views (`pate.programs.augment.strong`: shifts, flips, a small
affine map, brightness, contrast, sharpness, noise and cutout); the encoder's pooled output
goes through a projection head, and the NT-Xent loss pulls the two views of one image
together and pushes the other 2(B - 1) views of the batch away (temperature `Recipe.temperature`).

The map's feature of an input is the encoder's last **spatial** map, flattened (7 × 7 × 64 on
28 × 28 images), not its pooled vector: in issue 45's probe the pooled feature labelled the pool
at 0.822-0.831 and the spatial map (then pool PCA) at 0.861-0.869; the projection head is
dropped, as in SimCLR. The encoder has no batch statistics (no batch norm), and inputs go
through it in batches of a fixed shape (`BATCH`, the last padded), so each input's row is a
function of that input and the weights alone, whatever else is mapped with it.

The weights live in a directory: `encoder.npz` (the parameters, flattened by path) and
`recipe.json` (architecture, augmentations, epochs, seed, time, the pool's sha256 and the
weights' sha256). Loading checks the weights against the recipe's digest and refuses, in one
line, a directory that lacks them or whose weights are not the recipe's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
import time
from pathlib import Path

import numpy as np

from analysis.core.errors import PateError
from pate.programs import weights_folder

WEIGHTS = "encoder.npz"
#: Inputs mapped per call of the jitted encoder (the last batch padded): one shape, one program.
BATCH = 256


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    """How the encoder is built and trained. The defaults: a CNN of the size issue 45's probe
    trained (56k parameters on 28 × 28 images), SimCLR's usual loss and optimiser; they were set
    on public data only and not tuned further. `widths`/`strides`: the 3 × 3 convolutions (ReLU
    after each); `projection`: the projection head's widths (training only); augmentations as
    `pate.programs.augment.strong` takes them (`cutout` and `shift` in pixels, capped by the
    image size)."""

    widths: tuple[int, ...] = (32, 64, 64)
    strides: tuple[int, ...] = (1, 2, 2)
    projection: tuple[int, ...] = (128, 64)
    epochs: int = 30
    batch_size: int = 256
    learning_rate: float = 1e-3
    temperature: float = 0.2
    shift: int = 3
    flip: bool = True
    degrees: float = 10.0
    cutout: int = 8
    seed: int = 0

    def check(self) -> None:
        """Refuses, in one line, a recipe that cannot be trained."""
        problems = []
        if not self.widths or len(self.widths) != len(self.strides):
            problems.append(f"widths {list(self.widths)} and strides {list(self.strides)} need one entry per convolution "
                            "each (give --strides with --widths)")
        if any(w < 1 for w in (*self.widths, *self.projection)) or any(s < 1 for s in self.strides):
            problems.append("widths and strides must be positive")
        if self.epochs < 1 or self.batch_size < 2:
            problems.append("at least 1 epoch and batches of at least 2 images")
        if not (math.isfinite(self.learning_rate) and math.isfinite(self.temperature)
                and self.learning_rate > 0 and self.temperature > 0):
            problems.append("the learning rate and temperature must be positive finite numbers")
        if not (math.isfinite(self.degrees) and 0 <= self.degrees <= 90):
            problems.append(f"--degrees {self.degrees} must be a number of degrees in [0, 90] (NaN and inf are none)")
        if problems:
            raise PateError(f"learned map recipe: {'; '.join(problems)}")


def encoder_class():
    import flax.linen as nn

    class Encoder(nn.Module):
        """Convolutions with ReLU (no batch statistics); returns the last spatial map and, with
        `project`, the projection of its spatial mean."""

        widths: tuple[int, ...]
        strides: tuple[int, ...]
        projection: tuple[int, ...]

        @nn.compact
        def __call__(self, x, project: bool = False):
            x = x - 0.5
            for i, (w, s) in enumerate(zip(self.widths, self.strides)):
                x = nn.relu(nn.Conv(w, (3, 3), strides=(s, s), padding="SAME", name=f"conv{i}")(x))
            if not project:
                return x
            z = x.mean(axis=(1, 2))
            for i, w in enumerate(self.projection):
                z = nn.Dense(w, name=f"proj{i}")(z)
                if i < len(self.projection) - 1:
                    z = nn.relu(z)
            return x, z

    return Encoder


def nt_xent(z1, z2, temperature: float):
    """The NT-Xent loss (SimCLR eq. 1) of B pairs of projections, averaged over the 2B views."""
    import jax
    import jax.numpy as jnp

    z = jnp.concatenate([z1, z2])
    z = z / jnp.maximum(jnp.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    b = z1.shape[0]
    logits = (z @ z.T) / temperature
    logits = jnp.where(jnp.eye(2 * b, dtype=bool), -jnp.inf, logits)
    positive = jnp.concatenate([jnp.arange(b, 2 * b), jnp.arange(b)])
    return jnp.mean(jax.nn.logsumexp(logits, axis=1) - logits[jnp.arange(2 * b), positive])


def pool_digest(pool_x: np.ndarray) -> str:
    """sha256 of the pool's inputs as the encoder sees them (float32, C order, with their shape)."""
    x = np.ascontiguousarray(pool_x, np.float32)
    return hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()


def train(pool_x: np.ndarray, recipe: Recipe, *, show_progress: bool = True) -> tuple[dict, dict]:
    """The encoder trained on the pool's images `pool_x` (N, H, W, C) in [0, 1] by SimCLR, and the
    record of its training (the recipe, the pool's digest and size, seconds, the loss per epoch).

    Deterministic given the recipe's seed and the pool (the same keys, batches and views).

    Raises:
      PateError: the pool is not images, holds fewer than 2 images, or the loss diverges.
    """
    import jax
    import jax.numpy as jnp

    from pate.programs.progress import Progress

    recipe.check()
    _check_images(pool_x)
    n, h, w, _ = pool_x.shape
    batch = min(recipe.batch_size, n - n % 2)
    if batch < 2:
        raise PateError(f"the public pool holds {n} image(s); a learned map needs at least 2")
    shift, cutout = min(recipe.shift, h // 4), min(recipe.cutout, h // 3)
    model, tx, step = _program(dataclasses.replace(recipe, epochs=1, seed=0, shift=shift, cutout=cutout))
    key = jax.random.PRNGKey(recipe.seed)
    params = model.init(jax.random.fold_in(key, 0), jnp.zeros((1, *pool_x.shape[1:]), jnp.float32), True)["params"]
    opt_state = tx.init(params)
    x = jnp.asarray(pool_x, jnp.float32)
    steps = n // batch
    losses = []
    start = time.perf_counter()
    with Progress("encoder epoch", recipe.epochs, ("loss",), show=show_progress) as bar:
        for epoch in range(recipe.epochs):
            k_epoch = jax.random.fold_in(key, epoch + 1)
            order = jax.random.permutation(jax.random.fold_in(k_epoch, 0), n)
            total = 0.0
            for s in range(steps):
                idx = order[s * batch:(s + 1) * batch]
                params, opt_state, loss = step(params, opt_state, x[idx], jax.random.fold_in(k_epoch, s + 1))
                total += float(loss)
            losses.append(total / steps)
            if not np.isfinite(losses[-1]):
                raise PateError(f"the encoder's loss diverged at epoch {epoch + 1} (learning rate "
                                f"{recipe.learning_rate:g}); lower it")
            bar.update(epoch + 1, loss=f"{losses[-1]:.4f}")
    params = jax.device_get(params)
    record = {"pool": {"sha256": pool_digest(pool_x), "images": int(n), "shape": list(pool_x.shape[1:])},
              "seconds": round(time.perf_counter() - start, 1), "loss": [round(v, 5) for v in losses],
              "steps_per_epoch": steps, "batch_size": batch, "shift": shift, "cutout": cutout}
    return params, record


@functools.lru_cache(maxsize=2)
def _program(recipe: Recipe):
    """The encoder, its optimiser and the jitted SimCLR step of a recipe (its training settings;
    cached, so a second training of the same recipe compiles nothing)."""
    import jax
    import jax.numpy as jnp
    import optax

    from pate.programs import augment

    model = encoder_class()(recipe.widths, recipe.strides, recipe.projection)
    tx = optax.adam(recipe.learning_rate)
    views = dict(max_shift=recipe.shift, flip=recipe.flip, cutout=recipe.cutout, degrees=recipe.degrees)

    @jax.jit
    def step(params, opt_state, images, key):
        k1, k2 = jax.random.split(key)
        both = jnp.concatenate([augment.strong(k1, images, **views), augment.strong(k2, images, **views)])

        def loss_fn(p):
            _, z = model.apply({"params": p}, both, True)
            return nt_xent(z[:images.shape[0]], z[images.shape[0]:], recipe.temperature)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return model, tx, step


def _check_images(pool_x: np.ndarray) -> None:
    if np.ndim(pool_x) != 4:
        raise PateError(f"a learned map needs images (N, H, W, C); the pool holds rows of features "
                        f"{np.shape(pool_x)}: use features.map = \"none\" for them")


def _flat(params) -> dict[str, np.ndarray]:
    from flax import traverse_util

    return {k: np.asarray(v) for k, v in traverse_util.flatten_dict(params, sep="/").items()}


def weights_bytes(params) -> bytes:
    """The encoder's parameters as one .npz (the encoder's alone: the projection head is dropped)."""
    buf = io.BytesIO()
    flat = {k: v for k, v in sorted(_flat(params).items()) if not k.startswith("proj")}
    np.savez(buf, **flat)
    return buf.getvalue()


def check_out(out: Path, *, overwrite: bool = False, config=None) -> None:
    """May `pate features` write its encoder into `out`? A new or empty folder, yes; with
    `overwrite`, one holding what `pate features` wrote and nothing else (`encoder.npz`,
    `recipe.json`, plain files); never a folder inside a ledger folder
    (`pate.programs.weights_folder.check_out`).

    Raises:
      PateError: in one line, naming what is there.
    """
    weights_folder.check_out(out, (WEIGHTS, weights_folder.RECIPE), overwrite=overwrite, config=config)


def write(out: str | Path, params, recipe: Recipe, record: dict, *, overwrite: bool = False) -> dict:
    """Writes `encoder.npz` and `recipe.json` into `out`, all or nothing (a staged folder renamed
    into place); returns the recipe document.

    Raises:
      PateError: `check_out` refuses `out`.
    """
    out = Path(out)
    check_out(out, overwrite=overwrite)
    raw = weights_bytes(params)
    doc = {"map": "learned", "method": "SimCLR (NT-Xent), public pool images only, no labels",
           "architecture": {"convolutions": "3x3, ReLU, no batch statistics", "widths": list(recipe.widths),
                            "strides": list(recipe.strides), "projection_head": list(recipe.projection),
                            "feature": "the last spatial map, flattened"},
           "recipe": {**dataclasses.asdict(recipe), "widths": list(recipe.widths), "strides": list(recipe.strides),
                      "projection": list(recipe.projection)},
           "augmentations": {"kind": "pate.programs.augment.strong", "shift": record["shift"], "flip": recipe.flip,
                             "degrees": recipe.degrees, "cutout": record["cutout"],
                             "also": "brightness, contrast, sharpness, Gaussian noise up to 0.1"},
           "epochs": recipe.epochs, "seed": recipe.seed, "seconds": record["seconds"],
           "steps_per_epoch": record["steps_per_epoch"], "batch_size": record["batch_size"],
           "loss": record["loss"], "pool": record["pool"],
           "weights": {"file": WEIGHTS, "sha256": hashlib.sha256(raw).hexdigest()}}
    weights_folder.write(out, WEIGHTS, raw, doc)
    return doc


# --------------------------------------------------------------------------- loading by digest


@dataclasses.dataclass(frozen=True)
class Encoder:
    """Loaded weights: the recipe document, the parameters and the weights' sha256."""

    recipe: dict
    params: dict
    sha256: str


def check_weights(folder: str, key: str = "features.weights") -> str:
    """The sha256 of the weights in `folder` after checking them against its recipe and checking
    what the digest cannot say (`_checked`): one line when the folder, its recipe or its weights are
    missing, the weights are not the recipe's, or they do not make the recipe's encoder. Reads the
    folder only (no data)."""
    doc, digest, raw = _read(folder, key)
    _checked_in(doc, digest, raw, key, folder)
    return digest


def _read(folder: str, key: str) -> tuple[dict, str, bytes]:
    return weights_folder.read_named(folder, key, WEIGHTS, "learned", "`pate features --out DIR`",
                                     f"make it with {_command(folder)}")


def _command(folder: str, more: str = "") -> str:
    return f"`pate features --config CONFIG --out {folder}{more}`"


def load(folder: str, key: str = "features.weights") -> Encoder:
    """The encoder in `folder`, its weights checked against its recipe's digest and its recipe
    (`check_weights`)."""
    from flax import traverse_util

    doc, digest, raw = _read(folder, key)
    flat = _checked_in(doc, digest, raw, key, folder)
    return Encoder(doc, traverse_util.unflatten_dict(dict(flat), sep="/"), digest)


def _checked_in(doc: dict, digest: str, raw: bytes, key: str, folder: str) -> tuple[tuple[str, np.ndarray], ...]:
    try:
        return _checked(digest, json.dumps(doc, sort_keys=True), raw)
    except weights_folder.Damaged as err:
        raise weights_folder.refuse(key, folder, err, f"remake it with {_command(folder, ' --overwrite')}") from None


@functools.lru_cache(maxsize=4)
def _checked(digest: str, doc_text: str, raw: bytes) -> tuple[tuple[str, np.ndarray], ...]:
    """The encoder's parameters (path, array) once they make the recipe's encoder: the recipe's
    widths and strides lists of positive integers, one each per convolution, the pool's image shape
    (H, W, C); exactly the kernels (3, 3, C_in, width) and biases (width,) of those convolutions,
    finite floating-point numbers; and no input in [0, 1] mapped past `weights_folder.MAX_REACH`
    (each convolution's output at most the largest column sum of |kernel| times its input's bound,
    plus the largest |bias|: ReLU only lowers it), so no row is inf.

    Raises:
      weights_folder.Damaged: what is wrong, in words.
    """
    doc = json.loads(doc_text)
    arch = doc.get("architecture") if isinstance(doc.get("architecture"), dict) else {}
    widths = weights_folder.positive_ints(arch.get("widths"), "architecture.widths")
    strides = weights_folder.positive_ints(arch.get("strides"), "architecture.strides", len(widths))
    pool = doc.get("pool") if isinstance(doc.get("pool"), dict) else {}
    channels = weights_folder.positive_ints(pool.get("shape"), "pool.shape (the images' H, W, C)", 3)[2]
    flat = weights_folder.arrays(raw, WEIGHTS)
    wanted = [f"conv{i}/{part}" for i in range(len(widths)) for part in ("kernel", "bias")]
    missing, extra = [k for k in wanted if k not in flat], sorted(set(flat) - set(wanted))
    if missing:
        raise weights_folder.Damaged(f"{WEIGHTS} lacks {missing[0]} (its recipe has {len(widths)} convolutions)")
    if extra:
        raise weights_folder.Damaged(f"{WEIGHTS} holds {extra[0]}, which no convolution of its recipe "
                                     f"(widths {list(widths)}) has")
    weights_folder.check_values(WEIGHTS, flat)
    reach, fan_in = 0.5, channels  # the encoder sees x - 0.5, x in [0, 1]
    for i, width in enumerate(widths):
        kernel, bias = flat[f"conv{i}/kernel"], flat[f"conv{i}/bias"]
        if kernel.shape != (3, 3, fan_in, width) or bias.shape != (width,):
            raise weights_folder.Damaged(
                f"{WEIGHTS}'s conv{i} has a kernel {list(kernel.shape)} and a bias {list(bias.shape)} where its "
                f"recipe (widths {list(widths)}, {channels} channel(s)) makes {[3, 3, fan_in, width]} and [{width}]")
        column = np.abs(kernel.astype(np.float64)).sum(axis=(0, 1, 2)).max()
        reach = column * reach + float(np.abs(bias.astype(np.float64)).max())
        fan_in = width
    if not reach <= weights_folder.MAX_REACH:
        raise weights_folder.Damaged(f"{WEIGHTS}'s weights can map an input to {reach:.3g}, past "
                                     f"{weights_folder.MAX_REACH:g} (its rows would overflow float32)")
    return tuple((k, flat[k]) for k in wanted)


@functools.lru_cache(maxsize=4)
def _apply_fn(widths: tuple[int, ...], strides: tuple[int, ...]):
    import jax

    model = encoder_class()(widths, strides, ())
    return jax.jit(lambda params, x: model.apply({"params": params}, x))


def features(encoder: Encoder, inputs: np.ndarray, key: str = "features.weights", progress: str = "") -> np.ndarray:
    """(n, F) float32: each input's last spatial map, flattened, in batches of one shape (`BATCH`)
    (`progress`: a bar's label, none when empty).

    Raises:
      PateError: the inputs' image shape is not the one the encoder was trained on.
    """
    x = np.asarray(inputs, np.float32)
    trained = tuple(encoder.recipe.get("pool", {}).get("shape", ()))
    if x.ndim != 4 or tuple(x.shape[1:]) != trained:
        raise PateError(f"{key}: the encoder was trained on images of shape {list(trained)}, these are "
                        f"{list(x.shape[1:])}; make one on this pool with `pate features`")
    arch = encoder.recipe["architecture"]
    apply = _apply_fn(tuple(arch["widths"]), tuple(arch["strides"]))
    out = []
    from pate.programs.progress import Progress

    with Progress(progress, x.shape[0], show=bool(progress)) as bar:
        for first in range(0, x.shape[0], BATCH):
            block = x[first:first + BATCH]
            padded = np.concatenate([block, np.zeros((BATCH - len(block), *x.shape[1:]), np.float32)])
            out.append(np.asarray(apply(encoder.params, padded))[:len(block)].reshape(len(block), -1))
            bar.update(first + len(block))
    if out:
        return np.concatenate(out)
    import jax

    return np.zeros((0, int(np.prod(jax.eval_shape(apply, encoder.params, x[:1]).shape[1:]))), np.float32)


def make(config, out: str | Path, *, overwrite: bool = False, show_progress: bool = True, echo=print,
         **recipe) -> dict:
    """`pate features`: the encoder trained on the public pool of `config` alone
    (`pate.data.load_pool`: the test inputs, the train files never opened; no label) and
    written into `out` (`write`); returns the recipe document. `recipe`: `Recipe` fields to
    change (None: the default).

    Raises:
      PateError: `check_out` refuses `out` (not empty without `overwrite`, not an encoder, in
        a ledger folder), a bad recipe, a pool that is not images, or a diverged loss; nothing
        is written then.
    """
    from pate.data import load_pool

    recipe = Recipe(**{k: v for k, v in recipe.items() if v is not None})
    recipe.check()
    out = Path(out)
    check_out(out, overwrite=overwrite, config=config)  # refuses in one line before any training
    pool_x = load_pool(config.data, config.data.public_size)
    _check_images(pool_x)
    echo(f"features: a SimCLR encoder (widths {list(recipe.widths)}) trained {recipe.epochs} epochs on the "
         f"{len(pool_x)} public pool images alone (no private record, no label)")
    params, record = train(pool_x, recipe, show_progress=show_progress)
    doc = write(out, params, recipe, record, overwrite=overwrite)
    recipe = out / weights_folder.RECIPE
    echo(f"features: wrote {out / WEIGHTS} (sha256 {doc['weights']['sha256'][:12]}) and {recipe} in "
         f"{record['seconds']:.0f} s; use it with [features] map = \"learned\", weights = \"{out}\"")
    return doc
