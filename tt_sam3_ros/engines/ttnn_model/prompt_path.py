"""The prompt path on the chip, fed by the image trace's output buffers: nothing read back between.

SAM 3's prompt path for text prompts, in order, and where each part runs here:
- the text encoder: on the host (the torch engine's, cached per prompt by the segmenter); the
  features go up once per prompt set into PromptBuffers' persistent buffers;
- the geometry encoder's class token: on the chip, once per image, in the image trace after the
  neck (ChipImageEncoder's last output);
- per prompt batch, in one replay of the bucket's prompt trace (PromptBuffers): the prompt
  tokens (the text, then the class token placed at row 32 by a 0/1 matmul), the fusion encoder,
  the decoder stack with its box refinement and box bias, scoring, the segmentation head up to
  the mask embeddings and the per-pixel embeddings (prompt cross-attention, pixel decoder), and
  the on-device selection (selection.py): the k best queries of each prompt by logit, the order
  of their detection scores (ttnn.topk), their one-hot selection matrix, and with it their
  logits, presence logit, boxes and mask embeddings gathered on the chip;
- the mask logits of the kept queries only: after the replay, the product of the k kept
  embeddings with the pixels (instance projection inside mask logits), in fetch_masks, fixed
  shapes.

What crosses PCIe. In the common case only the kept rows: k logits, k boxes (two bfloat16
halves: the boxes are float32 on the chip) and k indices per prompt, the presence logit, and the
k mask-logit maps when masks are asked for. decode() hands the segmenter every query's logit
with -inf on the queries not kept, so the host post-processing (the same as every engine's, the
one place where score > threshold and max_instances pick the instances) never picks those and
picks the kept ones exactly as from the full set: each prompt's best max_instances queries are
among its k best when max_instances <= k.

k is fixed per engine (ChipPromptPath's max_instances, by default KEPT_QUERIES, the segmenter's
DEFAULT_MAX_INSTANCES; at most the query count, where every query is kept). The trace also
leaves every query's logit, presence, box and mask embedding on the chip as outputs. A call that
may need more than k instances of one prompt (decode's max_instances above k, or not given) reads
those instead, and fetch_masks then picks the asked rows by a one-hot matrix from the host (up
to MASK_ROWS per prompt per read), as before the on-device selection: slower, never wrong.
Build the engine with the largest max_instances it will serve to stay on the fast path.

Prompt tokens are T = 64 rows, whatever the prompt: 32 text tokens, row 32 the image's class
token (the image trace's class tile, row 0, placed by a 0/1 matmul), rows 33..63 the geometry
tokens the host gives (exemplar boxes; zeros and masked for a text prompt); prompt_rows.py
builds these rows on the host. Buckets of 1, 2, 4,
... max_prompts prompts (PromptBuffers) are compiled at warm-up before the image trace is
captured, since a program compiled after a capture breaks its replays; the emulator holds the
engine to that.

Exemplar boxes (encode_exemplars, then decode's ``exemplars``): the geometry encoder's box path
(ROI pooling of each box's region of the layer-normed scale-1 map, the box's position and label
terms, three layers that attend to the whole map) runs on the host, on that map read back from
the chip on the frame the boxes were drawn on (5184 x 256 bfloat16, 2.65 MB at full size), once
per request: exemplars are rare, and benchmarks/model/exemplar_bench.py prices the read and the host
work against the frame. The tokens it returns go up into the prompt rows 33..63 with the prompt
set: on the drawn frame the class token that attended to the boxes, then one token per box, with
row 32 (this image's own class token) masked; on later frames that carry them, the box tokens
only, beside this image's class token at row 32. Bucket rules for prompt length: there is one
length, T = 64 (two tiles), for every bucket; a concept takes up to GEOMETRY_ROWS (31) host rows,
so up to 30 boxes (exemplars.MAX_BOXES, 16, is below it). The traces, their shapes and programs
do not change with exemplars (only the contents of the prompt buffers and masks do), so a
prompt set with boxes costs the chip what the same prompts without them cost, plus one upload.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tt_sam3_ros.engines.base import DecodedBatch, EngineError
from tt_sam3_ros.engines.ttnn_model import segmentation_head as head
from tt_sam3_ros.engines.ttnn_model import selection
from tt_sam3_ros.engines.ttnn_model.attention import AttentionShape
from tt_sam3_ros.engines.ttnn_model.config import TILE
from tt_sam3_ros.engines.ttnn_model.decoder import DecoderStackConfig, DecoderStackInputs, decoder_stack
from tt_sam3_ros.engines.ttnn_model.fusion_encoder import fusion_encoder
from tt_sam3_ros.engines.ttnn_model.prompt_buffers import PromptBuffers, power_of_two_buckets
from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig
from tt_sam3_ros.engines.ttnn_model.prompt_rows import PROMPT_TOKENS, placement_matrix, prompt_rows
from tt_sam3_ros.engines.ttnn_model.prompt_weights import (
    PIXEL_DECODER_STAGES,
    prepare_decoder,
    prepare_fusion_encoder,
    prepare_scoring,
    prepare_segmentation_head,
)
from tt_sam3_ros.engines.ttnn_model.scoring import (
    ScoringConfig,
    presence_logits,
    presence_selector,
    query_logits,
)
from tt_sam3_ros.engines.ttnn_model.selection import HOST_TOP_K
from tt_sam3_ros.engines.ttnn_model.weights import upload

#: Where the prompt path runs, in words (describe()).
ON_CHIP = "class token, fusion encoder, decoder, scoring, top-k selection, segmentation head"
ON_HOST = "text encoder"
#: The neck outputs the prompt path reads: scale 4 and 2 (pixel decoder), scale 1 (the fusion
#: encoder's image tokens and the class token's keys); Sam3Model drops the coarsest level.
FINE, MIDDLE, COARSE = 0, 1, 2
#: Kept queries per prompt when the engine is given none: the segmenter's DEFAULT_MAX_INSTANCES
#: (not imported: the segmenter imports the engines).
KEPT_QUERIES = 50
#: Rows one fallback mask read picks per prompt (a one-hot (B, MASK_ROWS, rows) from the host).
MASK_ROWS = TILE


@dataclass
class PromptOutputs:
    """One prompt trace's outputs (B prompts, k kept rows, rows = presence + queries + padding;
    TILE, DRAM): the kept rows first, then every row's, which stay on the chip unless a call
    needs more than k instances of a prompt."""

    kept_logits: Any  # (B, k, 1) bfloat16
    kept_presence: Any  # (B, k, 1) bfloat16, the presence logit on each kept row
    kept_boxes_high: Any  # (B, k, 32) bfloat16, cx cy w h in columns 0..3
    kept_boxes_low: Any  # (B, k, 32) bfloat16, the float32 boxes' remainder
    kept_rows: Any  # (B, 1, k) uint16 decoder rows (query number + 1), best first
    kept_embeddings: Any  # (B, k, C) bfloat16 mask embeddings
    pixels: Any  # (B, H*W, C) per-pixel embeddings
    logits: Any  # (B, rows, 1) bfloat16
    presence: Any  # (B, rows, 1) bfloat16, row 0 the presence token's
    boxes: Any  # (B, rows, 32) float32
    embeddings: Any  # (B, rows, C) mask embeddings


@dataclass
class ChipImageState:
    """One image as the prompt path reads it: the image trace's output buffers (valid until the
    next image), the three FPN maps and the class-token tile; ``serial`` tells images apart
    (exemplar tokens remember the image they were drawn on)."""

    fine: Any
    middle: Any
    coarse: Any
    class_tile: Any
    serial: int = 0


@dataclass
class ChipMasks:
    """What fetch_masks reads: mask embeddings and the per-pixel embeddings on the chip. With
    `positions` ((P, Q): where each query sits among the k kept rows, -1: not kept), the
    embeddings are the kept rows' (B, k, C); without (the fallback), every row's (B, rows, C)."""

    embeddings: Any
    pixels: Any
    count: int
    positions: np.ndarray | None


class ChipPromptPath:
    """The prompt path on an open chip (see the module doc).

    Args:
        ttnn: the ttnn module (or the emulator).
        encoder: the ChipImageEncoder on the same chip (its trace ends with the class token).
        model: transformers' Sam3Model (its prompt modules are read, never changed).
        host: the host prompt path (a TorchEngine over the model without its ViT): only its
            text encoder is used.
        max_prompts: the most prompts one decode takes.
        max_instances: queries kept per prompt on the chip (k; None: KEPT_QUERIES), capped at
            the query count; see the module doc for calls that ask for more.
    """

    reads_device_levels = True

    def __init__(
        self,
        ttnn: Any,
        encoder: Any,
        model: Any,
        host: Any,
        max_prompts: int,
        max_instances: int | None = None,
    ) -> None:
        self.ttnn, self.device, self.settings = ttnn, encoder.device, encoder.settings
        self.host = host
        self.dtype = torch.float32
        config, side = encoder.config, encoder.config.grid
        matmul, param = encoder._matmul_dtype, encoder._param_dtype
        self._conv_dtype = matmul
        position = sine_position(model, side, model.detr_encoder.config.hidden_size)
        self.fusion = PromptLayerConfig.from_layer(model.detr_encoder.layers[0])
        self.fusion_layers = len(model.detr_encoder.layers)
        self.decoder = DecoderStackConfig.from_decoder(model.detr_decoder, side, side)
        self.scoring = ScoringConfig.from_modules(model.dot_product_scoring, model.detr_decoder)
        mask_decoder = model.mask_decoder
        self.pixel = head.PixelDecoderConfig.from_module(
            mask_decoder.pixel_decoder, side, PIXEL_DECODER_STAGES
        )
        attention = mask_decoder.prompt_cross_attn
        self.head_shape = AttentionShape.of(attention.hidden_size, attention.num_attention_heads)
        self.head_eps = mask_decoder.prompt_cross_attn_norm.eps
        device = self.device
        tokens = position.flatten(2).transpose(1, 2)
        self.w_fusion = upload(
            ttnn, device, prepare_fusion_encoder(model.detr_encoder, tokens), matmul, param
        )
        self.w_decoder = upload(
            ttnn, device, prepare_decoder(model.detr_decoder, self.decoder), matmul, param
        )
        self.w_scoring = upload(
            ttnn, device, prepare_scoring(model.dot_product_scoring, model.detr_decoder), matmul, param
        )
        self.w_head = {
            **upload(ttnn, device, prepare_segmentation_head(mask_decoder), matmul, param),
            **head.pixel_decoder_constants(ttnn, device, self.pixel),
        }
        self._conv_weights: dict[str, Any] = {}
        self.kept = selection.kept_count(
            KEPT_QUERIES if max_instances is None else max_instances, self.decoder.queries
        )
        self.constants = {
            "position": self._tensor(tokens),
            "placement": self._tensor(placement_matrix()),
            "candidates": self._tensor(selection.candidate_row(self.decoder.rows, 1, self.decoder.queries)),
            "rows": self._tensor(selection.row_index(self.decoder.rows)),
        }
        #: How the kept queries are ranked: selection.TOPK_FORMS; the warm-up check
        #: (stage_checks.py) may change it before anything is compiled.
        self.topk_form = selection.TOPK_FORMS[0]
        #: The pixel decoder's GroupNorm (weight, bias) per stage, float32 on the host: the
        #: warm-up check's reference.
        self.host_norms = [
            (norm.weight.detach().float().clone(), norm.bias.detach().float().clone())
            for norm in mask_decoder.pixel_decoder.norms[: self.pixel.stages]
        ]
        self.buckets = power_of_two_buckets(max_prompts)
        self.selectors = {b: self._tensor(presence_selector(self.decoder.rows, b)) for b in self.buckets}
        #: The scale-1 map's sine encoding (1, C, side, side), for the host's geometry encoder.
        self.coarse_position = position
        self._image_serials = itertools.count(1)
        self.prompts = PromptBuffers(
            ttnn,
            device,
            self._forward,
            tokens=PROMPT_TOKENS,
            hidden=self.fusion.hidden,
            mask_rows={"image": config.grid**2, "queries": self.decoder.rows, "pool": 1},
            max_prompts=max_prompts,
            buckets=self.buckets,
            use_trace=encoder.use_trace,
        )
        self._closed = False

    # the engine's side of the PromptPath protocol -----------------------------------------------
    def describe(self) -> dict[str, str]:
        host = self.host.describe()
        return {
            "engine": "ttnn prompt path",
            "device": f"chip: {ON_CHIP}; host {host['device']}: {ON_HOST}",
            "dtype": f"chip bfloat16 activations; text encoder {host['dtype']}",
        }

    def image_features(self, levels: list[Any]) -> ChipImageState:
        """The image trace's outputs (four FPN maps, then the class-token tile) as this path's state."""
        return ChipImageState(
            levels[FINE], levels[MIDDLE], levels[COARSE], levels[-1], next(self._image_serials)
        )

    def encode_exemplars(
        self, image_state: ChipImageState, boxes: list[np.ndarray], labels: list[np.ndarray]
    ) -> list[Any]:
        """The geometry encoder's box path on the host (the module doc says why), on this image's
        scale-1 map read back from the chip: one read of (1, 1, side^2, C) bfloat16 per call.
        Arguments and result as TorchEngine.encode_exemplars."""
        side = self.decoder.height
        coarse = self.ttnn.to_torch(image_state.coarse).float().reshape(1, side, side, -1)
        level = coarse.permute(0, 3, 1, 2).contiguous()
        return self.host.exemplar_tokens(level, self.coarse_position, image_state.serial, boxes, labels)

    def encode_prompts(self, prompts: list[str]) -> list[Any]:
        return self.host.encode_prompts(prompts)

    def compile(self, image_state: ChipImageState) -> None:
        """Run every bucket's prompt forward and both mask reads (the kept rows', the fallback's)
        once, eagerly, so all their programs exist before any trace is captured."""
        for bucket in self.buckets:
            features, masks = self.prompts.features[bucket], self.prompts.masks[bucket]
            outputs = PromptOutputs(*self._forward(bucket, features, masks, *self._inputs(image_state)))
            self._kept_mask_logits(ChipMasks(outputs.kept_embeddings, outputs.pixels, bucket, np.empty(0)))
            self._mask_rows(ChipMasks(outputs.embeddings, outputs.pixels, bucket, None), {0: np.zeros(1)})
            for tensor in vars(outputs).values():
                self.ttnn.deallocate(tensor)

    def decode(
        self,
        image_state: ChipImageState,
        prompt_states: list[Any],
        max_instances: int | None = None,
        exemplars: list[Any] | None = None,
    ) -> DecodedBatch:
        """All prompts in one replay of their bucket's trace.

        With max_instances <= k (or k = every query), only the kept rows' logits, boxes and
        indices and the presence logits are read back, and the other queries' logits are -inf;
        otherwise every query's (the module doc says why). ``exemplars``: one entry per prompt,
        its encode_exemplars state (from this image or an earlier one) or None."""
        count = len(prompt_states)
        if count > self.buckets[-1]:
            raise EngineError(f"{count} prompts: this engine was warmed up for at most {self.buckets[-1]}")
        features, valid = prompt_rows(prompt_states, exemplars, image_state.serial)
        self.prompts.set_prompts(features, valid)
        outputs = PromptOutputs(*self.prompts.run(*self._inputs(image_state)))
        if self.needs_every_query(max_instances):
            return self._every_query(outputs, count)
        return self._kept_queries(outputs, count)

    def needs_every_query(self, max_instances: int | None) -> bool:
        """Whether a call keeping up to `max_instances` per call (None: unknown) may need a
        query outside some prompt's k kept ones."""
        if self.topk_form == HOST_TOP_K:
            return True
        if self.kept >= self.decoder.queries:
            return False
        return max_instances is None or max_instances > self.kept

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        """Mask logits (n, H, W) of the asked queries. After a kept-rows decode they must be kept
        ones (the others have -inf logits): one product over the k kept rows, read back once.
        After an every-query decode: up to MASK_ROWS asked rows per prompt per read."""
        masks: ChipMasks = decoded.mask_source
        side = self.pixel.output_side
        if len(prompt_index) == 0:
            return np.empty((0, side, side), dtype=np.float32)
        if masks.positions is None:
            return self._every_query_masks(masks, prompt_index, query_index)
        rows = masks.positions[prompt_index, query_index]
        if rows.min() < 0:
            missing = int(np.argmin(rows))
            raise EngineError(
                f"query {int(query_index[missing])} of prompt {int(prompt_index[missing])} is not among "
                f"the {self.kept} queries this engine keeps per prompt"
            )
        picked = self._kept_mask_logits(masks)
        return picked[prompt_index, rows].reshape(len(rows), side, side)

    def close(self) -> None:
        """Free the device buffers and weights (the chip itself is the image encoder's), then
        the host path."""
        self.release_device()
        self.host.close()

    def release_device(self) -> None:
        """Free the device buffers, traces and weights, keeping the host path (which an engine
        that falls back to it goes on serving). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.prompts.release()
        held = [
            self.w_fusion,
            self.w_decoder,
            self.w_scoring,
            self.w_head,
            self.constants,
            self.selectors,
        ]
        for tensor in [t for group in held for t in group.values()] + [
            t for pair in self._conv_weights.values() for t in pair if t is not None
        ]:
            if tensor is not None and tensor.device() is not None:
                self.ttnn.deallocate(tensor)

    # what crosses PCIe -----------------------------------------------------------------------------
    def _kept_queries(self, outputs: PromptOutputs, count: int) -> DecodedBatch:
        """The kept rows read back, spread to (P, Q) with -inf logits on the queries not kept."""
        read, k, queries = self._read, self.kept, self.decoder.queries
        kept = read(outputs.kept_rows)[:count, 0, :k].astype(np.int64) - 1  # decoder row -> query
        if kept.min() < 0 or kept.max() >= queries:
            raise EngineError(f"the chip's top-k kept rows outside the queries: {kept.min()}..{kept.max()}")
        prompt = np.arange(count)[:, None]
        logits = np.full((count, queries), -np.inf, dtype=np.float32)
        logits[prompt, kept] = read(outputs.kept_logits)[:count, :k, 0]
        boxes = np.zeros((count, queries, 4), dtype=np.float32)
        boxes[prompt, kept] = (
            read(outputs.kept_boxes_high)[:count, :k, :4] + read(outputs.kept_boxes_low)[:count, :k, :4]
        )
        positions = np.full((count, queries), -1, dtype=np.int64)
        positions[prompt, kept] = np.arange(k)
        return DecodedBatch(
            logits=logits,
            boxes=cxcywh_to_xyxy(boxes),
            presence=read(outputs.kept_presence)[:count, 0, 0],
            mask_source=ChipMasks(outputs.kept_embeddings, outputs.pixels, count, positions),
        )

    def _every_query(self, outputs: PromptOutputs, count: int) -> DecodedBatch:
        """Every query's logit, box and the presence read back (the fallback)."""
        queries, read = slice(1, 1 + self.decoder.queries), self._read
        return DecodedBatch(
            logits=read(outputs.logits)[:count, queries, 0],
            boxes=cxcywh_to_xyxy(read(outputs.boxes)[:count, queries, :4]),
            presence=read(outputs.presence)[:count, 0, 0],
            mask_source=ChipMasks(outputs.embeddings, outputs.pixels, count, None),
        )

    def _every_query_masks(
        self, masks: ChipMasks, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        side = self.pixel.output_side
        out = np.empty((len(prompt_index), side, side), dtype=np.float32)
        pending = {int(p): list(np.nonzero(prompt_index == p)[0]) for p in np.unique(prompt_index)}
        while any(pending.values()):
            chunk = {p: rows[:MASK_ROWS] for p, rows in pending.items() if rows}
            picked = self._mask_rows(masks, {p: query_index[rows] for p, rows in chunk.items()})
            for p, rows in chunk.items():
                out[rows] = picked[p, : len(rows)].reshape(len(rows), side, side)
                pending[p] = pending[p][MASK_ROWS:]
        return out

    # the chip's work -----------------------------------------------------------------------------
    def _inputs(self, image_state: ChipImageState) -> tuple[Any, ...]:
        return image_state.fine, image_state.middle, image_state.coarse, image_state.class_tile

    def _forward(
        self,
        bucket: int,
        features: Any,
        masks: dict[str, Any],
        fine: Any,
        middle: Any,
        coarse: Any,
        class_tile: Any,
    ) -> list[Any]:
        """The prompt trace for `bucket` prompts: PromptOutputs' fields in order (the kept rows',
        then every row's); leaves every input allocated. Its stages run in this order, which is
        also the order of the buffers they allocate and free (the trace's allocation depends on it)."""
        prompt = self._prompt_tokens(features, class_tile)
        encoded = self._fusion(coarse, prompt, masks["image"])
        stack = self._decoder_stack(prompt, masks["queries"], encoded)
        logits, presence = self._scores(bucket, stack, prompt, masks["pool"])
        indices = self._ranked_rows(bucket, logits)
        kept_logits, kept_presence, high, low, kept_embeddings, embeddings = self._gather_kept(
            bucket, indices, logits, presence, stack
        )
        pixels = self._pixel_embeddings(encoded, prompt, masks["image"], fine, middle)
        return [
            kept_logits,
            kept_presence,
            high,
            low,
            indices,
            kept_embeddings,
            pixels,
            logits,
            presence,
            stack.boxes[-1],
            embeddings,
        ]

    def _prompt_tokens(self, features: Any, class_tile: Any) -> Any:
        """(B, T, C) prompt tokens: the prompt buffers' rows with the image's class token placed
        at CLASS_ROW (a 0/1 matmul of the class tile, exact)."""
        ttnn, settings = self.ttnn, self.settings
        placed = ttnn.matmul(
            self.constants["placement"],
            class_tile,
            memory_config=settings.memory,
            compute_kernel_config=settings.exact_kernel,
        )
        prompt = ttnn.add(features, placed, memory_config=settings.memory)
        ttnn.deallocate(placed)
        return prompt

    def _fusion(self, coarse: Any, prompt: Any, image_mask: Any) -> Any:
        """The fusion encoder over the scale-1 map's tokens, attending to the prompt tokens."""
        ttnn = self.ttnn
        tokens = ttnn.reshape(coarse, (1, coarse.shape[-2], coarse.shape[-1]))
        return fusion_encoder(
            ttnn,
            tokens,
            prompt,
            image_mask,
            self.w_fusion,
            self.fusion,
            self.settings,
            self.fusion_layers,
        )

    def _decoder_stack(self, prompt: Any, query_mask: Any, encoded: Any) -> Any:
        """The decoder stack with its box refinement, its keys the encoded image plus its
        position encoding; of its per-layer outputs only the last layer's queries and boxes
        are kept (the others are freed)."""
        ttnn, settings = self.ttnn, self.settings
        keyed = ttnn.add(encoded, self.constants["position"], memory_config=settings.memory)
        stack = decoder_stack(
            ttnn,
            DecoderStackInputs(prompt, query_mask, encoded, keyed),
            self.w_decoder,
            self.decoder,
            settings,
        )
        ttnn.deallocate(keyed)
        for tensor in [*stack.queries[:-1], *stack.boxes[:-1]]:
            ttnn.deallocate(tensor)
        return stack

    def _scores(self, bucket: int, stack: Any, prompt: Any, pool_mask: Any) -> tuple[Any, Any]:
        """Every row's query logit (against the prompt tokens pooled by the pool mask's softmax)
        and presence logit; frees the decoder's hidden states."""
        ttnn, settings = self.ttnn, self.settings
        pool_rows = ttnn.softmax(pool_mask, -1, memory_config=settings.memory)
        pool = ttnn.reshape(pool_rows, (bucket, 1, PROMPT_TOKENS))
        logits = query_logits(ttnn, stack.hidden, prompt, pool, self.w_scoring, self.scoring, settings)
        # The reshape copies (its last dimension changes): both buffers are freed, or the copy
        # would outlive the capture (an unsafe allocation to the trace allocation tracker).
        ttnn.deallocate(pool)
        ttnn.deallocate(pool_rows)
        presence = presence_logits(ttnn, stack.hidden, self.w_scoring, self.scoring, settings)
        ttnn.deallocate(stack.hidden)
        return logits, presence

    def _ranked_rows(self, bucket: int, logits: Any) -> Any:
        """(B, 1, k) uint16 decoder rows of each prompt's k kept queries, best first, in the
        warm-up check's top-k form (selection.TOPK_FORMS)."""
        ttnn, settings = self.ttnn, self.settings
        if self.topk_form == HOST_TOP_K:
            # No ttnn.topk (it failed its warm-up check): stand-in kept rows, the first k queries;
            # decode reads every query and the host ranks them (needs_every_query).
            return ttnn.clone(self.constants[f"first_rows.{bucket}"], memory_config=settings.memory)
        # Ranked by logit, not score: the same order, without the bfloat16 product's ties (see
        # selection.py); the flags are not used, the host applies the threshold.
        values, indices, flags = selection.top_queries(
            ttnn,
            logits,
            self.constants["candidates"],
            self.kept,
            0.0,
            settings,
            widen=self.constants.get("widen"),
        )
        for tensor in (values, flags):
            ttnn.deallocate(tensor)
        return indices

    def _gather_kept(
        self, bucket: int, indices: Any, logits: Any, presence: Any, stack: Any
    ) -> tuple[Any, Any, Any, Any, Any, Any]:
        """The kept rows gathered on the chip by their one-hot selection matrix: (logits,
        presence, boxes' high half, low half, mask embeddings, then every row's mask embeddings,
        which the segmentation head makes from the decoder's last queries, freed here)."""
        ttnn, settings = self.ttnn, self.settings
        pick = selection.selection_matrix(ttnn, indices, self.constants["rows"], settings)
        kept_logits = selection.gather_rows(ttnn, pick, logits, settings)
        kept_presence = gather_presence(ttnn, pick, presence, self.selectors[bucket], settings)
        high, low = gather_float32_rows(ttnn, pick, stack.boxes[-1], settings)
        embeddings = head.mask_embeddings(ttnn, stack.queries[-1], self.w_head, settings)
        ttnn.deallocate(stack.queries[-1])
        kept_embeddings = selection.gather_rows(ttnn, pick, embeddings, settings)
        ttnn.deallocate(pick)
        return kept_logits, kept_presence, high, low, kept_embeddings, embeddings

    def _pixel_embeddings(self, encoded: Any, prompt: Any, image_mask: Any, fine: Any, middle: Any) -> Any:
        """(B, H*W, C) per-pixel embeddings: the encoded image's cross-attention to the prompt,
        then the pixel decoder over the scale-4 and scale-2 maps; frees the encoded image and
        the prompt tokens."""
        ttnn, settings = self.ttnn, self.settings
        attended = head.prompt_cross_attention(
            ttnn, encoded, prompt, image_mask, self.w_head, self.head_shape, self.head_eps, settings
        )
        ttnn.deallocate(encoded)
        ttnn.deallocate(prompt)
        pixels = head.pixel_decoder(
            ttnn,
            self.device,
            attended,
            [fine, middle],
            self.w_head,
            self.pixel,
            settings,
            self._conv_weights,
            self._conv_dtype,
        )
        ttnn.deallocate(attended)
        return pixels

    def _kept_mask_logits(self, masks: ChipMasks) -> np.ndarray:
        """(B, k, H*W) mask logits of every kept row: the kept embeddings times the pixels (fixed
        shapes, compiled at warm-up), read back."""
        logits = head.mask_logits(self.ttnn, masks.embeddings, masks.pixels, self.w_head, self.settings)
        values = self._read(logits)
        self.ttnn.deallocate(logits)
        return values

    def _mask_rows(self, masks: ChipMasks, rows: dict[int, np.ndarray]) -> np.ndarray:
        """(B, MASK_ROWS, H*W) logits of the asked query rows of each prompt (the fallback): a
        one-hot selection of every row's embeddings, then the product with the pixels (fixed
        shapes, compiled at warm-up)."""
        ttnn, settings = self.ttnn, self.settings
        bucket = masks.embeddings.shape[0]
        pick = torch.zeros(bucket, MASK_ROWS, self.decoder.rows)
        for prompt, queries in rows.items():
            pick[prompt, np.arange(len(queries)), 1 + np.asarray(queries, dtype=np.int64)] = 1.0
        pick_device = self._tensor(pick)
        chosen = ttnn.matmul(
            pick_device,
            masks.embeddings,
            memory_config=settings.memory,
            compute_kernel_config=settings.exact_kernel,
        )
        ttnn.deallocate(pick_device)
        logits = head.mask_logits(ttnn, chosen, masks.pixels, self.w_head, settings)
        ttnn.deallocate(chosen)
        values = self._read(logits)
        ttnn.deallocate(logits)
        return values

    # host helpers ----------------------------------------------------------------------------------
    def _tensor(self, values: torch.Tensor) -> Any:
        ttnn = self.ttnn
        return ttnn.from_torch(
            values.float(),
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=self.device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )

    def _read(self, tensor: Any) -> np.ndarray:
        return self.ttnn.to_torch(tensor).float().numpy()


def sine_position(model: Any, side: int, channels: int) -> torch.Tensor:
    """The neck's sine position encoding (1, C, side, side) of a square map: a function of the
    shape only, made once on the host (the fusion encoder's, decoder's and geometry encoder's keys)."""
    encoding = model.vision_encoder.neck.position_encoding
    with torch.no_grad():
        return encoding((1, channels, side, side), torch.device("cpu"), torch.float32).float()


def gather_presence(ttnn: Any, pick: Any, presence: Any, selector: Any, settings: Any) -> Any:
    """(B, k, 1) the presence token's logit (row 0) on each kept row: the presence selector
    spreads row 0 to every row, the gather keeps k of them; exact (one value times 1)."""
    spread = ttnn.matmul(
        selector, presence, memory_config=settings.memory, compute_kernel_config=settings.exact_kernel
    )
    out = selection.gather_rows(ttnn, pick, spread, settings)
    ttnn.deallocate(spread)
    return out


def gather_float32_rows(ttnn: Any, pick: Any, values: Any, settings: Any) -> tuple[Any, Any]:
    """The kept rows of a float32 tensor as two bfloat16 halves, high + low: the bfloat16 gather
    is exact, and the two halves carry 16 of float32's 24 mantissa bits (a box corner within
    2^-17 of its float32 value, where one bfloat16 would be 2^-9: 2 pixels of 1008)."""
    high_rows = ttnn.typecast(values, ttnn.bfloat16, memory_config=settings.memory)
    negated = ttnn.mul(high_rows, -1.0, memory_config=settings.memory)  # exact
    negated_wide = ttnn.typecast(negated, ttnn.float32, memory_config=settings.memory)
    ttnn.deallocate(negated)
    rest = ttnn.add(values, negated_wide, memory_config=settings.memory)
    ttnn.deallocate(negated_wide)
    low_rows = ttnn.typecast(rest, ttnn.bfloat16, memory_config=settings.memory)
    ttnn.deallocate(rest)
    high = selection.gather_rows(ttnn, pick, high_rows, settings)
    low = selection.gather_rows(ttnn, pick, low_rows, settings)
    ttnn.deallocate(high_rows)
    ttnn.deallocate(low_rows)
    return high, low


def cxcywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """Centre-size boxes to corners, as transformers' box_cxcywh_to_xyxy."""
    cx, cy, w, h = np.moveaxis(boxes, -1, 0)
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1).astype(np.float32)
