"""Fidelity section: the ViT's and the prompt path's compute settings, chosen by measurement on the
emulator's numerics.

SAM 3's full-size ViT cut to two blocks (a windowed one, then a global one: 1024 wide, 16 heads,
72x72 tokens, 24x24 windows), random weights sharpened as in the full-size image-path test (else
attention is flat and a lossy setting hides), run on the TT-NN emulator (test/support/ttnn_emulator:
bfloat8_b weights, bfloat16 activations, the operand bits each math fidelity keeps, the SFPU's
approximate exp and gelu) block by block, each block fed transformers' own float32 input, once per
candidate setting and once at the engine's own (its DeviceSettings as they are). Printed per
candidate and block: PCC against transformers in float32 of the block's output and of its update
(output - input, which the residual stream cannot hide), and the block's modelled time
(benchmarks/blackhole/trace_cost.py on the ops it ran, at the engine's chunk sizes).

The prompt path's table: SAM 3's full-size fusion-encoder layer (width 256, 8 heads of 32, MLP
2048, 72x72 image tokens attending to themselves and to 33 prompt tokens in 64 rows), random
weights at unit gain (test/support/random_weights.py, as the prompt layers' PCC test draws them),
run on the emulator once per candidate setting of its self-attention (the one prompt attention
the cost model finds compute-bound); PCC of the
layer's output and of its update against transformers in float32, and the layer's modelled time.

Chunk sizes do not enter the numerics: the emulator computes the attention in one pass whatever the
chunks (the kernel's online softmax per k chunk is not modelled), so chunks are chosen by the real
library's acceptance and the cost model (the blackhole section). --quick: the tiny model's
dimensions (a smoke run: the figures say nothing).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from ..common import report
from . import trace_cost

REPO = Path(__file__).resolve().parents[2]

#: (label, attention fidelity, approximate exp, fidelity of the qkv and output projections, fidelity
#: of the MLP's fc1 and fc2); the first row is the setting before this measurement. The engine's own
#: setting is measured as a row of its own, read from device_settings (engine_label).
CANDIDATES = (
    ("attention HiFi4, exact exp (before)", "HiFi4", False, "HiFi2", "HiFi2"),
    ("attention HiFi4, approximate exp", "HiFi4", True, "HiFi2", "HiFi2"),
    ("attention HiFi2, exact exp", "HiFi2", False, "HiFi2", "HiFi2"),
    ("attention HiFi2, approximate exp", "HiFi2", True, "HiFi2", "HiFi2"),
    ("attention LoFi, approximate exp", "LoFi", True, "HiFi2", "HiFi2"),
    ("attention HiFi2, approximate exp; linears LoFi", "HiFi2", True, "LoFi", "LoFi"),
)


def engine_label(base: Any) -> str:
    """The label of the engine's own row, read from its DeviceSettings (the row is measured with
    those settings themselves, so it follows the engine)."""
    attention, projections, mlp = (
        _fidelity(kernel) for kernel in (base.vit_attention_kernel, base.matmul_kernel, base.vit_mlp_kernel)
    )
    exp = "approximate" if base.vit_exp_approx else "exact"
    return f"the engine's: attention {attention}, {exp} exp; projections {projections}; MLP {mlp}"


def _sharpen(model: Any, seed: int) -> None:
    """The full-size image-path test's scaling: peaked attention, blocks that move the stream."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))
            elif isinstance(module, torch.nn.Linear):
                std = 0.03 if module.in_features > 1024 else 0.06
                module.weight.copy_(std * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.02 * torch.randn(module.bias.shape, generator=generator))


def two_block_vit(quick: bool) -> tuple[Any, Any, list[Any]]:
    """A windowed + a global block of SAM 3's ViT, sharpened; its input and per-block hidden states."""
    import torch
    from transformers import Sam3ViTConfig
    from transformers.models.sam3.modeling_sam3 import Sam3ViTModel

    width = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2) if quick else {}
    config = Sam3ViTConfig(
        **(width or dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16)),
        num_hidden_layers=2,
        global_attn_indexes=[1],
        window_size=24,
        image_size=1008,
        patch_size=14,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(7)
    try:
        model = Sam3ViTModel(config).eval()
    finally:
        torch.random.set_rng_state(state)
    _sharpen(model, 7)
    pixels = torch.rand(1, 3, 1008, 1008, generator=torch.Generator().manual_seed(7)) * 2 - 1
    with torch.no_grad():
        hidden = list(model(pixel_values=pixels, output_hidden_states=True).hidden_states)
    return model, pixels, hidden


