"""The prompt trace's op log for the cost model: the sequence the engine replays per prompt batch.

The engine's chip prompt path (ttnn_model/prompt_path.py, ChipPromptPath) replays one trace per
prompt bucket; ``run_sequence`` issues its ``_forward`` call for call on shape-only inputs, for P
prompts in one replay: the class-token tile placed into the prompt tokens, 6 fusion-encoder layers
(the first one's self-attention once, repeated to the P prompts), the decoder's image keys, the decoder stack
(6 layers with their glue: query positions, box bias, box refinement), the pooling weights,
scoring, the top-k selection of the k = ``kept`` best queries per prompt with their logits,
presence and boxes gathered, the mask embeddings of every row and the kept rows' gathered, and the
segmentation head's prompt cross-attention and pixel decoder. ``mask_read`` adds what fetch_masks
runs after the replay, outside the trace, in the common case (max_instances <= k): the k kept
rows' mask logits at 288 x 288. The fallback of a call asking for more than k instances (every
query read back, MASK_ROWS rows per prompt per mask read) is not priced. Nothing of the prompt path
is left unported; between the replay and the mask read the host reads the kept rows and picks the
instances (a PCIe round trip this model does not price). test/unit/ttnn/test_prompt_trace_cost.py holds
run_sequence to ChipPromptPath._forward: on the tiny model both issue the same ops on the same
shapes, so a change to the engine that this file does not follow fails there.

The log comes from the strict emulator (test/support/ttnn_emulator) through the recorder the
image trace's cost model uses (tools/ttnn_mock/oplog.py), with every weight and input a torch
*meta* tensor: the emulator checks every call as it does for real values (layouts, dtypes, SDPA
chunks and masks, shapes) but computes nothing, so SAM 3's full size with 16 prompts logs in
seconds (packing the weights to bfloat8_b is most of it); the same test checks that meta tensors
log exactly the ops real values do, and pins each stage's op count.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: Prompt counts the cost model predicts a frame for.
PROMPT_COUNTS = (1, 4, 16)
#: Text tokens per prompt (the CLIP context).
TEXT_TOKENS = 32
#: Stage of the ops ChipPromptPath._forward issues itself, between two modules.
BETWEEN_MODULES = "between modules"
#: Stage of the mask read after the replay (fetch_masks), outside the trace.
MASK_READ = "mask read (after the replay)"


def _paths() -> None:
    for folder in (REPO / "tools", REPO / "test" / "support"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


@dataclass(frozen=True)
class PromptShapes:
    """The prompt trace's dimensions, read from transformers' Sam3Config.

    Attributes:
        hidden: width C (256).
        heads: attention heads (8).
        side: image tokens per side of the map the prompt path reads (72).
        queries: decoder queries (200).
        rows: the decoder's padded rows, presence token included (224).
        tokens: prompt tokens padded to tiles (64: 32 text, then the class-token tile).
        encoder_layers, decoder_layers: 6 and 6.
        upsampling: the pixel decoder's upsamplings (2: 72 -> 144 -> 288).
    """

    hidden: int
    heads: int
    side: int
    queries: int
    rows: int
    tokens: int
    encoder_layers: int
    decoder_layers: int
    upsampling: int

    @classmethod
    def of(cls, config: Any) -> PromptShapes:
        from tt_sam3_ros.engines.ttnn_model.config import TILE
        from tt_sam3_ros.engines.ttnn_model.prompt_config import padded_length

        backbone = config.vision_config.backbone_config
        decoder = config.detr_decoder_config
        return cls(
            hidden=decoder.hidden_size,
            heads=decoder.num_attention_heads,
            side=backbone.image_size // backbone.patch_size,
            queries=decoder.num_queries,
            rows=padded_length(1 + decoder.num_queries),
            tokens=TEXT_TOKENS + TILE,
            encoder_layers=config.detr_encoder_config.num_layers,
            decoder_layers=decoder.num_layers,
            # Sam3Model drops the coarsest FPN map; the pixel decoder starts from the scale-1 map and
            # upsamples once per finer map (its config's num_upsampling_stages counts its convs).
            upsampling=len(config.vision_config.scale_factors) - 2,
        )

    @property
    def image_tokens(self) -> int:
        return self.side * self.side

    @property
    def mask_side(self) -> int:
        return self.side * 2**self.upsampling


def kept(shapes: PromptShapes) -> int:
    """Queries kept per prompt by the on-device selection: the engine's default k (KEPT_QUERIES,
    the segmenter's default max_instances), at most the query count."""
    from tt_sam3_ros.engines.ttnn_model.prompt_path import KEPT_QUERIES
    from tt_sam3_ros.engines.ttnn_model.selection import kept_count

    return kept_count(KEPT_QUERIES, shapes.queries)


def model_config(size: str) -> Any:
    """transformers' Sam3Config at SAM 3's size ("full") or the project's tiny model ("tiny")."""
    from transformers import Sam3Config

    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    if size not in ("full", "tiny"):
        raise ValueError(f"size {size!r} is not 'full' or 'tiny'")
    return Sam3Config() if size == "full" else tiny_sam3_config()


