"""Tensors, devices, command queues and metal traces of the emulator, with the runtime's rules.

Rules enforced here (each is an error a chip would raise, or silent corruption it would
cause that the emulator turns into an error):
- device open: one owner per chip (an open or busy chip, an absent id fail); the compute
  grid follows harvesting and the dispatch cores (DIE_GRID minus harvested columns, minus one
  column for worker dispatch, the Blackhole default); Ethernet dispatch fails to open unless
  the settings say this build can (current builds cannot: docs/design/facts.md, tt-metal review),
  and a failed open can be made to break later opens in the process (what a chip may do is unknown);
- L1: each core's L1 bank holds SETTINGS.l1_bank_bytes (1,428,352 B, the real allocator's
  figure for a p150a); an L1 buffer (interleaved pages round-robin over the cores' banks, or
  one shard per core) that does not fit beside the live ones fails with the figures;
- an op's tensors must be allocated and on the device the op runs on;
- metal traces: ops must be compiled by an eager run first; no host read or write, no
  synchronize and no event inside a capture; captured outputs hold garbage (NaN) until a
  replay; a replay reads its inputs' current contents; several traces per device, one capture
  at a time; a replay overwrites every buffer allocated after its capture ended that it did not
  produce (another trace's outputs included), so such a buffer read later raises; a program
  compiled after a capture (its binary lands where replays write) makes that trace's next
  replay raise; a trace must be released before the device closes;
- trace allocation tracking (tt-metal's TT_METAL_TRACE_ALLOC_TRACKING=1, SETTINGS.
  trace_alloc_tracking, on when that variable is "1"): a replay of a trace raises while any
  buffer allocated after its capture ended is alive, unless the buffer was acknowledged as
  corruptible (0.81.1: ttnn.tools.trace_allocation_tracker.acknowledge_corruptible, or an
  allocation inside its corruptible_allocation_scope; newer ttnn: ttnn.mark_corruptible), as
  tt-metal's tracker does before each replay;
- command queues: open_device gives one (0), open_mesh_device(num_command_queues=2) two; work
  on one queue that touches a buffer the other queue wrote (or read, for a write) is a race
  unless an event recorded after that work was waited for (or the host synchronised): the
  emulator tracks that order and raises on a race.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _numerics
from ._types import (
    DIE_GRID,
    TILE_SIZE,
    Arch,
    BufferType,
    CoreCoord,
    DataType,
    DispatchCoreAxis,
    DispatchCoreConfig,
    DispatchCoreType,
    Layout,
    MemoryConfig,
    MeshShape,
    MeshTraceId,
    Shape,
    grid_xy,
)


class EmulatorError(RuntimeError):
    """A call the real runtime would refuse (or that would corrupt data on a chip)."""


#: L1 bank per Tensix core on a p150a: the real allocator's figure ("bank size is 1428352 B").
L1_BANK_BYTES = 1_428_352


@dataclass
class EmulatorSettings:
    """Knobs a test turns to model the machine: chips, busy ones, harvesting, dispatch, L1."""

    num_devices: int = 1
    busy_device_ids: set[int] = field(default_factory=set)
    #: Tensix columns harvested by firmware: 2 on a real p150a (120 cores), 0 or 1 possible.
    harvested_columns: int = 2
    #: Whether this build opens with Ethernet dispatch (current Blackhole builds do not).
    eth_dispatch_opens: bool = False
    #: Whether a failed Ethernet-dispatch open leaves the process unable to open any device.
    failed_open_breaks_process: bool = False
    l1_bank_bytes: int = L1_BANK_BYTES
    #: tt-metal's trace allocation tracking (TT_METAL_TRACE_ALLOC_TRACKING=1): a replay raises
    #: while a buffer allocated after its capture is alive and not marked corruptible.
    trace_alloc_tracking: bool = field(
        default_factory=lambda: os.environ.get("TT_METAL_TRACE_ALLOC_TRACKING") == "1"
    )


SETTINGS = EmulatorSettings()
_OPEN_DEVICES: dict[int, Device] = {}
#: Chips opened on their own (open_device, open_mesh_device, CreateDevices of one chip), in order.
#: The real library ties each to those opened before it: closing it closes them too
#: (docs/design/facts.md, Mock p150a); chips opened in one CreateDevices call close alone.
_OPENED_ALONE: list[Device] = []
_PROCESS = {"broken": ""}
_ELEMENT_BYTES = {
    DataType.FLOAT32: 4,
    DataType.BFLOAT16: 2,
    DataType.BFLOAT8_B: 1.0625,
    DataType.UINT8: 1,
    DataType.UINT16: 2,
    DataType.UINT32: 4,
    DataType.INT32: 4,
}


def padded_dims(shape: Sequence[int], layout: Layout) -> tuple[int, ...]:
    """Shape as stored: TILE rounds the last two dims up to 32."""
    dims = list(shape)
    if layout == Layout.TILE:
        for axis in (-1, -2):
            if len(dims) >= -axis:
                dims[axis] = -(-dims[axis] // TILE_SIZE) * TILE_SIZE
    return tuple(dims)


def l1_bytes_per_core(
    shape: Sequence[int], dtype: DataType, layout: Layout, memory_config: Any, cores: int
) -> int:
    """Bytes one core's L1 bank gives a buffer: its shard, or its share of round-robin pages.

    Interleaved pages are tiles (TILE) or rows (ROW_MAJOR); a core holds ceil(pages / cores).
    """
    if memory_config is None or memory_config.buffer_type != BufferType.L1:
        return 0
    element = _ELEMENT_BYTES[dtype]
    if memory_config.is_sharded() and memory_config.shard_spec is not None:
        height, width = memory_config.shard_spec.shape
        if layout == Layout.TILE:
            height, width = (-(-d // TILE_SIZE) * TILE_SIZE for d in (height, width))
        return math.ceil(height * width * element)
    dims = padded_dims(shape, layout)
    width = dims[-1] if dims else 1
    rows = math.prod(dims[:-1]) if len(dims) > 1 else 1
    if layout == Layout.TILE:
        pages, page = rows * width // (TILE_SIZE * TILE_SIZE), int(TILE_SIZE * TILE_SIZE * element)
    else:
        pages, page = rows, math.ceil(width * element)
    return -(-pages // max(cores, 1)) * page


class _Storage:
    """A device allocation; views made by ttnn.reshape share their source's.

    ``l1_per_core``: bytes it takes in each core's L1 bank (0 in DRAM). ``last_write`` and
    ``last_reads`` record which command queue touched it last, for the race check.
    ``alloc_seq``: when it was allocated (the device's sequence); ``corruptible``: marked with
    mark_corruptible (exempt from trace allocation tracking).
    """

    __slots__ = (
        "__weakref__",
        "alive",
        "alloc_seq",
        "corruptible",
        "l1_per_core",
        "last_reads",
        "last_write",
    )

    def __init__(self) -> None:
        self.alive = True
        self.alloc_seq = -1
        self.corruptible = False
        self.l1_per_core = 0
        self.last_write: tuple[int, int] | None = None
        self.last_reads: dict[int, int] = {}


class Tensor:
    """A host or device tensor: logical values (float32/int64 torch), dtype, layout, placement.

    ``storage`` is shared with views (ttnn.reshape may return one): deallocating a view frees its
    source and the other way round, so code that frees one and keeps using the other fails here
    as it would corrupt data on a chip.
    """

    def __init__(
        self,
        values: torch.Tensor,
        dtype: DataType,
        layout: Layout,
        device: Device | None = None,
        memory_config: MemoryConfig | None = None,
        quantized: bool = False,
        storage: _Storage | None = None,
    ) -> None:
        if dtype == DataType.BFLOAT8_B and layout != Layout.TILE:
            raise EmulatorError("bfloat8_b needs TILE layout (its exponents are shared along tile face rows)")
        self._values = values if quantized else _numerics.quantize(values, dtype)
        self.dtype = dtype
        self.layout = layout
        self._device = device
        self._memory_config = memory_config
        shared = storage is not None
        self._storage = storage or _Storage()
        self.clobbered_by_replay = False
        self.alloc_seq = -1
        if device is not None:
            device._register(self, new_allocation=not shared)

    # ttnn-style accessors -------------------------------------------------------------------
    @property
    def shape(self) -> Shape:
        return Shape(self._values.shape)

    @property
    def padded_shape(self) -> Shape:
        return Shape(padded_dims(self._values.shape, self.layout))

    def get_dtype(self) -> DataType:
        return self.dtype

    def get_layout(self) -> Layout:
        return self.layout

    def device(self) -> Device | None:
        return self._device

    def memory_config(self) -> MemoryConfig | None:
        return self._memory_config

    def is_allocated(self) -> bool:
        return self._storage.alive

    @property
    def _allocated(self) -> bool:
        return self._storage.alive

    @_allocated.setter
    def _allocated(self, alive: bool) -> None:
        self._storage.alive = alive

    def storage_type(self) -> str:
        return "DEVICE" if self._device is not None else "HOST"

    def volume(self) -> int:
        return int(self._values.numel())

    def __repr__(self) -> str:
        where = "host" if self._device is None else f"device {self._device.device_id}"
        return f"Tensor({list(self.shape)}, {self.dtype.name}, {self.layout.name}, {where})"

    # emulator internals ---------------------------------------------------------------------
    def read(self) -> torch.Tensor:
        """Current contents; refuses deallocated or replay-clobbered buffers."""
        if not self._allocated and not (
            self._device is not None and id(self) in self._device._replay_buffers
        ):
            raise EmulatorError(f"{self!r} was deallocated")
        if self.clobbered_by_replay:
            raise EmulatorError(
                f"{self!r} was allocated after a trace capture and has been overwritten by a replay"
            )
        return self._values

    def write(self, values: torch.Tensor, quantized: bool = False) -> None:
        self._values = values if quantized else _numerics.quantize(values, self.dtype)

    def nbytes(self) -> int:
        volume = 1
        for d in padded_dims(self._values.shape, self.layout):
            volume *= d
        return int(volume * _ELEMENT_BYTES[self.dtype])


def is_device_tensor(value: Any) -> bool:
    return isinstance(value, Tensor) and value._device is not None


@dataclass
class _TraceStep:
    run: Callable[[], list[Tensor]]
    outputs: list[Tensor]
    name: str


@dataclass
class _Trace:
    trace_id: MeshTraceId
    cq_id: int
    steps: list[_TraceStep] = field(default_factory=list)
    end_seq: int = -1
    capturing: bool = True
    produced: set[int] = field(default_factory=set)
    external_inputs: list[Tensor] = field(default_factory=list)
    #: Programs compiled after this capture ended: their binaries may sit where it writes.
    late_programs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TensorRecord:
    """What an op was given or made: enough for a cost model (shape, dtype, layout, buffer)."""

    shape: tuple[int, ...]
    dtype: str
    layout: str
    buffer: str


@dataclass(frozen=True)
class OpRecord:
    """One device op as the emulator saw it (eager or captured; replays are not logged)."""

    name: str
    inputs: tuple[TensorRecord, ...]
    outputs: tuple[TensorRecord, ...]
    attrs: dict[str, Any]
    captured: bool


def _record(tensor: Tensor) -> TensorRecord:
    config = tensor.memory_config()
    buffer = "HOST" if tensor._device is None else (config.buffer_type.name if config else "DRAM")
    return TensorRecord(tuple(tensor.shape), tensor.dtype.name, tensor.layout.name, buffer)


@dataclass(frozen=True)
class MeshEvent:
    """A point in one command queue's stream: work before it on that queue is done once waited for."""

    device_id: int
    cq_id: int
    index: int


def _grid_for(dispatch: DispatchCoreConfig) -> tuple[int, int]:
    harvested = SETTINGS.harvested_columns
    if not 0 <= harvested <= 3:
        raise EmulatorError(f"harvested_columns {harvested} is not a Blackhole configuration")
    columns = DIE_GRID[0] - harvested
    if dispatch.type != DispatchCoreType.ETH:
        if dispatch.axis not in (None, DispatchCoreAxis.COL):
            raise EmulatorError(
                "worker dispatch on a row is not emulated (Blackhole dispatches from a column)"
            )
        columns -= 1
    return columns, DIE_GRID[1]


class Device:
    """One emulated p150a. The compute grid depends on harvesting and the dispatch cores chosen at open."""

    def __init__(
        self,
        device_id: int,
        l1_small_size: int,
        trace_region_size: int,
        dispatch: DispatchCoreConfig,
        num_command_queues: int = 1,
    ) -> None:
        self.device_id = device_id
        self.l1_small_size = l1_small_size
        self.trace_region_size = trace_region_size
        self.dispatch_core_config = dispatch
        self.num_command_queues = num_command_queues
        self._grid = _grid_for(dispatch)
        self._open = True
        # The chip whose close closed this one (chips opened alone are tied: _OPENED_ALONE).
        self._closed_with: int | None = None
        self._seq = itertools.count()
        self._live: weakref.WeakSet[Tensor] = weakref.WeakSet()
        self._l1: weakref.WeakSet[_Storage] = weakref.WeakSet()
        self._compiled: set[tuple] = set()
        self._capture: _Trace | None = None
        self._traces: dict[int, _Trace] = {}
        self._trace_ids = itertools.count(1)
        self.op_log: list[str] = []
        self.ops: list[OpRecord] = []
        self.reshape_copies = 0
        # During a replay: the trace's own intermediates, which it reads even when the code that
        # captured it deallocated them (their addresses belong to the trace).
        self._replay_buffers: set[int] = set()
        self._replaying = False
        # Open corruptible_allocation_scope()s: what they allocate is exempt from tracking.
        self._corruptible_scopes = 0
        self.replays = 0
        # Command queue order: issued[q] commands so far; seen[q][p]: queue q runs after the
        # first seen[q][p] commands of queue p (events waited for, host synchronisation).
        self._issued = [0] * num_command_queues
        self._seen = [[0] * num_command_queues for _ in range(num_command_queues)]

    # ttnn.MeshDevice surface ----------------------------------------------------------------
    def compute_with_storage_grid_size(self) -> CoreCoord:
        return CoreCoord(*self._grid)

    def arch(self) -> Arch:
        return Arch.BLACKHOLE

    def id(self) -> int:
        return self.device_id

    def get_num_devices(self) -> int:
        return 1

    @property
    def shape(self) -> MeshShape:
        return MeshShape(1, 1)

    def enable_program_cache(self) -> None:
        """Program caching is always on in the emulator (it tracks compiled programs)."""

    # emulator internals ---------------------------------------------------------------------
    def check_open(self) -> None:
        if not self._open:
            raise EmulatorError(f"device {self.device_id} is closed")

    def check_queue(self, cq_id: int | None) -> int:
        """The queue index; a queue the device was not opened with fails."""
        self.check_open()
        queue = 0 if cq_id is None else cq_id
        if not isinstance(queue, int) or not 0 <= queue < self.num_command_queues:
            raise EmulatorError(
                f"command queue {cq_id} does not exist: the device was opened with "
                f"{self.num_command_queues} ({', '.join(map(str, range(self.num_command_queues)))})"
            )
        return queue

    def _register(self, tensor: Tensor, new_allocation: bool = True) -> None:
        self.check_open()
        tensor.alloc_seq = next(self._seq)
        self._live.add(tensor)
        if new_allocation and not self._replaying:
            tensor._storage.alloc_seq = tensor.alloc_seq
            tensor._storage.corruptible = self._corruptible_scopes > 0
            self._claim_l1(tensor)

    def _claim_l1(self, tensor: Tensor) -> None:
        cores = self._grid[0] * self._grid[1]
        need = l1_bytes_per_core(tensor.shape, tensor.dtype, tensor.layout, tensor.memory_config(), cores)
        if not need:
            return
        used = self.l1_used_per_core()
        bank = SETTINGS.l1_bank_bytes
        if used + need > bank:
            raise EmulatorError(
                f"Out of Memory: {tensor!r} needs {need:,} B per core in L1; {used:,} B of the "
                f"{bank:,} B bank are in use ({bank - used:,} B free)"
            )
        tensor._storage.l1_per_core = need
        self._l1.add(tensor._storage)

    def l1_used_per_core(self) -> int:
        """L1 bytes per core held by live buffers (the worst core)."""
        return sum(s.l1_per_core for s in self._l1 if s.alive)

    @property
    def capturing(self) -> bool:
        return self._capture is not None

    @property
    def _trace(self) -> _Trace | None:
        """The capture in progress, else the most recent trace (tests read this)."""
        if self._capture is not None:
            return self._capture
        return next(reversed(self._traces.values()), None)

    def live_tensors(self) -> list[Tensor]:
        return [t for t in self._live if t._allocated]

    def grid_xy(self) -> tuple[int, int]:
        return self._grid

    def check_grid(self, grid: CoreCoord | tuple[int, int], what: str) -> None:
        x, y = grid_xy(grid)
        if x < 1 or y < 1 or x > self._grid[0] or y > self._grid[1]:
            raise EmulatorError(
                f"{what}: grid {x}x{y} does not fit the compute grid {self._grid[0]}x{self._grid[1]}"
            )

    def run_op(
        self,
        name: str,
        signature: tuple | None,
        compute: Callable[[], list[Tensor]],
        inputs: Sequence[Tensor] = (),
        attrs: dict[str, Any] | None = None,
    ) -> list[Tensor]:
        """Run one device op (on queue 0) under the compile, trace and queue rules; its outputs.

        `signature` keys the compiled program; None for an op that needs none (a reshape view).
        """
        self.check_open()
        self.op_log.append(name)
        if self.capturing:
            if signature is not None and signature not in self._compiled:
                raise EmulatorError(
                    f"{name}: program not compiled before trace capture (run the path once eagerly first)"
                )
            trace = self._capture
            assert trace is not None
            outputs = compute()
            trace.steps.append(_TraceStep(compute, outputs, name))
            for out in outputs:
                trace.produced.add(id(out))
                # A captured op has not run: its output holds whatever the buffer held.
                out.write(
                    torch.full_like(out._values, float("nan"))
                    if out._values.is_floating_point()
                    else out._values,
                    quantized=True,
                )
            self._log(name, inputs, outputs, attrs, captured=True)
            return outputs
        if signature is not None and signature not in self._compiled:
            self._compiled.add(signature)
            for trace in self._traces.values():
                trace.late_programs.append(name)
        self.access(0, reads=inputs)
        outputs = compute()
        self.access(0, writes=outputs)
        self._log(name, inputs, outputs, attrs, captured=False)
        return outputs

    def _log(
        self, name: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor], attrs: Any, captured: bool
    ) -> None:
        self.ops.append(
            OpRecord(
                name,
                tuple(_record(t) for t in inputs),
                tuple(_record(t) for t in outputs),
                dict(attrs or {}),
                captured,
            )
        )

    def note_trace_input(self, tensor: Tensor) -> None:
        """Remember tensors a captured op reads that the trace itself did not produce."""
        trace = self._capture
        if (
            trace is not None
            and id(tensor) not in trace.produced
            and all(t is not tensor for t in trace.external_inputs)
        ):
            trace.external_inputs.append(tensor)

    def forbid_host_io(self, what: str) -> None:
        if self.capturing:
            raise EmulatorError(f"{what} inside a trace capture: no host reads or writes may be captured")

    # command queues -------------------------------------------------------------------------
    def access(self, queue: int, reads: Sequence[Tensor] = (), writes: Sequence[Tensor] = ()) -> None:
        """One command on `queue` reading and writing these buffers; raises on a cross-queue race."""
        if self.num_command_queues == 1 or self._replaying:
            return
        self._issued[queue] += 1
        index = self._issued[queue]
        for tensor, writing in [*((t, False) for t in reads), *((t, True) for t in writes)]:
            storage = tensor._storage
            hazards = []
            if storage.last_write is not None:
                hazards.append(("written", *storage.last_write))
            if writing:
                hazards.extend(("read", q, i) for q, i in storage.last_reads.items())
            for kind, other, at in hazards:
                if other != queue and self._seen[queue][other] < at:
                    raise EmulatorError(
                        f"race on {tensor!r}: command queue {queue} "
                        f"{'writes' if writing else 'reads'} it while queue {other} may not have "
                        f"{kind} it yet (record an event on queue {other} and wait for it on queue {queue})"
                    )
            if writing:
                storage.last_write, storage.last_reads = (queue, index), {}
            else:
                storage.last_reads[queue] = index

    def host_waits(self, queue: int | None) -> None:
        """The host waited for `queue` (None: every queue): later work on any queue comes after."""
        queues = range(self.num_command_queues) if queue is None else [queue]
        for done in queues:
            for waiting in range(self.num_command_queues):
                self._seen[waiting][done] = max(self._seen[waiting][done], self._issued[done])


