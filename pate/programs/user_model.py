"""A user's own flax module as the teachers' or the student's network: named in the config by
import path (`[teachers] model = "module"`, `module = "package.module:Class"`) or passed from
Python, built as ``Class(num_classes=C)`` and called as every built-in model is
(`pate.programs.models.make_model`), so it trains vmapped over the teacher axis, checkpoints and
resumes as they do.

What a class must be: a `flax.linen.Module` subclass with a ``num_classes`` field whose
``__call__(x)`` maps a batch of inputs (N, ...) to logits (N, num_classes); it may take
``train`` (True while training: dropout on) and draw its dropout from the ``"dropout"`` rng.
It must not keep mutable state (batch statistics): the teachers' program is a pure ``apply``.
"""

from __future__ import annotations

import importlib
import inspect

import flax.linen as nn
import jax
import jax.numpy as jnp

from analysis.core.errors import PateError


def resolve(path: str, where: str = "module") -> type[nn.Module]:
    """The flax.linen Module class ``path`` ("package.module:Class") names.

    Raises:
      PateError: (one line) the path is malformed, its module does not import, it has no such
        attribute, or the attribute is not a flax.linen Module class with a ``num_classes`` field.
    """
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise PateError(f"{where} = {path!r} must be \"package.module:Class\"")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise PateError(f"{where} = {path!r}: cannot import {module_name} ({err}); put its folder on "
                        "PYTHONPATH or install it") from None
    except Exception as err:  # the user's module failed while importing
        raise PateError(f"{where} = {path!r}: importing {module_name} raised {type(err).__name__}: {err}") from None
    try:
        cls = getattr(module, class_name)
    except AttributeError:
        raise PateError(f"{where} = {path!r}: {module_name} has no {class_name}") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise PateError(f"{where} = {path!r} is not a flax module (a flax.linen.Module subclass), "
                        f"it is {type(cls).__name__ if not isinstance(cls, type) else 'the class ' + cls.__name__}")
    if "num_classes" not in getattr(cls, "__dataclass_fields__", {}):
        raise PateError(f"{where} = {path!r}: {class_name} has no num_classes field; declare "
                        "`num_classes: int` so pate can size its output")
    return cls


class UserModule(nn.Module):
    """A user's module behind the built-in models' calling convention: ``(x, train=False,
    features=False) -> logits``. ``train`` is passed on only when the module's ``__call__``
    takes it; its parameters live under ``inner``."""

    inner: nn.Module

    def __call__(self, x: jax.Array, train: bool = False, features: bool = False) -> jax.Array:
        if features:
            raise PateError(f"{type(self.inner).__name__} (a user's module) gives no penultimate features; "
                            "round 2 (its ridge heads) needs a built-in student model")
        if "train" in inspect.signature(type(self.inner).__call__).parameters:
            return self.inner(x, train=train)
        return self.inner(x)


def build(cls_or_path: type[nn.Module] | str, num_classes: int, where: str = "module") -> nn.Module:
    """``cls(num_classes=num_classes)`` for a class or an import path, wrapped as `UserModule`."""
    cls = resolve(cls_or_path, where) if isinstance(cls_or_path, str) else cls_or_path
    try:
        inner = cls(num_classes=num_classes)
    except TypeError as err:
        raise PateError(f"{where}: {cls.__name__}(num_classes={num_classes}) failed ({err}); give every other "
                        "field a default") from None
    return UserModule(inner)


#: The sample batch a user's module is tried on before anything trains (`check`).
SAMPLE_BATCH = 2


def check(model: UserModule, num_classes: int, input_shape: tuple[int, ...], where: str = "module") -> None:
    """Tries a user's module (built by `build`) on a sample batch of ``input_shape`` inputs before
    any training, vote or charge: it must initialise and run (evaluation and, when its
    ``__call__`` takes ``train``, training with a dropout rng), give outputs of shape
    ``(batch, num_classes)``, finite, and keep no mutable collection (batch statistics: the
    teachers' program and the student's are a pure ``apply``).

    Raises:
      PateError: one line naming the module (``module pkg.mod:Class (teachers.module) ...``)
        and what to change; whatever the user's code raised is reported in it, never as an
        internal error.
    """
    inner = type(model.inner)
    name = f"module {inner.__module__}:{inner.__qualname__} ({where})"
    x = jax.random.uniform(jax.random.key(0), (SAMPLE_BATCH, *input_shape), jnp.float32)
    rngs = {"params": jax.random.key(1), "dropout": jax.random.key(2)}
    try:
        variables = model.init(rngs, x)
    except PateError:
        raise
    except Exception as err:  # the user's code: any exception of theirs, one line
        raise PateError(f"{name} fails on a sample batch of inputs of shape {tuple(input_shape)}: "
                        f"{type(err).__name__}: {_first_line(err)}") from None
    mutable = sorted(k for k in variables if k != "params")
    if mutable:
        raise PateError(f"{name} keeps mutable state (the collection {', '.join(repr(k) for k in mutable)}, e.g. "
                        "nn.BatchNorm's batch statistics); pate trains a pure module: use nn.LayerNorm or "
                        "nn.GroupNorm instead")
    wanted = (SAMPLE_BATCH, num_classes)
    for train in (False, True):
        try:
            out = model.apply(variables, x, train=train, rngs={"dropout": jax.random.key(3)})
        except PateError:
            raise
        except Exception as err:
            raise PateError(f"{name} fails on a sample batch of inputs of shape {tuple(input_shape)}"
                            f"{' in training' if train else ''}: {type(err).__name__}: {_first_line(err)}") from None
        shape = tuple(getattr(out, "shape", ()))
        if shape != wanted:
            raise PateError(f"{name} gives outputs of shape {shape} on a batch of {SAMPLE_BATCH} inputs of shape "
                            f"{tuple(input_shape)}; it must give (batch, num_classes) = {wanted}: one logit per "
                            "class for each input")
        if not bool(jnp.all(jnp.isfinite(out))):
            raise PateError(f"{name} gives non-finite outputs (NaN or inf) on a sample batch of inputs of shape "
                            f"{tuple(input_shape)}; its logits must be finite")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else "(no message)"
