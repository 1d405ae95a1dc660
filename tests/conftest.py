"""Shared fixtures: the repository's configs and one trained tiny (synthetic) run; the helpers
the test files share (`invoke`, `one_line`, `one_line_error`, `snapshot`, `bench_module`, `vote_neighbours`,
`vote_histograms`; the door's `failing_replace` and `staged_labels`; the baselines' `baseline_run`,
`refused_before_writing`, `refused_without_overwrite`), imported as
``from conftest import invoke`` (tests/ is on sys.path under pytest, with or without xdist)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pathlib
import shutil

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TINY = CONFIGS / "tiny.toml"


def vote_neighbours(counts):
    """Every vote histogram one teacher's changed vote away from ``counts`` (one count −1,
    another +1), as tuples: the replace-one neighbours of the PATE bounds' brute-force tests."""
    for a, b in itertools.permutations(range(len(counts)), 2):
        if counts[a] > 0:
            other = list(counts)
            other[a] -= 1
            other[b] += 1
            yield tuple(other)


def vote_histograms(teachers: int, classes: int):
    """Every vote histogram of ``teachers`` votes over ``classes`` classes, as tuples."""
    for cut in itertools.combinations(range(teachers + classes - 1), classes - 1):
        edges = (-1, *cut, teachers + classes - 1)
        yield tuple(edges[i + 1] - edges[i] - 1 for i in range(classes))


EMBEDDING_FEATURES, EMBEDDING_CLASSES = 16, 4

#: The tiny run on embeddings (tests of a 2-D npz data set): 6 linear teachers, an MLP student, LNMax (as configs/tiny.toml's).
EMBEDDING_SETS = ["teachers.model=\"linear\"", "teachers.conv_features=[]", "teachers.conv_kernels=[]",
        "teachers.conv_strides=[]", "student.model=\"mlp\"", "student.hidden=[32]", "student.conv_features=[]",
        "student.conv_kernels=[]", "student.conv_strides=[]", "student.cutout=0", "student.augment_shift=0"]