def _check_open_args(**sizes: Any) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 0:
            raise EmulatorError(f"open_device: {name} must be a non-negative int, got {value!r}")


def _open(
    device_id: int,
    l1_small_size: int,
    trace_region_size: int,
    dispatch_core_config: DispatchCoreConfig | None,
    num_command_queues: int,
) -> Device:
    if _PROCESS["broken"]:
        raise EmulatorError(f"open_device: this process cannot open a device any more ({_PROCESS['broken']})")
    if not isinstance(device_id, int) or device_id < 0 or device_id >= SETTINGS.num_devices:
        raise EmulatorError(f"open_device: no chip with id {device_id} ({SETTINGS.num_devices} detected)")
    if device_id in _OPEN_DEVICES or device_id in SETTINGS.busy_device_ids:
        raise EmulatorError(f"open_device: chip {device_id} is in use by another process (device lock held)")
    dispatch = dispatch_core_config or DispatchCoreConfig()
    if dispatch.type == DispatchCoreType.ETH and not SETTINGS.eth_dispatch_opens:
        # What the real library reports on a mock p150a (docs/design/facts.md, Mock p150a).
        reason = "TT_FATAL: No core coordinate found at location: (0, 12, ETH, LOGICAL)"
        if SETTINGS.failed_open_breaks_process:
            _PROCESS["broken"] = f"an Ethernet-dispatch open failed earlier: {reason}"
        raise EmulatorError(f"open_device with Ethernet dispatch: {reason}")
    device = Device(device_id, l1_small_size, trace_region_size, dispatch, num_command_queues)
    _OPEN_DEVICES[device_id] = device
    return device


