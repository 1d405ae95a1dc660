"""PATE-GAN's training program (Jordon, Yoon & van der Schaar, "PATE-GAN: generating
synthetic data with differential privacy guarantees", ICLR 2019, Algorithm 1): a
class-conditional MLP GAN whose only contact with the private data is the teachers'
noisy real/fake vote.

One step ``s`` (`train`):

1. **Teachers.** The T teacher discriminators are one stacked pytree, trained by one jitted
   step vmapped over the teacher axis (the optimizer update inside the vmap: nothing couples
   teachers) and placed by `pate.programs.placement` (sharded over a ("teacher",) mesh when there are
   several devices, padding teachers masked out of every vote). Teacher t reads row t of
   the ``(T, S, ...)`` shard array cut **once** from the fixed partition
   (`pate.data.partition`, the teachers' seed), and nothing else of the private data: each of
   its ``teacher_steps`` Adam steps takes ``real_batch_size`` points of its own shard
   (labelled real) against as many generated points (fake).
2. **Queries.** ``batch_size`` generated (image, class) pairs; teacher t votes real when its
   logit is > 0. The vote histogram (B, 2) (column 0 fake, column 1 real; every row sums
   to T) is PRIVATE: it never leaves `train`, which hands it to the noisy aggregator
   (`pate.release.aggregation.run`, the GNMax record of `analysis.mechanisms.registry` with 2 classes, float64
   noise from an `analysis.core.noise.NoiseSource`). Only the noisy labels go on.
3. **Post-processing.** The student discriminator takes ``student_steps`` steps on the queried
   points and their noisy labels; the generator one step to make the student say real.

**The public-pool student** (``public_real``; the original above is ``public_real = false``).
Jordon et al.'s student never sees a real image, so nothing points the generator at the data
(docs/baselines.md). Here the student is two discriminators: a *public* one, without class
input, trained on the public pool's unlabelled images (`pate.data.Splits.pool_x`, published
by the threat model) as real against generated ones, and the *conditional* one, trained on
every (query, noisy label) released so far. Each step is ``gan_steps`` updates of both and of
the generator, which fools both (non-saturating); ``warmup_steps`` such steps come before the
first query (no vote, no teacher read by the student or the generator). The teachers may be
trained to call their own images under a wrong class fake (``teacher_fakes = "mismatched"``,
Reed et al.'s matching-aware discriminator, ICML 2016), so that their vote says whether a
generated image shows its class: the only class information the generator gets.

**Privacy** (replace-one neighbours of the private train split, as everywhere in pate).
Replacing one training example changes one shard t. Everything the next step computes
besides teacher t's state is a function of public values (the config, its seed, the
public partition) and of the noisy labels released so far, so given that transcript only
teacher t's vote can differ on each query: each histogram row moves by at most one count
between the two columns, L2 sensitivity √2, the setting of GNMax (Papernot et al., "Scalable
private learning with PATE", ICLR 2018, Proposition 8: ``(λ, λ/σ²)``-RDP per answer). The
adaptive composition of the ``steps × batch_size`` answers (fixed before training) is what
`analysis.mechanisms.noisy_max.GNMax.cost` states (μ² = 2N/σ²). The noise is drawn by the aggregator
on the votes; no label any discriminator trains on is noised otherwise.

The public-pool student changes none of this. Its inputs are the public pool (the same
under both neighbours: replace-one changes a train-split example, never a pool image), the
config and its seed, and the released noisy labels with the generated points they answer
(themselves functions of earlier releases and public values); the ``gan_steps`` updates, the
warm-up steps and the reuse of every released label are therefore post-processing, and cost
nothing however many there are. The teachers' objective (``teacher_fakes``) reads teacher t's
own shard and public values only, so replacing one example still changes teacher t alone,
and each answer is still one GNMax answer of sensitivity √2. The number of answers,
``steps × batch_size``, is fixed from the config before training (``warmup_steps`` and
``gan_steps`` add none), so the ledger's charge is the same record and cost as without it.
Test: `tests/baselines/test_synth.py::test_the_generator_reads_the_private_data_only_through_the_votes`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from analysis.core.errors import PateError
from analysis.mechanisms.record import Mechanism
from analysis.core.noise import NoiseSource
from pate.config.baseline_sections import SynthConfig
from pate.release import aggregation
from pate.programs import keys
from pate.programs.models import Discriminator, Generator
from pate.programs.placement import Placement, to_host, unpad

FAKE, REAL = 0, 1  # the vote histogram's columns
# Named sub-streams of a step's key (`fold_in(fold_in(data key, step), ...)`).
_TEACHER_FAKES, _TEACHER_REAL, _QUERIES, _GENERATOR = 0, 1, 2, 3
_SAMPLES_STREAM = 3  # the released samples: fold_in(training key, 3)


@dataclasses.dataclass(frozen=True)
class GanSpec:
    """What the program is built from: the data's public shape and classes, and the `[synth]`
    section itself (`pate.config.baseline_sections.SynthConfig`, frozen and hashable)."""

    image_shape: tuple[int, ...]
    num_classes: int
    synth: SynthConfig

    @classmethod
    def of(cls, cfg: SynthConfig, image_shape: Sequence[int], num_classes: int) -> "GanSpec":
        return cls(tuple(int(d) for d in image_shape), int(num_classes), cfg)


def teacher_shards(train_x: np.ndarray, train_y: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(xs, ys)``: teacher t's shard is row t, ``train_x[indices[t]]`` (`pate.data.Partition`)."""
    return np.asarray(train_x, np.float32)[indices], np.asarray(train_y, np.int32)[indices]


