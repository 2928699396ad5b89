"""Tensors, devices and metal traces of the emulator, with the rules the real runtime enforces.

Rules enforced here (each is an error a chip would raise, or silent corruption it would
cause that the emulator turns into an error):
- one owner per chip: opening a device that is open (or marked busy) fails, as does an
  absent device id;
- an op's tensors must be allocated and on the device the op runs on; a deallocated tensor
  cannot be used;
- a metal trace may only contain ops whose programs were compiled by an eager run first;
  no host read or write happens inside a capture; the ops' outputs hold garbage (NaN)
  until the trace is executed; a replay reads its inputs' current contents;
- a replay overwrites every buffer allocated after the capture ended (the real trace reuses
  the addresses it freed), so such a buffer read after a replay raises;
- one trace per device at a time: capturing again before release_trace fails;
- open_device gives one command queue: cq_id other than 0 fails.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _numerics
from ._types import (
    FULL_GRID,
    TILE_SIZE,
    Arch,
    BufferType,
    CoreCoord,
    DataType,
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


@dataclass
class EmulatorSettings:
    """Knobs a test turns to model the machine: how many chips, which are busy, dispatch support."""

    num_devices: int = 1
    busy_device_ids: set[int] = field(default_factory=set)
    eth_dispatch_supported: bool = True
    #: L1 per Tensix core on Blackhole (1.5 MB); sharded configs are checked against it.
    l1_bytes_per_core: int = 1536 * 1024


SETTINGS = EmulatorSettings()
_OPEN_DEVICES: dict[int, Device] = {}
_ELEMENT_BYTES = {
    DataType.FLOAT32: 4,
    DataType.BFLOAT16: 2,
    DataType.BFLOAT8_B: 1.0625,
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


class _Storage:
    """A device allocation; views made by ttnn.reshape share their source's."""

    __slots__ = ("alive",)

    def __init__(self) -> None:
        self.alive = True


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
        self._storage = storage or _Storage()
        self.clobbered_by_replay = False
        self.alloc_seq = -1
        if device is not None:
            device._register(self)

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
    steps: list[_TraceStep] = field(default_factory=list)
    end_seq: int = -1
    capturing: bool = True
    produced: set[int] = field(default_factory=set)
    external_inputs: list[Tensor] = field(default_factory=list)


class Device:
    """One emulated p150a. The compute grid depends on the dispatch cores chosen at open."""

    def __init__(
        self, device_id: int, l1_small_size: int, trace_region_size: int, dispatch: DispatchCoreConfig
    ) -> None:
        self.device_id = device_id
        self.l1_small_size = l1_small_size
        self.trace_region_size = trace_region_size
        self.dispatch_core_config = dispatch
        eth = dispatch.type == DispatchCoreType.ETH
        self._grid = FULL_GRID if eth else (FULL_GRID[0] - 1, FULL_GRID[1])
        self._open = True
        self._seq = itertools.count()
        self._live: weakref.WeakSet[Tensor] = weakref.WeakSet()
        self._compiled: set[tuple] = set()
        self._trace: _Trace | None = None
        self._trace_ids = itertools.count(1)
        self.op_log: list[str] = []
        # During a replay: the trace's own intermediates, which it reads even when the code that
        # captured it deallocated them (their addresses belong to the trace).
        self._replay_buffers: set[int] = set()
        self.replays = 0

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

    def check_queue(self, cq_id: int | None) -> None:
        """open_device gives one command queue (0); a second needs a mesh opened with two."""
        self.check_open()
        if cq_id not in (None, 0):
            raise EmulatorError(f"command queue {cq_id} does not exist: the device was opened with one (0)")

    def _register(self, tensor: Tensor) -> None:
        self.check_open()
        tensor.alloc_seq = next(self._seq)
        self._live.add(tensor)

    @property
    def capturing(self) -> bool:
        return self._trace is not None and self._trace.capturing

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

    def run_op(self, name: str, signature: tuple, compute: Callable[[], list[Tensor]]) -> list[Tensor]:
        """Run one device op under the compile and trace rules; returns its output tensors."""
        self.check_open()
        self.op_log.append(name)
        if self.capturing:
            if signature not in self._compiled:
                raise EmulatorError(
                    f"{name}: program not compiled before trace capture (run the path once eagerly first)"
                )
            trace = self._trace
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
            return outputs
        self._compiled.add(signature)
        return compute()

    def note_trace_input(self, tensor: Tensor) -> None:
        """Remember tensors a captured op reads that the trace itself did not produce."""
        trace = self._trace
        if (
            trace is not None
            and trace.capturing
            and id(tensor) not in trace.produced
            and all(t is not tensor for t in trace.external_inputs)
        ):
            trace.external_inputs.append(tensor)

    def forbid_host_io(self, what: str) -> None:
        if self.capturing:
            raise EmulatorError(f"{what} inside a trace capture: no host reads or writes may be captured")


def open_device(
    *,
    device_id: int = 0,
    l1_small_size: int = 0,
    trace_region_size: int = 0,
    dispatch_core_config: DispatchCoreConfig | None = None,
    worker_l1_size: int = 0,
) -> Device:
    """Open one chip; fails like the driver when it is absent or held by another owner."""
    for name, value in (
        ("l1_small_size", l1_small_size),
        ("trace_region_size", trace_region_size),
        ("worker_l1_size", worker_l1_size),
    ):
        if not isinstance(value, int) or value < 0:
            raise EmulatorError(f"open_device: {name} must be a non-negative int, got {value!r}")
    if not isinstance(device_id, int) or device_id < 0 or device_id >= SETTINGS.num_devices:
        raise EmulatorError(f"open_device: no chip with id {device_id} ({SETTINGS.num_devices} detected)")
    if device_id in _OPEN_DEVICES or device_id in SETTINGS.busy_device_ids:
        raise EmulatorError(f"open_device: chip {device_id} is in use by another process (device lock held)")
    dispatch = dispatch_core_config or DispatchCoreConfig()
    if dispatch.type == DispatchCoreType.ETH and not SETTINGS.eth_dispatch_supported:
        raise EmulatorError("open_device: Ethernet dispatch is not supported by this build")
    device = Device(device_id, l1_small_size, trace_region_size, dispatch)
    _OPEN_DEVICES[device_id] = device
    return device