def measure(quick: bool) -> tuple[list[dict[str, Any]], Any]:
    """One row per candidate and block: PCCs and modelled milliseconds."""
    sys.path[:0] = [str(REPO / "test" / "support"), str(REPO / "tools")]
    import ttnn_emulator as ttnn
    from compare import pcc
    from transformers import Sam3VisionConfig
    from ttnn_mock import oplog

    from tt_sam3_ros.engines.ttnn_model import vit
    from tt_sam3_ros.engines.ttnn_model.config import (
        ImagePathConfig,
        compute_kernel,
        device_settings,
        window_order,
    )
    from tt_sam3_ros.engines.ttnn_model.weights import prepare_vit, upload

    model, _, hidden = two_block_vit(quick)
    vision = Sam3VisionConfig(backbone_config=model.config.to_dict())
    config = ImagePathConfig.from_hf(vision)
    order = window_order(config)
    ttnn.reset()
    device = ttnn.open_device(device_id=0, l1_small_size=32768, trace_region_size=1 << 20)
    weights = upload(ttnn, device, prepare_vit(model, config), ttnn.bfloat8_b, ttnn.bfloat16)
    base = device_settings(ttnn, device)
    recorder = oplog.Recorder(ttnn)
    rows = []
    try:
        candidates = [
            (
                label,
                dataclasses.replace(
                    base,
                    vit_attention_kernel=compute_kernel(ttnn, attention, packer_l1_acc=False),
                    vit_exp_approx=approx,
                    matmul_kernel=compute_kernel(ttnn, projections),
                    vit_mlp_kernel=compute_kernel(ttnn, mlp),
                ),
            )
            for label, attention, approx, projections, mlp in CANDIDATES
        ]
        # The engine's row runs the engine's settings themselves, not a copy of their names.
        for label, settings in [*candidates, (engine_label(base), base)]:
            for index in range(config.layers):
                windowed = not config.is_global(index)
                rows_in = hidden[index].reshape(config.tokens, config.hidden)
                x = ttnn.from_torch(
                    rows_in[order].reshape(1, config.tokens, config.hidden),
                    dtype=ttnn.bfloat16,
                    layout=ttnn.TILE_LAYOUT,
                    device=device,
                )
                start = len(recorder.log)
                started = time.perf_counter()
                out = vit.vit_layer(
                    recorder, x, vit.layer_weights(weights, index), vit.rope_for(weights, windowed),
                    config, settings, windowed,
                )  # fmt: skip
                values = ttnn.to_torch(out).float().reshape(config.tokens, config.hidden)
                ttnn.deallocate(out)
                ours = values.clone()
                ours[order] = values
                want = hidden[index + 1].reshape(config.tokens, config.hidden)
                ops = [record.to_json() for record in recorder.log[start:]]
                rows.append(
                    {
                        "candidate": label,
                        "block": "windowed" if windowed else "global",
                        "pcc": pcc(ours, want),
                        "update_pcc": pcc(ours - rows_in, want - rows_in),
                        "ms": sum(cost.seconds for cost in trace_cost.price_all(ops)) * 1e3,
                        "emulator_s": time.perf_counter() - started,
                    }
                )
                report.progress(
                    f"{label}, {rows[-1]['block']} block: PCC {rows[-1]['pcc']:.5f} "
                    f"({rows[-1]['emulator_s']:.0f} s on the emulator)"
                )
    finally:
        ttnn.reset()
    return rows, base


