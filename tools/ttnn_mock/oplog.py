"""Record the image path's ttnn calls as it runs: op, tensor shapes, dtypes, fidelity, stage.

Standard library only, so it wraps either ttnn module: the real one on a mock p150a
(image_path.py, CPython 3.12) or the emulator (the op-count test, 3.11). ``Recorder(ttnn)``
behaves as the module it wraps; every device operation called through it (any function that
is not in RUNTIME: opening, moving data, traces) is logged as an ``OpRecord`` before its
result is returned. Nothing about the engine is written down here: the ops are whatever the
engine's code calls.

The stage of each op is read from the call stack, by the engine's own function and file names
(StageTracker's tables): inside ``vit_layer`` -> "vit_block" (with the block's running number and
its ``windowed`` argument), ``fusion_encoder_layer`` -> "fusion_encoder" and ``decoder_layer`` ->
"decoder" (with theirs), inside ``vit_embeddings`` or ``rope_in_l1`` (the RoPE tables' copy to L1
before the blocks) -> "patch_embed"; by file in ttnn_model/:
neck.py -> "neck", geometry_encoder.py -> "geometry_encoder", decoder.py (outside its layers) ->
"decoder", scoring.py -> "scoring", selection.py -> "selection", segmentation_head.py ->
"segmentation_head"; else "other". A renamed function shows as ops in "other", which the op-count
tests catch.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

#: ttnn functions that open, move, place or trace, and are not device ops of the image path.
RUNTIME = frozenset(
    {
        "open_device",
        "open_mesh_device",
        "close_device",
        "close_mesh_device",
        "CreateDevices",
        "CloseDevices",
        "synchronize_device",
        "deallocate",
        "from_torch",
        "to_torch",
        "as_tensor",
        "from_device",
        "to_device",
        "allocate_tensor_on_device",
        "copy_host_to_device_tensor",
        "copy_device_to_host_tensor",
        "begin_trace_capture",
        "end_trace_capture",
        "execute_trace",
        "release_trace",
        "GetNumAvailableDevices",
        "get_num_devices",
        "record_event",
        "wait_for_event",
    }
)
#: Namespaces of ops the engine reaches through an attribute (ttnn.transformer.x).
NAMESPACES = ("transformer", "experimental")


@dataclass
class TensorInfo:
    shape: list[int]
    dtype: str
    layout: str
    memory: str  # "DRAM", "L1" or "host"


@dataclass
class OpRecord:
    """One device op: what was called, on what, and where in the image path."""

    op: str
    stage: str
    block: int | None
    windowed: bool | None
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    fidelity: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpRecord:
        fields = dict(data)
        fields["inputs"] = [TensorInfo(**t) for t in data["inputs"]]
        fields["outputs"] = [TensorInfo(**t) for t in data["outputs"]]
        return cls(**fields)


def _name(value: Any) -> str:
    """'BFLOAT16' from DataType.BFLOAT16 (emulator enums and nanobind enums alike)."""
    text = getattr(value, "name", None) or str(value)
    return text.rsplit(".", 1)[-1].upper()


def _is_tensor(value: Any) -> bool:
    return (
        hasattr(value, "shape")
        and (hasattr(value, "get_dtype") or hasattr(value, "dtype"))
        and hasattr(value, "memory_config")
    )


def tensor_info(tensor: Any) -> TensorInfo:
    dtype = tensor.get_dtype() if hasattr(tensor, "get_dtype") else tensor.dtype
    layout = tensor.get_layout() if hasattr(tensor, "get_layout") else tensor.layout
    on_device = tensor.device() is not None if callable(getattr(tensor, "device", None)) else False
    memory = "host"
    if on_device:
        config = tensor.memory_config()
        memory = _name(config.buffer_type) if config is not None else "DRAM"
    return TensorInfo([int(d) for d in tensor.shape], _name(dtype), _name(layout), memory)


def _tensors(value: Any) -> list[Any]:
    if _is_tensor(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _scalar(value: Any) -> Any:
    """JSON-safe form of a plain argument, or None when it is not a plain value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float)) for v in value):
        return list(value)
    return None