def _opened_alone(device: Device) -> Device:
    _OPENED_ALONE.append(device)
    return device


def open_device(
    *,
    device_id: int = 0,
    l1_small_size: int = 0,
    trace_region_size: int = 0,
    dispatch_core_config: DispatchCoreConfig | None = None,
    worker_l1_size: int = 0,
) -> Device:
    """Open one chip with one command queue; fails like the driver when it is absent or held."""
    _check_open_args(
        l1_small_size=l1_small_size, trace_region_size=trace_region_size, worker_l1_size=worker_l1_size
    )
    return _opened_alone(_open(device_id, l1_small_size, trace_region_size, dispatch_core_config, 1))


def open_mesh_device(
    mesh_shape: MeshShape | None = None,
    l1_small_size: int = 0,
    trace_region_size: int = 0,
    num_command_queues: int = 1,
    dispatch_core_config: DispatchCoreConfig | None = None,
    offset: Any = None,
    physical_device_ids: Sequence[int] = (),
    worker_l1_size: int = 0,
) -> Device:
    """A 1x1 mesh (one chip) with one or two command queues."""
    _check_open_args(
        l1_small_size=l1_small_size, trace_region_size=trace_region_size, worker_l1_size=worker_l1_size
    )
    if mesh_shape is not None and tuple(mesh_shape) != (1, 1):
        raise EmulatorError(f"open_mesh_device: only a 1x1 mesh is emulated, not {tuple(mesh_shape)}")
    if num_command_queues not in (1, 2):
        raise EmulatorError(f"open_mesh_device: num_command_queues must be 1 or 2, got {num_command_queues}")
    device_id = physical_device_ids[0] if physical_device_ids else 0
    return _opened_alone(
        _open(device_id, l1_small_size, trace_region_size, dispatch_core_config, num_command_queues)
    )


