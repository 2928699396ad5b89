# ruff: noqa: F401 - this module re-exports the emulated ttnn surface
"""A torch-backed emulation of the TT-NN surface tt_sam3_ros uses, for testing Blackhole code off-chip.

Inject it where the engine expects `ttnn` (``TtnnEngine(..., ttnn_module=ttnn_emulator)``).
It follows ttnn 0.81.1's names and keywords (tools/ttnn_conformance.py checks the engine's
calls against the real wheel) and enforces the runtime's rules: dtypes with their real
rounding (bfloat8_b bit-exact with the wheel's host packing), TILE vs ROW_MAJOR, host vs
device placement, deallocation, one owner per chip, and metal trace capture/replay rules.
What it cannot show (speed, circular-buffer fits, kernel bugs, the exact SFPU functions) needs a
p150a or, for what the real library validates on the host, the real ttnn on a mock p150a.
"""

from __future__ import annotations

from types import SimpleNamespace

from ._numerics import quantize, quantize_bfloat8_b
from ._ops import (
    add,
    clamp,
    clone,
    concat,
    concatenate_heads,
    conv2d,
    copy,
    create_group_norm_input_mask,
    eq,
    gelu,
    group_norm,
    gt,
    layer_norm,
    linear,
    log1p,
    matmul,
    max_pool2d,
    mean,
    mul,
    pad,
    permute,
    relu,
    repeat,
    reshape,
    rotary_embedding,
    rsqrt,
    scaled_dot_product_attention,
    sigmoid,
    sin,
    softmax,
    split_query_key_value_and_split_heads,
    to_layout,
    to_memory_config,
    topk,
    typecast,
    upsample,
)
from ._ops import slice_ as slice
from ._runtime import (
    _OPEN_DEVICES,
    _OPENED_ALONE,
    _PROCESS,
    L1_BANK_BYTES,
    SETTINGS,
    CloseDevices,
    CreateDevices,
    Device,
    EmulatorError,
    EmulatorSettings,
    GetNumAvailableDevices,
    MeshEvent,
    OpRecord,
    Tensor,
    TensorRecord,
    acknowledge_corruptible,
    allocate_tensor_on_device,
    as_tensor,
    begin_trace_capture,
    close_device,
    close_mesh_device,
    copy_host_to_device_tensor,
    corruptible_allocation_scope,
    deallocate,
    end_trace_capture,
    event_synchronize,
    execute_trace,
    from_device,
    from_torch,
    get_num_devices,
    mark_corruptible,
    open_device,
    open_mesh_device,
    record_event,
    release_trace,
    synchronize_device,
    to_device,
    to_torch,
    wait_for_event,
)
from ._types import (
    DRAM_MEMORY_CONFIG,
    L1_MEMORY_CONFIG,
    Arch,
    BufferType,
    Conv2dConfig,
    CoreCoord,
    CoreGrid,
    CoreRange,
    CoreRangeSet,
    DataType,
    DispatchCoreAxis,
    DispatchCoreConfig,
    DispatchCoreType,
    Layout,
    MathFidelity,
    MatmulMultiCoreReuseMultiCastProgramConfig,
    MemoryConfig,
    MeshShape,
    MeshTraceId,
    SDPAProgramConfig,
    Shape,
    ShardOrientation,
    ShardSpec,
    TensorMemoryLayout,
    UnaryOpType,
    UnaryWithParam,
    WormholeComputeKernelConfig,
)

#: Marks this module as the emulator (the engine reports it in describe()).
IS_EMULATOR = True
__version__ = "0.81.1-emulated"

bfloat16 = DataType.BFLOAT16
float32 = DataType.FLOAT32
bfloat8_b = DataType.BFLOAT8_B
uint8 = DataType.UINT8
uint16 = DataType.UINT16
uint32 = DataType.UINT32
int32 = DataType.INT32
TILE_LAYOUT = Layout.TILE
ROW_MAJOR_LAYOUT = Layout.ROW_MAJOR
MeshDevice = Device

transformer = SimpleNamespace(
    scaled_dot_product_attention=scaled_dot_product_attention,
    split_query_key_value_and_split_heads=split_query_key_value_and_split_heads,
    concatenate_heads=concatenate_heads,
    SDPAProgramConfig=SDPAProgramConfig,
)
experimental = SimpleNamespace(rotary_embedding=rotary_embedding)
#: ttnn 0.81.1's trace allocation tracker (TT_METAL_TRACE_ALLOC_TRACKING=1).
tools = SimpleNamespace(
    trace_allocation_tracker=SimpleNamespace(
        acknowledge_corruptible=acknowledge_corruptible,
        corruptible_allocation_scope=corruptible_allocation_scope,
    )
)


def reset() -> None:
    """Close every emulated device and restore default settings (test isolation)."""
    for device in list(_OPEN_DEVICES.values()):
        device._traces.clear()
        device._capture = None
        if device._open:  # closing one chip opened alone closes those opened before it
            close_device(device)
    _OPENED_ALONE.clear()
    _PROCESS["broken"] = ""
    SETTINGS.__dict__.update(EmulatorSettings().__dict__)


#: Only under ttnn.transformer, ttnn.experimental or ttnn.tools.trace_allocation_tracker in the
#: real module.
_TRANSFORMER_ONLY = {
    "scaled_dot_product_attention",
    "split_query_key_value_and_split_heads",
    "concatenate_heads",
    "rotary_embedding",
    "acknowledge_corruptible",
    "corruptible_allocation_scope",
}
__all__ = [name for name in dir() if not name.startswith("_") and name not in _TRANSFORMER_ONLY]