def _modules(config: Any) -> dict[str, Any]:
    """transformers' prompt modules (random weights: nothing here reads their values)."""
    from transformers.models.sam3 import modeling_sam3 as sam3

    return {
        "encoder": sam3.Sam3DetrEncoder(config.detr_encoder_config).eval(),
        "decoder": sam3.Sam3DetrDecoder(config.detr_decoder_config).eval(),
        "scoring": sam3.Sam3DotProductScoring(config).eval(),
        "head": sam3.Sam3MaskDecoder(config.mask_decoder_config).eval(),
    }


def _host_weights(modules: dict[str, Any], shapes: PromptShapes) -> dict[str, dict[str, Any]]:
    import torch

    from tt_sam3_ros.engines.ttnn_model import prompt_weights
    from tt_sam3_ros.engines.ttnn_model.decoder import DecoderStackConfig

    decoder = modules["decoder"]
    stack = DecoderStackConfig.from_decoder(decoder, shapes.side, shapes.side)
    return {
        "encoder": prompt_weights.prepare_fusion_encoder(
            modules["encoder"], torch.zeros(1, shapes.image_tokens, shapes.hidden)
        ),
        "decoder": prompt_weights.prepare_decoder(decoder, stack),
        "scoring": prompt_weights.prepare_scoring(modules["scoring"], decoder),
        "head": prompt_weights.prepare_segmentation_head(modules["head"]),
    }


def upload_weights(
    ttnn: Any, device: Any, modules: dict[str, Any], shapes: PromptShapes, meta: bool
) -> dict[str, dict[str, Any]]:
    """Every prompt module's weights on the device, as the engine uploads them (weights.upload),
    and the pixel decoder's GroupNorm mask."""
    from tt_sam3_ros.engines.ttnn_model import segmentation_head
    from tt_sam3_ros.engines.ttnn_model.weights import HostWeight, upload

    weights = {}
    for name, host in _host_weights(modules, shapes).items():
        if meta:  # prepared from real modules (preparation writes into tensors), then shapes only
            host = {key: HostWeight(w.values.to("meta"), w.kind) for key, w in host.items()}
        weights[name] = upload(ttnn, device, host, ttnn.bfloat8_b, ttnn.bfloat16)
    constants = segmentation_head.pixel_decoder_constants(ttnn, device, _pixel_config(modules, shapes))
    # the GroupNorm mask keeps real values even with `meta`: the emulator checks them
    weights["head"].update(constants)
    return weights


def _pixel_config(modules: dict[str, Any], shapes: PromptShapes) -> Any:
    from tt_sam3_ros.engines.ttnn_model.segmentation_head import PixelDecoderConfig

    return PixelDecoderConfig.from_module(modules["head"].pixel_decoder, shapes.side, shapes.upsampling)


