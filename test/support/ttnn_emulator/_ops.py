"""Device ops of the emulator: torch math on the stored (already rounded) values.

Numerics: inputs hold exactly what their dtype can hold (bfloat16, bfloat8_b); each op
computes in float32 and rounds its output to the output dtype, as the device packs its
results. Modelled: the math fidelity of matmuls, convolutions and both matmuls inside the
fused attention (_numerics.fidelity_product: the operand bits each fidelity keeps), the fused
matmul GELU as the approximate one, the attention's approximate exp when exp_approx_mode is
set, its bfloat16 probabilities. Not modelled: bfloat16 accumulation when fp32_dest_acc_en is
off, the exact SFPU approximations (the models are the tanh GELU and 2^f ~ 1 + f): the device
tests measure those.

Layout rules follow the device: matmul, linear, layer_norm, attention and the head
split/concat need TILE; bfloat8_b exists only in TILE; uint8 (the uploaded pixels) is neither
tilized nor reshaped by a copy on the device: it is typecast first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

from . import _numerics
from ._runtime import Device, EmulatorError, Tensor, is_device_tensor
from ._types import (
    TILE_SIZE,
    BufferType,
    Conv2dConfig,
    CoreGrid,
    DataType,
    Layout,
    MatmulMultiCoreReuseMultiCastProgramConfig,
    MemoryConfig,
    SDPAProgramConfig,
    TensorMemoryLayout,
    grid_xy,
)

#: Activations fused into a matmul; the fused gelu is the SFPU's approximate one.
_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": _numerics.approximate_gelu,
    "relu": F.relu,
    "silu": F.silu,
}


#: Score values the emulated attention holds at once (float32): 64 Mi values, 256 MB.
_SDPA_SCORE_BUDGET = 64 * 1024 * 1024


def fidelity_of(compute_kernel_config: Any, default: str = "LoFi") -> str:
    """The math fidelity a compute config asks for; ttnn's default (LoFi for matmul and conv,
    init_device_compute_kernel_config's) when none is given."""
    fidelity = getattr(compute_kernel_config, "math_fidelity", None)
    return fidelity.name if fidelity is not None else default


def _freeze(value: Any) -> Any:
    """A hashable stand-in for an op parameter, for the compiled-program key."""
    if isinstance(value, Tensor):
        return ("tensor", tuple(value.shape), value.dtype, value.layout, value.memory_config())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _launch(
    name: str,
    tensors: Sequence[Tensor],
    params: dict[str, Any],
    compute: Callable[[], list[Tensor]],
    program: bool = True,
) -> list[Tensor]:
    """Check placement, then run `compute` under the device's compile and trace rules."""
    device: Device | None = None
    for tensor in tensors:
        if not isinstance(tensor, Tensor):
            raise EmulatorError(f"{name}: expected a ttnn.Tensor, got {type(tensor).__name__}")
        if tensor._device is None:
            raise EmulatorError(f"{name}: {tensor!r} is on the host; device ops need device tensors")
        if not tensor.is_allocated():
            raise EmulatorError(f"{name}: {tensor!r} was deallocated")
        if device is None:
            device = tensor._device
        elif tensor._device is not device:
            raise EmulatorError(f"{name}: tensors on different devices")
    assert device is not None
    memory_config = params.get("memory_config")
    if memory_config is not None and not isinstance(memory_config, MemoryConfig):
        raise EmulatorError(f"{name}: memory_config must be a ttnn.MemoryConfig")
    for tensor in tensors:
        device.note_trace_input(tensor)
    signature = (name, tuple(_freeze(t) for t in tensors), _freeze(params))
    return device.run_op(name, signature if program else None, compute, inputs=tensors, attrs=params)


def _require_tile(name: str, *tensors: Tensor | None) -> None:
    for tensor in tensors:
        if tensor is not None and tensor.layout != Layout.TILE:
            raise EmulatorError(f"{name}: {tensor!r} must be in TILE layout")


