"""A tracker trace priced: SAM 3's memory tracker per object and frame, as a chip port would run it.

SAM 3's tracker has no chip port yet (``tracker: sam3`` runs it in PyTorch on the host), so there
is no op log of it to price. This module makes one from transformers' own modules at SAM 3's full
size (``Sam3VideoConfig()``): it runs memory attention, the tracker's mask decoder, the memory
encoder and the object-pointer projection once on meta tensors (no memory, no arithmetic) and
records every torch call they make as the ttnn op a direct port would issue, in the op-log format
of tools/ttnn_mock/oplog.py, which benchmarks/blackhole/trace_cost.py (roofline) and
benchmarks/blackhole/calibrated_cost.py (calibrated model) price:

- ``F.linear`` -> ``linear``; ``matmul``/``bmm``/``@`` -> ``matmul``; ``conv2d`` and
  ``conv_transpose2d`` -> ``conv2d`` (per-group input channels; a transposed convolution at its
  input's size, which gives its FLOPs); ``scaled_dot_product_attention`` -> the fused attention,
  chunks of 256 queries and 256 keys;
- copies of layout (``permute``, ``transpose``, ``contiguous``, ``reshape``, ``cat``) -> ttnn's
  data-movement op of that name; every other call that computes a tensor (adds, norms,
  activations, softmax) -> an elementwise op, priced by its DRAM traffic and SFPU time; views
  and shape queries -> nothing;
- every tensor bfloat16, TILE layout, in DRAM (no L1 sharding: the plain port, not a tuned one);
  matrix ops at HiFi2.

Its matrix FLOPs are checked against torch's own FLOP counter on the same calls. What it prices is
the per-object work of a tracked frame with a full memory (7 memory frames: the conditioning
frame and the 6 latest, 16 object pointers): a prediction, as good as the calibrated model's
validation, of a port that does not exist.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: torch functions that only describe or view a tensor: no op on a chip.
VIEWS = frozenset(
    {
        "view",
        "view_as",
        "unsqueeze",
        "squeeze",
        "flatten",
        "unflatten",
        "expand",
        "expand_as",
        "__getitem__",
        "size",
        "dim",
        "numel",
        "shape",
        "dtype",
        "device",
        "to",
        "float",
        "type_as",
        "__get__",
        "__len__",
        "__bool__",
        "is_floating_point",
        "requires_grad_",
        "detach",
        "chunk",
        "split",
        "unbind",
        "narrow",
        "select",
        "stride",
        "is_contiguous",
        "new_zeros",
        "new_ones",
        "zeros",
        "ones",
        "arange",
        "zeros_like",
        "ones_like",
        "full",
        "tensor",
        "empty",
        "linspace",
        "__iter__",
        "__hash__",
        "__eq__",
        "__setitem__",
        "clone",
        "get_device",
        "data_ptr",
        "element_size",
    }
)
DATA_MOVEMENT = {
    "permute": "permute",
    "transpose": "transpose",
    "contiguous": "copy",
    "reshape": "reshape",
    "cat": "concat",
    "repeat": "repeat",
    "pad": "pad",
    "interpolate": "upsample",
}
FIDELITY = "HIFI2"
CHUNK = 256
#: Full-size SAM 3: the tracker's features are 72x72 (1008 / 14), its masks 4x and 16x that.
FEATURE_SIDE = 72


def _tensor(shape: Any) -> dict[str, Any]:
    return {"shape": list(shape), "dtype": "BFLOAT16", "layout": "TILE", "memory": "DRAM"}


def _tensors(values: Any) -> list[Any]:
    import torch

    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _name(func: Callable) -> str:
    name = getattr(func, "__name__", str(func))
    return name if name in VIEWS else name.removeprefix("_")


def _moves_data(source: Any, result: Any) -> bool:
    """Whether a permute or transpose reorders memory: not when only dimensions of size 1 move."""
    before = [d for d in source.shape if d != 1]
    after = [d for d in result.shape if d != 1]
    if before != after:
        return True
    return len(set(before)) != len(before)  # repeated sizes: cannot tell, count it


@dataclass
class Recorder:
    """Turns the torch calls of a meta-tensor forward into op-log records of one stage."""

    stage: str
    ops: list[dict[str, Any]]

    def record(self, func: Callable, args: tuple, kwargs: dict, result: Any) -> None:
        name = _name(func)
        inputs = _tensors(list(args) + list(kwargs.values()))
        outputs = _tensors(result if isinstance(result, (list, tuple)) else [result])
        if name in VIEWS or not outputs or not inputs:
            return
        if name in ("permute", "transpose") and not _moves_data(inputs[0], outputs[0]):
            return
        op: dict[str, Any] = {
            "stage": self.stage,
            "block": None,
            "windowed": None,
            "inputs": [_tensor(t.shape) for t in inputs],
            "outputs": [_tensor(t.shape) for t in outputs],
            "options": {},
        }
        if name == "linear":
            # as a port runs it: the leading dimensions folded into rows, the weight transposed
            x, weight = inputs[0], inputs[1]
            rows = math.prod(x.shape[:-1])
            op.update(op="linear", fidelity=FIDELITY)
            op["inputs"] = [_tensor([rows, x.shape[-1]]), _tensor(weight.shape[::-1]), *op["inputs"][2:]]
            op["outputs"] = [_tensor([rows, weight.shape[0]])]
        elif name in ("matmul", "bmm", "mm", "__matmul__", "baddbmm", "addmm"):
            op.update(op="matmul", fidelity=FIDELITY)
        elif name in ("conv2d", "conv_transpose2d"):
            op.update(op="conv2d", fidelity=FIDELITY, options=self._conv_options(name, args, kwargs, inputs))
            op["inputs"] = op["inputs"][:1]
        elif name == "scaled_dot_product_attention":
            op.update(
                op="transformer.scaled_dot_product_attention",
                fidelity=FIDELITY,
                options={"q_chunk_size": CHUNK, "k_chunk_size": CHUNK},
            )
            op["inputs"] = op["inputs"][:3]
        elif name in DATA_MOVEMENT:
            op.update(op=DATA_MOVEMENT[name])
        else:
            op.update(op=name)
        self.ops.append(op)

    @staticmethod
    def _conv_options(name: str, args: tuple, kwargs: dict, inputs: list) -> dict[str, Any]:
        x, weight = inputs[0], inputs[1]
        transposed = name == "conv_transpose2d"
        stride = kwargs.get("stride", args[3] if len(args) > 3 else 1)
        groups = kwargs.get("groups", 1)
        stride = [stride, stride] if isinstance(stride, int) else list(stride)
        if transposed:  # weight (in, out / groups, kh, kw); FLOPs at the input's size
            in_channels, out_channels = weight.shape[0], weight.shape[1] * groups
            stride = [1, 1]
        else:
            out_channels, in_channels = weight.shape[0], weight.shape[1]
        return {
            "batch_size": int(x.shape[0]),
            "input_height": int(x.shape[2]),
            "input_width": int(x.shape[3]),
            "in_channels": int(in_channels),
            "out_channels": int(out_channels),
            "kernel_size": [int(weight.shape[2]), int(weight.shape[3])],
            "stride": stride,
        }


def _recording_mode(recorder: Recorder):
    from torch.overrides import TorchFunctionMode

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            result = func(*args, **kwargs)
            recorder.record(func, args, kwargs, result)
            return result

    return Mode()


def tracker_modules() -> tuple[Any, Any]:
    """SAM 3's full-size tracker (transformers' Sam3TrackerVideoModel without its vision encoder) on
    the meta device, and its config."""
    import torch
    from transformers import Sam3VideoConfig
    from transformers.models.sam3_tracker_video.modeling_sam3_tracker_video import Sam3TrackerVideoModel

    config = Sam3VideoConfig().tracker_config
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = Sam3TrackerVideoModel(config, remove_vision_encoder=True)
    for module in model.modules():
        if hasattr(module, "config"):
            module.config._attn_implementation = "sdpa"
    return model.eval(), config


def tracker_op_log(
    memory_frames: int = 7, pointers: int = 16
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The op log of one object's tracked frame, and torch's FLOP count of each stage on the same calls.

    ``memory_frames``: spatial memories memory attention reads (SAM 3: at most 7); ``pointers``:
    object pointers (at most 16), each split into hidden / 64 tokens of the memory's width.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model, config = tracker_modules()
    side, hidden, mem = (
        FEATURE_SIDE,
        config.memory_attention_hidden_size,
        config.memory_encoder_output_channels,
    )
    tokens = side * side
    memory_tokens = memory_frames * tokens + pointers * (hidden // mem)

    def meta(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, device="meta")

    decoder = config.mask_decoder_config
    stages: dict[str, Callable[[], Any]] = {
        "memory attention": lambda: model.memory_attention(
            current_vision_features=meta(tokens, 1, hidden),
            current_vision_position_embeddings=meta(tokens, 1, hidden),
            memory=meta(memory_tokens, 1, mem),
            memory_posision_embeddings=meta(memory_tokens, 1, mem),
            num_object_pointer_tokens=pointers * (hidden // mem),
        ),
        "mask decoder": lambda: model.mask_decoder(
            image_embeddings=meta(1, decoder.hidden_size, side, side),
            image_positional_embeddings=meta(1, decoder.hidden_size, side, side),
            sparse_prompt_embeddings=meta(1, 1, 2, decoder.hidden_size),
            dense_prompt_embeddings=meta(1, decoder.hidden_size, side, side),
            multimask_output=True,
            high_resolution_features=[
                meta(1, decoder.hidden_size // 8, 4 * side, 4 * side),
                meta(1, decoder.hidden_size // 4, 2 * side, 2 * side),
            ],
        ),
        "memory encoder": lambda: model.memory_encoder(
            meta(1, config.memory_encoder_hidden_size, side, side), meta(1, 1, 16 * side, 16 * side)
        ),
        "object pointer": lambda: model.object_pointer_proj(meta(1, 1, hidden)),
    }
    ops: list[dict[str, Any]] = []
    flops: dict[str, float] = {}
    with torch.inference_mode():
        for stage, run in stages.items():
            run()  # fills the caches of constants (position encodings), which a port computes once
            recorder = Recorder(stage, ops)
            with FlopCounterMode(display=False) as counter, _recording_mode(recorder):
                run()
            flops[stage] = float(counter.get_total_flops())
    return ops, flops


@dataclass(frozen=True)
class StagePrice:
    stage: str
    ops: int
    gflop_log: float
    gflop_torch: float
    roofline_ms: float
    calibrated_ms: float


def price_stages(ops: list[dict[str, Any]], torch_flops: dict[str, float]) -> list[StagePrice]:
    """Per stage: ops, matrix FLOPs (op log, tile-padded; torch's count), roofline and calibrated ms."""
    from ..blackhole import calibrated_cost, trace_cost

    by_stage: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for op in ops:
        by_stage[op["stage"]].append(op)
    prices = []
    for stage, stage_ops in by_stage.items():
        roofline = sum(c.seconds for c in trace_cost.price_all(stage_ops))
        calibrated = calibrated_cost.total_seconds(stage_ops)
        gflop = sum(trace_cost.matrix_flops(op) for op in stage_ops) / 1e9
        prices.append(
            StagePrice(
                stage, len(stage_ops), gflop, torch_flops[stage] / 1e9, roofline * 1e3, calibrated * 1e3
            )
        )
    return prices


def per_object_ms(memory_frames: int = 7) -> float:
    """Calibrated ms of one object's tracked frame with ``memory_frames`` memories."""
    ops, flops = tracker_op_log(memory_frames)
    return sum(p.calibrated_ms for p in price_stages(ops, flops))


def chip_table() -> None:
    """The tracker trace per object, priced by stage, with a full memory and with 1 memory frame."""
    from ..common import report

    rows = []
    totals = {}
    for frames in (7, 1):
        ops, flops = tracker_op_log(frames)
        prices = price_stages(ops, flops)
        totals[frames] = sum(p.calibrated_ms for p in prices)
        for p in prices:
            rows.append(
                [
                    frames,
                    p.stage,
                    p.ops,
                    f"{p.gflop_log:.2f}",
                    f"{p.gflop_torch:.2f}",
                    report.ms(p.roofline_ms / 1e3),
                    report.ms(p.calibrated_ms / 1e3),
                ]
            )
        rows.append(
            [
                frames,
                "per object and frame",
                sum(p.ops for p in prices),
                "",
                "",
                "",
                report.ms(totals[frames] / 1e3),
            ]
        )
    report.title("tracking: sam3 mode on the chip, a tracker trace priced (calibrated cost model)")
    print(
        "prediction, not a measurement: SAM 3's full-size tracker (Sam3VideoConfig()) per object and "
        "frame as a direct port would run it (one ttnn op per torch call of transformers' modules, "
        f"bfloat16 in DRAM, HiFi2, fused attention in {CHUNK}x{CHUNK} chunks; "
        "benchmarks/tracking/tracker_trace.py), "
        "priced by the calibrated cost model and the roofline; memory frames: spatial memories memory "
        "attention reads (7 once an object has been tracked 6 frames), with 16 object pointers; GFLOP: "
        "matrix work of the op log (tile-padded) "
        "and torch's FLOP counter on the same calls"
    )
    report.table(
        ["memory frames", "stage", "ops", "GFLOP (op log)", "GFLOP (torch)", "roofline ms", "calibrated ms"],
        rows,
    )