def run_sequence(
    ttnn: Any,
    device: Any,
    shapes: PromptShapes,
    prompts: int,
    modules: dict[str, Any],
    weights: dict[str, dict[str, Any]],
    meta: bool,
) -> list[Any]:
    """One prompt-trace replay for `prompts` prompts, as ChipPromptPath._forward issues it, on an
    open (emulated) device with the uploaded `weights` (upload_weights). Inputs are zeros (on
    torch's meta device when `meta`); returns _forward's outputs."""
    import torch

    from tt_sam3_ros.engines.ttnn_model import decoder, fusion_encoder, scoring, segmentation_head, selection
    from tt_sam3_ros.engines.ttnn_model.attention import AttentionShape
    from tt_sam3_ros.engines.ttnn_model.config import TILE, device_settings
    from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig
    from tt_sam3_ros.engines.ttnn_model.prompt_path import gather_float32_rows, gather_presence

    settings = device_settings(ttnn, device)
    where = "meta" if meta else "cpu"

    def zeros(*shape: int) -> Any:
        return ttnn.from_torch(
            torch.zeros(shape, device=where),
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )

    p, c, s, t, q = prompts, shapes.hidden, shapes.image_tokens, shapes.tokens, shapes.rows
    encoder_config = PromptLayerConfig.from_layer(modules["encoder"].layers[0])
    stack_config = decoder.DecoderStackConfig.from_decoder(modules["decoder"], shapes.side, shapes.side)
    scoring_config = scoring.ScoringConfig.from_modules(modules["scoring"], modules["decoder"])
    head = modules["head"]
    attention = head.prompt_cross_attn
    head_shape = AttentionShape.of(attention.hidden_size, attention.num_attention_heads)

    # The trace's inputs: the image trace's scale-4, -2 and -1 maps and class-token tile; the
    # prompt buffers (text features, the image / query / pooling key masks); constants.
    fine, middle, coarse = zeros(1, 1, 16 * s, c), zeros(1, 1, 4 * s, c), zeros(1, 1, s, c)
    class_tile, features = zeros(1, TILE, c), zeros(p, t, c)
    image_mask, query_mask, pool_mask = zeros(p, 1, s, t), zeros(p, 1, q, t), zeros(p, 1, 1, t)
    position, placement, selector = zeros(1, s, c), zeros(1, t, TILE), zeros(p, q, q)
    candidates, row_index = zeros(1, 1, q), zeros(1, 1, q)

    # ChipPromptPath._forward, call for call.
    placed = ttnn.matmul(
        placement, class_tile, memory_config=settings.memory, compute_kernel_config=settings.exact_kernel
    )
    prompt = ttnn.add(features, placed, memory_config=settings.memory)
    ttnn.deallocate(placed)
    tokens = ttnn.reshape(coarse, (1, s, c))
    encoded = fusion_encoder.fusion_encoder(
        ttnn,
        tokens,
        prompt,
        image_mask,
        weights["encoder"],
        encoder_config,
        settings,
        layers=shapes.encoder_layers,
    )
    keyed = ttnn.add(encoded, position, memory_config=settings.memory)
    stack = decoder.decoder_stack(
        ttnn,
        decoder.DecoderStackInputs(prompt, query_mask, encoded, keyed),
        weights["decoder"],
        stack_config,
        settings,
    )
    ttnn.deallocate(keyed)
    pool_rows = ttnn.softmax(pool_mask, -1, memory_config=settings.memory)
    pool = ttnn.reshape(pool_rows, (p, 1, t))
    logits = scoring.query_logits(
        ttnn, stack.hidden, prompt, pool, weights["scoring"], scoring_config, settings
    )
    presence = scoring.presence_logits(ttnn, stack.hidden, weights["scoring"], scoring_config, settings)
    values, indices, flags = selection.top_queries(ttnn, logits, candidates, kept(shapes), 0.0, settings)
    for tensor in (values, flags):
        ttnn.deallocate(tensor)
    pick = selection.selection_matrix(ttnn, indices, row_index, settings)
    kept_logits = selection.gather_rows(ttnn, pick, logits, settings)
    kept_presence = gather_presence(ttnn, pick, presence, selector, settings)
    high, low = gather_float32_rows(ttnn, pick, stack.boxes[-1], settings)
    embeddings = segmentation_head.mask_embeddings(ttnn, stack.queries[-1], weights["head"], settings)
    kept_embeddings = selection.gather_rows(ttnn, pick, embeddings, settings)
    attended = segmentation_head.prompt_cross_attention(
        ttnn,
        encoded,
        prompt,
        image_mask,
        weights["head"],
        head_shape,
        head.prompt_cross_attn_norm.eps,
        settings,
    )
    pixels = segmentation_head.pixel_decoder(
        ttnn,
        device,
        attended,
        [fine, middle],
        weights["head"],
        _pixel_config(modules, shapes),
        settings,
        {},
        ttnn.bfloat8_b,
    )
    return [
        *(kept_logits, kept_presence, high, low, indices, kept_embeddings, pixels),
        *(logits, presence, stack.boxes[-1], embeddings),
    ]


def mask_read(
    ttnn: Any, device: Any, shapes: PromptShapes, prompts: int, weights: dict, outputs: list, meta: bool
):
    """After the replay, ChipPromptPath._kept_mask_logits: the mask logits of the k kept rows of
    each prompt (their embeddings are the trace's); returns the logits."""
    from tt_sam3_ros.engines.ttnn_model import segmentation_head
    from tt_sam3_ros.engines.ttnn_model.config import device_settings

    settings = device_settings(ttnn, device)
    embeddings, pixels = outputs[5], outputs[6]
    return segmentation_head.mask_logits(ttnn, embeddings, pixels, weights["head"], settings)


def record(
    size: str, prompt_counts: tuple[int, ...] = PROMPT_COUNTS, meta: bool = True
) -> tuple[dict[int, list[dict[str, Any]]], PromptShapes]:
    """The prompt trace's op log (oplog records as JSON dicts) for each prompt count at `size`,
    from the emulator, the weights uploaded once; with `meta` every tensor is a torch meta
    tensor (shapes only: the bfloat8_b packing of the weights is most of the time it takes)."""
    _paths()
    import ttnn_emulator
    from ttnn_mock import oplog

    config = model_config(size)
    shapes = PromptShapes.of(config)
    modules = _modules(config)
    ttnn_emulator.reset()
    recorder = oplog.Recorder(ttnn_emulator)
    device = recorder.open_device(device_id=0)
    logs: dict[int, list[dict[str, Any]]] = {}
    try:
        weights = upload_weights(recorder, device, modules, shapes, meta)
        for prompts in prompt_counts:
            before = len(recorder.log)
            outputs = run_sequence(recorder, device, shapes, prompts, modules, weights, meta)
            replay = len(recorder.log)
            outputs.append(mask_read(recorder, device, shapes, prompts, weights, outputs, meta))
            ops = [r.to_json() for r in recorder.log[before:]]
            for index, op in enumerate(ops):
                if before + index >= replay:
                    op["stage"] = MASK_READ
                elif op["stage"] == "other":  # issued by ChipPromptPath itself, between modules
                    op["stage"] = BETWEEN_MODULES
            for tensor in outputs:
                recorder.deallocate(tensor)
            logs[prompts] = ops
        return logs, shapes
    finally:
        ttnn_emulator.reset()