def _new(
    values: torch.Tensor,
    like: Tensor,
    dtype: DataType | None = None,
    layout: Layout | None = None,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    return Tensor(
        values,
        dtype or like.dtype,
        layout or like.layout,
        like._device,
        memory_config or like.memory_config(),
    )


def _check_core_grid(device: Device, core_grid: CoreGrid | None, name: str) -> None:
    if core_grid is not None:
        device.check_grid((core_grid.x, core_grid.y), f"{name} core_grid")


# matmul family ------------------------------------------------------------------------------
def matmul(
    input_tensor_a: Tensor,
    input_tensor_b: Tensor,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    memory_config: MemoryConfig | None = None,
    dtype: DataType | None = None,
    program_config: Any = None,
    activation: str | None = None,
    compute_kernel_config: Any = None,
    core_grid: CoreGrid | None = None,
) -> Tensor:
    """a @ b (+ activation): ttnn.linear without a bias."""
    return _matmul(
        "matmul",
        input_tensor_a,
        input_tensor_b,
        None,
        dict(
            transpose_a=transpose_a,
            transpose_b=transpose_b,
            memory_config=memory_config,
            dtype=dtype,
            program_config=program_config,
            activation=activation,
            compute_kernel_config=compute_kernel_config,
            core_grid=core_grid,
        ),
    )


def linear(
    input_tensor_a: Tensor,
    input_tensor_b: Tensor,
    *,
    bias: Tensor | None = None,
    transpose_a: bool = False,
    transpose_b: bool = False,
    memory_config: MemoryConfig | None = None,
    dtype: DataType | None = None,
    program_config: Any = None,
    activation: str | None = None,
    compute_kernel_config: Any = None,
    core_grid: CoreGrid | None = None,
) -> Tensor:
    """a @ b + bias (+ activation); b is (..., K, N) as ttnn expects (torch weights transposed)."""
    return _matmul(
        "linear",
        input_tensor_a,
        input_tensor_b,
        bias,
        dict(
            transpose_a=transpose_a,
            transpose_b=transpose_b,
            memory_config=memory_config,
            dtype=dtype,
            program_config=program_config,
            activation=activation,
            compute_kernel_config=compute_kernel_config,
            core_grid=core_grid,
        ),
    )


def _matmul(
    name: str, input_tensor_a: Tensor, input_tensor_b: Tensor, bias: Tensor | None, options: dict[str, Any]
) -> Tensor:
    """The matmul family: shape and layout checks, then torch math on the stored values."""
    transpose_a, transpose_b = options["transpose_a"], options["transpose_b"]
    activation, dtype, memory_config = options["activation"], options["dtype"], options["memory_config"]
    core_grid = options["core_grid"]
    _require_tile(name, input_tensor_a, input_tensor_b, bias)
    if activation is not None and activation not in _ACTIVATIONS:
        raise EmulatorError(f"{name}: unknown activation {activation!r}")
    a_shape, b_shape = input_tensor_a.shape, input_tensor_b.shape
    k_a = a_shape[-2] if transpose_a else a_shape[-1]
    k_b = b_shape[-1] if transpose_b else b_shape[-2]
    if k_a != k_b:
        raise EmulatorError(f"{name}: inner dims differ: {list(a_shape)} x {list(b_shape)}")
    n = b_shape[-2] if transpose_b else b_shape[-1]
    if bias is not None and (bias.shape[-1] != n or bias.volume() != n):
        raise EmulatorError(f"{name}: bias {list(bias.shape)} does not match output width {n}")
    tensors = [input_tensor_a, input_tensor_b] + ([bias] if bias is not None else [])
    _check_core_grid(tensors[0]._device, core_grid, name)

    fidelity = fidelity_of(options["compute_kernel_config"])
    program = options["program_config"]
    if program is not None:
        fused = _check_matmul_program(name, program, input_tensor_a, k_a, n, options)
        activation = activation or fused

    def compute() -> list[Tensor]:
        a, b = input_tensor_a.read(), input_tensor_b.read()
        if transpose_a:
            a = a.transpose(-1, -2)
        if transpose_b:
            b = b.transpose(-1, -2)
        out = _numerics.fidelity_product(a, b, fidelity, torch.matmul)
        if bias is not None:
            out = out + bias.read().reshape(n)
        if activation is not None:
            out = _ACTIVATIONS[activation](out)
        return [_new(out, input_tensor_a, dtype, Layout.TILE, memory_config)]

    params = dict(options, bias=bias is not None)
    return _launch(name, tensors, params, compute)[0]


#: The destination register's tiles a matmul sub-block may use: half of them with fp32 accumulation.
_DEST_TILES = {False: 8, True: 4}


def _check_matmul_program(
    name: str, program: Any, a: Tensor, k: int, n: int, options: dict[str, Any]
) -> str | None:
    """ttnn 0.81.1's checks of a 2-D multicast matmul program config (the ones its
    matmul_device_operation.cpp makes, as the real library on a mock p150a refuses them); returns
    the fused activation's name. Its circular buffers' fit in L1 is the mock p150a's to judge."""
    if not isinstance(program, MatmulMultiCoreReuseMultiCastProgramConfig):
        raise EmulatorError(f"{name}: program config {type(program).__name__} is not emulated")
    device = a._device
    device.check_grid(program.compute_with_storage_grid_size, f"{name} program config")
    grid_x, grid_y = grid_xy(program.compute_with_storage_grid_size)
    rows = math.prod(a.shape[:-1]) if program.fuse_batch else a.shape[-2]
    m_tiles, k_tiles, n_tiles = (math.ceil(v / TILE_SIZE) for v in (rows, k, n))
    block_h = program.out_block_h or program.per_core_M
    block_w = program.out_block_w or program.per_core_N
    fp32 = bool(getattr(options["compute_kernel_config"], "fp32_dest_acc_en", False))
    along_rows, along_columns = (grid_x, grid_y) if program.transpose_mcast else (grid_y, grid_x)
    rules = [
        (k_tiles % program.in0_block_w == 0, f"Kt ({k_tiles}) must be divisible by in0_block_w"),
        (math.ceil(m_tiles / program.per_core_M) <= along_rows, f"{m_tiles} row tiles need more grid rows"),
        (
            math.ceil(n_tiles / program.per_core_N) <= along_columns,
            f"{n_tiles} column tiles need more columns",
        ),
        (program.per_core_M % block_h == 0, "per_core_M must be divisible by out_block_h"),
        (program.per_core_N % block_w == 0, "per_core_N must be divisible by out_block_w"),
        (block_h % program.out_subblock_h == 0, "out_block_h must be divisible by out_subblock_h"),
        (block_w % program.out_subblock_w == 0, "out_block_w must be divisible by out_subblock_w"),
        (
            program.out_subblock_h * program.out_subblock_w <= _DEST_TILES[fp32],
            f"a sub-block may use {_DEST_TILES[fp32]} destination tiles (fp32_dest_acc_en={fp32})",
        ),
        # The real library takes both and runs the activation twice; nothing here wants that.
        (options["activation"] is None, "activation= beside a program config's fused_activation"),
    ]
    for holds, rule in rules:
        if not holds:
            raise EmulatorError(f"{name}: MatmulMultiCoreReuseMultiCastProgramConfig: {rule}")
    fused = program.fused_activation
    return fused.op_type.value if fused is not None else None


# normalisation and pointwise ----------------------------------------------------------------
def layer_norm(
    input_tensor: Tensor,
    *,
    epsilon: float = 1e-12,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    residual_input_tensor: Tensor | None = None,
    memory_config: MemoryConfig | None = None,
    program_config: Any = None,
    compute_kernel_config: Any = None,
) -> Tensor:
    """LayerNorm over the last dim; weight/bias hold W values (e.g. shape (1, W))."""
    _require_tile("layer_norm", input_tensor, weight, bias, residual_input_tensor)
    width = input_tensor.shape[-1]
    for param in (weight, bias):
        if param is not None and param.volume() != width:
            raise EmulatorError(f"layer_norm: parameter {list(param.shape)} does not hold {width} values")
    tensors = [t for t in (input_tensor, weight, bias, residual_input_tensor) if t is not None]

    def compute() -> list[Tensor]:
        x = input_tensor.read()
        if residual_input_tensor is not None:
            x = x + residual_input_tensor.read()
        w = weight.read().reshape(width) if weight is not None else None
        b = bias.read().reshape(width) if bias is not None else None
        return [_new(F.layer_norm(x, (width,), w, b, epsilon), input_tensor, memory_config=memory_config)]

    params = dict(
        epsilon=epsilon,
        memory_config=memory_config,
        program_config=program_config,
        compute_kernel_config=compute_kernel_config,
        weight=weight is not None,
        bias=bias is not None,
    )
    return _launch("layer_norm", tensors, params, compute)[0]


def _binary(
    name: str,
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    a: Any,
    b: Any,
    dtype: DataType | None,
    memory_config: MemoryConfig | None,
) -> Tensor:
    if not isinstance(a, Tensor):
        a, b = b, a
    tensors = [a] + ([b] if isinstance(b, Tensor) else [])
    if isinstance(b, Tensor):
        try:
            torch.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        except RuntimeError as exc:
            raise EmulatorError(
                f"{name}: shapes {list(a.shape)} and {list(b.shape)} do not broadcast"
            ) from exc
        if a.layout != b.layout:
            raise EmulatorError(f"{name}: operands in different layouts")

    def compute() -> list[Tensor]:
        other = b.read() if isinstance(b, Tensor) else b
        return [_new(fn(a.read(), other), a, dtype, memory_config=memory_config)]

    scalar = None if isinstance(b, Tensor) else b
    return _launch(name, tensors, dict(dtype=dtype, memory_config=memory_config, scalar=scalar), compute)[0]


def add(
    input_tensor_a: Any,
    input_tensor_b: Any,
    *,
    dtype: DataType | None = None,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    return _binary("add", torch.add, input_tensor_a, input_tensor_b, dtype, memory_config)


def mul(
    input_tensor_a: Any,
    input_tensor_b: Any,
    *,
    dtype: DataType | None = None,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    return _binary("mul", torch.mul, input_tensor_a, input_tensor_b, dtype, memory_config)


def gelu(
    input_tensor: Tensor,
    *,
    fast_and_approximate_mode: bool = False,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """Exact (erf) GELU; the approximate mode is recorded, not modelled."""

    def compute() -> list[Tensor]:
        return [_new(F.gelu(input_tensor.read()), input_tensor, memory_config=memory_config)]

    params = dict(fast_and_approximate_mode=fast_and_approximate_mode, memory_config=memory_config)
    return _launch("gelu", [input_tensor], params, compute)[0]


def softmax(input_tensor: Tensor, dim: int = -1, *, memory_config: MemoryConfig | None = None) -> Tensor:
    _require_tile("softmax", input_tensor)

    def compute() -> list[Tensor]:
        return [_new(torch.softmax(input_tensor.read(), dim=dim), input_tensor, memory_config=memory_config)]

    return _launch("softmax", [input_tensor], dict(dim=dim, memory_config=memory_config), compute)[0]


def sigmoid(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None) -> Tensor:
    """Exact logistic; the SFPU's own approximation is not modelled (device tests measure it)."""

    def compute() -> list[Tensor]:
        return [_new(torch.sigmoid(input_tensor.read()), input_tensor, memory_config=memory_config)]

    return _launch("sigmoid", [input_tensor], dict(memory_config=memory_config), compute)[0]


def clamp(
    input_tensor: Tensor,
    min: float | None = None,
    max: float | None = None,
    *,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """Values limited to [min, max] (scalar bounds; either may be None)."""
    if min is None and max is None:
        raise EmulatorError("clamp: give min, max or both")

    def compute() -> list[Tensor]:
        return [_new(input_tensor.read().clamp(min, max), input_tensor, memory_config=memory_config)]

    return _launch("clamp", [input_tensor], dict(min=min, max=max, memory_config=memory_config), compute)[0]


#: Dtypes the SFPU unary ops (sin, log1p) take; both TILE and ROW_MAJOR (their ttnn docstrings).
_UNARY_DTYPES = (DataType.BFLOAT16, DataType.BFLOAT8_B, DataType.FLOAT32)


def _unary(
    name: str, fn: Callable[[torch.Tensor], torch.Tensor], input_tensor: Tensor, params: dict[str, Any]
) -> Tensor:
    """An SFPU op value by value, with the dtypes it takes; its approximation is not modelled."""
    if input_tensor.dtype not in _UNARY_DTYPES:
        raise EmulatorError(f"{name}: {input_tensor.dtype} is not one of bfloat16, bfloat8_b, float32")

    def compute() -> list[Tensor]:
        memory_config = params.get("memory_config")
        return [_new(fn(input_tensor.read()), input_tensor, memory_config=memory_config)]

    return _launch(name, [input_tensor], params, compute)[0]


def sin(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None) -> Tensor:
    """Sine in radians; the chip reduces any argument by multiples of pi (Cody-Waite) first."""
    return _unary("sin", torch.sin, input_tensor, dict(memory_config=memory_config))


def log1p(
    input_tensor: Tensor,
    *,
    fast_and_approximate_mode: bool = False,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """ln(1 + x); NaN below -1 as on the chip (its supported range is x > -1)."""
    params = dict(fast_and_approximate_mode=fast_and_approximate_mode, memory_config=memory_config)
    return _unary("log1p", torch.log1p, input_tensor, params)


# data movement ------------------------------------------------------------------------------
def _host_or_device(
    name: str, tensor: Tensor, params: dict[str, Any], make: Callable[[], Tensor], program: bool = True
) -> Tensor:
    """Data-movement ops also run on host tensors (no device rules then); `program` False for a
    metadata-only op (a reshape view), which needs no compiled program."""
    if tensor._device is None:
        return make()
    return _launch(name, [tensor], params, lambda: [make()], program=program)[0]


def reshape_is_view(old: Sequence[int], new: Sequence[int], layout: Layout) -> bool:
    """Whether ttnn.reshape can return a view: the last dim unchanged and, in TILE, the rows on
    both sides whole tiles (so no tile changes its padding); otherwise it copies."""
    if not old or not new or old[-1] != new[-1]:
        return False
    if layout != Layout.TILE:
        return True
    rows = [dims[-2] if len(dims) >= 2 else 1 for dims in (old, new)]
    return all(r % TILE_SIZE == 0 for r in rows)


#: What the device's ROW_MAJOR reshape copy takes (reshape_device_operation.cpp); uint8 is refused.
_ROW_MAJOR_RESHAPE_DTYPES = (DataType.BFLOAT16, DataType.FLOAT32, DataType.UINT32, DataType.INT32)
#: What the device's tilize takes (tilize_with_val_padding_device_operation.cpp); uint8 is refused.
_TILIZE_DTYPES = (DataType.BFLOAT16, DataType.FLOAT32, DataType.UINT32, DataType.INT32)


def reshape(
    input_tensor: Tensor, shape: Sequence[int], *, memory_config: MemoryConfig | None = None
) -> Tensor:
    """A view when the layout allows (reshape_is_view), else a copy into a new buffer, which the
    device counts (Device.reshape_copies): a copy costs a device op and, after a capture, is an
    allocation the next replay can overwrite."""
    dims = tuple(int(d) for d in shape)
    if math.prod(dims) != input_tensor.volume():
        raise EmulatorError(f"reshape: {list(input_tensor.shape)} cannot become {list(dims)}")
    view = reshape_is_view(tuple(input_tensor.shape), dims, input_tensor.layout)
    if (
        not view
        and input_tensor._device is not None
        and input_tensor.layout == Layout.ROW_MAJOR
        and input_tensor.dtype not in _ROW_MAJOR_RESHAPE_DTYPES
    ):
        raise EmulatorError(
            f"reshape: a ROW_MAJOR copy of {input_tensor!r} needs one of "
            f"{', '.join(d.name for d in _ROW_MAJOR_RESHAPE_DTYPES)} (typecast it first)"
        )

    def make() -> Tensor:
        if not view:
            return _new(input_tensor.read().reshape(dims), input_tensor, memory_config=memory_config)
        # A view: same allocation (and allocation time) as the input (see Tensor).
        result = Tensor(
            input_tensor.read().reshape(dims),
            input_tensor.dtype,
            input_tensor.layout,
            input_tensor._device,
            memory_config or input_tensor.memory_config(),
            quantized=True,
            storage=input_tensor._storage,
        )
        result.alloc_seq = input_tensor.alloc_seq
        return result

    device = input_tensor._device
    if device is not None and not view:
        device.reshape_copies += 1
    params = dict(shape=dims, memory_config=memory_config, view=view)
    return _host_or_device("reshape", input_tensor, params, make, program=not view)


def permute(
    input_tensor: Tensor, dims: Sequence[int], *, memory_config: MemoryConfig | None = None
) -> Tensor:
    order = tuple(int(d) for d in dims)
    if sorted(d % len(order) for d in order) != list(range(input_tensor.shape.rank)):
        raise EmulatorError(f"permute: {list(order)} is not a permutation of {input_tensor.shape.rank} dims")

    def make() -> Tensor:
        return _new(
            input_tensor.read().permute(order).contiguous(), input_tensor, memory_config=memory_config
        )

    return _host_or_device("permute", input_tensor, dict(dims=order, memory_config=memory_config), make)


def repeat(
    input_tensor: Tensor, repeat_dims: Sequence[int], *, memory_config: MemoryConfig | None = None
) -> Tensor:
    """The tensor tiled repeat_dims[d] times along each dim d. All ones returns the input itself,
    not a copy, as ttnn's RepeatOperation does ("nothing to do"): code that then deallocates
    the result frees its input."""
    times = tuple(int(r) for r in repeat_dims)
    if len(times) != input_tensor.shape.rank or min(times) < 1:
        raise EmulatorError(f"repeat: {list(times)} does not fit a rank-{input_tensor.shape.rank} tensor")
    if all(r == 1 for r in times):
        return input_tensor

    def make() -> Tensor:
        return _new(input_tensor.read().repeat(times), input_tensor, memory_config=memory_config)

    return _host_or_device("repeat", input_tensor, dict(repeat_dims=times, memory_config=memory_config), make)


def clone(
    input: Tensor,
    *,
    dtype: DataType | None = None,
    memory_config: MemoryConfig | None = None,
    compute_kernel_config: Any = None,
) -> Tensor:
    """A copy in a new buffer (the layout kept), unlike a repeat by ones, which returns its input."""
    if dtype == DataType.BFLOAT8_B and input.layout != Layout.TILE:
        raise EmulatorError("clone: bfloat8_b needs TILE layout")

    def make() -> Tensor:
        return _new(input.read(), input, dtype, memory_config=memory_config)

    return _host_or_device("clone", input, dict(dtype=dtype, memory_config=memory_config), make)


def to_layout(
    tensor: Tensor,
    layout: Layout,
    dtype: DataType | None = None,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """Tilize or untilize; a tensor already in `layout` comes back unchanged, as on the device."""
    if layout == tensor.layout and (dtype is None or dtype == tensor.dtype):
        return tensor
    target = dtype or tensor.dtype
    if target == DataType.BFLOAT8_B and layout != Layout.TILE:
        raise EmulatorError("to_layout: bfloat8_b cannot be ROW_MAJOR; give dtype=ttnn.bfloat16")
    tilize = tensor.layout == Layout.ROW_MAJOR and layout == Layout.TILE
    if tilize and tensor._device is not None and tensor.dtype not in _TILIZE_DTYPES:
        raise EmulatorError(
            f"to_layout: the device tilizes {', '.join(d.name for d in _TILIZE_DTYPES)}, "
            f"not {tensor.dtype.name} (typecast {tensor!r} first)"
        )

    def make() -> Tensor:
        return _new(tensor.read(), tensor, target, layout, memory_config)

    params = dict(layout=layout, dtype=dtype, memory_config=memory_config)
    return _host_or_device("to_layout", tensor, params, make)


def typecast(
    input_tensor: Tensor,
    dtype: DataType,
    *,
    memory_config: MemoryConfig | None = None,
    output_tensor: Tensor | None = None,
    sub_core_grids: Any = None,
) -> Tensor:
    """The same values in another dtype, layout unchanged (ROW_MAJOR included), on the device.

    The device's rules (typecast_device_op.cpp): input and output both interleaved or both
    sharded; no sub_core_grids for a ROW_MAJOR input; bfloat8_b only in TILE. Emulated: any
    dtype to a float dtype (exact for uint8 to bfloat16: every value 0..255 fits its 8 bits);
    to an integer dtype is not (the device's rounding is not modelled).
    """
    name = "typecast"
    if not is_device_tensor(input_tensor):
        raise EmulatorError(
            f"{name}: the emulator casts device tensors only (use to_torch/from_torch on the host)"
        )
    if output_tensor is not None:
        raise EmulatorError(f"{name}: a preallocated output_tensor is not emulated")
    if sub_core_grids is not None and input_tensor.layout == Layout.ROW_MAJOR:
        raise EmulatorError(f"{name}: sub_core_grids are not supported for a ROW_MAJOR input")
    if dtype == DataType.BFLOAT8_B and input_tensor.layout != Layout.TILE:
        raise EmulatorError(f"{name}: bfloat8_b needs TILE layout, {input_tensor!r} is ROW_MAJOR")
    if dtype in _numerics.INTEGER_RANGES:
        raise EmulatorError(f"{name}: a cast to {dtype.name} is not emulated")
    source = input_tensor.memory_config()
    target = memory_config or source
    if source is not None and target is not None and source.is_sharded() != target.is_sharded():
        raise EmulatorError(f"{name}: input and output must both be interleaved or both sharded")

    def compute() -> list[Tensor]:
        values = input_tensor.read().to(torch.float32)
        return [_new(values, input_tensor, dtype, memory_config=target)]

    params = dict(dtype=dtype, memory_config=memory_config, sub_core_grids=sub_core_grids is not None)
    return _launch(name, [input_tensor], params, compute)[0]


def to_memory_config(tensor: Tensor, memory_config: MemoryConfig, dtype: DataType | None = None) -> Tensor:
    from ._runtime import _check_memory_config

    def make() -> Tensor:
        out = _new(tensor.read(), tensor, dtype, memory_config=memory_config)
        _check_memory_config(tensor._device, memory_config, out)
        return out

    return _launch(
        "to_memory_config", [tensor], dict(memory_config=memory_config, dtype=dtype), lambda: [make()]
    )[0]


def copy(input_a: Tensor, input_b: Tensor) -> Tensor:
    """Copy `input_a`'s contents into the existing buffer `input_b` (in place, on queue 0).

    Specs must match (shape, dtype, layout): the real op asks for equal shapes, and a copy into a
    persistent trace input must keep the spec the trace was captured with. Inside a capture it
    is refused: only the eager use (a staging buffer into a trace's input, trace.py) is emulated.
    """
    for tensor in (input_a, input_b):
        if not is_device_tensor(tensor):
            raise EmulatorError(f"copy: {tensor!r} is not a device tensor")
    if input_b._device.capturing:
        raise EmulatorError("copy inside a trace capture is not emulated (the engine copies outside traces)")
    spec_a = (tuple(input_a.shape), input_a.dtype, input_a.layout)
    spec_b = (tuple(input_b.shape), input_b.dtype, input_b.layout)
    if spec_a != spec_b:
        raise EmulatorError(f"copy: {input_a!r} and {input_b!r} differ in shape, dtype or layout")

    def compute() -> list[Tensor]:
        input_b.write(input_a.read().clone(), quantized=True)
        input_b.clobbered_by_replay = False
        return [input_b]

    return _launch("copy", [input_a, input_b], {}, compute)[0]


# attention ----------------------------------------------------------------------------------
def split_query_key_value_and_split_heads(
    input_tensor: Tensor,
    kv_input_tensor: Tensor | None = None,
    *,
    num_heads: int,
    num_kv_heads: int | None = None,
    transpose_key: bool = True,
    memory_config: MemoryConfig | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(B, S, 3*H*D) laid out [q | k | v] -> q, v (B, H, S, D) and k (B, H, D, S) or (B, H, S, D)."""
    _require_tile("split_query_key_value_and_split_heads", input_tensor)
    if kv_input_tensor is not None or num_kv_heads not in (None, num_heads):
        raise EmulatorError(
            "split_query_key_value_and_split_heads: only fused self-attention QKV is emulated"
        )
    batch, seq, width = input_tensor.shape
    if width % (3 * num_heads):
        raise EmulatorError(f"split_query_key_value_and_split_heads: width {width} not 3 x {num_heads} heads")
    head_dim = width // (3 * num_heads)
    if head_dim % 32:
        raise EmulatorError(
            f"split_query_key_value_and_split_heads: head dim {head_dim} is not a tile multiple"
        )

    def compute() -> list[Tensor]:
        qkv = input_tensor.read().reshape(batch, seq, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = (qkv[i].contiguous() for i in range(3))
        if transpose_key:
            k = k.transpose(-1, -2).contiguous()
        return [_new(t, input_tensor, memory_config=memory_config) for t in (q, k, v)]

    params = dict(num_heads=num_heads, transpose_key=transpose_key, memory_config=memory_config)
    q, k, v = _launch("split_query_key_value_and_split_heads", [input_tensor], params, compute)
    return q, k, v


def concatenate_heads(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None) -> Tensor:
    """(B, H, S, D) -> (B, S, H*D)."""
    _require_tile("concatenate_heads", input_tensor)
    batch, heads, seq, head_dim = input_tensor.shape

    def compute() -> list[Tensor]:
        out = input_tensor.read().permute(0, 2, 1, 3).reshape(batch, seq, heads * head_dim)
        return [_new(out, input_tensor, memory_config=memory_config)]

    return _launch("concatenate_heads", [input_tensor], dict(memory_config=memory_config), compute)[0]


def scaled_dot_product_attention(
    input_tensor_q: Tensor,
    input_tensor_k: Tensor,
    input_tensor_v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = True,
    scale: float | None = None,
    memory_config: MemoryConfig | None = None,
    program_config: SDPAProgramConfig | None = None,
    compute_kernel_config: Any = None,
) -> Tensor:
    """softmax(q k^T * scale + mask) v over (B, H, S, D) tensors, with the kernel's rules: operands
    DRAM or L1 interleaved, a mask in DRAM and TILE, mask and causal exclusive, causal only for
    Sq == Sk, chunk sizes tile multiples dividing Sq and Sk."""
    name = "scaled_dot_product_attention"
    _require_tile(name, input_tensor_q, input_tensor_k, input_tensor_v, attn_mask)
    q_shape, k_shape, v_shape = input_tensor_q.shape, input_tensor_k.shape, input_tensor_v.shape
    if len(q_shape) != 4 or k_shape != v_shape or q_shape[:2] != k_shape[:2] or q_shape[3] != k_shape[3]:
        raise EmulatorError(
            f"{name}: shapes q {list(q_shape)}, k {list(k_shape)}, v {list(v_shape)} disagree"
        )
    for label, tensor in (("q", input_tensor_q), ("k", input_tensor_k), ("v", input_tensor_v)):
        config = tensor.memory_config()
        if config is not None and config.is_sharded():
            raise EmulatorError(f"{name}: {label} must be DRAM or L1 interleaved, not sharded")
    if attn_mask is not None:
        config = attn_mask.memory_config()
        if config is not None and (config.buffer_type != BufferType.DRAM or config.is_sharded()):
            raise EmulatorError(f"{name}: the mask must be in DRAM (interleaved)")
        if is_causal:
            raise EmulatorError(f"{name}: is_causal and attn_mask are exclusive (is_causal defaults to True)")
        mask = attn_mask.shape
        fits = len(mask) == 4 and mask[-2:] == (q_shape[2], k_shape[2])
        if not fits or mask[0] not in (1, q_shape[0]) or mask[1] not in (1, q_shape[1]):
            raise EmulatorError(
                f"{name}: mask {list(mask)} does not fit q {list(q_shape)} and k {list(k_shape)}"
            )
    if is_causal and q_shape[2] != k_shape[2]:
        raise EmulatorError(f"{name}: causal attention needs Sq == Sk, got {q_shape[2]} and {k_shape[2]}")
    if program_config is not None:
        device = input_tensor_q._device
        device.check_grid(program_config.compute_with_storage_grid_size, name)
        for label, chunk, seq in (
            ("q", program_config.q_chunk_size, q_shape[2]),
            ("k", program_config.k_chunk_size, k_shape[2]),
        ):
            if chunk % 32 or seq % chunk:
                raise EmulatorError(
                    f"{name}: {label}_chunk_size {chunk} must be a tile multiple dividing S{label} = {seq}"
                )
    scale_value = scale if scale is not None else q_shape[3] ** -0.5
    tensors = [input_tensor_q, input_tensor_k, input_tensor_v] + (
        [attn_mask] if attn_mask is not None else []
    )

    fidelity = fidelity_of(compute_kernel_config, default="HiFi2")
    exp_ = (
        _numerics.approximate_exp_
        if program_config is not None and program_config.exp_approx_mode
        else torch.Tensor.exp_
    )

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: slice) -> torch.Tensor:
        # In place on the scores (the largest tensor here): the same float32 steps as
        # softmax(q k^T * scale + mask) written out, without a temporary per step.
        scores = _numerics.fidelity_product(q, k.transpose(-1, -2), fidelity, torch.matmul).mul_(scale_value)
        if attn_mask is not None:
            scores = scores.add_(attn_mask.read()[:, :, rows])
        if is_causal:
            keep = torch.ones(q_shape[2], k_shape[2], dtype=torch.bool).tril()[rows]
            scores = scores.masked_fill_(~keep, float("-inf"))
        weights = exp_(scores.sub_(scores.amax(dim=-1, keepdim=True)))
        # The kernel keeps the probabilities in bfloat16 between its two matmuls.
        probabilities = weights.div_(weights.sum(dim=-1, keepdim=True)).to(torch.bfloat16).float()
        return _numerics.fidelity_product(probabilities, v, fidelity, torch.matmul)

    def compute() -> list[Tensor]:
        q, k, v = input_tensor_q.read(), input_tensor_k.read(), input_tensor_v.read()
        # Query rows in blocks, as the kernel's q chunks: bounded memory for long sequences.
        block = max(1, _SDPA_SCORE_BUDGET // max(1, q_shape[0] * q_shape[1] * k_shape[2]))
        parts = [
            attend(q[:, :, start : start + block], k, v, slice(start, start + block))
            for start in range(0, q_shape[2], block)
        ]
        return [_new(torch.cat(parts, dim=2), input_tensor_q, memory_config=memory_config)]

    params = dict(
        is_causal=is_causal,
        scale=scale,
        memory_config=memory_config,
        program_config=program_config,
        compute_kernel_config=compute_kernel_config,
        mask=attn_mask is not None,
    )
    return _launch(name, tensors, params, compute)[0]


def rotary_embedding(
    input_tensor: Tensor,
    cos_cache: Tensor,
    sin_cache: Tensor,
    token_index: int | None = None,
    *,
    memory_config: MemoryConfig | None = None,
    compute_kernel_config: Any = None,
) -> Tensor:
    """ttnn.experimental.rotary_embedding (prefill): x * cos + rotate_half(x) * sin, with
    rotate_half(x) = [-x2, x1] over the two halves of the last dimension.

    The rules of tt-metal's RotaryEmbedding (rotary_embedding_device_operation.cpp): every
    operand a TILE device tensor; the padded last dim X a multiple of 64 (the kernel swaps the
    halves a whole tile at a time); cos and sin of one dtype and one padded shape (1, 1, >= S, X),
    the same table rows for every leading index (broadcast over batch and heads); interleaved
    input and output unless sharded (never width-sharded). The output has the input's padded
    shape (a sequence that is not whole tiles comes back padded). Numerics as the kernel's
    circular buffers: x * cos rounded to the cos dtype, rotate_half(x) * sin to the sin dtype,
    their sum to the input dtype; products exact (its compute kernel runs at the default HiFi4).
    Decode mode (token_index) is not emulated.
    """
    name = "rotary_embedding"
    _require_tile(name, input_tensor, cos_cache, sin_cache)
    if token_index is not None:
        raise EmulatorError(f"{name}: token_index (decode mode) is not emulated")
    padded = input_tensor.padded_shape
    width, seq = padded[-1], padded[-2]
    if width % (2 * TILE_SIZE):
        raise EmulatorError(f"{name}: input X dim {width} must be divisible into tiles (a multiple of 64)")
    if cos_cache.dtype != sin_cache.dtype:
        raise EmulatorError(f"{name}: cos and sin dtypes must match ({cos_cache.dtype}, {sin_cache.dtype})")
    table = cos_cache.padded_shape
    if table != sin_cache.padded_shape:
        other = list(sin_cache.padded_shape)
        raise EmulatorError(f"{name}: cos {list(table)} and sin {other} dims must match")
    if len(table) < 3 or table[0] != 1 or table[1] != 1 or table[-1] != width or table[-2] < seq:
        raise EmulatorError(
            f"{name}: cos dims {list(table)} must be (1, 1, >= {seq}, {width}) for input {list(padded)}"
        )
    output = memory_config or input_tensor.memory_config()
    for label, config in (("input", input_tensor.memory_config()), ("output", output)):
        if config is not None and config.memory_layout == TensorMemoryLayout.WIDTH_SHARDED:
            raise EmulatorError(f"{name}: {label} must not be WIDTH_SHARDED")
    source = input_tensor.memory_config()
    if source is not None and source.is_sharded() and source.shard_spec is not None:
        shard_h, shard_w = source.shard_spec.shape
        if shard_w != width or math.prod(padded[:-1]) % shard_h:
            raise EmulatorError(
                f"{name}: input shard {[shard_h, shard_w]} must be {width} wide and divide the rows evenly"
            )

    def compute() -> list[Tensor]:
        x = input_tensor.read()
        rows = x.shape[-2]
        if rows != seq:
            x = F.pad(x, (0, 0, 0, seq - rows))
        cos = cos_cache.read().reshape(-1, width)[:seq]
        sin = sin_cache.read().reshape(-1, width)[:seq]
        first, second = x[..., : width // 2], x[..., width // 2 :]
        turned = torch.cat((-second, first), dim=-1)
        straight = _numerics.quantize(x * cos, cos_cache.dtype)
        rotated = _numerics.quantize(turned * sin, sin_cache.dtype)
        return [_new(straight + rotated, input_tensor, memory_config=memory_config)]

    params = dict(memory_config=memory_config, compute_kernel_config=compute_kernel_config)
    return _launch(name, [input_tensor, cos_cache, sin_cache], params, compute)[0]


# convolution and pooling --------------------------------------------------------------------
def _pair(value: Sequence[int] | int) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    values = tuple(int(v) for v in value)
    if len(values) == 4:  # (top, bottom, left, right)
        if values[0] != values[1] or values[2] != values[3]:
            raise EmulatorError("asymmetric padding is not emulated")
        return values[0], values[2]
    return values[0], values[1]


def _nhwc(tensor: Tensor, batch: int, height: int, width: int, channels: int, name: str) -> torch.Tensor:
    """A conv/pool input given as (1, 1, B*H*W, C) or (B, H, W, C), as NCHW values."""
    if tensor.shape[-1] != channels or tensor.volume() != batch * height * width * channels:
        raise EmulatorError(f"{name}: input {list(tensor.shape)} is not {batch}x{height}x{width}x{channels}")
    return tensor.read().reshape(batch, height, width, channels).permute(0, 3, 1, 2)


def _prepare_conv_weight(weight: Tensor, weights_dtype: DataType, device: Device) -> Tensor:
    """Host (Cout, Cin, kh, kw) weights -> device weights; bfloat8_b blocks run along Cout, as
    in the device's (kh*kw*Cin, Cout) matrix."""
    device.forbid_host_io("conv2d weight preparation (pass the prepared weights back in)")
    values = weight.read()
    as_matrix = values.permute(2, 3, 1, 0)
    rounded = _numerics.quantize(as_matrix, weights_dtype).permute(3, 2, 0, 1).contiguous()
    prepared = Tensor(rounded, weights_dtype, Layout.TILE, device, quantized=True)
    prepared.conv_weight_shape = tuple(values.shape)  # type: ignore[attr-defined]
    return prepared


def conv2d(
    *,
    input_tensor: Tensor,
    weight_tensor: Tensor,
    device: Device,
    in_channels: int,
    out_channels: int,
    batch_size: int,
    input_height: int,
    input_width: int,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    dtype: DataType | None = None,
    bias_tensor: Tensor | None = None,
    conv_config: Conv2dConfig | None = None,
    compute_config: Any = None,
    memory_config: MemoryConfig | None = None,
    slice_config: Any = None,
    return_output_dim: bool = False,
    return_weights_and_bias: bool = False,
) -> Any:
    """Conv over a flattened NHWC input; output (1, 1, B*Ho*Wo, Cout).

    Host weights are prepared (a host write) on first use; pass the prepared ones returned with
    return_weights_and_bias=True on later calls, which a trace capture requires.
    """
    name = "conv2d"
    config = conv_config or Conv2dConfig()
    if groups != 1:
        raise EmulatorError("conv2d: grouped convolution is not emulated")
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    if not is_device_tensor(input_tensor):
        raise EmulatorError("conv2d: the emulator needs the input on the device")
    weight = weight_tensor
    if weight._device is None:
        if tuple(weight.shape) != (out_channels, in_channels, kh, kw):
            raise EmulatorError(
                f"conv2d: weight {list(weight.shape)} is not ({out_channels}, {in_channels}, {kh}, {kw})"
            )
        weight = _prepare_conv_weight(weight, config.weights_dtype or weight.dtype, device)
    bias = bias_tensor
    if bias is not None and bias._device is None:
        if bias.volume() != out_channels:
            raise EmulatorError(f"conv2d: bias {list(bias.shape)} does not hold {out_channels} values")
        device.forbid_host_io("conv2d bias preparation")
        bias = Tensor(bias.read().reshape(1, 1, 1, out_channels), DataType.BFLOAT16, Layout.TILE, device)
    out_h = (input_height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    out_w = (input_width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    tensors = [input_tensor, weight] + ([bias] if bias is not None else [])

    fidelity = fidelity_of(compute_config)

    def compute() -> list[Tensor]:
        x = _nhwc(input_tensor, batch_size, input_height, input_width, in_channels, name)
        y = _numerics.fidelity_product(
            x, weight.read(), fidelity, lambda a, w: F.conv2d(a, w, None, (sh, sw), (ph, pw), (dh, dw))
        )
        if bias is not None:
            y = y + bias.read().reshape(1, out_channels, 1, 1)
        y = y.permute(0, 2, 3, 1).reshape(1, 1, batch_size * out_h * out_w, out_channels)
        return [Tensor(y, dtype or DataType.BFLOAT16, config.output_layout, device, memory_config)]

    params = dict(
        in_channels=in_channels,
        out_channels=out_channels,
        batch_size=batch_size,
        h=input_height,
        w=input_width,
        k=(kh, kw),
        s=(sh, sw),
        p=(ph, pw),
        d=(dh, dw),
        dtype=dtype,
        conv_config=conv_config,
        compute_config=compute_config,
        memory_config=memory_config,
    )
    output = _launch(name, tensors, params, compute)[0]
    result: list[Any] = [output]
    if return_output_dim:
        result.append((out_h, out_w))
    if return_weights_and_bias:
        result.append((weight, bias))
    return output if len(result) == 1 else tuple(result)


def max_pool2d(
    input_tensor: Tensor,
    batch_size: int,
    input_h: int,
    input_w: int,
    channels: int,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool = False,
    *,
    memory_config: MemoryConfig | None = None,
    applied_shard_scheme: TensorMemoryLayout | None = None,
    dtype: DataType = DataType.BFLOAT16,
    output_layout: Layout = Layout.ROW_MAJOR,
) -> Tensor:
    """Max pool over a flattened NHWC input; output (1, 1, B*Ho*Wo, C)."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)

    def compute() -> list[Tensor]:
        x = _nhwc(input_tensor, batch_size, input_h, input_w, channels, "max_pool2d")
        y = F.max_pool2d(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil_mode=ceil_mode)
        out = y.permute(0, 2, 3, 1).reshape(1, 1, -1, channels)
        return [Tensor(out, dtype, output_layout, input_tensor._device, memory_config)]

    params = dict(
        b=batch_size,
        h=input_h,
        w=input_w,
        c=channels,
        k=(kh, kw),
        s=(sh, sw),
        p=(ph, pw),
        d=(dh, dw),
        ceil_mode=ceil_mode,
        memory_config=memory_config,
        dtype=dtype,
        output_layout=output_layout,
    )
    return _launch("max_pool2d", [input_tensor], params, compute)[0]


# pixel decoder: upsample, group norm, relu --------------------------------------------------
def upsample(
    input_tensor: Tensor,
    scale_factor: int | float | Sequence[int] | Sequence[float],
    *,
    mode: str = "nearest",
    memory_config: MemoryConfig | None = None,
    compute_kernel_config: Any = None,
) -> Tensor:
    """Nearest upsampling of an NHWC (N, H, W, C) tensor by integer factors; ROW_MAJOR output
    (bfloat16 for a bfloat8_b input). The device's rules: rank 4, a TILE input only when no tile
    is padded (W and C whole tiles), interleaved (sharded and bilinear paths are not emulated)."""
    name = "upsample"
    scales = (scale_factor, scale_factor) if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
    if len(scales) != 2 or any(s <= 0 for s in scales):
        raise EmulatorError(f"{name}: scale_factor {scale_factor!r} is not one or two positive factors")
    if mode != "nearest":
        raise EmulatorError(f"{name}: only mode='nearest' is emulated, got {mode!r}")
    if any(float(s) != int(s) for s in scales):
        raise EmulatorError(f"{name}: fractional scale factors (the float path) are not emulated")
    if input_tensor.shape.rank != 4:
        raise EmulatorError(f"{name}: input {list(input_tensor.shape)} is not NHWC (rank 4)")
    if input_tensor.layout == Layout.TILE and input_tensor.padded_shape != input_tensor.shape:
        raise EmulatorError(f"{name}: a TILE input must have no padded tile: {list(input_tensor.shape)}")
    for config in (input_tensor.memory_config(), memory_config):
        if config is not None and config.is_sharded():
            raise EmulatorError(f"{name}: sharded upsampling is not emulated")
    sh, sw = (int(s) for s in scales)
    out_dtype = DataType.BFLOAT16 if input_tensor.dtype == DataType.BFLOAT8_B else input_tensor.dtype

    def compute() -> list[Tensor]:
        x = input_tensor.read().repeat_interleave(sh, dim=1).repeat_interleave(sw, dim=2)
        return [_new(x, input_tensor, out_dtype, Layout.ROW_MAJOR, memory_config)]

    params = dict(scales=(sh, sw), mode=mode, memory_config=memory_config, kernel=compute_kernel_config)
    return _launch(name, [input_tensor], params, compute)[0]


def _max_tile_span(width: int, group: int) -> int:
    """Tiles the widest group of `group` channels straddles in a row of `width` channels."""
    return max((start + group - 1) // TILE_SIZE - start // TILE_SIZE + 1 for start in range(0, width, group))


def create_group_norm_input_mask(
    num_channel: int, num_groups: int, num_cores_across_channel: int, data_type: DataType = DataType.BFLOAT16
) -> Tensor:
    """Host (1, G, 32, span*32) TILE 0/1 mask: row block g marks group g's channels inside the
    tiles of the core that holds it (tt-metal's groupnorm_input_mask rule)."""
    per_group = num_channel // num_groups
    width = _max_tile_span(num_channel, per_group) * TILE_SIZE
    starts: list[int] = []
    for _ in range(num_cores_across_channel):
        offset = 0
        starts.append(0)
        for _ in range(num_groups // num_cores_across_channel - 1):
            offset = (offset + per_group % TILE_SIZE) % TILE_SIZE
            starts.append(offset)
    mask = torch.zeros(1, num_groups, TILE_SIZE, width)
    for group, start in enumerate(starts[:num_groups]):
        mask[0, group, :, start : min(start + per_group, width)] = 1.0
    return Tensor(mask, data_type, Layout.TILE)


def group_norm_virtual_columns(grid_x: int, groups: int, channels: int) -> int:
    """Cores across the channels of an interleaved group norm (tt-metal compute_num_virtual_cols)."""
    columns = min(grid_x, groups)
    while columns > 0 and ((channels // columns) % TILE_SIZE or groups % columns):
        columns -= 1
    return columns


def group_norm(
    input_tensor: Tensor,
    *,
    num_groups: int,
    epsilon: float = 1e-12,
    input_mask: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    memory_config: MemoryConfig | None = None,
    dtype: DataType | None = None,
    core_grid: CoreGrid | None = None,
    inplace: bool | None = True,
    output_layout: Layout | None = None,
    num_out_blocks: int | None = None,
    compute_kernel_config: Any = None,
) -> Tensor:
    """GroupNorm over (N, 1, H*W, C) per sample, for an interleaved (DRAM or L1) TILE input; the
    sharded variants are not emulated. The device's rules: bfloat16 (or float32) input, output
    dtype and layout unchanged, inplace off (its default is on), C divisible by the groups;
    weight and bias ROW_MAJOR bfloat16 rows of 32 (ttnn.create_group_norm_weight_bias_rm); the
    input mask TILE (1, G, 32, k*32) for the core count the op splits the channels over. Without
    a mask the op builds one and writes it to the device: a host write, refused in a capture. An
    explicit core_grid must give virtual rows that divide the tile rows (and fit the batch);
    num_out_blocks needs one. Not modelled: the circular buffers' size (the mock p150a checks it)."""
    name = "group_norm"
    _require_tile(name, input_tensor, input_mask)
    shape = input_tensor.shape
    if shape.rank != 4 or shape[1] != 1:
        raise EmulatorError(f"{name}: input {list(shape)} is not (N, 1, H*W, C)")
    channels = shape[3]
    if channels % num_groups:
        raise EmulatorError(f"{name}: {channels} channels do not split into {num_groups} groups")
    if input_tensor.dtype not in (DataType.BFLOAT16, DataType.FLOAT32):
        raise EmulatorError(f"{name}: input must be bfloat16 or float32, got {input_tensor.dtype.name}")
    if dtype not in (None, input_tensor.dtype) or output_layout not in (None, Layout.TILE):
        raise EmulatorError(f"{name}: output dtype and layout must be the input's")
    if inplace is not False:
        raise EmulatorError(f"{name}: inplace (the default) is not supported for TILE: pass inplace=False")
    if input_tensor.memory_config() is not None and input_tensor.memory_config().is_sharded():
        raise EmulatorError(f"{name}: sharded group norm is not emulated")
    device = input_tensor._device
    grid_x = core_grid.x if core_grid is not None else device.grid_xy()[0]
    _check_core_grid(device, core_grid, name)
    columns = group_norm_virtual_columns(grid_x, num_groups, channels)
    if columns == 0:
        raise EmulatorError(f"{name}: no core split of {channels} channels into {num_groups} groups")
    if core_grid is None and num_out_blocks is not None:
        raise EmulatorError(f"{name}: num_out_blocks needs an explicit core_grid")
    if core_grid is not None:
        tile_rows, rows = shape[0] * shape[2] // TILE_SIZE, (core_grid.x // columns) * core_grid.y
        if not rows or tile_rows % rows or not (rows < shape[0] or rows % shape[0] == 0):
            raise EmulatorError(
                f"{name}: core_grid {core_grid.x}x{core_grid.y} gives {rows} virtual rows, which must divide "
                f"the {tile_rows} tile rows and be fewer than the {shape[0]} samples or a multiple of them"
            )
        block = tile_rows // shape[0] if shape[0] >= rows else tile_rows // rows
        if num_out_blocks is not None and not (num_out_blocks == -1 or 1 <= num_out_blocks <= block):
            raise EmulatorError(f"{name}: num_out_blocks {num_out_blocks} is not -1 or in [1, {block}]")
    chunk = channels // columns
    for label, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        rows = param.layout == Layout.ROW_MAJOR and param.shape[-1] == TILE_SIZE
        if not rows or param.dtype != DataType.BFLOAT16:
            raise EmulatorError(f"{name}: {label} must be ROW_MAJOR bfloat16 rows of 32, got {param!r}")
        if param.volume() != columns * chunk:
            raise EmulatorError(f"{name}: {label} {list(param.shape)} does not hold {channels} values")
    if input_mask is None:
        device.forbid_host_io("group_norm without input_mask (the op uploads its own)")
    else:
        want = create_group_norm_input_mask(channels, num_groups, columns)
        if input_mask.shape != want.shape or not torch.equal(input_mask.read(), want.read()):
            raise EmulatorError(
                f"{name}: input_mask {list(input_mask.shape)} is not the mask for {columns} core(s) "
                f"across {channels} channels in {num_groups} groups"
            )
    tensors = [t for t in (input_tensor, input_mask, weight, bias) if t is not None]

    def compute() -> list[Tensor]:
        x = input_tensor.read()
        samples = x.reshape(shape[0], shape[2], channels).transpose(1, 2)
        w = weight.read().reshape(-1) if weight is not None else None
        b = bias.read().reshape(-1) if bias is not None else None
        y = F.group_norm(samples, num_groups, w, b, epsilon).transpose(1, 2).reshape(shape)
        return [_new(y, input_tensor, memory_config=memory_config or input_tensor.memory_config())]

    params = dict(
        num_groups=num_groups,
        epsilon=epsilon,
        memory_config=memory_config,
        core_grid=core_grid,
        num_out_blocks=num_out_blocks,
        compute_kernel_config=compute_kernel_config,
        mask=input_mask is not None,
        weight=weight is not None,
        bias=bias is not None,
    )
    return _launch(name, tensors, params, compute)[0]


def relu(input_tensor: Tensor, *, memory_config: MemoryConfig | None = None) -> Tensor:
    def compute() -> list[Tensor]:
        return [_new(F.relu(input_tensor.read()), input_tensor, memory_config=memory_config)]

    return _launch("relu", [input_tensor], dict(memory_config=memory_config), compute)[0]


# selection: topk, comparisons ------------------------------------------------------
def topk(
    input_tensor: Tensor,
    k: int = 32,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,
    *,
    memory_config: MemoryConfig | None = None,
) -> list[Tensor]:
    """[values, indices] of the k largest (or smallest) along `dim`, TILE; indices UINT16 (UINT32
    for a float32 input or a dimension over 65535). The device's rules: a TILE input (it fills the
    tile padding first) in bfloat16, bfloat8_b or float32, 1 <= k <= the dimension, interleaved
    output. Ties: the device's bitonic sort and torch may order equal values differently."""
    name = "topk"
    _require_tile(name, input_tensor)
    shape = input_tensor.shape
    if not -shape.rank <= dim < shape.rank:
        raise EmulatorError(f"{name}: dim {dim} out of range for {list(shape)}")
    if input_tensor.dtype not in (DataType.BFLOAT16, DataType.BFLOAT8_B, DataType.FLOAT32):
        raise EmulatorError(f"{name}: input must be bfloat16, bfloat8_b or float32")
    if not 1 <= k <= shape[dim]:
        raise EmulatorError(f"{name}: k {k} must be in [1, {shape[dim]}]")
    if memory_config is not None and memory_config.is_sharded():
        raise EmulatorError(f"{name}: sharded outputs are not supported")
    wide = input_tensor.dtype == DataType.FLOAT32 or input_tensor.padded_shape[dim] > 65535
    index_dtype = DataType.UINT32 if wide else DataType.UINT16

    def compute() -> list[Tensor]:
        values, indices = torch.topk(input_tensor.read(), k, dim=dim, largest=largest, sorted=sorted)
        return [
            _new(values, input_tensor, memory_config=memory_config),
            _new(indices, input_tensor, index_dtype, memory_config=memory_config),
        ]

    params = dict(k=k, dim=dim, largest=largest, sorted=sorted, memory_config=memory_config)
    return _launch(name, [input_tensor], params, compute)


def _compare(name: str, fn: Callable, a: Any, b: Any, dtype: DataType | None, memory_config: Any) -> Tensor:
    """1.0 where fn(a, b) holds, else 0.0. The device pairs integer with integer operands only."""
    if (
        isinstance(a, Tensor)
        and isinstance(b, Tensor)
        and (a.dtype in _numerics.INTEGER_RANGES) != (b.dtype in _numerics.INTEGER_RANGES)
    ):
        raise EmulatorError(f"{name}: {a.dtype.name} and {b.dtype.name} operands are not a supported pair")
    return _binary(name, lambda x, y: fn(x, y).float(), a, b, dtype, memory_config)


def eq(
    input_tensor_a: Any,
    input_tensor_b: Any,
    *,
    dtype: DataType | None = None,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    return _compare("eq", torch.eq, input_tensor_a, input_tensor_b, dtype, memory_config)


def gt(
    input_tensor_a: Tensor,
    input_tensor_b: Any,
    *,
    dtype: DataType | None = None,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    if not isinstance(input_tensor_a, Tensor):
        raise EmulatorError("gt: the first operand must be a tensor")
    return _compare("gt", torch.gt, input_tensor_a, input_tensor_b, dtype, memory_config)


# the warm-up fallbacks' ops: mean, rsqrt (composite GroupNorm); pad, slice, concat (conv taps) ----
def mean(
    input_tensor: Tensor,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    memory_config: MemoryConfig | None = None,
    compute_kernel_config: Any = None,
) -> Tensor:
    """The mean over `dim` of a TILE tensor (float32 accumulation, the result rounded to the
    input's dtype); the device's reduce kernels are not modelled beyond that."""
    name = "mean"
    _require_tile(name, input_tensor)
    dims = (
        tuple(range(input_tensor.shape.rank))
        if dim is None
        else (dim,)
        if isinstance(dim, int)
        else tuple(dim)
    )

    def compute() -> list[Tensor]:
        values = input_tensor.read().float().mean(dim=dims, keepdim=keepdim)
        return [_new(values, input_tensor, memory_config=memory_config)]

    params = dict(dim=dims, keepdim=keepdim, memory_config=memory_config, kernel=compute_kernel_config)
    return _launch(name, [input_tensor], params, compute)[0]


def rsqrt(
    input_tensor: Tensor,
    *,
    fast_and_approximate_mode: bool = False,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """1 / sqrt(x); the SFPU's approximation is not modelled."""
    params = dict(fast_and_approximate_mode=fast_and_approximate_mode, memory_config=memory_config)
    return _unary("rsqrt", torch.rsqrt, input_tensor, params)


def pad(
    input_tensor: Tensor,
    padding: Sequence[tuple[int, int]],
    value: float,
    *,
    use_multicore: bool = True,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """`value` added before and after each dimension. The device's rule kept: a TILE tensor takes no
    front padding (ROW_MAJOR does)."""
    name = "pad"
    pairs = [(int(before), int(after)) for before, after in padding]
    if len(pairs) != input_tensor.shape.rank or min(min(p) for p in pairs) < 0:
        raise EmulatorError(f"{name}: padding {pairs} does not fit a rank-{input_tensor.shape.rank} tensor")
    if input_tensor.layout == Layout.TILE and any(before for before, _ in pairs):
        raise EmulatorError(f"{name}: a TILE tensor takes no front padding on the device")

    def make() -> Tensor:
        flat = [amount for before, after in reversed(pairs) for amount in (before, after)]
        return _new(F.pad(input_tensor.read(), flat, value=value), input_tensor, memory_config=memory_config)

    params = dict(padding=tuple(pairs), value=value, memory_config=memory_config)
    return _host_or_device(name, input_tensor, params, make)


def slice_(
    input_tensor: Tensor,
    slice_start: Sequence[int],
    slice_end: Sequence[int],
    slice_step: Sequence[int] | None = None,
    *,
    memory_config: MemoryConfig | None = None,
) -> Tensor:
    """ttnn.slice (exported under that name): input[start:end] per dimension (steps of 1), a copy;
    the bounds rules of ttnn.slice."""
    name = "slice"
    shape = list(input_tensor.shape)
    starts, ends = [int(v) for v in slice_start], [int(v) for v in slice_end]
    if slice_step is not None and any(int(step) != 1 for step in slice_step):
        raise EmulatorError(f"{name}: strided slices are not emulated")
    if not len(starts) == len(ends) == len(shape) or any(
        not (0 <= s < e <= n) for s, e, n in zip(starts, ends, shape, strict=True)
    ):
        raise EmulatorError(f"{name}: [{starts}, {ends}) is not inside {shape}")

    def make() -> Tensor:
        index = tuple(slice(s, e) for s, e in zip(starts, ends, strict=True))
        return _new(input_tensor.read()[index].clone(), input_tensor, memory_config=memory_config)

    params = dict(starts=tuple(starts), ends=tuple(ends), memory_config=memory_config)
    return _host_or_device(name, input_tensor, params, make)


def concat(tensors: Sequence[Tensor], dim: int = 0, *, memory_config: MemoryConfig | None = None) -> Tensor:
    """The tensors joined along `dim`: same rank, dtype and layout, equal other dimensions."""
    name = "concat"
    tensors = list(tensors)
    if not tensors:
        raise EmulatorError(f"{name}: no tensors")
    first = tensors[0]
    rank = first.shape.rank
    axis = dim % rank
    for tensor in tensors[1:]:
        same = [n for i, n in enumerate(tensor.shape) if i != axis] == [
            n for i, n in enumerate(first.shape) if i != axis
        ]
        if tensor.shape.rank != rank or not same:
            raise EmulatorError(
                f"{name}: {list(tensor.shape)} does not join {list(first.shape)} on dim {dim}"
            )
        if tensor.dtype != first.dtype or tensor.layout != first.layout:
            raise EmulatorError(f"{name}: inputs differ in dtype or layout")

    def compute() -> list[Tensor]:
        values = torch.cat([tensor.read() for tensor in tensors], dim=axis)
        return [_new(values, first, memory_config=memory_config)]

    return _launch(name, tensors, dict(dim=axis, memory_config=memory_config), compute)[0]