def close_device(device: Device) -> None:
    """Close a chip; a trace still held is an error (release it first)."""
    device.check_open()
    if device._trace is not None:
        raise EmulatorError("close_device: a trace is still captured; release_trace first")
    for tensor in device.live_tensors():
        tensor._allocated = False
    device._open = False
    _OPEN_DEVICES.pop(device.device_id, None)


def GetNumAvailableDevices() -> int:  # noqa: N802 - ttnn's name
    return SETTINGS.num_devices


def get_num_devices() -> int:
    return SETTINGS.num_devices


def synchronize_device(device: Device, cq_id: int | None = None, sub_device_ids: Sequence[Any] = ()) -> None:
    device.check_queue(cq_id)


def begin_trace_capture(device: Device, *, cq_id: int | None = 0) -> MeshTraceId:
    device.check_queue(cq_id)
    if device.trace_region_size <= 0:
        raise EmulatorError("begin_trace_capture: the device was opened without a trace_region_size")
    if device._trace is not None:
        raise EmulatorError(
            "begin_trace_capture: a trace is already captured on this device; release it first"
        )
    trace_id = MeshTraceId(next(device._trace_ids))
    device._trace = _Trace(trace_id)
    return trace_id


def end_trace_capture(device: Device, trace_id: MeshTraceId, *, cq_id: int | None = 0) -> None:
    device.check_queue(cq_id)
    trace = device._trace
    if trace is None or trace.trace_id is not trace_id or not trace.capturing:
        raise EmulatorError("end_trace_capture: no capture in progress with this id")
    trace.capturing = False
    trace.end_seq = next(device._seq)


def execute_trace(
    device: Device, trace_id: MeshTraceId, *, cq_id: int | None = 0, blocking: bool = True
) -> None:
    """Replay the captured ops on the current contents of their input buffers."""
    device.check_queue(cq_id)
    trace = device._trace
    if trace is None or trace.trace_id is not trace_id or trace.capturing:
        raise EmulatorError("execute_trace: unknown, released or still-capturing trace")
    for tensor in trace.external_inputs:
        if not tensor._allocated:
            raise EmulatorError(f"execute_trace: trace input {tensor!r} was deallocated")
    device._replay_buffers = {id(o) for s in trace.steps for o in s.outputs}
    try:
        _replay(device, trace)
    finally:
        device._replay_buffers = set()
    produced = {id(o) for s in trace.steps for o in s.outputs}
    for tensor in device.live_tensors():
        if tensor.alloc_seq > trace.end_seq and id(tensor) not in produced:
            tensor.clobbered_by_replay = True
    device.replays += 1


def _replay(device: Device, trace: _Trace) -> None:
    for step in trace.steps:
        fresh = step.run()
        for target, value in zip(step.outputs, fresh, strict=True):
            target.write(value._values, quantized=True)
            target.clobbered_by_replay = False
            device._live.discard(value)  # a scratch result of the replay, not a buffer of its own


def release_trace(device: Device, trace_id: MeshTraceId) -> None:
    trace = device._trace
    if trace is None or trace.trace_id is not trace_id:
        raise EmulatorError("release_trace: unknown or already released trace")
    device._trace = None


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
        }.get(values.dtype, DataType.FLOAT32)
    layout = layout or Layout.ROW_MAJOR
    if device is not None:
        device.forbid_host_io("from_torch(device=...)")
    result = Tensor(
        values.to(torch.float32) if values.is_floating_point() else values,
        dtype,
        layout,
        device,
        memory_config if device is not None else None,
    )
    if device is not None:
        _check_memory_config(device, memory_config, result)
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
    if tensor._device is not None:
        return tensor
    result = Tensor(tensor.read().clone(), tensor.dtype, tensor.layout, device, memory_config, quantized=True)
    _check_memory_config(device, memory_config, result)
    return result


def from_device(tensor: Tensor, blocking: bool = True, *, queue_id: int | None = None) -> Tensor:
    if tensor._device is None:
        return tensor
    tensor._device.forbid_host_io("from_device")
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
        tensor._device.forbid_host_io("to_torch of a device tensor")
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
        if dtype not in (DataType.UINT32, DataType.INT32)
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
    device.check_queue(cq_id)
    device.forbid_host_io("copy_host_to_device_tensor")
    if not device_tensor._allocated:
        raise EmulatorError(f"copy_host_to_device_tensor: {device_tensor!r} was deallocated")
    if (host_tensor.shape, host_tensor.dtype, host_tensor.layout) != (
        device_tensor.shape,
        device_tensor.dtype,
        device_tensor.layout,
    ):
        raise EmulatorError(f"copy_host_to_device_tensor: spec mismatch {host_tensor!r} -> {device_tensor!r}")
    device_tensor.write(host_tensor.read().clone(), quantized=True)
    device_tensor.clobbered_by_replay = False


def deallocate(tensor: Tensor, force: bool = True) -> None:
    """Free a tensor's buffer; any later use of it fails."""
    if tensor._device is not None:
        tensor._device.check_open()
    tensor._allocated = False