def CreateDevices(  # noqa: N802 - ttnn's name
    device_ids: Sequence[int],
    num_command_queues: int = 1,
    l1_small_size: int = 0,
    trace_region_size: int = 0,
    dispatch_core_config: DispatchCoreConfig | None = None,
    *,
    worker_l1_size: int = 0,
) -> dict[int, Device]:
    """Several chips in one call, each a 1x1 mesh that closes on its own; one chip alone is
    tied to the chips opened before it, as open_mesh_device's is. Nothing stays open on failure."""
    _check_open_args(
        l1_small_size=l1_small_size, trace_region_size=trace_region_size, worker_l1_size=worker_l1_size
    )
    if num_command_queues not in (1, 2):
        raise EmulatorError(f"CreateDevices: num_command_queues must be 1 or 2, got {num_command_queues}")
    opened: dict[int, Device] = {}
    try:
        for device_id in device_ids:
            opened[device_id] = _open(
                device_id, l1_small_size, trace_region_size, dispatch_core_config, num_command_queues
            )
    except EmulatorError:
        for device in opened.values():
            close_device(device)
        raise
    if len(opened) == 1:
        _opened_alone(next(iter(opened.values())))
    return opened


def CloseDevices(devices: dict[int, Device], /) -> None:  # noqa: N802 - ttnn's name
    for device in devices.values():
        close_device(device)


