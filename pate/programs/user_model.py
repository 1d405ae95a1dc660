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


#: The sample batches a user's module is tried on before anything trains (`check`): two sizes, so
#: an output that ignores the batch (one row, or a size of its own) is found.
SAMPLE_BATCH = 2
OTHER_BATCH = 3

#: What a user's code may raise that `check` reports in one line: its exceptions, and a `sys.exit`
#: (SystemExit: it ended `pate` with status 0 and no teachers). Ctrl-C stays Ctrl-C.
_USER_FAILURES = (Exception, SystemExit)


def describe(model: UserModule, where: str = "module") -> str:
    """``module pkg.mod:Class (where)``: how every line about a user's module names it."""
    inner = type(model.inner)
    return f"module {inner.__module__}:{inner.__qualname__} ({where})"


def check(model: UserModule, num_classes: int, input_shape: tuple[int, ...], where: str = "module") -> None:
    """Tries a user's module (built by `build`) on sample batches of ``input_shape`` inputs before
    any training, vote or charge, as the teachers' and the student's programs run it (jitted): it
    must initialise with at least one parameter and run (evaluation and, when its ``__call__``
    takes ``train``, training with a dropout rng), give one array of floating-point logits of
    shape ``(batch, num_classes)`` for batches of two sizes, finite, and keep no mutable
    collection (batch statistics: the teachers' program and the student's are a pure ``apply``).

    Raises:
      PateError: one line naming the module (``module pkg.mod:Class (teachers.module) ...``)
        and what to change; whatever the user's code raised (a `sys.exit` too) is reported in
        it, never as an internal error.
    """
    name = describe(model, where)
    shape = tuple(input_shape)
    x = jax.random.uniform(jax.random.key(0), (SAMPLE_BATCH, *shape), jnp.float32)
    rngs = {"params": jax.random.key(1), "dropout": jax.random.key(2)}
    try:
        variables = model.init(rngs, x)
    except PateError:
        raise
    except _USER_FAILURES as err:  # the user's code: any exception of theirs, one line
        raise PateError(f"{name} fails on a sample batch of inputs of shape {shape}: {_what(err)}") from None
    mutable = sorted(k for k in variables if k != "params")
    if mutable:
        raise PateError(f"{name} keeps mutable state (the collection {', '.join(repr(k) for k in mutable)}, e.g. "
                        "nn.BatchNorm's batch statistics); pate trains a pure module: use nn.LayerNorm or "
                        "nn.GroupNorm instead")
    if not jax.tree.leaves(variables.get("params", {})):
        raise PateError(f"{name} has no parameters: there is nothing to train; give it a layer with weights "
                        "(e.g. nn.Dense(self.num_classes))")
    for batch, train in ((SAMPLE_BATCH, False), (SAMPLE_BATCH, True), (OTHER_BATCH, False)):
        inputs = x if batch == SAMPLE_BATCH else jax.random.uniform(jax.random.key(4), (batch, *shape), jnp.float32)
        when = (f"a sample batch of {'' if batch == SAMPLE_BATCH else f'{batch} '}inputs of shape {shape}"
                f"{' in training' if train else ''}")
        try:
            out = _jitted(model, train)(variables, inputs, jax.random.key(3))
        except PateError:
            raise
        except _USER_FAILURES as err:
            raise PateError(f"{name} fails on {when}: {_what(err)}") from None
        if not isinstance(out, jax.Array):
            raise PateError(f"{name} gives a {type(out).__name__} on {when}, not an array of logits; it must "
                            f"give one array of shape (batch, num_classes) = {(batch, num_classes)}")
        if tuple(out.shape) != (batch, num_classes):
            raise PateError(f"{name} gives outputs of shape {tuple(out.shape)} on a batch of {batch} inputs of shape "
                            f"{shape}; it must give (batch, num_classes) = {(batch, num_classes)}: one logit per "
                            "class for each input")
        if not jnp.issubdtype(out.dtype, jnp.floating):
            raise PateError(f"{name} gives {out.dtype} outputs on {when}; its logits must be floating-point numbers "
                            "(float32)")
        if not bool(jnp.all(jnp.isfinite(out))):
            raise PateError(f"{name} gives non-finite outputs (NaN or inf) on {when}; its logits must be finite")


def _jitted(model: UserModule, train: bool):
    """``(variables, x, key) -> logits``, jitted as the training and voting programs run it (a
    module that branches on a traced value fails here, in one line, not in the middle of training)."""
    return jax.jit(lambda variables, x, key: model.apply(variables, x, train=train, rngs={"dropout": key}))


def _what(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r}) (a module must return its logits, never end the program)"
    return f"{type(err).__name__}: {_first_line(err)}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else "(no message)"
