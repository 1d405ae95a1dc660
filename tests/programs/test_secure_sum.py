"""pate.programs.secure_sum: Flower's SecAgg+ carries integers exactly under the ranges chosen for
them, through Flower's own quantisation functions and its real workflow and client mod (an
in-process Grid, `pate.programs.flower_loopback`), at the extremes of the inputs; a modulus SecAgg+ cannot
carry is refused; Flower's default ranges would not be exact (the test can fail)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from analysis.core.errors import PateError
from pate.programs import secure_sum
from pate.programs.flower_loopback import loopback_grid, server_context


def _sum_through_secagg(inputs: list[np.ndarray], ranges, needed: int | None = None, answers=None):
    """The silos' `inputs` (residues mod M) summed by Flower's SecAggPlusWorkflow and secaggplus_mod."""
    def contribute(context, config):
        i = int(context.node_config["silo"])
        return inputs[i], ranges, i

    n = len(inputs)
    grid = loopback_grid(secure_sum.client_app(contribute), [{"silo": i} for i in range(n)], answers=answers)
    return secure_sum.secure_sum(grid, server_context(), nodes=list(range(1, n + 1)), ranges=ranges,
                                 needed=needed or n, timeout=5.0, fit_config={"plan": "x"})


@pytest.mark.parametrize("silos, modulus", [(2, 2), (3, 609), (5, (2**32 - 1) // 10)])
def test_integers_round_trip_exactly_through_flowers_secagg_plus(silos, modulus):
    ranges = secure_sum.SecAggRanges.for_modulus(modulus, silos)
    assert ranges.modulus_range <= 2**32 and ranges.modulus_range > 2 * silos * modulus
    rng = np.random.default_rng(silos)
    extremes = [np.zeros(6, np.int64), np.full(6, modulus - 1, np.int64)]
    inputs = [np.concatenate([extremes[i % 2], rng.integers(0, modulus, 200), [modulus - 1, 0]])
              for i in range(silos)]
    got = _sum_through_secagg(inputs, ranges)
    assert got.present == silos and sorted(got.silos) == list(range(silos))
    assert got.residues.dtype == np.int64
    assert np.array_equal(got.residues, np.mod(np.sum(inputs, axis=0), modulus))


def test_flowers_quantisation_functions_keep_every_input_of_the_ranges():
    """The client's and the server's halves of the pipeline (module docstring, steps 1-5) on every
    input in [0, M) for a small M, and at the top of the largest M, with m of n silos present."""
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    for modulus, silos in ((37, 3), ((2**32 - 1) // 6, 3)):
        ranges = secure_sum.SecAggRanges.for_modulus(modulus, silos)
        y = np.unique(np.concatenate([np.arange(min(modulus, 4096)), modulus - 1 - np.arange(min(modulus, 4096))]))
        (q,) = quantize([y.astype(np.float64) * 1.0], ranges.clipping_range, ranges.quantization_range)
        assert q.dtype == np.int32 and np.array_equal(q.astype(np.int64), y + modulus)  # y + c, exactly
        for present in range(1, silos + 1):
            summed = (present * q.astype(np.int64)) % ranges.modulus_range  # m silos that sent the same y
            (back,) = dequantize([summed], ranges.clipping_range, ranges.quantization_range)
            back += -(present - 1) * ranges.clipping_range
            back *= ranges.quantization_range / (present * ranges.quantization_range)
            assert np.array_equal(secure_sum.exact_total(back, present, ranges), np.mod(present * y, modulus))


def test_flowers_default_ranges_are_not_exact():
    """A check of the check: SecAgg+'s defaults (clipping 8, 2^22 levels) lose integers."""
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    y = np.array([0.0, 5.0, 8.0, 100.0])
    (q,) = quantize([y], 8.0, 2**22)
    (back,) = dequantize([q], 8.0, 2**22)
    assert not np.array_equal(np.rint(back), y)


def test_a_silo_that_does_not_answer_leaves_the_others_sum_or_stops_the_round():
    ranges = secure_sum.SecAggRanges.for_modulus(1000, 4)
    inputs = [np.arange(5, dtype=np.int64) * (i + 1) for i in range(4)]
    partial = _sum_through_secagg(inputs, ranges, needed=3, answers={3: 2})  # silo 3 killed after its keys
    assert partial.present == 3 and sorted(partial.silos) == [0, 1, 2]
    assert np.array_equal(partial.residues, np.mod(sum(inputs[:3]), 1000))  # its masks recovered, its input not in
    with pytest.raises(PateError) as err:
        _sum_through_secagg(inputs, ranges, needed=4, answers={3: 2})
    assert "\n" not in str(err.value) and "nothing was released or charged" in str(err.value)


def test_a_modulus_secagg_cannot_carry_is_refused_and_a_bad_aggregate_is_caught():
    with pytest.raises(PateError) as err:
        secure_sum.SecAggRanges.for_modulus(2**31, 2)
    assert "\n" not in str(err.value) and "modulus_range" in str(err.value)
    ranges = secure_sum.SecAggRanges.for_modulus(100, 3)
    assert np.array_equal(secure_sum.exact_total(np.array([10.0, 33 + 1 / 3]), 3, ranges), [30, 100 % 100])
    with pytest.raises(PateError, match="internal error"):
        secure_sum.exact_total(np.array([10.5]), 3, ranges)  # 31.5: no integer sum
    with pytest.raises(PateError, match="internal error"):
        secure_sum.as_update(np.array([100]), ranges)  # not a residue mod 100