def close_device(device: Device) -> None:
    """Close a chip; a trace still held is an error (release it first). A chip already closed with
    a chip opened after it is left as it is (the real library logs "Cannot close device N that has
    not been initialized!" and returns)."""
    if device._closed_with is not None:
        return
    device.check_open()
    if device._traces or device._capture is not None:
        raise EmulatorError("close_device: a trace is still captured; release_trace first")
    tied = [device]
    if device in _OPENED_ALONE:
        index = _OPENED_ALONE.index(device)
        tied = _OPENED_ALONE[: index + 1]
        del _OPENED_ALONE[: index + 1]
    for closing in tied:
        if closing._open:
            for tensor in closing.live_tensors():
                tensor._allocated = False
            closing._open = False
            _OPEN_DEVICES.pop(closing.device_id, None)
            if closing is not device:
                closing._closed_with = device.device_id


def close_mesh_device(mesh_device: Device) -> None:
    """close_device for a device opened with open_mesh_device."""
    close_device(mesh_device)


def GetNumAvailableDevices() -> int:  # noqa: N802 - ttnn's name
    return SETTINGS.num_devices


def get_num_devices() -> int:
    return SETTINGS.num_devices


def _forbid_in_capture(device: Device, what: str) -> None:
    if device.capturing:
        raise EmulatorError(f"{what} inside a trace capture: a capture may hold only device ops")


