"""DP-FedSGD with distributed Skellam noise over Flower's SecAgg+ (`pate.baselines.flower_fedsgd`), through
the in-process Flower deployment (`pate.programs.flower_loopback`): 2 rounds with 3 silos give the
in-process rounds' model exactly (shares zeroed in both), the coordinator's total is the silos'
inputs summed with their shares, and a silo killed mid-round stops the round."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import ddg
from analysis.mechanisms import skellam as sk
from pate.baselines import flower_fedsgd, secure_fedavg
from pate.programs import secure_sum
from pate.programs.flower_loopback import loopback_grid, server_context

SILOS, SIZE, DIM, CLASSES = 3, 30, 4, 3


def _data(seed=0):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(SILOS, SIZE, DIM)).astype(np.float32)
    ys = rng.integers(0, CLASSES, size=(SILOS, SIZE))
    return xs, ys


def _record():
    return sk.SkellamSum.of(1.0, (DIM + 1) * CLASSES, 8, SILOS, SILOS * SIZE, 3.0, 2, 1e-5)


def _flower(record, xs, ys, answers=None, lr=0.5):
    sources = {i: NoiseSource(100 + i, stream=5) for i in range(SILOS)}
    app = flower_fedsgd.silo_app(record, lambda i: (xs[i], ys[i]), lambda i: sources[i])
    grid = loopback_grid(app, [{"silo": i} for i in range(SILOS)], answers=answers)
    return flower_fedsgd.flower_round(record, lr, grid, server_context(), nodes=list(range(1, SILOS + 1)),
                                      timeout=5.0)


@pytest.mark.parametrize("kind", ["skellam", "ddg"])
def test_two_rounds_over_secagg_are_the_in_process_rounds(monkeypatch, kind):
    """Either record (the silo asks it for its share): shares zeroed, the Flower rounds are the in-process
    rounds bit for bit."""
    record, (xs, ys) = (_record() if kind == "skellam" else
                        ddg.DDGSum.of(1.0, (DIM + 1) * CLASSES, 8, SILOS, SILOS * SIZE, 3.0, 2, 1e-5)), _data()
    ranges = secure_sum.SecAggRanges.for_modulus(record.modulus, SILOS)  # the modulus fits SecAgg+'s exact ranges
    assert ranges.modulus_range <= 2**32
    monkeypatch.setattr(type(record), "share", lambda self, source, shape: np.zeros(shape, np.int64))
    flower, local = _flower(record, xs, ys), secure_fedavg.secure_round(record, 0.5)
    a = b = np.zeros((DIM + 1, CLASSES))
    for _ in range(2):
        a, _ = flower(a, None)
        b, _ = local(b, None, xs, ys, NoiseSource(1, stream=5))
    assert np.array_equal(a, b) and np.abs(a).sum() > 0


def test_the_coordinator_gets_the_inputs_and_shares_summed(monkeypatch):
    record, (xs, ys) = _record(), _data(1)
    drawn, draw = [], sk.skellam_share

    def recording(source, mu, clients, shape):
        drawn.append(draw(source, mu, clients, shape))
        return drawn[-1]

    monkeypatch.setattr(sk, "skellam_share", recording)
    theta = np.zeros((DIM + 1, CLASSES))
    new, _ = _flower(record, xs, ys)(theta, None)
    sums = np.asarray(secure_fedavg.quantised_sums(record)(theta.astype(np.float32), xs, ys)).astype(np.int64)
    assert len(drawn) == SILOS and any(d.any() for d in drawn)
    total = sums.reshape(SILOS, -1).sum(axis=0) + np.sum(drawn, axis=0)  # every share in, nothing else
    assert np.allclose(new, theta - 0.5 * record.mean_gradient(total).reshape(theta.shape), rtol=0, atol=1e-12)


def test_a_silo_killed_mid_round_stops_it_in_one_line():
    record, (xs, ys) = _record(), _data(2)
    with pytest.raises(PateError) as err:
        _flower(record, xs, ys, answers={2: 2})(np.zeros((DIM + 1, CLASSES)), None)
    assert "\n" not in str(err.value) and "nothing was released" in str(err.value)