def write_embeddings(path, train: int = 480, test: int = 300, features: int = EMBEDDING_FEATURES, seed: int = 0) -> str:
    """Gaussian classes around random centres, in no particular range (as a model's embeddings)."""
    rng = np.random.default_rng(seed)
    centres = 2.0 * rng.normal(size=(EMBEDDING_CLASSES, features))

    def draw(n):
        y = rng.integers(0, EMBEDDING_CLASSES, n)
        return (centres[y] + rng.normal(size=(n, features))).astype(np.float32), y

    (xtr, ytr), (xte, yte) = draw(train), draw(test)
    np.savez(path, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    return str(path)


def clean_and_poisoned_embeddings(tmp_path, train: int, test: int = 260) -> tuple[str, pathlib.Path]:
    """Two npz data sets of embeddings with the same public pool: ``clean`` (`write_embeddings`) and
    ``poisoned``, whose private rows are NaN and private labels -1, which every loader of the private
    split refuses: a command that prints the same for both never read a private record."""
    (tmp_path / "clean").mkdir(), (tmp_path / "poisoned").mkdir()
    clean = write_embeddings(tmp_path / "clean" / "e.npz", train=train, test=test)
    with np.load(clean) as f:
        arrays = dict(f)
    poisoned = tmp_path / "poisoned" / "e.npz"
    np.savez(poisoned, **{**arrays, "x_train": np.full_like(arrays["x_train"], np.nan),
                          "y_train": np.full_like(arrays["y_train"], -1)})
    return clean, poisoned


def embedding_sets(path) -> list[str]:
    out = ["data.name=\"npz\"", f"data.path={json.dumps(str(path))}", *EMBEDDING_SETS]
    return [a for s in out for a in ("--set", s)]


def chi_square_pvalue(samples, pmf, support):
    """Pearson's test of integer samples against a pmf over `support` (tails pooled)."""
    samples = np.asarray(samples)
    probs = pmf(support)
    observed = np.array([(samples == k).sum() for k in support], dtype=float)
    tail_p = 1.0 - probs.sum()
    observed = np.append(observed, samples.size - observed.sum())
    expected = np.append(probs, tail_p) * samples.size
    keep = expected > 5
    pooled_obs = np.append(observed[keep], observed[~keep].sum())
    pooled_exp = np.append(expected[keep], expected[~keep].sum())
    if pooled_exp[-1] == 0:
        pooled_obs, pooled_exp = pooled_obs[:-1], pooled_exp[:-1]
    pooled_exp *= pooled_obs.sum() / pooled_exp.sum()
    from scipy import stats

    return stats.chisquare(pooled_obs, pooled_exp).pvalue


def own_copy(shared_run, target, **copytree_options) -> pathlib.Path:
    """A copy of a shared session run (`labelled_tiny`, `finished_tiny`) at ``target``, and of
    the ledger folder that run's labels were charged to into this test's own ledger folder
    (``$PATE_LEDGER_DIR``, the `ledger_dir` fixture): a run belongs to one ledger
    (`pate.store.ledger.Ledger.check_holds_run`), so commands on the copy charge the run's
    own ledger, as they would on the machine that labelled it, and never the session's."""
    import os

    shutil.copytree(shared_run, target, **copytree_options)
    shutil.copytree(pathlib.Path(shared_run).parent / "ledgers", os.environ["PATE_LEDGER_DIR"], dirs_exist_ok=True)
    return pathlib.Path(target)


def unpublished_copy(labelled_tiny, tmp_path):
    """An own copy (`own_copy`) of the labelled tiny run at ``tmp_path / "run"``: labelled, not
    yet analysed; its labels charged to the test's own ledger (its one entry, "labels")."""
    return own_copy(labelled_tiny, tmp_path / "run")


def failing_replace(monkeypatch, fault, module=os):
    """Makes ``module.replace`` (`os.replace`) raise the OSError that ``fault(src, dst)`` (both
    as strings) returns, and rename as usual where it returns None. Returns the real
    `os.replace`, to put back."""
    real = os.replace

    def replace(src, dst):
        err = fault(str(src), str(dst))
        if err is not None:
            raise err
        return real(src, dst)

    monkeypatch.setattr(module, "replace", replace)
    return real


def staged_labels(tmp_path, old, staged, extra=()):
    """A run directory ``tmp_path / "run"`` holding the files `old` ("old NAME") and the label
    step's staging folder (`pate.store.door.Staging`) of `staged`, written with `extra`
    beside them ("new NAME"). Returns the `RunDir` and the `Staging`."""
    from pate.store import door, rundir

    run = rundir.RunDir(tmp_path / "run")
    run.path.mkdir()
    for name in old:
        (run / name).write_text(f"old {name.split('.')[0]}")
    staging = door.Staging(run, "label", staged)
    for name in (*staged, *extra):
        (staging / name).write_text(f"new {name.split('.')[0]}")
    return run, staging


def charged(run) -> pathlib.Path:
    """A hand-made run (labels.npz written by a test, as a script would) with its releases
    charged to its ledger by `pate ledger --import`: labels no ledger records are neither
    published nor learnt from (`pate.release.labels.require_charged`)."""
    result = invoke("ledger", "--import", run)
    assert result.exit_code == 0, result.output
    return pathlib.Path(run)


def run_entries(run) -> list[dict]:
    """The entries of the ledger a run's data set charges."""
    from pate.store import ledger as ledger_mod

    return ledger_mod.Ledger.for_run(run).entries()


def bench_module(name: str):
    """The script ``bench/<name>.py`` imported as a module (bench/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_configure(config):
    """The fast suite's JAX programs are compiled with XLA's optimisations mostly off
    (``jax_disable_most_optimizations``): it runs many small programs once each, so XLA's compile,
    not the run, is most of its time. tests/steps and tests/baselines, the two modes side by side on
    one loaded machine (2026-12-06): 376 s of CPU optimised, 278 s not, all 504 passing both ways.
    The programs compute the same functions; every comparison with an XLA result carries the
    tolerance its method guarantees. A run that selects slow tests (real data, minutes of training)
    keeps the optimisations, as does ``JAX_DISABLE_MOST_OPTIMIZATIONS=0``. Set before xdist starts
    its workers and the tests their `pate` processes, which inherit it."""
    import sys

    if (config.getoption("markexpr") or "").strip() == "not slow":
        os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    off = os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS", "0") not in ("0", "")
    if off and "jax" in sys.modules:
        import jax

        jax.config.update("jax_disable_most_optimizations", True)


@pytest.fixture(scope="session", autouse=True)
def _session_ledgers(tmp_path_factory):
    """Privacy ledgers of the session's shared runs go to a temporary folder, never to the
    user's state folder (`pate.store.ledger`); ``$XDG_STATE_HOME`` too, so that the "once"
    guard, which also reads the default folder (`pate.store.identity.visible_directories`),
    never sees the user's own ledgers (a `pate run configs/tiny.toml --seed 0` of theirs
    would refuse the tests' draws of the same labels)."""
    import os

    names = ("PATE_LEDGER_DIR", "XDG_STATE_HOME", "PATE_CACHE_DIR")
    old = {name: os.environ.get(name) for name in names}
    os.environ["PATE_LEDGER_DIR"] = str(tmp_path_factory.mktemp("ledgers"))
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    os.environ["PATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))  # filters fitted on a pool
    yield
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def ledger_dir(tmp_path_factory, monkeypatch):
    """Each test charges its releases to ledgers of its own (a fresh folder)."""
    path = tmp_path_factory.mktemp("ledger")
    monkeypatch.setenv("PATE_LEDGER_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def tiny_config():
    """configs/tiny.toml: synthetic data, 6 teachers, trains in seconds."""
    from pate.config import load_config

    return load_config(TINY)


#: `pate features` options of a 2-layer encoder, one epoch, no affine views (its compilation alone takes 9 s;
#: tests/programs/test_augment.py tests it): seconds on 8 x 8 images.
SMALL_ENCODER = ["--widths", "4,8", "--strides", "2,2", "--degrees", 0, "--epochs", 1, "--seed", 3, "--no-progress"]


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory):
    """An encoder trained on the tiny config's synthetic pool (200 images of 8 x 8) by `pate
    features` (tests of the learned map, its teachers and DP-SGD on it), once per session for both
    workers (read it, never write into it)."""
    def build(folder):
        result = invoke("features", "--config", TINY, "--out", folder / "enc", *SMALL_ENCODER)
        assert result.exit_code == 0, result.output

    return _built_once(tmp_path_factory, "shared-tiny-encoder", build) / "enc"


def _built_once(tmp_path_factory, name: str, build) -> pathlib.Path:
    """``name`` in the folder every worker of this test session shares, made by ``build(path)``
    once per session, not once per xdist worker (``make test`` runs two).

    The first worker to get the file lock builds; the others wait on it and reuse the result.
    ``name.done``, written last, marks a finished build: a half-built folder (a worker killed or
    failed mid-build) is removed and built again, never reused. Without xdist the shared folder
    is the session's own temporary folder.
    """
    import os

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    target, done = shared / name, shared / f"{name}.done"
    with FileLock(shared / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(mode=0o700)  # as tmp_path_factory.mktemp makes them
            build(target)
            done.write_text("built\n")
    return target


@pytest.fixture(scope="session")
def _trained_tiny(tmp_path_factory, tiny_config):
    """A tiny train-teachers run, trained once per test session (shared by the xdist workers:
    read it, copy it, never write into it): (workdir, TrainResult)."""
    import pickle

    def build(folder):
        from pate.steps.teachers import train_teachers

        (folder / "run").mkdir(mode=0o700)
        result = train_teachers(tiny_config, folder / "run", show_progress=False)
        (folder / "result.pickle").write_bytes(pickle.dumps(result))  # beside the run, not in it

    folder = _built_once(tmp_path_factory, "shared-tiny-run", build)
    return folder / "run", pickle.loads((folder / "result.pickle").read_bytes())


@pytest.fixture
def trained_run(_trained_tiny, tmp_path):
    """A fresh copy of a finished tiny train-teachers run: (workdir, TrainResult)."""
    workdir, result = _trained_tiny
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    return copy, result


@contextlib.contextmanager
def _ledger_folder(folder):
    """``$PATE_LEDGER_DIR`` set to ``folder`` for the block (a session run's own ledgers)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATE_LEDGER_DIR", str(folder))
        yield mp


@pytest.fixture(scope="session")
def labelled_tiny(_trained_tiny, tmp_path_factory, tiny_config):
    """The tiny run labelled and its student trained, not analysed (no sanitised draw yet),
    made once per test session (shared by the xdist workers: read it, never write into it;
    `own_copy` copies it with its ledgers). Its labels are charged to a ledger folder of its
    own beside it (``labelled_tiny.parent / "ledgers"``)."""

    import dataclasses

    class Labelled(BaseException):
        """`pate run` stopped where its analyze step would start (teachers, labels, student recorded)."""

    def stop(_ctx):
        raise Labelled

    def build(folder):
        from pate.steps import pipeline

        shutil.copytree(_trained_tiny[0], folder / "run")
        with _ledger_folder(folder / "ledgers") as mp:
            mp.setattr(pipeline, "STEPS", tuple(dataclasses.replace(s, run=stop) if s.name == "analyze" else s
                                                for s in pipeline.STEPS))
            with contextlib.suppress(Labelled):
                pipeline.run(tiny_config, folder / "run", seed=0, show_progress=False, echo=lambda *_: None)
        assert (folder / "run" / "student.json").exists() and not (folder / "run" / "release.json").exists()

    return _built_once(tmp_path_factory, "shared-tiny-labelled", build) / "run"


@pytest.fixture(scope="session")
def finished_tiny(labelled_tiny, tmp_path_factory, tiny_config):
    """A complete tiny run (teachers, labels, student, privacy report): `labelled_tiny`
    analysed under a copy of its ledger folder (``finished_tiny.parent / "ledgers"``, which
    holds its labels and their sanitised draw), made once per test session (shared by the
    xdist workers: read it, copy it, never write into it). A plain copy is a run from another
    machine (`pate ledger --import` counts it in the test's ledger); `own_copy` brings its ledger."""

    def build(folder):
        from pate.steps.pipeline import run

        shutil.copytree(labelled_tiny, folder / "run")
        shutil.copytree(labelled_tiny.parent / "ledgers", folder / "ledgers")
        with _ledger_folder(folder / "ledgers"):
            run(tiny_config, folder / "run", seed=0, show_progress=False, echo=lambda *_: None)

    return _built_once(tmp_path_factory, "shared-tiny-finished", build) / "run"


@contextlib.contextmanager
def small_tmpfs(folder, size: str):
    """A tmpfs of ``size`` (mount's syntax: "200k") mounted on the new folder ``folder`` for
    the block: a disk that fills up for real (needs root; the test is skipped otherwise)."""
    import subprocess

    folder = pathlib.Path(folder)
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)])


def snapshot(directory) -> dict:
    """Every file under `directory` (relative path -> bytes digest), lock files aside."""
    import hashlib

    directory = pathlib.Path(directory)
    out = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.name.startswith(".pate.lock"):
            continue
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def coordinator_entries(config) -> list:
    """The entries of the `pate silos` coordinator's ledger (``[silos] ledger``), none if it has none."""
    from pate.programs.silo_party import ledger_name
    from pate.store.ledger import Ledger

    book = Ledger(ledger_name(config))
    return book.entries() if book.exists() else []


def silo_entries(config, silo: int, records: int = 480, silos: int = 3) -> list:
    """The releases in the ledger of silo `silo`'s records (its block of the `records`), none if it has none."""
    from pate.programs.cluster import block
    from pate.release import silo_ledger

    book = silo_ledger.silo_ledger(config, block(records, silos, silo))
    return book.releases() if book.exists() else []


def run_with_a_silo_killed(tmp_path, monkeypatch, config_path, run, silo: int = 2):
    """``run(config, workdir)``, a `pate silos` coordinator, against a local SuperLink and 3 SuperNodes
    (`pate.programs.flower_deploy.LocalDeployment`), SuperNode ``silo`` killed once it has answered
    once: ``(the PateError the run raised, the config it ran, seconds taken)``. The run directory is
    ``tmp_path / "run"``; the Flower logs a failed run keeps go to ``tmp_path``."""
    import tempfile
    import threading
    import time

    from analysis.core.errors import PateError
    from pate.config import load_config
    from pate.programs.flower_deploy import LocalDeployment

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with LocalDeployment(tmp_path / "flower", config_path, 3) as local:
        config = load_config(config_path, {"silos.address": local.address})
        deadline = time.monotonic() + 120

        def kill_after_first_reply():
            while "Sent successfully" not in local.logs[silo].read_text(errors="replace"):
                assert time.monotonic() < deadline, f"silo {silo} never answered"
                time.sleep(0.2)
            local.stop(local.nodes[silo])

        killer = threading.Thread(target=kill_after_first_reply, daemon=True)
        killer.start()
        began = time.monotonic()
        with pytest.raises(PateError) as err:
            run(config, tmp_path / "run", echo=lambda _: None)
        took = time.monotonic() - began
        killer.join(timeout=5)
    return err.value, config, took


def invoke(*args):
    """``pate ARGS...`` through click's test runner (arguments turned into strings)."""
    from click.testing import CliRunner

    from cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def spied_synth(workdir, ledger, seed: int, spies: list[tuple], *options):
    """``pate synth`` on the tiny config through the CLI with each ``(owner, name, spy)`` of
    ``spies`` patched in for the run and the ledger in ``ledger``; asserts it exited 0."""
    import json

    with pytest.MonkeyPatch.context() as mp:
        for owner, name, spy in spies:
            mp.setattr(owner, name, spy)
        result = invoke("synth", "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", seed,
                        "--set", f"privacy.ledger={json.dumps(str(ledger))}", *options)
    assert result.exit_code == 0, result.output
    return result


def check_synthetic_release(workdir, ledger, seed: int, samples: int) -> list[dict]:
    """What every `pate synth` run publishes: ``samples`` uint8 images of the tiny shape, the
    sample sheet, the model folder, no trace of the research ``seed`` in any file; one
    "synth" charge in ``ledger``. Returns the ledger's entries."""
    import numpy as np

    from pate.config import load_config
    from pate.store import rundir
    from pate.store.ledger import Ledger

    arrays = rundir.read_npz(workdir / rundir.SYNTHETIC_NPZ, ("images", "labels"))
    assert arrays["images"].dtype == np.uint8 and arrays["images"].shape == (samples, 8, 8, 1)
    assert (workdir / rundir.SYNTH_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (workdir / rundir.SYNTH_DIR).is_dir()
    for path in workdir.rglob("*"):
        if path.is_file():
            assert str(seed) not in path.read_bytes().decode("latin-1"), path
    entries = Ledger.for_config(load_config(TINY, {"privacy.ledger": str(ledger)})).entries()
    assert [e["kind"] for e in entries] == ["synth"]
    return entries


def one_line(result) -> str:
    """The one line a failed command wrote to stderr (and no traceback anywhere)."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def one_line_error(result, code: int) -> str:
    """The one line of a command's output, after checking it exited with ``code``; the line that
    says which defaults the data chose (`pate.config.data_defaults.describe`, printed when the
    config is read) is information, not part of the refusal."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("defaults for ")]
    assert len(lines) == 1, result.output
    return lines[0]


def tiny_dpsgd_cnn(n: int = 12, side: int = 8, seed: int = 0):
    """The tiny config's DP-SGD CNN on 4 classes of side x side images, its parameters and n
    random examples: ``(model, params, x, y)``."""
    import jax
    import jax.numpy as jnp

    from pate.baselines import dpsgd
    from pate.config import load_config

    model = dpsgd.make_model(load_config(TINY).dpsgd, "cnn", 4, (side, side, 1))
    params = model.init(jax.random.key(0), jnp.zeros((1, side, side, 1)))
    rng = np.random.default_rng(seed)
    x = rng.random((n, side, side, 1), dtype=np.float32)
    y = rng.integers(0, 4, n).astype(np.int32)
    return model, params, x, y


def baseline_run(tmp_path_factory, command: str, seed: int) -> tuple:
    """``pate COMMAND`` (a baseline release) on the tiny config through the CLI, in a fresh run
    directory, with the research `seed`: ``(workdir, its output, seed)``."""
    workdir = tmp_path_factory.mktemp(command) / "run"
    result = invoke(command, "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", seed)
    assert result.exit_code == 0, result.output
    return workdir, result.output, seed


#: Bad values of what every baseline release is given (``--eps``, ``--seed``, ``[privacy] delta``):
#: ``(args, exit code, a word of the one-line error)``, for `refused_before_writing`.
BAD_RELEASE_OPTIONS = [
    (["--eps", "0"], 2, "positive"),
    (["--eps", "inf"], 2, "positive"),
    (["--seed", str(2**128)], 2, "2**128"),
    (["--set", "privacy.delta=0"], 1, "delta"),
]


def refused_before_writing(command: str, workdir, args, code: int, needle: str) -> None:
    """``pate COMMAND`` with the bad `args` is refused in one line (exit `code`, naming `needle`)
    and writes nothing in `workdir`."""
    line = one_line_error(invoke(command, "--config", TINY, "--workdir", workdir, "--no-progress", *args), code)
    assert needle in line
    assert not workdir.exists() or not any(workdir.iterdir())


def refused_without_overwrite(command: str, workdir, artifact: str) -> None:
    """``pate COMMAND`` again over the result it already wrote in `workdir` (`artifact`, its
    record) is refused in one line naming ``--overwrite``, exit 1, the result untouched."""
    before = (workdir / artifact).read_bytes()
    line = one_line_error(invoke(command, "--config", TINY, "--workdir", workdir, "--no-progress"), 1)
    assert "--overwrite" in line
    assert (workdir / artifact).read_bytes() == before


def sigkill_while_staged(args, run, step: str, env: dict, timeout: float = 300) -> tuple[bool, int]:
    """Starts ``pate ARGS`` in a subprocess and sends SIGKILL as soon as its door's staging
    folder ``run/.new-<step>`` appears (or it ends, or ``timeout`` passes). Returns whether the
    folder was there when the kill was sent, and the process's return code."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    staging = pathlib.Path(run) / f".new-{step}"
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline and not staging.exists():
        time.sleep(0.005)
    staged = staging.exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return staged, proc.returncode


def leads_with_the_data_set(command: str, json_name: str, workdir) -> dict:
    """`pate COMMAND` on the tiny config after an earlier pure-ε-1 charge to the same data set:
    its result file's first keys are the data set's cumulative ε and δ (more than the model's
    own ``release_eps`` by the earlier charge's worth), and the printed summary starts with that
    figure. Returns the result file's dict for the caller's own checks."""
    import json

    from analysis.mechanisms import composition
    from pate.config import load_config
    from pate.store.ledger import Ledger

    Ledger.for_config(load_config(TINY)).charge("labels", composition.Cost("pure", {"eps0": 1.0, "count": 1}))
    result = invoke(command, "--config", TINY, "--workdir", workdir, "--no-progress", "--seed", 1)
    assert result.exit_code == 0, result.output
    info = json.loads((workdir / json_name).read_text())
    assert list(info)[:2] == ["eps", "delta"] and info["eps"] == info["data_set"]["eps"]
    assert info["data_set"]["releases"] == 2 and info["eps"] > info["release_eps"] + 0.5
    summary = result.output[result.output.index("PUBLISH: eps"):]
    assert summary.startswith(f"PUBLISH: eps {info['eps']:.4g} at delta")
    return info


# --------------------------------------------------------------------------- local clusters


def free_port() -> int:
    """A TCP port free on this machine now (a local cluster's coordinator)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_processes(commands, *, devices: int = 1, env: dict | None = None):
    """One local JAX cluster on CPU: process p runs ``python COMMANDS[p]...`` (a script and its
    options) with the cluster options of process p of len(commands) appended, each with
    `devices` CPU devices; ``env`` is added to the environment. Their Popen objects by process id."""
    import subprocess
    import sys

    port = free_port()
    environ = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", **(env or {})}
    environ.pop("XLA_FLAGS", None)
    if devices > 1:
        environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return [subprocess.Popen([sys.executable, *map(str, argv), "--distributed", "--coordinator", f"127.0.0.1:{port}",
                              "--num-processes", str(len(commands)), "--process-id", str(p)],
                             cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for p, argv in enumerate(commands)]


def finish_processes(procs, timeout: float):
    """Waits for every process of `start_processes` (killing what is left if one times out):
    their CompletedProcess results by process id."""
    import subprocess

    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def assert_imported_once(run, monkeypatch, ledgers) -> None:
    """`pate ledger --import RUN` into the ledger folder `ledgers` charges the run's one release
    (no sanitised draw), and a second import charges nothing."""
    monkeypatch.setenv("PATE_LEDGER_DIR", str(ledgers))
    imported = invoke("ledger", "--import", run)
    assert imported.exit_code == 0, imported.output
    assert imported.output.count("charged:") == 1 and "over 1 releases" in imported.output  # no sanitised draw
    again = invoke("ledger", "--import", run)
    assert again.exit_code == 0 and "already" in again.output


class Others:
    """The all-gather of process `index` of a played 2-process cluster: the other process's words
    given in advance, one per collective; records what this process sent."""

    def __init__(self, *theirs, index: int = 0):
        self.theirs, self.sent, self.index = list(theirs), [], index

    def __call__(self, mine):
        self.sent.append(np.asarray(mine))
        both = [np.asarray(mine), self.theirs.pop(0)]
        return np.stack(both if self.index == 0 else both[::-1])


def stopped_by(results, culprit: int) -> str:
    """The failure of a local cluster of two (`finish_processes`) that process `culprit` caused:
    both exit 1, the culprit with one line, the other with that line after "process CULPRIT of
    2 failed, so every process stopped (nothing was charged or written): ". Returns the culprit's
    line without its "pate: "."""
    first, second = results
    assert first.returncode == 1 and second.returncode == 1, first.stderr + second.stderr
    (line,) = results[culprit].stderr.strip().splitlines()
    assert line.startswith("pate: ")
    why = line.removeprefix("pate: ")
    assert results[1 - culprit].stderr.strip().splitlines() == [
        f"pate: process {culprit} of 2 failed, so every process stopped (nothing was charged or written): {why}"]
    return why


def kill_one_after(procs, marker: str, timeout: float, pause: float = 0.0):
    """The kill test of a local cluster of two (`start_processes`): reads process 0's output up to
    its first line starting with `marker`, waits `pause` seconds, kills process 1, and waits for
    process 0 to end (every process is killed and reaped whatever happens). Returns process 0's
    CompletedProcess (its stdout after the marker) and the seconds it took to leave after the kill."""
    import subprocess
    import time

    first, second = procs
    try:
        for line in first.stdout:
            if line.startswith(marker):
                break
        time.sleep(pause)
        second.kill()
        began = time.monotonic()
        out, err = first.communicate(timeout=timeout)
        waited = time.monotonic() - began
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(first.args, first.returncode, out, err), waited


def released(path, drop=()) -> dict:
    """An npz's arrays (dtype, shape, bytes) and its meta without the time it was written (two
    writes of the same release differ in nothing else) and the meta keys `drop`."""
    with np.load(path, allow_pickle=False) as f:
        out = {k: (f[k].dtype.str, f[k].shape, f[k].tobytes()) for k in f.files if k != "meta"}
        meta = json.loads(str(f["meta"]))
    for key in ("written_at", *drop):
        meta.pop(key, None)
    return {**out, "meta": meta}