def synchronize_device(device: Device, cq_id: int | None = None, sub_device_ids: Sequence[Any] = ()) -> None:
    """Host waits for one queue (or all, cq_id None)."""
    queue = None if cq_id is None else device.check_queue(cq_id)
    device.check_open()
    _forbid_in_capture(device, "synchronize_device")
    device.host_waits(queue)


def record_event(
    mesh_device: Device, cq_id: int, sub_device_ids: Sequence[Any] = (), device_range: Any = None
) -> MeshEvent:
    """An event after everything issued so far on `cq_id`."""
    queue = mesh_device.check_queue(cq_id)
    _forbid_in_capture(mesh_device, "record_event")
    return MeshEvent(mesh_device.device_id, queue, mesh_device._issued[queue])


def wait_for_event(cq_id: int, mesh_event: MeshEvent) -> None:
    """Queue `cq_id` waits (on the device, the host does not) until the event's work is done."""
    device = _OPEN_DEVICES.get(mesh_event.device_id)
    if device is None:
        raise EmulatorError("wait_for_event: the event's device is closed")
    queue = device.check_queue(cq_id)
    _forbid_in_capture(device, "wait_for_event")
    seen = device._seen[queue]
    seen[mesh_event.cq_id] = max(seen[mesh_event.cq_id], mesh_event.index)


def event_synchronize(mesh_event: MeshEvent) -> None:
    """The host waits for the event: later work on any queue comes after it."""
    device = _OPEN_DEVICES.get(mesh_event.device_id)
    if device is None:
        raise EmulatorError("event_synchronize: the event's device is closed")
    _forbid_in_capture(device, "event_synchronize")
    for seen in device._seen:
        seen[mesh_event.cq_id] = max(seen[mesh_event.cq_id], mesh_event.index)


def begin_trace_capture(mesh_device: Device, *, cq_id: int | None = 0) -> MeshTraceId:
    device = mesh_device
    queue = device.check_queue(cq_id)
    if device.trace_region_size <= 0:
        raise EmulatorError("begin_trace_capture: the device was opened without a trace_region_size")
    if device._capture is not None:
        raise EmulatorError("begin_trace_capture: a capture is already in progress on this device")
    trace_id = MeshTraceId(next(device._trace_ids))
    device._capture = _Trace(trace_id, queue)
    return trace_id


def end_trace_capture(mesh_device: Device, trace_id: MeshTraceId, *, cq_id: int | None = 0) -> None:
    device = mesh_device
    device.check_queue(cq_id)
    trace = device._capture
    if trace is None or trace.trace_id is not trace_id:
        raise EmulatorError("end_trace_capture: no capture in progress with this id")
    trace.capturing = False
    trace.end_seq = next(device._seq)
    device._capture = None
    device._traces[trace_id.value] = trace


def _captured(device: Device, trace_id: MeshTraceId, what: str) -> _Trace:
    trace = device._traces.get(getattr(trace_id, "value", None))
    if trace is None or trace.trace_id is not trace_id:
        raise EmulatorError(f"{what}: unknown, released or still-capturing trace")
    return trace


def execute_trace(
    mesh_device: Device, trace_id: MeshTraceId, *, cq_id: int | None = 0, blocking: bool = True
) -> None:
    """Replay the captured ops on the current contents of their input buffers."""
    device = mesh_device
    queue = device.check_queue(cq_id)
    _forbid_in_capture(device, "execute_trace")
    trace = _captured(device, trace_id, "execute_trace")
    if trace.late_programs:
        raise EmulatorError(
            f"execute_trace: {len(trace.late_programs)} program(s) compiled after this trace was captured "
            f"(first: {trace.late_programs[0]}); their binaries and program-cache buffers may sit where the "
            "replay writes: compile every path before the first capture"
        )
    for tensor in trace.external_inputs:
        if not tensor._allocated:
            raise EmulatorError(f"execute_trace: trace input {tensor!r} was deallocated")
    outputs = [o for s in trace.steps for o in s.outputs]
    if SETTINGS.trace_alloc_tracking:
        _check_unsafe_allocations(device, trace, outputs)
    device.access(queue, reads=trace.external_inputs, writes=outputs)
    device._replay_buffers = {id(o) for o in outputs}
    device._replaying = True
    try:
        _replay(device, trace)
    finally:
        device._replay_buffers = set()
        device._replaying = False
    produced = {id(o) for o in outputs}
    for tensor in device.live_tensors():
        if tensor.alloc_seq > trace.end_seq and id(tensor) not in produced:
            tensor.clobbered_by_replay = True
    if blocking:
        device.host_waits(queue)
    device.replays += 1