#: (label, fidelity of the fusion encoder's self-attention, approximate exp in the layer's two
#: attentions); the first row is the setting before. The cross-attention stays at
#: settings.prompt_attention_kernel (memory-bound in the cost model: fidelity buys it nothing).
PROMPT_CANDIDATES = (
    ("self-attention HiFi4, exact exp (before)", "HiFi4", False, "bfloat16"),
    ("self-attention HiFi2, exact exp", "HiFi2", False, "bfloat16"),
    ("self-attention HiFi2, approximate exp", "HiFi2", True, "bfloat16"),
    ("self-attention LoFi, exact exp", "LoFi", False, "bfloat16"),
    ("self-attention LoFi, approximate exp", "LoFi", True, "bfloat16"),
    ("self-attention HiFi2, exact exp; MLP hidden bfloat8_b", "HiFi2", False, "bfloat8_b"),
)
#: Prompt tokens the model sees: 32 text tokens and the geometry encoder's class token.
PROMPT_TOKENS = 33


def fusion_layer_case(quick: bool) -> tuple[Any, dict[str, Any], Any]:
    """A randomised Sam3DetrEncoderLayer (full size, or the tiny model's widths with `quick`), its
    inputs (one prompt of 20 real text tokens and the class token) and transformers' float32 output."""
    import torch
    from random_weights import randomise
    from transformers.models.sam3.configuration_sam3 import Sam3DETREncoderConfig
    from transformers.models.sam3.modeling_sam3 import Sam3DetrEncoderLayer

    hidden, heads, intermediate, side = (32, 2, 64, 8) if quick else (256, 8, 2048, 72)
    config = Sam3DETREncoderConfig(
        hidden_size=hidden, num_attention_heads=heads, intermediate_size=intermediate
    )
    config._attn_implementation = "eager"
    layer = Sam3DetrEncoderLayer(config).eval()
    randomise(layer, 0)
    generator = torch.Generator().manual_seed(1)
    valid = torch.zeros(1, PROMPT_TOKENS, dtype=torch.bool)
    valid[:, :20] = True
    valid[:, -1] = True
    inputs = {
        "vision": torch.randn(1, side * side, hidden, generator=generator),
        "position": torch.randn(1, side * side, hidden, generator=generator),
        "prompt": torch.randn(1, PROMPT_TOKENS, hidden, generator=generator),
        "valid": valid,
    }
    mask = torch.where(valid, 0.0, float("-inf")).reshape(1, 1, 1, PROMPT_TOKENS)
    with torch.no_grad():
        want = layer(inputs["vision"], inputs["prompt"], inputs["position"], prompt_cross_attn_mask=mask)
    return layer, inputs, want


def _device_tensor(ttnn: Any, device: Any, values: Any) -> Any:
    return ttnn.from_torch(
        values,
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=device,
        memory_config=ttnn.DRAM_MEMORY_CONFIG,
    )


def measure_prompt(quick: bool) -> tuple[list[dict[str, Any]], Any]:
    """One row per prompt-attention candidate: the fusion-encoder layer's PCCs and modelled ms."""
    sys.path[:0] = [str(REPO / "test" / "support"), str(REPO / "tools")]
    import torch
    import ttnn_emulator as ttnn
    from compare import pcc
    from ttnn_mock import oplog

    from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask
    from tt_sam3_ros.engines.ttnn_model.config import compute_kernel, device_settings
    from tt_sam3_ros.engines.ttnn_model.fusion_encoder import fusion_encoder_layer
    from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig, padded_length
    from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_fusion_encoder_layer
    from tt_sam3_ros.engines.ttnn_model.weights import upload

    layer, inputs, want = fusion_layer_case(quick)
    tokens, padded = inputs["vision"].shape[1], padded_length(PROMPT_TOKENS)
    prompt = torch.nn.functional.pad(inputs["prompt"], (0, 0, 0, padded - PROMPT_TOKENS))
    ttnn.reset()
    device = ttnn.open_device(device_id=0)
    host = prepare_fusion_encoder_layer(layer, inputs["position"])
    weights = upload(ttnn, device, host, ttnn.bfloat8_b, ttnn.bfloat16)
    base = device_settings(ttnn, device)
    recorder = oplog.Recorder(ttnn)
    rows = []
    try:
        held = {
            "prompt": _device_tensor(ttnn, device, prompt),
            "mask": _device_tensor(ttnn, device, key_padding_mask(tokens, inputs["valid"], padded)),
        }
        for label, fidelity, approx, hidden in PROMPT_CANDIDATES:
            settings = dataclasses.replace(
                base,
                fusion_attention_kernel=compute_kernel(ttnn, fidelity, packer_l1_acc=False),
                prompt_exp_approx=approx,
                fusion_mlp_hidden=getattr(ttnn, hidden),
            )
            start = len(recorder.log)
            started = time.perf_counter()
            out = fusion_encoder_layer(
                recorder, _device_tensor(ttnn, device, inputs["vision"]), held["prompt"], held["mask"],
                weights, PromptLayerConfig.from_layer(layer), settings,
            )  # fmt: skip
            ours = ttnn.to_torch(out).float()
            ttnn.deallocate(out)
            ops = [record.to_json() for record in recorder.log[start:]]
            rows.append(
                {
                    "candidate": label,
                    "pcc": pcc(ours, want),
                    "update_pcc": pcc(ours - inputs["vision"], want - inputs["vision"]),
                    "rms": float((ours - want).pow(2).mean().sqrt()),
                    "ms": sum(cost.seconds for cost in trace_cost.price_all(ops)) * 1e3,
                }
            )
            report.progress(
                f"{label}: PCC {rows[-1]['pcc']:.5f} ({time.perf_counter() - started:.0f} s on the emulator)"
            )
    finally:
        ttnn.reset()
    return rows, base


