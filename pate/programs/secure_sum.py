"""Flower's SecAgg+ as an exact sum of integers mod M: how `pate silos run`'s silos add up their
inputs without the coordinator seeing any one of them (docs/silos.md).

The secure sum is Flower's own (`flwr.server.workflow.SecAggPlusWorkflow` on the coordinator's
ServerApp, `flwr.client.mod.secaggplus_mod` on every silo's ClientApp: Bell et al. 2020's SecAgg+,
pairwise masks from Diffie-Hellman keys, Shamir shares of the mask seeds for dropped parties);
nothing here is cryptography. What this module adds is the choice of SecAgg+'s public
parameters under which its float pipeline carries integers exactly, the conversions on both
ends, and the Strategy that hands the sum to pate.

**Integers through SecAgg+ exactly** (`SecAggRanges`; the code read is flwr 1.42.0's
``secaggplus_mod._collect_masked_vectors``, ``quantization.quantize``/``dequantize`` and
``SecAggPlusWorkflow.unmask_stage``). Each silo sends y, its residues mod M, integers in [0, M),
as a float64 array (`as_update`: exact, M < 2^31), reports ``num_examples`` = 1, and the workflow
runs with ``max_weight`` = 1.0, ``clipping_range`` c = M, ``quantization_range`` R = 2M and
``modulus_range`` K = the least power of two above 2 n M (n silos). Then, step by step:

1. the client's weight ratio is 1 / 1.0 = 1.0, ``q_ratio`` = round(1.0 · R) = R and ``dq_ratio`` =
   R / R = 1.0, so the update times ``dq_ratio`` is y itself (x · 1.0 = x in IEEE arithmetic);
2. ``quantize``: the quantizer R / (2c) = 1.0 exactly; y lies in [0, M − 1] ⊂ [−c, c], so the
   clip keeps it, and (y + c) · 1.0 = y + c exactly (integers below 2^53);
3. the stochastic rounding takes ceil(y + c) = y + c, cast to int32 exactly (y + c <= 2M − 1 <
   2^31), and subtracts 1 only where a uniform draw in [0, 1) falls below ceil(v) − v = 0:
   never. So the quantised input is q = y + c, and the factor R goes first;
4. masks are added and removed mod K (SecAgg+'s correctness), so the coordinator gets, for the m
   silos present, Σ q = S + m c and the factor m R, both below K (m R <= 2 n M < K and Σ q <=
   m (2M − 1)): no wrap, the exact integers;
5. ``dequantize`` multiplies by 2c / R = 1.0 and adds −c, the workflow adds −(m − 1) c: S exactly
   (integers below 2^53), then multiplies by R / (m R), the float64 nearest 1/m.

So the aggregate is fl(S · fl(1/m)), within a relative 2^−52 of S/m, and `exact_total` recovers S
as round(aggregate · m): the error is at most S · 3 · 2^−53 < 1/2 for S < 2^50 (here S < n M <=
2^32), and S mod M is the sum of the inputs mod M. `tests/programs/test_secure_sum.py` runs
this through Flower's own functions and workflow at the extremes (every y = 0, every y = M − 1).

**What the secure sum is trusted with.** Flower's masks come from ``pseudo_rand_gen``: numpy's
MT19937 seeded with 32 bits folded from each 256-bit key, so SecAgg+'s confidentiality is
Flower's, as implemented, not more. The release's privacy does not rest on it: the coordinator
is meant to see the noisy total only, and even a silo's input seen alone carries that silo's
noise share (`analysis.mechanisms.silos.guaranteed_eps` with one share present bounds what it
leaks of that silo's records).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from analysis.core.errors import PateError

#: The largest SecAgg+ ``modulus_range`` used (Flower's default, 2^32; its docstring asks for
#: moduli below it, its masks are drawn below it).
MAX_MODULUS_RANGE = 2**32

#: The metrics key under which a silo names itself (`SecureSum.silos`).
SILO_KEY = "silo"


@dataclasses.dataclass(frozen=True)
class SecAggRanges:
    """SecAgg+'s public parameters for an exact sum of n inputs in [0, M) (module docstring)."""

    modulus: int
    silos: int
    clipping_range: float
    quantization_range: int
    modulus_range: int

    @classmethod
    def for_modulus(cls, modulus: int, silos: int) -> "SecAggRanges":
        """c = M, R = 2M, K = the least power of two above 2 n M; refused (one line) where K
        would pass `MAX_MODULUS_RANGE`."""
        modulus, silos = int(modulus), int(silos)
        if modulus < 2 or silos < 2:
            raise PateError(f"internal error: a secure sum needs a modulus >= 2 and two silos, got {modulus}, {silos}")
        top = 2 * silos * modulus
        modulus_range = 1 << top.bit_length()  # > top
        if modulus_range > MAX_MODULUS_RANGE:
            raise PateError(f"a secure sum mod {modulus} over {silos} silos needs SecAgg+'s modulus_range "
                            f"{modulus_range} > 2**32: fewer records ([silos] records), more eps per release, or "
                            "fewer silos")
        return cls(modulus, silos, float(modulus), 2 * modulus, modulus_range)

    def workflow(self, needed: int, timeout: float):
        """Flower's `SecAggPlusWorkflow` with these ranges: every silo shares its keys with every
        other (``num_shares`` 1.0), a dropped silo's masks recoverable from ``max(needed, n//2 + 1)``
        shares (so n − h silos may drop and the sum of the others still be unmasked, to be
        refused or released by the shares present; more than half, as SecAgg+ asks)."""
        from flwr.server.workflow import SecAggPlusWorkflow

        threshold = max(int(needed), self.silos // 2 + 1)
        return SecAggPlusWorkflow(num_shares=1.0, reconstruction_threshold=threshold, max_weight=1.0,
                                  clipping_range=self.clipping_range, quantization_range=self.quantization_range,
                                  modulus_range=self.modulus_range, timeout=float(timeout))


def as_update(residues, ranges: SecAggRanges) -> list[np.ndarray]:
    """A silo's residues mod M (integers in [0, M)) as the one float64 array SecAgg+ takes."""
    y = np.asarray(residues)
    if not np.issubdtype(y.dtype, np.integer) or (y.size and (y.min() < 0 or y.max() >= ranges.modulus)):
        raise PateError(f"internal error: a silo's input must be integers in [0, {ranges.modulus})")
    return [y.astype(np.float64).ravel()]


def exact_total(aggregate, present: int, ranges: SecAggRanges) -> np.ndarray:
    """The sum of the `present` silos' residues mod M (int64 in [0, M)) from SecAgg+'s aggregate,
    their float64 average (module docstring: round(aggregate · m) is the exact sum). An aggregate
    that is not m times an integer's average within 1/4 is refused as an internal error."""
    a = np.asarray(aggregate, dtype=np.float64).ravel()
    scaled = a * int(present)
    total = np.rint(scaled)
    if a.size and (not np.isfinite(scaled).all() or np.abs(scaled - total).max() > 0.25
                   or total.min() < 0 or total.max() >= int(present) * ranges.modulus):
        raise PateError("internal error: SecAgg+'s aggregate is not a sum of integer inputs (its quantisation "
                        "parameters do not carry integers exactly)")
    return np.mod(total.astype(np.int64), ranges.modulus)


@dataclasses.dataclass(frozen=True)
class SecureSum:
    """What the coordinator learns: how many silos' inputs the sum holds, the sum of their
    residues mod M, the silo indices they name themselves by, and the failures reported."""

    present: int
    residues: np.ndarray
    silos: tuple[int, ...]
    failures: tuple[str, ...]


def _strategy():
    """A Flower Strategy for one SecAgg+ round: every silo is asked (`configure_fit` with the
    coordinator's fit config), and `aggregate_fit` keeps the results as they come (the workflow
    has already replaced each result's parameters by the unmasked aggregate)."""
    from flwr.common import FitIns
    from flwr.server.strategy import Strategy

    class OneSum(Strategy):
        def __init__(self):
            self.proxies, self.fit_config, self.outcome = [], {}, None

        def initialize_parameters(self, client_manager):
            return None

        def configure_fit(self, server_round, parameters, client_manager):
            return [(proxy, FitIns(parameters, dict(self.fit_config))) for proxy in self.proxies]

        def aggregate_fit(self, server_round, results, failures):
            self.outcome = (list(results), list(failures))
            return None, {}

        def configure_evaluate(self, server_round, parameters, client_manager):
            return []

        def aggregate_evaluate(self, server_round, results, failures):
            return None, {}

        def evaluate(self, server_round, parameters):
            return None

    return OneSum()


def wait_for_silos(grid, silos: int, timeout: float, where: str) -> list[int]:
    """The node ids of the `silos` SuperNodes connected to the SuperLink, once there are that
    many; refused in one line when fewer join within `timeout` seconds or more are connected."""
    deadline = time.monotonic() + float(timeout)
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) > silos:
            raise PateError(f"{len(nodes)} SuperNodes are connected to {where}, [silos] silos says {silos}: a release "
                            "counts every connected silo once; stop the others or set [silos] silos")
        if len(nodes) == silos:
            return nodes
        if time.monotonic() >= deadline:
            raise PateError(f"only {len(nodes)} of the {silos} silos joined {where} within {timeout:g} s "
                            "([silos] timeout); nothing was released or charged")
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def secure_sum(grid, context, *, nodes: list[int], ranges: SecAggRanges, needed: int, timeout: float,
               fit_config: dict) -> SecureSum:
    """One round of Flower's SecAgg+ over the SuperNodes `nodes`, each sent `fit_config`; the sum
    of their residues mod M (`exact_total`). Refused in one line, nothing released, when the
    workflow stops before the sum (too few silos left to unmask it)."""
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.common import parameters_to_ndarrays
    from flwr.server import LegacyContext, ServerConfig, SimpleClientManager
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

    strategy = _strategy()
    manager = SimpleClientManager()
    strategy.proxies = [GridClientProxy(node_id=n, grid=grid, run_id=grid.run.run_id) for n in nodes]
    for proxy in strategy.proxies:
        manager.register(proxy)
    strategy.fit_config = dict(fit_config)
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=1), strategy=strategy,
                           client_manager=manager)
    legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: 1,
                                                                     Key.START_TIME: time.time()})
    ranges.workflow(needed, timeout)(grid, legacy)
    if strategy.outcome is None:
        raise PateError(f"the secure sum stopped before its end: fewer than {max(needed, ranges.silos // 2 + 1)} "
                        f"of the {ranges.silos} silos answered within {timeout:g} s ([silos] timeout); nothing was "
                        "released or charged")
    results, failures = strategy.outcome
    reasons = tuple(_reason(f) for f in failures)
    if not results:
        return SecureSum(0, np.zeros(0, np.int64), (), reasons)
    (aggregate,) = parameters_to_ndarrays(results[0][1].parameters)
    named = tuple(int(r.metrics.get(SILO_KEY, -1)) for _, r in results)
    return SecureSum(len(results), exact_total(aggregate, len(results), ranges), named, reasons)


def _reason(failure) -> str:
    """One line of a silo's failure as Flower reports it (its ClientApp's exception, if any)."""
    text = " ".join(str(failure).split())
    return text[:400]


def client_app(contribute: Callable):
    """A Flower ClientApp for a silo: SecAgg+'s mod (`secaggplus_mod`) around a client whose
    `fit` calls ``contribute(context, config)`` -> (residues, silo index) and sends the residues
    (`as_update`, the ranges `contribute` returns with them) with weight 1 (module docstring)."""
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod

    class Silo(NumPyClient):
        def __init__(self, context):
            self.context = context

        def fit(self, parameters, config):
            residues, ranges, index = contribute(self.context, dict(config))
            return as_update(residues, ranges), 1, {SILO_KEY: int(index)}

    return ClientApp(client_fn=lambda context: Silo(context).to_client(), mods=[secaggplus_mod])