def unsafe_allocations(device: Device, trace: _Trace, outputs: Sequence[Tensor] = ()) -> list[Tensor]:
    """Live buffers allocated after `trace`'s capture ended, not marked corruptible and not its
    own outputs: what tt-metal's trace allocation tracker refuses before a replay (one tensor per
    buffer, views folded into their source)."""
    own = {id(o._storage) for o in outputs}
    found: dict[int, Tensor] = {}
    for tensor in device.live_tensors():
        storage = tensor._storage
        if storage.alloc_seq > trace.end_seq and not storage.corruptible and id(storage) not in own:
            found.setdefault(id(storage), tensor)
    return sorted(found.values(), key=lambda t: t._storage.alloc_seq)


def _check_unsafe_allocations(device: Device, trace: _Trace, outputs: Sequence[Tensor]) -> None:
    unsafe = unsafe_allocations(device, trace, outputs)
    if unsafe:
        shown = ", ".join(repr(t) for t in unsafe[:3])
        raise EmulatorError(
            f"execute_trace (TT_METAL_TRACE_ALLOC_TRACKING=1): {len(unsafe)} buffer(s) allocated after "
            f"trace {trace.trace_id.value}'s capture are alive and not marked corruptible ({shown}): "
            "the replay may overwrite them; allocate them before the capture, free them before the "
            "replay, or mark them with ttnn.mark_corruptible"
        )


def mark_corruptible(tensor: Tensor) -> int:
    """Exempt a buffer from trace allocation tracking (a newer ttnn's call, not in 0.81.1):
    its owner accepts that replays may overwrite it. Returns an id for the buffer."""
    if tensor._device is None or not tensor._allocated:
        raise EmulatorError(f"mark_corruptible: {tensor!r} is not an allocated device tensor")
    tensor._storage.corruptible = True
    return id(tensor._storage)


def acknowledge_corruptible(tensor: Tensor) -> None:
    """ttnn 0.81.1's form of mark_corruptible (ttnn.tools.trace_allocation_tracker)."""
    mark_corruptible(tensor)


@contextlib.contextmanager
def corruptible_allocation_scope(mesh_device: Device) -> Iterator[None]:
    """Buffers allocated inside are exempt from trace allocation tracking (0.81.1's
    ttnn.tools.trace_allocation_tracker.corruptible_allocation_scope)."""
    mesh_device._corruptible_scopes += 1
    try:
        yield
    finally:
        mesh_device._corruptible_scopes -= 1


def _replay(device: Device, trace: _Trace) -> None:
    for step in trace.steps:
        fresh = step.run()
        for target, value in zip(step.outputs, fresh, strict=True):
            target.write(value._values, quantized=True)
            target.clobbered_by_replay = False
            device._live.discard(value)  # a scratch result of the replay, not a buffer of its own


def release_trace(mesh_device: Device, trace_id: MeshTraceId) -> None:
    device = mesh_device
    _forbid_in_capture(device, "release_trace")
    _captured(device, trace_id, "release_trace")
    del device._traces[trace_id.value]


# host <-> device ---------------------------------------------------------------------------
def _as_torch(tensor: Any) -> torch.Tensor:
    if isinstance(tensor, torch.Tensor):
        return tensor
    return torch.as_tensor(tensor)


def _check_memory_config(device: Device, memory_config: MemoryConfig | None, tensor: Tensor) -> None:
    """What can be checked off-chip: shard grids inside the compute grid, shard shapes that tile."""
    if memory_config is None or not memory_config.is_sharded():
        return
    spec = memory_config.shard_spec
    if spec is None:
        raise EmulatorError("sharded memory config without a shard spec")
    if memory_config.buffer_type != BufferType.L1:
        raise EmulatorError("sharded tensors must live in L1")
    box = spec.grid.bounding_box()
    device.check_grid((box.end.x + 1, box.end.y + 1), "shard grid")
    rows = 1
    for d in tensor.padded_shape[:-1]:
        rows *= d
    cols = tensor.padded_shape[-1]
    shard_h, shard_w = spec.shape
    if rows % shard_h or cols % shard_w:
        raise EmulatorError(f"shard shape {tuple(spec.shape)} does not divide tensor {rows}x{cols}")
    if tensor.layout == Layout.TILE and (shard_h % TILE_SIZE or shard_w % TILE_SIZE):
        raise EmulatorError(f"shard shape {tuple(spec.shape)} is not a whole number of tiles")


def from_torch(
    tensor: Any,
    dtype: DataType | None = None,
    *,
    layout: Layout | None = Layout.ROW_MAJOR,
    device: Device | None = None,
    memory_config: MemoryConfig | None = None,
    tile: Any = None,
    pad_value: float | None = None,
    mesh_mapper: Any = None,
    cq_id: int | None = None,
    spec: Any = None,
) -> Tensor:
    """Host tensor (or device tensor when `device` is given, a host write) from torch/numpy."""
    values = _as_torch(tensor)
    if dtype is None:
        dtype = {
            torch.float32: DataType.FLOAT32,
            torch.bfloat16: DataType.BFLOAT16,
            torch.int32: DataType.INT32,
            torch.uint8: DataType.UINT8,
        }.get(values.dtype, DataType.FLOAT32)
    layout = layout or Layout.ROW_MAJOR
    if device is not None:
        device.forbid_host_io("from_torch(device=...)")
        queue = device.check_queue(cq_id)
    result = Tensor(
        values.to(torch.float32) if values.is_floating_point() else values,
        dtype,
        layout,
        device,
        memory_config if device is not None else None,
    )
    if device is not None:
        _check_memory_config(device, memory_config, result)
        device.access(queue, writes=[result])
    return result


