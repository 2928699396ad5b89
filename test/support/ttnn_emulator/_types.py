"""Plain value types of the emulated TT-NN surface: dtypes, layouts, memory and program configs.

Each mirrors the ttnn 0.81.1 type of the same name closely enough for the engine's calls
(same constructor keywords, same attribute names); validation that the device would do at
op time lives in the ops, not here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

#: Tensix columns x rows on the Blackhole die (140 cores); firmware harvests some columns.
DIE_GRID = (14, 10)
#: Tile side; TILE tensors pad their last two dims to multiples of it.
TILE_SIZE = 32


class DataType(enum.Enum):
    """Element types the project uses (ttnn's values); BFLOAT8_B is block float (16 values share
    one exponent); UINT8 holds the camera's pixels, uploaded as they are; UINT16 is ttnn.topk's indices."""

    BFLOAT16 = 0
    FLOAT32 = 1
    UINT32 = 2
    BFLOAT8_B = 3
    UINT8 = 5
    UINT16 = 6
    INT32 = 7


class Layout(enum.Enum):
    ROW_MAJOR = 0
    TILE = 1


class BufferType(enum.Enum):
    DRAM = 0
    L1 = 1


class TensorMemoryLayout(enum.Enum):
    INTERLEAVED = 0
    HEIGHT_SHARDED = 2
    WIDTH_SHARDED = 3
    BLOCK_SHARDED = 4


class ShardOrientation(enum.Enum):
    ROW_MAJOR = 0
    COL_MAJOR = 1


class MathFidelity(enum.Enum):
    LoFi = 0
    HiFi2 = 2
    HiFi3 = 3
    HiFi4 = 4


class DispatchCoreType(enum.Enum):
    WORKER = 0
    ETH = 1


class DispatchCoreAxis(enum.Enum):
    ROW = 0
    COL = 1


class Arch(enum.Enum):
    WORMHOLE_B0 = 2
    BLACKHOLE = 3


@dataclass(frozen=True)
class CoreCoord:
    x: int
    y: int


@dataclass(frozen=True)
class CoreRange:
    start: CoreCoord
    end: CoreCoord

    def grid_size(self) -> CoreCoord:
        return CoreCoord(self.end.x - self.start.x + 1, self.end.y - self.start.y + 1)


class CoreRangeSet:
    """Core ranges as a frozen set: hashable and comparable however it was built (set or list),
    as the real one is."""

    def __init__(self, core_ranges: Any = ()) -> None:
        if isinstance(core_ranges, CoreRange):
            core_ranges = [core_ranges]
        ranges = frozenset(core_ranges)
        if not all(isinstance(r, CoreRange) for r in ranges):
            raise TypeError("CoreRangeSet takes CoreRange values")
        self._ranges = ranges

    @property
    def ranges(self) -> frozenset[CoreRange]:
        return self._ranges

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CoreRangeSet) and other._ranges == self._ranges

    def __hash__(self) -> int:
        return hash(self._ranges)

    def __repr__(self) -> str:
        return f"CoreRangeSet({sorted(self._ranges, key=repr)})"

    def num_cores(self) -> int:
        return sum(r.grid_size().x * r.grid_size().y for r in self.ranges)

    def bounding_box(self) -> CoreRange:
        xs = [c for r in self.ranges for c in (r.start.x, r.end.x)]
        ys = [c for r in self.ranges for c in (r.start.y, r.end.y)]
        return CoreRange(CoreCoord(min(xs), min(ys)), CoreCoord(max(xs), max(ys)))


@dataclass(frozen=True)
class CoreGrid:
    y: int
    x: int

    @property
    def num_cores(self) -> int:
        return self.x * self.y


@dataclass(frozen=True)
class ShardSpec:
    grid: CoreRangeSet
    shape: tuple[int, int] | list[int]
    orientation: ShardOrientation = ShardOrientation.ROW_MAJOR

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))


@dataclass(frozen=True)
class MemoryConfig:
    memory_layout: TensorMemoryLayout = TensorMemoryLayout.INTERLEAVED
    buffer_type: BufferType = BufferType.DRAM
    shard_spec: ShardSpec | None = None

    def is_sharded(self) -> bool:
        return self.memory_layout != TensorMemoryLayout.INTERLEAVED


DRAM_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.INTERLEAVED, BufferType.DRAM)
L1_MEMORY_CONFIG = MemoryConfig(TensorMemoryLayout.INTERLEAVED, BufferType.L1)


@dataclass(frozen=True)
class DispatchCoreConfig:
    type: DispatchCoreType | None = None
    axis: DispatchCoreAxis | None = None
    fabric_tensix_config: Any = None


@dataclass(frozen=True, kw_only=True)
class WormholeComputeKernelConfig:
    """Compute kernel knobs. math_fidelity selects the operand bits a matmul keeps (_numerics)."""

    math_fidelity: MathFidelity = MathFidelity.LoFi
    math_approx_mode: bool = True
    fp32_dest_acc_en: bool = False
    packer_l1_acc: bool = False
    dst_full_sync_en: bool = False


@dataclass(frozen=True, kw_only=True)
class SDPAProgramConfig:
    compute_with_storage_grid_size: CoreCoord | tuple[int, int]
    q_chunk_size: int
    k_chunk_size: int
    exp_approx_mode: bool | None = None


class UnaryOpType(enum.Enum):
    """The unary ops a matmul program config can fuse (ttnn.UnaryOpType's names)."""

    GELU = "gelu"
    RELU = "relu"


@dataclass(frozen=True, init=False)
class UnaryWithParam:
    """A fused activation: ttnn.UnaryWithParam(op) or (op, param); GELU's param 1.0 asks for the
    approximate GELU (the one the emulator computes for every fused gelu). Equal by value, so a
    program config rebuilt for the same call is the same compiled program."""

    op_type: UnaryOpType
    params: tuple[float, ...]

    def __init__(self, op_type: UnaryOpType, *params: float) -> None:
        object.__setattr__(self, "op_type", op_type)
        object.__setattr__(self, "params", tuple(float(p) for p in params))


@dataclass(frozen=True, kw_only=True)
class MatmulMultiCoreReuseMultiCastProgramConfig:
    """The 2-D multicast matmul program: the output split into per_core_M x per_core_N tile blocks
    over the grid's rows and columns (transposed with transpose_mcast), K walked in_block_w tiles
    at a time, each core's block computed out_block_h x out_block_w at a time in
    out_subblock_h x out_subblock_w pieces of the destination register; bias and
    fused_activation fused into the same program."""

    compute_with_storage_grid_size: CoreCoord | tuple[int, int]
    in0_block_w: int
    out_subblock_h: int
    out_subblock_w: int
    per_core_M: int  # noqa: N815 - ttnn's keyword
    per_core_N: int  # noqa: N815 - ttnn's keyword
    transpose_mcast: bool
    out_block_h: int | None = None
    out_block_w: int | None = None
    fused_activation: UnaryWithParam | None = None
    fuse_batch: bool = True


@dataclass(frozen=True, kw_only=True)
class Conv2dConfig:
    weights_dtype: DataType | None = None
    activation: Any = None
    deallocate_activation: bool = False
    reallocate_halo_output: bool = True
    shard_layout: TensorMemoryLayout | None = None
    output_layout: Layout = Layout.TILE
    enable_act_double_buffer: bool = False
    enable_weights_double_buffer: bool = False


class Shape(tuple):
    """A tensor shape: a tuple of ints that also prints like ttnn's."""

    def __new__(cls, dims: Any = ()) -> Shape:
        return super().__new__(cls, (int(d) for d in dims))

    @property
    def rank(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return f"Shape({list(self)})"


@dataclass(frozen=True)
class MeshShape:
    rows: int = 1
    cols: int = 1

    def __iter__(self):
        return iter((self.rows, self.cols))


@dataclass
class MeshTraceId:
    value: int
    extra: dict[str, Any] = field(default_factory=dict)


def grid_xy(grid: CoreCoord | tuple[int, int]) -> tuple[int, int]:
    """(x, y) of a grid given as CoreCoord or tuple."""
    if isinstance(grid, CoreCoord):
        return grid.x, grid.y
    return int(grid[0]), int(grid[1])