def _options(args: tuple, kwargs: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Fidelity and the plain options of one call (program-config fields included)."""
    options: dict[str, Any] = {}
    fidelity = None
    positional = [_scalar(a) for a in args if not _tensors(a)]
    if any(p is not None for p in positional):
        options["args"] = positional
    for key, value in kwargs.items():
        if _tensors(value):
            continue
        plain = _scalar(value)
        if plain is not None:
            options[key] = plain
        elif hasattr(value, "math_fidelity"):
            fidelity = _name(value.math_fidelity)
            options[key + ".math_approx_mode"] = bool(getattr(value, "math_approx_mode", False))
            options[key + ".fp32_dest_acc_en"] = bool(getattr(value, "fp32_dest_acc_en", False))
        elif key == "program_config":
            options[key] = value is not None
            for attr in ("q_chunk_size", "k_chunk_size", "exp_approx_mode"):
                if hasattr(value, attr):
                    options[attr] = _scalar(getattr(value, attr))
        elif key == "conv_config" and hasattr(value, "weights_dtype"):
            options["weights_dtype"] = _name(value.weights_dtype)
    return fidelity, options


#: Functions whose every call is one block of a stage: (stage, running block number). They
#: decide the stage even when an inner frame matches a file below (a decoder layer's MLP is
#: fusion_encoder.mlp).
BLOCK_FUNCTIONS = {
    "vit_layer": "vit_block",
    "fusion_encoder_layer": "fusion_encoder",
    "decoder_layer": "decoder",
}
#: Functions and files that name a stage without blocks, matched from the innermost frame out.
STAGE_FUNCTIONS = {"vit_embeddings": "patch_embed", "rope_in_l1": "patch_embed"}
STAGE_FILES = {
    "neck.py": "neck",
    "geometry_encoder.py": "geometry_encoder",
    "decoder.py": "decoder",
    "scoring.py": "scoring",
    "segmentation_head.py": "segmentation_head",
    "selection.py": "selection",
}


class StageTracker:
    """Which stage of the image or prompt path the current call comes from, read off the call
    stack: a block function anywhere on it wins, else the innermost function or file named above."""

    def __init__(self) -> None:
        self._block_frames: dict[str, types.FrameType] = {}
        self._blocks: dict[str, int] = {}
        #: The op being run (name, stage, block): what failed when a call raises.
        self.pending: tuple[str, str, int | None] | None = None

    def stage(self) -> tuple[str, int | None, bool | None]:
        frame = sys._getframe(2)
        named: str | None = None
        while frame is not None:
            code = frame.f_code
            path = code.co_filename.replace("\\", "/")
            if "ttnn_model/" in path:
                stage = BLOCK_FUNCTIONS.get(code.co_name)
                if stage is not None:
                    if frame is not self._block_frames.get(stage):
                        self._block_frames[stage] = frame
                        self._blocks[stage] = self._blocks.get(stage, -1) + 1
                    windowed = bool(frame.f_locals.get("windowed")) if stage == "vit_block" else None
                    return stage, self._blocks[stage], windowed
                if named is None:
                    named = STAGE_FUNCTIONS.get(code.co_name) or STAGE_FILES.get(path.rsplit("/", 1)[-1])
            frame = frame.f_back
        return named or "other", None, None


class Recorder:
    """The wrapped ttnn module, logging every device op into ``self.log``.

    Args:
        ttnn: the module to wrap (real or emulated).
        overrides: name -> function used instead of the module's (the mock runner's stand-ins
            for calls the mock cannot make); overridden calls are not logged as ops.
        before_op: called with (op name, stage, block) before each op runs (the mock runner
            starts a new graph capture at each stage or op boundary there).
    """

    def __init__(
        self,
        ttnn: Any,
        overrides: dict[str, Callable[..., Any]] | None = None,
        before_op: Callable[[str, str, int | None], None] | None = None,
        _log: list[OpRecord] | None = None,
        _tracker: StageTracker | None = None,
        _prefix: str = "",
    ) -> None:
        self._ttnn = ttnn
        self._overrides = overrides or {}
        self._before_op = before_op
        self.log: list[OpRecord] = [] if _log is None else _log
        self._tracker = _tracker or StageTracker()
        self._prefix = _prefix

    @property
    def pending(self) -> tuple[str, str, int | None] | None:
        """The op that was running when a call raised; None when the last one returned."""
        return self._tracker.pending

    def __getattr__(self, name: str) -> Any:
        full = self._prefix + name
        if full in self._overrides:
            return self._overrides[full]
        value = getattr(self._ttnn, name)
        if name in NAMESPACES and not callable(value):
            return Recorder(
                value, self._overrides, self._before_op, self.log, self._tracker, _prefix=full + "."
            )
        if isinstance(value, type) or not callable(value) or name.startswith("_") or name in RUNTIME:
            return value
        return self._wrap(full, value)

    def _wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            stage, block, windowed = self._tracker.stage()
            if self._before_op is not None:
                self._before_op(name, stage, block)
            inputs = [tensor_info(t) for t in _tensors(list(args) + list(kwargs.values()))]
            fidelity, options = _options(args, kwargs)
            self._tracker.pending = (name, stage, block)
            result = function(*args, **kwargs)
            self._tracker.pending = None
            outputs = [tensor_info(t) for t in _tensors(result)]
            self.log.append(OpRecord(name, stage, block, windowed, inputs, outputs, fidelity, options))
            return result

        return call
