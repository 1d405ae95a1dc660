"""Where the stacked teachers live: one device, or the teacher axis sharded over a
("teacher",) mesh of every device of every host, padded to a multiple of the device
count; how many of them run together on a device (`teacher_chunk`); moving trees between
the host and that placement; one block of the teacher axis per process (`process_blocks`);
and joining several hosts (`initialize_distributed`, `--distributed`)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import numpy as np

from analysis.core.errors import PateError
from pate.config import TeachersConfig


class Placement:
    """Where the stacked teachers live: one device, or sharded over a ("teacher",) mesh.

    With `n` devices the teacher axis is padded to a multiple of `n` (padding teachers
    train on teacher 0's shard with their own keys and are dropped from every result).
    """

    def __init__(self, num_teachers: int, devices: Sequence[jax.Device] | None = None):
        self.devices = list(devices if devices is not None else jax.devices())
        self.num_teachers = num_teachers
        n = len(self.devices)
        self.padded = math.ceil(num_teachers / n) * n
        self.mesh = None
        if n > 1:
            self.mesh = jax.make_mesh((n,), ("teacher",),
                                      axis_types=(jax.sharding.AxisType.Auto,),
                                      devices=self.devices)
            self.sharding = jax.sharding.NamedSharding(self.mesh,
                                                       jax.sharding.PartitionSpec("teacher"))
        else:
            self.sharding = jax.sharding.SingleDeviceSharding(self.devices[0])

    @property
    def platform(self) -> str:
        return self.devices[0].platform

    def put(self, tree: Any) -> Any:
        """Pads the leading (teacher) axis of host arrays and places them on the devices."""

        def one(x: Any) -> jax.Array:
            x = np.asarray(x)
            if x.shape[0] == self.num_teachers and self.padded > self.num_teachers:
                fill = np.repeat(x[:1], self.padded - self.num_teachers, axis=0)
                x = np.concatenate([x, fill], axis=0)
            return jax.make_array_from_callback(x.shape, self.sharding, lambda idx: x[idx])

        return jax.tree.map(one, tree)

    def local_teachers(self) -> np.ndarray:
        """The rows of the padded teacher axis on this process's own devices (all of them in a
        one-process run), in order: the teachers whose shards this process reads."""
        index_map = self.sharding.addressable_devices_indices_map((self.padded,))
        return np.array(sorted({int(t) for index in index_map.values() for t in range(self.padded)[index[0]]}),
                        dtype=np.int64)

    def put_local(self, x: np.ndarray, teachers: np.ndarray) -> jax.Array:
        """The padded teacher axis of which this process holds only rows `teachers`
        (`local_teachers`; ``x[i]`` is teacher ``teachers[i]``), placed: each device gets its
        block from this process's rows (`jax.make_array_from_callback` asks only for the
        blocks of this process's devices), so no process needs another's data."""
        at = {int(t): i for i, t in enumerate(teachers)}

        def block(index):
            mine = [at[t] for t in range(self.padded)[index[0]]]
            return x[mine][(slice(None), *index[1:])]

        return jax.make_array_from_callback((self.padded, *x.shape[1:]), self.sharding, block)

    def teacher_ids(self) -> jax.Array:
        return self.put(np.arange(self.padded, dtype=np.int32))

    def mask(self) -> jax.Array:
        """1 for real teachers, 0 for padding, on the devices."""
        return self.put((np.arange(self.padded) < self.num_teachers).astype(np.int32))


#: Teachers run together on CPU when `teacher_chunk = 0` (automatic). Measured on this
#: project's 2-vCPU machine (about one core of throughput) with the default
#: Fashion-MNIST job: training ran about 12.5K examples/s one, two or four teachers at a
#: time, 11.2K ten at a time and 7.0K with all 250 at once (whose activations overflow
#: the caches); prediction was fastest one teacher at a time. A machine with many
#: cores may prefer larger chunks (bigger ops parallelise): set `teacher_chunk`.
CPU_TEACHER_CHUNK = 1


def teacher_chunk(cfg: TeachersConfig | int, platform: str) -> int:
    """How many teachers run together: `cfg.teacher_chunk` (or an int), or for 0,
    `CPU_TEACHER_CHUNK` on CPU and all of them (0) on accelerators."""
    requested = cfg if isinstance(cfg, int) else cfg.teacher_chunk
    if requested:
        return requested
    return CPU_TEACHER_CHUNK if platform == "cpu" else 0


def to_host(x: jax.Array) -> np.ndarray:
    """A (possibly sharded, possibly multi-host) array as one numpy array. An array on this
    process's devices alone (a process's own block of teachers) is read here, without a
    collective: the other processes may be computing something else."""
    if jax.process_count() > 1 and not getattr(x, "is_fully_addressable", True):
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def placed(params: Any, placement: Placement | None) -> tuple[Any, Placement]:
    """``(params, placement)`` for prediction: when no placement is given, the stacked
    parameters are placed over all devices by a new one (padded as it needs)."""
    if placement is None:
        num_teachers = jax.tree.leaves(params)[0].shape[0]
        placement = Placement(num_teachers)
        params = placement.put(unpad(params, num_teachers))
    return params, placement


def unpad(tree: Any, num_teachers: int) -> Any:
    """A placed tree on the host without its padding teachers."""
    return jax.tree.map(lambda x: to_host(x)[:num_teachers], tree)


def process_blocks(num_rows: int) -> tuple[int, jax.sharding.NamedSharding]:
    """A stacked axis of `num_rows` as one block per process (`pate.programs.cluster.block`):
    its length padded to a multiple of the process count, and its sharding over one device
    per process (each one's first), in process order. A checkpoint restored with it is read
    block by block: each process reads only the rows of its own device."""
    count = jax.process_count()
    firsts = [min((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
              for p in range(count)]
    mesh = jax.make_mesh((count,), ("teacher",), axis_types=(jax.sharding.AxisType.Auto,), devices=firsts)
    return -(-num_rows // count) * count, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("teacher"))


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None,
                           join_timeout: float | None = None) -> None:
    """Joins the processes of a `--distributed` command (`pate.programs.joining.join`): JAX's
    cluster and the first agreement, or one line within `join_timeout` seconds (default
    `joining.DEFAULT_JOIN_TIMEOUT`), with the coordination service bound to the address given.

    Arguments left as None are found by JAX: the coordinator from
    `$JAX_COORDINATOR_ADDRESS`, everything from the cluster environment where JAX knows
    it (SLURM, Open MPI, Kubernetes, ...).
    """
    from pate.programs import joining

    joining.join(coordinator_address, num_processes, process_id,
                 joining.DEFAULT_JOIN_TIMEOUT if join_timeout is None else join_timeout)
