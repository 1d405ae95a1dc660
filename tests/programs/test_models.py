"""Models: the patch convolution equals lax.conv, shapes, config → model, initialisation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pate.programs import models
from pate.config import TeachersConfig


_SLOW = pytest.mark.slow  # each case compiles two convolutions (3-5 s)


@pytest.mark.parametrize("kernel, stride, channels, size", [
    (3, 1, 3, 8), (1, 1, 2, 5), (4, 3, 1, 11), pytest.param(5, 2, 1, 28, marks=_SLOW),
    pytest.param(5, 2, 4, 14, marks=_SLOW), pytest.param(3, 2, 2, 9, marks=_SLOW)])
def test_patch_conv_equals_xla_conv(kernel, stride, channels, size):
    x = jax.random.uniform(jax.random.PRNGKey(0), (3, size, size, channels))
    patches = models.Conv(6, kernel, stride, impl="patches")
    xla = models.Conv(6, kernel, stride, impl="xla")
    params = patches.init(jax.random.PRNGKey(1), x)
    params = jax.tree.map(lambda p: p + 0.1, params)  # a non-zero bias too
    y_patch, y_xla = patches.apply(params, x), xla.apply(params, x)
    assert y_patch.shape == y_xla.shape
    np.testing.assert_allclose(y_patch, y_xla, rtol=1e-5, atol=1e-5)


def test_extract_patches_layout():
    x = jnp.arange(2 * 4 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 4, 3)
    p = models.extract_patches(x, kernel=3, stride=1, padding=0)
    assert p.shape == (2, 2, 2, 27)
    # feature (dy * k + dx) * C + c of output (i, j) is x[i + dy, j + dx, c]
    np.testing.assert_array_equal(p[1, 1, 0, (2 * 3 + 1) * 3 + 2], x[1, 1 + 2, 0 + 1, 2])


@pytest.mark.slow  # 10 s: compiles every model
def test_cnn_and_mlp_shapes_and_vmap():
    cfg = TeachersConfig(conv_features=(4, 8), conv_kernels=(5, 3), conv_strides=(2, 2),
                         hidden=(16,))
    model = models.make_model(cfg, num_classes=7, backend="cpu")
    assert isinstance(model, models.CNN) and model.impl == "patches"
    x = jnp.zeros((5, 12, 12, 1))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    stacked = jax.vmap(lambda k: model.init(k, x))(keys)
    logits = jax.vmap(model.apply, in_axes=(0, None))(stacked, x)
    assert logits.shape == (3, 5, 7)
    mlp = models.make_model(dataclasses.replace(cfg, model="mlp", hidden=(32, 16)), 4)
    assert isinstance(mlp, models.MLP)
    assert mlp.apply(mlp.init(jax.random.PRNGKey(0), x), x).shape == (5, 4)


def test_pooled_cnn_shape():
    cfg = TeachersConfig(conv_features=(4, 4), conv_kernels=(3, 3), conv_strides=(1, 1),
                         conv_pool=True)
    model = models.make_model(cfg, 3)
    x = jnp.zeros((2, 9, 9, 1))
    assert model.apply(model.init(jax.random.PRNGKey(0), x), x).shape == (2, 3)


def test_conv_impl_resolution():
    assert models.conv_impl("auto", "cpu") == "patches"
    assert models.conv_impl("auto", "gpu") == "xla"
    assert models.conv_impl("xla", "cpu") == "xla"
    with pytest.raises(ValueError, match="unknown convolution impl"):
        models.Conv(2, impl="fft").init(jax.random.PRNGKey(0), jnp.zeros((1, 4, 4, 1)))


def test_lecun_normal_scale():
    w = models.lecun_normal(jax.random.PRNGKey(0), (5, 5, 8, 64))
    assert w.shape == (5, 5, 8, 64)
    fan_in = 5 * 5 * 8
    np.testing.assert_allclose(float(jnp.var(w)), 1.0 / fan_in, rtol=0.05)
    assert float(jnp.abs(w).max()) <= 2.0 / 0.87962566103423978 / np.sqrt(fan_in) + 1e-6


@pytest.mark.slow  # 8 s
def test_dropout_only_in_training():
    cfg = TeachersConfig(model="mlp", hidden=(64,), dropout=0.5)
    model = models.make_model(cfg, 3)
    x = jax.random.uniform(jax.random.PRNGKey(0), (4, 6, 6, 1))
    params = model.init(jax.random.PRNGKey(1), x)
    np.testing.assert_array_equal(model.apply(params, x), model.apply(params, x))
    a = model.apply(params, x, train=True, rngs={"dropout": jax.random.PRNGKey(2)})
    b = model.apply(params, x, train=True, rngs={"dropout": jax.random.PRNGKey(3)})
    assert not np.allclose(a, b)
    # inverted dropout keeps the mean activation: average many masks ≈ no dropout
    hidden = jnp.ones((1, 20000))
    module = models.MLP(num_classes=2, hidden=(), dropout=0.25)
    dropped = models._dropout(module.bind({}, rngs={"dropout": jax.random.PRNGKey(4)}),
                              hidden, 0.25, True)
    assert abs(float(dropped.mean()) - 1.0) < 0.03
    assert abs(float((dropped == 0).mean()) - 0.25) < 0.02


@pytest.mark.slow  # 5 s
def test_flip_averaged_is_mirror_invariant_at_inference():
    cfg = TeachersConfig(conv_features=(4,), conv_kernels=(3,), conv_strides=(2,),
                         eval_flip=True)
    model = models.make_model(cfg, 5)
    assert isinstance(model, models.FlipAveraged)
    x = jax.random.uniform(jax.random.PRNGKey(0), (3, 8, 8, 1))
    params = model.init(jax.random.PRNGKey(1), x)
    out = model.apply(params, x)
    np.testing.assert_allclose(out, model.apply(params, x[:, :, ::-1, :]), atol=1e-5)
    np.testing.assert_allclose(jnp.exp(out).sum(-1) <= 1.0 + 1e-6, True)
    inner = models.make_model(dataclasses.replace(cfg, eval_flip=False), 5)
    train_out = model.apply(params, x, train=True)
    np.testing.assert_allclose(train_out, inner.apply({"params": params["params"]["inner"]}, x),
                               atol=1e-6)


def test_gabor_bank_properties():
    bank = models.gabor_bank(8, kernel=5)
    assert bank.shape == (5, 5, 17)
    np.testing.assert_allclose(np.linalg.norm(bank.reshape(25, 17), axis=0), 1.0, rtol=1e-5)
    np.testing.assert_allclose(bank[..., :16].reshape(25, 16).sum(axis=0), 0.0, atol=1e-5)
    assert (bank[..., 16] > 0).all()  # the low-pass
    # orientation i + 4 is orientation i turned by 90 degrees
    np.testing.assert_allclose(np.rot90(bank[..., 0]), bank[..., 8], atol=1e-5)


def test_gabor_modulus_matches_direct_computation():
    x = jax.random.uniform(jax.random.PRNGKey(0), (2, 9, 9, 3))
    layer = models.GaborModulus(orientations=4, kernel=5, stride=2)
    out = np.asarray(layer.apply({}, x))
    assert out.shape == (2, 5, 5, 3 * 5)
    assert jax.tree.leaves(layer.init(jax.random.PRNGKey(0), x)) == []  # nothing to train
    bank = models.gabor_bank(4, 5)
    padded = np.pad(np.asarray(x), ((0, 0), (2, 2), (2, 2), (0, 0)))
    n, i, j, c = 1, 3, 2, 2  # one output position of input channel c
    window = padded[n, 2 * i: 2 * i + 5, 2 * j: 2 * j + 5, c]
    responses = np.einsum("hw,hwf->f", window, bank)
    expected = [np.hypot(responses[2 * o], responses[2 * o + 1]) for o in range(4)]
    expected.append(responses[8])
    np.testing.assert_allclose(out[n, i, j, c * 5:(c + 1) * 5], expected, rtol=1e-4, atol=1e-3)


def test_gabor_cnn_from_config():
    cfg = TeachersConfig(gabor_orientations=8, conv_features=(16,), conv_kernels=(3,),
                         conv_strides=(2,))
    model = models.make_model(cfg, 10)
    x = jnp.zeros((3, 28, 28, 1))
    params = model.init(jax.random.PRNGKey(0), x)
    assert params["params"]["Conv_0"]["kernel"].shape == (3, 3, 9, 16)
    assert model.apply(params, x).shape == (3, 10)


@pytest.mark.parametrize("name", ["fashion_mnist", "mnist", "svhn", "quickstart", "tiny"])
def test_shipped_configs_build_their_models(name):
    from conftest import CONFIGS

    from pate.config import load_config

    config = load_config(CONFIGS / f"{name}.toml")
    shape = {"svhn": (32, 32, 3), "synthetic": tuple(config.data.synthetic_shape)}.get(
        config.data.name, (28, 28, 1))
    model = models.make_model(config.teachers, 10, backend="cpu")
    x = jnp.zeros((2, *shape))
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    assert jax.eval_shape(model.apply, params, x).shape == (2, 10)


@pytest.mark.slow  # 10 s of compilation; the WRN student also runs in bench/gpu.py --smoke (tests/bench/test_bench_gpu.py)
def test_wide_resnet_student():
    """`model = "wrn"`: logits of the right shape, patches and lax.conv agree, a stride-2
    group halves the side (projection shortcut), dropout only in training."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pate.config import StudentConfig
    from pate.programs.models import WideResNet, make_model

    cfg = StudentConfig(model="wrn", conv_features=(8, 16), conv_kernels=(3, 3), conv_strides=(1, 2),
                        wrn_blocks=2, dropout=0.5, conv_impl="patches", gabor_orientations=0)
    cfg.validate()
    model = make_model(cfg, 10)
    assert isinstance(model, WideResNet) and model.blocks == 2
    x = jax.random.uniform(jax.random.key(0), (3, 12, 12, 1))
    params = model.init({"params": jax.random.key(1), "dropout": jax.random.key(2)}, x)
    logits = model.apply(params, x)
    assert logits.shape == (3, 10) and bool(jnp.all(jnp.isfinite(logits)))
    xla = make_model(StudentConfig(**{**cfg.__dict__, "conv_impl": "xla"}), 10)
    np.testing.assert_allclose(np.asarray(xla.apply(params, x)), np.asarray(logits), atol=1e-4)
    trained = model.apply(params, x, train=True, rngs={"dropout": jax.random.key(3)})
    assert not np.allclose(np.asarray(trained), np.asarray(logits))
    shapes = jax.tree.map(lambda a: a.shape, params)["params"]
    assert any(v["kernel"][:2] == (1, 1) for k, v in shapes.items() if k.startswith("Conv"))  # a projection
    with pytest.raises(Exception, match="conv_strides"):
        StudentConfig(model="wrn", conv_features=(8, 16), conv_kernels=(3, 3), conv_strides=(1,)).validate()
    with pytest.raises(Exception, match="wrn_blocks"):
        StudentConfig(model="wrn", wrn_blocks=0).validate()