def _bce(logits: jax.Array, targets) -> jax.Array:
    return optax.sigmoid_binary_cross_entropy(logits, jnp.broadcast_to(targets, logits.shape)).mean()


class PateGan:
    """The teachers, the student and the generator, and their jitted steps."""

    def __init__(self, spec: GanSpec, shards_x: np.ndarray, shards_y: np.ndarray,
                 placement: Placement | None = None, public_x: np.ndarray | None = None):
        if spec.synth.public_real and (public_x is None or len(public_x) == 0):
            raise PateError("synth.public_real = true needs the public pool's images (data.public_size >= 1)")
        self.spec = spec
        self.num_teachers = int(shards_x.shape[0])
        self.placement = placement or Placement(self.num_teachers)
        self.gen = Generator(spec.image_shape, spec.synth.generator_hidden)
        self.disc = Discriminator(spec.synth.discriminator_hidden)
        self.tx = optax.adam(spec.synth.learning_rate, b1=0.5)
        self.shards = self.placement.put((np.asarray(shards_x, np.float32), np.asarray(shards_y, np.int32)))
        self.ids = self.placement.teacher_ids()
        self.mask = self.placement.mask()
        root = keys.training_key(spec.synth.seed)
        self._root = root
        self._data_key = keys.stream(root, keys.DATA_STREAM)
        self._fns = _compiled(self)
        init = keys.stream(root, keys.INIT_STREAM)
        self.teachers = self._fns["init_teachers"](init, self.ids)
        self.student, self.generator = self._fns["init_rest"](init)
        # The public-pool student (public_real): a discriminator without class input, the
        # pool's images (public) as its only real ones, and the noisy votes released so far.
        self.public_x = None if public_x is None else jnp.asarray(public_x, jnp.float32)
        self.public_student = self._fns["init_public"](init) if spec.synth.public_real else None
        self.released: tuple[jax.Array, jax.Array, jax.Array] | None = None
        self.filled = 0

    def _make_init(self) -> tuple[Callable, Callable]:
        spec = self.spec
        x0 = jnp.zeros((1, *spec.image_shape), jnp.float32)
        c0 = jnp.zeros((1, spec.num_classes), jnp.float32)

        def init_teacher(init, tid):
            params = self.disc.init(jax.random.fold_in(jax.random.fold_in(init, 0), tid), x0, c0)
            return params, self.tx.init(params)

        def init_rest(init):
            student = self.disc.init(jax.random.fold_in(init, 1), x0, c0)
            generator = self.gen.init(jax.random.fold_in(init, 2), jnp.zeros((1, spec.synth.latent_dim)), c0)
            return (student, self.tx.init(student)), (generator, self.tx.init(generator))

        def init_public(init):
            public = self.disc.init(jax.random.fold_in(init, 3), x0, jnp.zeros((1, 0), jnp.float32))
            return public, self.tx.init(public)

        return jax.vmap(init_teacher, in_axes=(None, 0)), init_rest, init_public

    # ------------------------------------------------------------------ pieces

    def _onehot(self, y: jax.Array) -> jax.Array:
        return jax.nn.one_hot(y, self.spec.num_classes, dtype=jnp.float32)

    def _fake(self, gparams, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
        """``n`` generated images and their classes (drawn uniformly: a public prior)."""
        kz, ky = jax.random.split(key)
        y = jax.random.randint(ky, (n,), 0, self.spec.num_classes)
        z = jax.random.normal(kz, (n, self.spec.synth.latent_dim))
        return self.gen.apply(gparams, z, self._onehot(y)), y

    def _step_key(self, s, purpose: int) -> jax.Array:
        return jax.random.fold_in(jax.random.fold_in(self._data_key, s), purpose)

    def _make_teacher_round(self) -> Callable:
        spec, disc, tx = self.spec, self.disc, self.tx
        k, r = spec.synth.teacher_steps, spec.synth.real_batch_size
        generated, mismatched = spec.synth.teacher_fakes in ("generated", "both"), spec.synth.teacher_fakes in ("mismatched", "both")

        def one_teacher(params, opt, x, y, tid, s, fx, fy):
            """Teacher ``tid``'s Adam steps on its own shard (x, y) against the fakes."""
            key = jax.random.fold_in(self._step_key(s, _TEACHER_REAL), tid)

            def body(carry, inputs):
                params, opt = carry
                i, fxi, fyi = inputs
                ki, kw = jax.random.split(jax.random.fold_in(key, i))
                idx = jax.random.randint(ki, (r,), 0, x.shape[0])
                # "mismatched": its own images under a class they are not (a uniform other class)
                wrong = (y[idx] + jax.random.randint(kw, (r,), 1, spec.num_classes)) % spec.num_classes

                def loss(p):
                    out = _bce(disc.apply(p, x[idx], self._onehot(y[idx])), 1.0)
                    if generated:
                        out += _bce(disc.apply(p, fxi, self._onehot(fyi)), 0.0)
                    if mismatched:
                        out += _bce(disc.apply(p, x[idx], self._onehot(wrong)), 0.0)
                    return out

                updates, opt = tx.update(jax.grad(loss)(params), opt, params)
                return (optax.apply_updates(params, updates), opt), None

            (params, opt), _ = jax.lax.scan(body, (params, opt), (jnp.arange(k), fx, fy))
            return params, opt

        def teacher_round(teachers, shards, ids, gparams, s):
            if generated:
                fakes = [self._fake(gparams, jax.random.fold_in(self._step_key(s, _TEACHER_FAKES), i), r)
                         for i in range(k)]  # the same public fakes for every teacher
                fx, fy = jnp.stack([f[0] for f in fakes]), jnp.stack([f[1] for f in fakes])
            else:  # no generated fakes: placeholders the loss never reads
                fx, fy = jnp.zeros((k, 1, *spec.image_shape)), jnp.zeros((k, 1), jnp.int32)
            return jax.vmap(one_teacher, in_axes=(0, 0, 0, 0, 0, None, None, None))(
                *teachers, *shards, ids, s, fx, fy)

        return teacher_round

    def _make_votes(self) -> Callable:
        disc = self.disc

        def votes(tparams, mask, x, y):
            logits = jax.vmap(lambda p: disc.apply(p, x, self._onehot(y)))(tparams)  # (T, B)
            real = jnp.sum((logits > 0) & (mask[:, None] > 0), axis=0)
            return jnp.stack([jnp.sum(mask) - real, real], axis=-1).astype(jnp.int32)

        return votes

    def _make_post(self) -> Callable:
        spec, disc, gen, tx = self.spec, self.disc, self.gen, self.tx

        def post(student, generator, x, y, labels, s):
            sp, so = student
            target = labels.astype(jnp.float32)
            for _ in range(spec.synth.student_steps):
                grads = jax.grad(lambda p: _bce(disc.apply(p, x, self._onehot(y)), target))(sp)
                updates, so = tx.update(grads, so, sp)
                sp = optax.apply_updates(sp, updates)
            gp, go = generator
            kz, ky = jax.random.split(self._step_key(s, _GENERATOR))
            y2 = jax.random.randint(ky, (spec.synth.batch_size,), 0, spec.num_classes)
            z = jax.random.normal(kz, (spec.synth.batch_size, spec.synth.latent_dim))

            def loss(p):  # non-saturating: make the student say real
                return _bce(disc.apply(sp, gen.apply(p, z, self._onehot(y2)), self._onehot(y2)), 1.0)

            updates, go = tx.update(jax.grad(loss)(gp), go, gp)
            return (sp, so), (optax.apply_updates(gp, updates), go)

        return post

    def _make_post_public(self) -> Callable:
        """``gan_steps`` updates of the two students and the generator (public_real): post-processing
        of the public pool and of the released labels ``(bx, by, bl)[:filled]`` only."""
        spec, disc, gen, tx = self.spec, self.disc, self.gen, self.tx
        b = spec.synth.batch_size
        none = jnp.zeros((b, 0), jnp.float32)  # the public student's (empty) class input

        def post(student, public, generator, released, filled, public_x, s):
            bx, by, bl = released
            has = (filled > 0).astype(jnp.float32)  # no conditional signal before the first vote

            def one(carry, i):
                (sp, so), (up, uo), (gp, go) = carry
                key = jax.random.fold_in(self._step_key(s, _GENERATOR), i)
                for j in range(spec.synth.student_steps):
                    kf, kp, kb = jax.random.split(jax.random.fold_in(key, j + 1), 3)
                    fx, _ = self._fake(gp, kf, b)
                    px = public_x[jax.random.randint(kp, (b,), 0, public_x.shape[0])]
                    u_loss = lambda p: _bce(disc.apply(p, px, none), 1.0) + _bce(disc.apply(p, fx, none), 0.0)
                    updates, uo = tx.update(jax.grad(u_loss)(up), uo, up)
                    up = optax.apply_updates(up, updates)
                    idx = jax.random.randint(kb, (b,), 0, jnp.maximum(filled, 1))
                    c_loss = lambda p: has * _bce(disc.apply(p, bx[idx], self._onehot(by[idx])),
                                                   bl[idx].astype(jnp.float32))
                    updates, so = tx.update(jax.grad(c_loss)(sp), so, sp)
                    sp = optax.apply_updates(sp, updates)
                kz, ky = jax.random.split(jax.random.fold_in(key, 0))
                y = jax.random.randint(ky, (b,), 0, spec.num_classes)
                z = jax.random.normal(kz, (b, spec.synth.latent_dim))

                def g_loss(p):  # non-saturating: make both students say real
                    x = gen.apply(p, z, self._onehot(y))
                    return _bce(disc.apply(up, x, none), 1.0) + has * _bce(disc.apply(sp, x, self._onehot(y)), 1.0)

                updates, go = tx.update(jax.grad(g_loss)(gp), go, gp)
                return ((sp, so), (up, uo), (optax.apply_updates(gp, updates), go)), None

            return jax.lax.scan(one, (student, public, generator), jnp.arange(spec.synth.gan_steps))[0]

        return post

    @staticmethod
    def _record(released, x, y, labels, filled):
        """``released`` with the step's queries and noisy labels written at row ``filled``."""
        bx, by, bl = released
        return (jax.lax.dynamic_update_slice_in_dim(bx, x, filled, 0),
                jax.lax.dynamic_update_slice_in_dim(by, y.astype(jnp.int32), filled, 0),
                jax.lax.dynamic_update_slice_in_dim(bl, labels, filled, 0))

    # ------------------------------------------------------------------ the step's parts

    def reserve(self, queries: int) -> None:
        """Room for ``queries`` released (image, class, noisy label) rows (public_real: the
        conditional student draws its batches from all of them)."""
        if self.spec.synth.public_real:
            self.released = (jnp.zeros((queries, *self.spec.image_shape), jnp.float32),
                             jnp.zeros((queries,), jnp.int32), jnp.zeros((queries,), jnp.int32))
            self.filled = 0

    def warm_up(self, s: int) -> None:
        """Step ``s`` before the first query (public_real): the students and the generator on
        the public pool alone; no teacher is read."""
        self._post_public(s)

    def _post_public(self, s: int) -> None:
        self.student, self.public_student, self.generator = self._fns["post_public"](
            self.student, self.public_student, self.generator, self.released, jnp.int32(self.filled),
            self.public_x, jnp.int32(s))

    def update_teachers(self, s: int) -> None:
        """Every teacher's ``teacher_steps`` on its own shard against fakes of step ``s``."""
        self.teachers = self._fns["teacher_round"](self.teachers, self.shards, self.ids, self.generator[0],
                                            jnp.int32(s))

    def queries(self, s: int) -> tuple[jax.Array, jax.Array]:
        """The ``batch_size`` generated points of step ``s`` the teachers vote on."""
        return self._fns["generate"](self.generator[0], self._step_key(s, _QUERIES), self.spec.synth.batch_size)

    def votes(self, x: jax.Array, y: jax.Array) -> np.ndarray:
        """The (B, 2) vote histogram of the teachers on the queries — PRIVATE."""
        return to_host(self._fns["votes"](self.teachers[0], self.mask, x, y))

    def update_student_and_generator(self, s: int, x, y, labels: np.ndarray) -> None:
        """The student on the queried points and their noisy labels, then the generator
        (public_real: the labels join the released rows, then `gan_steps` updates)."""
        labels = jnp.asarray(labels, jnp.int32)
        if not self.spec.synth.public_real:
            self.student, self.generator = self._fns["post"](self.student, self.generator, x, y, labels,
                                                      jnp.int32(s))
            return
        if self.filled + labels.shape[0] > self.released[0].shape[0]:
            raise PateError(f"internal error: more answers than the {self.released[0].shape[0]} reserved")
        self.released = self._fns["record"](self.released, x, y, labels, jnp.int32(self.filled))
        self.filled += int(labels.shape[0])
        self._post_public(s)

    def teacher_params(self) -> Any:
        """The teachers' parameters on the host, padding dropped (tests)."""
        return unpad(self.teachers[0], self.num_teachers)

    def sample(self, n: int, chunk: int = 1000) -> tuple[np.ndarray, np.ndarray]:
        """``n`` synthetic images (float32 in [0, 1]) with balanced classes ``i mod C``."""
        y = np.arange(n, dtype=np.int32) % self.spec.num_classes
        key = keys.stream(self._root, _SAMPLES_STREAM)
        out = []
        for start in range(0, n, chunk):
            yc = jnp.asarray(y[start: start + chunk])
            z = jax.random.normal(jax.random.fold_in(key, start), (yc.shape[0], self.spec.synth.latent_dim))
            out.append(np.asarray(self._fns["apply_gen"](self.generator[0], z, self._onehot(yc))))
        return np.concatenate(out), y


_PROGRAMS: dict = {}


def _compiled(gan: PateGan) -> dict:
    """The jitted functions of ``gan``, shared by every `PateGan` of the same spec (they
    depend on the spec alone), so a second ensemble of that spec compiles nothing anew."""
    if gan.spec not in _PROGRAMS:
        init_teachers, init_rest, init_public = gan._make_init()
        _PROGRAMS[gan.spec] = {
            "init_teachers": jax.jit(init_teachers), "init_rest": jax.jit(init_rest),
            "init_public": jax.jit(init_public), "post_public": jax.jit(gan._make_post_public()),
            "record": jax.jit(gan._record),
            "teacher_round": jax.jit(gan._make_teacher_round()), "votes": jax.jit(gan._make_votes()),
            "post": jax.jit(gan._make_post()), "generate": jax.jit(gan._fake, static_argnums=(2,)),
            "apply_gen": jax.jit(gan.gen.apply)}
    return _PROGRAMS[gan.spec]


def noisy_labels(votes: np.ndarray, mechanism: Mechanism, source: NoiseSource) -> np.ndarray:
    """The released real/fake labels of one step: the mechanism record run on the votes
    (`pate.release.aggregation.run`; GNMax: argmax of the two counts plus N(0, σ²) each)."""
    return aggregation.run(votes, mechanism, source)


def train(gan: PateGan, steps: int, mechanism: Mechanism, source: NoiseSource,
          on_step: Callable[[int], None] | None = None) -> int:
    """Runs ``warmup_steps`` steps without a query, then ``steps`` steps with one (module
    docstring); both are fixed by the caller before training, from public values (no stopping
    rule reads anything). ``on_step`` gets the steps done of ``warmup_steps + steps``.
    Returns the number of queries answered: ``steps × batch_size``."""
    answered, warmup = 0, gan.spec.synth.warmup_steps
    gan.reserve(steps * gan.spec.synth.batch_size)
    for s in range(warmup + steps):
        gan.update_teachers(s)
        if s < warmup:
            gan.warm_up(s)
            if on_step is not None:
                on_step(s + 1)
            continue
        x, y = gan.queries(s)
        labels = noisy_labels(gan.votes(x, y), mechanism, source)
        gan.update_student_and_generator(s, x, y, labels)
        answered += int(labels.shape[0])
        if on_step is not None:
            on_step(s + 1)
    return answered