def as_tensor(
    tensor: Any,
    dtype: DataType | None = None,
    *,
    layout: Layout = Layout.ROW_MAJOR,
    device: Device | None = None,
    memory_config: MemoryConfig | None = None,
    cache_file_name: Any = None,
    preprocess: Callable[[Tensor], Tensor] | None = None,
    mesh_mapper: Any = None,
) -> Tensor:
    """from_torch with an on-disk cache: a second call with the same file name skips the conversion.

    The emulator's cache files end in `.emulated.pt` so they never mix with the real ttnn's
    `.tensorbin` files.
    """
    if cache_file_name is None:
        return from_torch(tensor, dtype, layout=layout, device=device, memory_config=memory_config)
    import pathlib

    path = pathlib.Path(
        f"{cache_file_name}_dtype_{dtype.name if dtype else 'NONE'}_layout_{layout.name}.emulated.pt"
    )
    if path.exists():
        stored = torch.load(path, weights_only=True)
        host = Tensor(stored, dtype or DataType.FLOAT32, layout, quantized=True)
    else:
        host = from_torch(tensor, dtype, layout=layout)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(host._values, path)
    if preprocess is not None:
        host = preprocess(host)
    if device is None:
        return host
    return to_device(host, device, memory_config)


def to_device(
    tensor: Tensor, device: Device, memory_config: MemoryConfig | None = None, *, queue_id: int | None = None
) -> Tensor:
    device.forbid_host_io("to_device")
    queue = device.check_queue(queue_id)
    if tensor._device is not None:
        return tensor
    result = Tensor(tensor.read().clone(), tensor.dtype, tensor.layout, device, memory_config, quantized=True)
    _check_memory_config(device, memory_config, result)
    device.access(queue, writes=[result])
    return result


def _host_read(tensor: Tensor, cq_id: int | None, what: str) -> None:
    """A blocking read on one queue: the host then waits for that queue."""
    device = tensor._device
    assert device is not None
    device.forbid_host_io(what)
    queue = device.check_queue(cq_id)
    device.access(queue, reads=[tensor])
    device.host_waits(queue)


def from_device(tensor: Tensor, blocking: bool = True, *, queue_id: int | None = None) -> Tensor:
    if tensor._device is None:
        return tensor
    _host_read(tensor, queue_id, "from_device")
    return Tensor(tensor.read().clone(), tensor.dtype, tensor.layout, quantized=True)


def to_torch(
    tensor: Tensor,
    dtype: torch.dtype | None = None,
    *,
    torch_rank: int | None = None,
    mesh_composer: Any = None,
    device: Device | None = None,
    cq_id: int | None = None,
) -> torch.Tensor:
    """Logical values as torch (a device read when the tensor is on a device)."""
    if tensor._device is not None:
        _host_read(tensor, cq_id, "to_torch of a device tensor")
    values = tensor.read().clone().to(_numerics.to_torch_dtype(tensor.dtype))
    if torch_rank is not None:
        while values.dim() > torch_rank:
            if values.shape[0] != 1:
                raise EmulatorError("to_torch: unable to squeeze to the requested rank")
            values = values.squeeze(0)
    return values.to(dtype) if dtype is not None else values


def allocate_tensor_on_device(
    shape: Sequence[int],
    dtype: DataType,
    layout: Layout,
    mesh_device: Device,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """A persistent device buffer (contents undefined: NaN here) for trace inputs."""
    mesh_device.check_open()
    if mesh_device.capturing:
        raise EmulatorError("allocate_tensor_on_device inside a trace capture")
    fill = (
        torch.full(tuple(shape), float("nan"))
        if dtype not in _numerics.INTEGER_RANGES
        else torch.zeros(tuple(shape), dtype=torch.int64)
    )
    result = Tensor(fill, dtype, layout, mesh_device, memory_config, quantized=True)
    _check_memory_config(mesh_device, memory_config, result)
    return result


def copy_host_to_device_tensor(host_tensor: Tensor, device_tensor: Tensor, cq_id: int | None = None) -> None:
    """Write a host tensor into an existing device buffer; spec (shape, dtype, layout) must match."""
    device = device_tensor._device
    if device is None or host_tensor._device is not None:
        raise EmulatorError("copy_host_to_device_tensor: needs a host source and a device destination")
    queue = device.check_queue(cq_id)
    device.forbid_host_io("copy_host_to_device_tensor")
    if not device_tensor._allocated:
        raise EmulatorError(f"copy_host_to_device_tensor: {device_tensor!r} was deallocated")
    if (host_tensor.shape, host_tensor.dtype, host_tensor.layout) != (
        device_tensor.shape,
        device_tensor.dtype,
        device_tensor.layout,
    ):
        raise EmulatorError(f"copy_host_to_device_tensor: spec mismatch {host_tensor!r} -> {device_tensor!r}")
    device.access(queue, writes=[device_tensor])
    device_tensor.write(host_tensor.read().clone(), quantized=True)
    device_tensor.clobbered_by_replay = False


def deallocate(tensor: Tensor, force: bool = True) -> None:
    """Free a tensor's buffer; any later use of it fails."""
    if tensor._device is not None:
        tensor._device.check_open()
    tensor._allocated = False