def print_prompt_table(quick: bool) -> None:
    report.title(
        "fusion encoder self-attention settings on the emulator's numerics: "
        + ("tiny dimensions (smoke run)" if quick else "SAM 3's full-size fusion-encoder layer")
    )
    rows, base = measure_prompt(quick)
    q_chunk, k_chunk = base.prompt_attention_chunks
    print(
        "settings: one fusion-encoder layer, random unit-gain weights (seed 0), bfloat8_b weights, "
        "bfloat16 activations, one prompt; PCC and rms error vs transformers float32 (output, and "
        "update = output - input); modelled ms of the layer at 120 cores, chunks up to "
        f"q {q_chunk} / k {k_chunk}"
    )
    hidden = base.fusion_mlp_hidden
    engine = (
        _fidelity(base.fusion_attention_kernel),
        base.prompt_exp_approx,
        "bfloat16" if hidden is None else hidden.name.lower(),
    )
    table = []
    for (label, *choice), row in zip(PROMPT_CANDIDATES, rows, strict=True):
        mark = " <- engine" if (choice[0].upper(), *choice[1:]) == (engine[0].upper(), *engine[1:]) else ""
        table.append(
            [
                label + mark,
                f"{row['pcc']:.5f}",
                f"{row['update_pcc']:.5f}",
                f"{row['rms']:.5f}",
                f"{row['ms']:.3f}",
            ]
        )
    report.table(["candidate", "PCC out", "PCC update", "rms error", "model ms"], table)


def _fidelity(config: Any) -> str:
    return config.math_fidelity.name


def main(quick: bool) -> None:
    report.title(
        "ViT attention settings on the emulator's numerics: "
        + ("tiny dimensions (smoke run)" if quick else "SAM 3's full-size blocks")
    )
    rows, base = measure(quick)
    q_chunk, k_chunk = base.vit_attention_chunks
    print(
        "settings: two-block ViT (windowed, global), random sharpened weights (seed 7), bfloat8_b "
        "weights, each block fed transformers' float32 input; PCC vs transformers float32; modelled "
        f"ms of each block at 120 cores with the engine's chunks q {q_chunk} / k {k_chunk}"
    )
    table = []
    for label in [*(candidate[0] for candidate in CANDIDATES), engine_label(base)]:
        found = {row["block"]: row for row in rows if row["candidate"] == label}
        line: list[object] = [label]
        for block in ("windowed", "global"):
            row = found[block]
            line += [f"{row['pcc']:.5f}", f"{row['update_pcc']:.5f}", f"{row['ms']:.3f}"]
        table.append(line)
    headers = ["candidate"]
    for block in ("windowed", "global"):
        headers += [f"{block}: PCC out", "PCC update", "model ms"]
    report.table(headers, table)
    print_prompt_table(quick)
