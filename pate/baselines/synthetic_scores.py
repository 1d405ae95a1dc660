"""What `pate synth` releases besides the generator, for every method (`pate.baselines.synth`,
`pate.baselines.dp_merf`): the public scaling of the pixels, the train-on-synthetic,
test-on-real scores (a logistic regression and the `[dpsgd]` CNN, trained without privacy
on the synthetic data, which is public) and the picture of samples."""

from __future__ import annotations

import abc
import dataclasses
import io

import jax
import jax.numpy as jnp
import numpy as np
import optax

from analysis.core.errors import PateError
from pate.config import Config
from pate.programs.models import Linear, TanhCNN, cnn_output_side
from pate.programs.student_training import predict
from pate.store import rundir
from pate.baselines.release_step import publish_lines


def public_scale(x: np.ndarray) -> np.ndarray:
    """Images as float32 clamped to [0, 1], the public range the loaders scale pixels to
    (uint8 / 255): a function of each pixel alone, never of the data set's statistics."""
    return np.clip(np.asarray(x, np.float32), 0.0, 1.0)


def released_pixels(images: np.ndarray, rate_key: str) -> np.ndarray:
    """A generator's samples as the uint8 pixels `pate synth` releases (clamped to the public
    range [0, 1], then x 255).

    Raises:
      PateError: a non-finite sample (the generator diverged): NaN would become black pixels
        that look like a release; nothing is written or charged then. ``rate_key`` names the
        learning rate to lower.
    """
    images = np.asarray(images, np.float32)
    if not np.all(np.isfinite(images)):
        raise PateError(f"the generator diverged (non-finite samples): nothing was released or charged; lower "
                        f"synth.{rate_key} and run again with --overwrite")
    return np.round(np.clip(images, 0.0, 1.0) * 255.0).astype(np.uint8)


# --------------------------------------------------------------------------- evaluation


def fit_classifier(model, x: np.ndarray, y: np.ndarray, *, epochs: int, batch_size: int, learning_rate: float,
                   seed: int):
    """Non-private Adam training of `model` on (x, y) (synthetic, public data): softmax
    cross-entropy, ``epochs`` shuffled passes of full batches."""
    tx = optax.adam(learning_rate)
    key = jax.random.key(seed)
    params = jax.jit(model.init)(key, jnp.zeros((1, *x.shape[1:]), jnp.float32))
    batch = min(batch_size, x.shape[0])
    nb = x.shape[0] // batch

    @jax.jit
    def epoch(params, opt, xs, ys, k):
        order = jax.random.permutation(k, xs.shape[0])[: nb * batch].reshape(nb, batch)

        def body(carry, idx):
            p, o = carry
            grads = jax.grad(lambda q: optax.softmax_cross_entropy_with_integer_labels(
                model.apply(q, xs[idx]), ys[idx]).mean())(p)
            updates, o = tx.update(grads, o, p)
            return (optax.apply_updates(p, updates), o), None

        return jax.lax.scan(body, (params, opt), order)[0]

    opt = tx.init(params)
    xs, ys = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32)
    for e in range(epochs):
        params, opt = epoch(params, opt, xs, ys, jax.random.fold_in(key, e + 1))
    return params


def tstr(config: Config, x: np.ndarray, y: np.ndarray, splits) -> dict:
    """Train on synthetic, test on real: a logistic regression and the `[dpsgd]` CNN
    (`pate.programs.models.TanhCNN`) trained on (x, y), scored on the evaluation split (and on the
    whole test split). The CNN is None when the images are too small for its layers."""
    cfg, d = config.synth, config.dpsgd
    models = {"logistic_regression": Linear(splits.num_classes)}
    if cnn_output_side(int(x.shape[1]), d) > 0:
        models["cnn"] = TanhCNN(splits.num_classes, tuple(d.conv_features), tuple(d.conv_kernels),
                                tuple(d.conv_strides), tuple(d.conv_padding), tuple(d.hidden))
    test_x = np.concatenate([splits.pool_x, splits.eval_x])
    test_y = np.concatenate([splits.pool_y, splits.eval_y])
    pool = splits.pool_x.shape[0]
    out = {"eval_points": int(splits.eval_y.size), "test_points": int(test_y.size), "cnn": None, "cnn_test": None}
    for name, model in models.items():
        params = fit_classifier(model, x, y, epochs=cfg.eval_epochs, batch_size=cfg.eval_batch_size,
                                learning_rate=cfg.eval_learning_rate, seed=cfg.seed)
        pred = predict(model, params, public_scale(test_x), cfg.eval_batch_size)
        out[name] = float(np.mean(pred[pool:] == test_y[pool:]))
        out[name + "_test"] = float(np.mean(pred == test_y))
    return out


def sample_grid(images: np.ndarray, labels: np.ndarray, num_classes: int, per_class: int = 10) -> bytes:
    """PNG of ``per_class`` synthetic images of each class (one row per class, up to 10)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = min(num_classes, 10)
    fig, axes = plt.subplots(rows, per_class, figsize=(per_class * 0.8, rows * 0.8), dpi=100, squeeze=False)
    try:
        for r in range(rows):
            picks = np.flatnonzero(labels == r)[:per_class]
            for c in range(per_class):
                ax = axes[r, c]
                ax.axis("off")
                if c < picks.size:
                    img = images[picks[c]]
                    ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=255)
        fig.suptitle("pate synth: synthetic samples, one row per class", fontsize=8)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


@dataclasses.dataclass(frozen=True, kw_only=True)
class SynthesisResult(abc.ABC):
    """What a `pate synth` method did (synth.json holds it, but for the wall time): its ε at
    δ, the train-on-synthetic scores and the time; each method adds what it released and
    says it in `headline()`."""

    eps: float
    delta: float
    scores: dict
    wall_time_s: float
    data_set: dict | None = None  # the ledger's summary with this release (`Ledger.summary`)

    @abc.abstractmethod
    def headline(self) -> str:
        """The first summary line: what the method released and its noise."""

    def summary(self) -> str:
        """The headline, ε, the train-on-synthetic scores and the time, one line each."""
        scores = self.scores
        cnn = "n/a (images too small for the [dpsgd] CNN)" if scores["cnn"] is None else f"{scores['cnn']:.4f}"
        return "\n".join([
            *publish_lines(self.data_set, rundir.SYNTH_JSON),
            self.headline(),
            f"synth eps = {self.eps:.4f} at delta = {self.delta:g} (replace-one neighbours)",
            f"train on synthetic, test on real ({scores['eval_points']} evaluation points): logistic regression "
            f"{scores['logistic_regression']:.4f}, CNN {cnn}",
            f"wall time: {self.wall_time_s:.1f} s (printed only)"])
