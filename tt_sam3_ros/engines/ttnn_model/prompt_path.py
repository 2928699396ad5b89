"""The prompt path on the chip, fed by the image trace's output buffers: nothing read back between.

SAM 3's prompt path for text prompts, in order, and where each part runs here:
- the text encoder: on the host (the torch engine's, cached per prompt by the segmenter); the
  features go up once per prompt set into PromptBuffers' persistent buffers;
- the geometry encoder's class token: on the chip, once per image, in the image trace after the
  neck (ChipImageEncoder's last output);
- per prompt batch, in one replay of the bucket's prompt trace (PromptBuffers): the prompt
  tokens (the text, then the class token placed at row 32 by a 0/1 matmul), the fusion encoder,
  the decoder stack with its box refinement and box bias, scoring, and the segmentation head up
  to the mask embeddings and the per-pixel embeddings (prompt cross-attention, pixel decoder,
  instance projection inside mask logits);
- the mask logits of the kept queries only: after the replay, one fixed-shape selection matmul
  (a one-hot (B, 32, Q) matrix from the host picks each prompt's kept rows) and the product with
  the pixels; only those logits, the scores, presence and boxes are read back.

Prompt tokens are T = 64 rows: 32 text tokens, then the class-token tile (row 32 the token,
rows 33..63 masked). Buckets of 1, 2, 4, ... max_prompts prompts (PromptBuffers) are compiled at
warm-up before the image trace is captured, since a program compiled after a capture breaks its
replays; the emulator holds the engine to that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..base import DecodedBatch, EngineError
from . import segmentation_head as head
from .attention import AttentionShape
from .config import TILE
from .decoder import DecoderStackConfig, DecoderStackInputs, decoder_stack
from .fusion_encoder import fusion_encoder
from .prompt_buffers import PromptBuffers, power_of_two_buckets
from .prompt_config import PromptLayerConfig
from .prompt_weights import (
    PIXEL_DECODER_STAGES,
    prepare_decoder,
    prepare_fusion_encoder,
    prepare_scoring,
    prepare_segmentation_head,
)
from .scoring import ScoringConfig, detection_scores, presence_logits, presence_selector, query_logits
from .weights import upload

#: Where the prompt path runs, in words (describe()).
ON_CHIP = "class token, fusion encoder, decoder, scoring, segmentation head, mask selection"
ON_HOST = "text encoder"
#: The neck outputs the prompt path reads: scale 4 and 2 (pixel decoder), scale 1 (the fusion
#: encoder's image tokens and the class token's keys); Sam3Model drops the coarsest level.
FINE, MIDDLE, COARSE = 0, 1, 2
#: Text tokens per prompt (CLIP's context) and the prompt tokens with the class-token tile.
TEXT_TOKENS = 32
PROMPT_TOKENS = TEXT_TOKENS + TILE
#: Kept queries per prompt one mask read carries (more are read in several).
MASK_ROWS = TILE


@dataclass
class ChipImageState:
    """One image as the prompt path reads it: the image trace's output buffers (valid until the
    next image), the three FPN maps and the class-token tile."""

    fine: Any
    middle: Any
    coarse: Any
    class_tile: Any


@dataclass
class ChipMasks:
    """What fetch_masks reads: the batch's mask embeddings and per-pixel embeddings on the chip."""

    embeddings: Any
    pixels: Any
    count: int


class ChipPromptPath:
    """The prompt path on an open chip (see the module doc).

    Args:
        ttnn: the ttnn module (or the emulator).
        encoder: the ChipImageEncoder on the same chip (its trace ends with the class token).
        model: transformers' Sam3Model (its prompt modules are read, never changed).
        host: the host prompt path (a TorchEngine over the model without its ViT): only its
            text encoder is used.
        max_prompts: the most prompts one decode takes.
    """

    reads_device_levels = True

    def __init__(self, ttnn: Any, encoder: Any, model: Any, host: Any, max_prompts: int) -> None:
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
        self.constants = {
            "position": self._tensor(tokens),
            "placement": self._tensor(placement_matrix()),
        }
        self.buckets = power_of_two_buckets(max_prompts)
        self.selectors = {b: self._tensor(presence_selector(self.decoder.rows, b)) for b in self.buckets}
        self.prompts = PromptBuffers(
            ttnn,
            device,
            self._forward,
            tokens=PROMPT_TOKENS,
            hidden=self.fusion.hidden,
            mask_rows={"image": config.grid**2, "queries": self.decoder.rows, "pool": 1},
            max_prompts=max_prompts,
            buckets=self.buckets,
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
        return ChipImageState(levels[FINE], levels[MIDDLE], levels[COARSE], levels[-1])

    def encode_prompts(self, prompts: list[str]) -> list[Any]:
        return self.host.encode_prompts(prompts)

    def compile(self, image_state: ChipImageState) -> None:
        """Run every bucket's prompt forward and a mask read once, eagerly, so all their programs
        exist before any trace is captured."""
        for bucket in self.buckets:
            features, masks = self.prompts.features[bucket], self.prompts.masks[bucket]
            outputs = self._forward(bucket, features, masks, *self._inputs(image_state))
            self._mask_rows(ChipMasks(outputs[4], outputs[5], bucket), {0: np.array([0])})
            for tensor in outputs:
                self.ttnn.deallocate(tensor)

    def decode(self, image_state: ChipImageState, prompt_states: list[Any]) -> DecodedBatch:
        """All prompts in one replay of their bucket's trace; scores, presence and boxes read back."""
        count = len(prompt_states)
        if count > self.buckets[-1]:
            raise EngineError(f"{count} prompts: this engine was warmed up for at most {self.buckets[-1]}")
        features, valid = self._prompt_rows(prompt_states)
        self.prompts.set_prompts(features, valid)
        logits, presence, boxes, _, embeddings, pixels = self.prompts.run(*self._inputs(image_state))
        queries = slice(1, 1 + self.decoder.queries)
        read = self._read
        return DecodedBatch(
            logits=read(logits)[:count, queries, 0],
            boxes=cxcywh_to_xyxy(read(boxes)[:count, queries, :4]),
            presence=read(presence)[:count, 0, 0],
            mask_source=ChipMasks(embeddings, pixels, count),
        )

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        """Mask logits (k, H, W) of the asked queries: up to MASK_ROWS per prompt per read."""
        masks: ChipMasks = decoded.mask_source
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

    def close(self) -> None:
        """Free the device buffers and weights (the chip itself is the image encoder's)."""
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
        self.host.close()

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
        """The prompt trace for `bucket` prompts: logits, presence, boxes, scores (B, Q, .), mask
        embeddings (B, Q, C) and per-pixel embeddings (B, H*W, C); leaves every input allocated."""
        ttnn, settings = self.ttnn, self.settings
        placed = ttnn.matmul(
            self.constants["placement"],
            class_tile,
            memory_config=settings.memory,
            compute_kernel_config=settings.exact_kernel,
        )
        prompt = ttnn.add(features, placed, memory_config=settings.memory)
        ttnn.deallocate(placed)
        tokens = ttnn.reshape(coarse, (1, coarse.shape[-2], coarse.shape[-1]))
        encoded = fusion_encoder(
            ttnn,
            tokens,
            prompt,
            masks["image"],
            self.w_fusion,
            self.fusion,
            settings,
            self.fusion_layers,
        )
        keyed = ttnn.add(encoded, self.constants["position"], memory_config=settings.memory)
        stack = decoder_stack(
            ttnn,
            DecoderStackInputs(prompt, masks["queries"], encoded, keyed),
            self.w_decoder,
            self.decoder,
            settings,
        )
        ttnn.deallocate(keyed)
        for tensor in [*stack.queries[:-1], *stack.boxes[:-1]]:
            ttnn.deallocate(tensor)
        pool_rows = ttnn.softmax(masks["pool"], -1, memory_config=settings.memory)
        pool = ttnn.reshape(pool_rows, (bucket, 1, PROMPT_TOKENS))
        logits = query_logits(ttnn, stack.hidden, prompt, pool, self.w_scoring, self.scoring, settings)
        ttnn.deallocate(pool_rows)
        presence = presence_logits(ttnn, stack.hidden, self.w_scoring, self.scoring, settings)
        scores = detection_scores(ttnn, logits, presence, self.selectors[bucket], settings)
        ttnn.deallocate(stack.hidden)
        attended = head.prompt_cross_attention(
            ttnn, encoded, prompt, masks["image"], self.w_head, self.head_shape, self.head_eps, settings
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
        embeddings = head.mask_embeddings(ttnn, stack.queries[-1], self.w_head, settings)
        ttnn.deallocate(stack.queries[-1])
        return [logits, presence, stack.boxes[-1], scores, embeddings, pixels]

    def _mask_rows(self, masks: ChipMasks, rows: dict[int, np.ndarray]) -> np.ndarray:
        """(B, MASK_ROWS, H*W) logits of the asked query rows of each prompt: a one-hot selection
        of the embeddings, then the product with the pixels (fixed shapes, compiled at warm-up)."""
        ttnn, settings = self.ttnn, self.settings
        bucket = masks.embeddings.shape[0]
        selection = torch.zeros(bucket, MASK_ROWS, self.decoder.rows)
        for prompt, queries in rows.items():
            selection[prompt, np.arange(len(queries)), 1 + np.asarray(queries)] = 1.0
        chosen = ttnn.matmul(
            self._tensor(selection),
            masks.embeddings,
            memory_config=settings.memory,
            compute_kernel_config=settings.exact_kernel,
        )
        logits = head.mask_logits(ttnn, chosen, masks.pixels, self.w_head, settings)
        ttnn.deallocate(chosen)
        values = self._read(logits)
        ttnn.deallocate(logits)
        return values

    # host helpers ----------------------------------------------------------------------------------
    def _prompt_rows(self, prompt_states: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, 33, C) text features with a zero row where the class token goes, and their (P, 33)
        validity (the class token valid)."""
        features = torch.stack([s.features.float() for s in prompt_states])
        valid = torch.stack([s.mask.bool() for s in prompt_states])
        count, width = features.shape[0], features.shape[-1]
        features = torch.cat([features, torch.zeros(count, 1, width)], dim=1)
        valid = torch.cat([valid, torch.ones(count, 1, dtype=torch.bool)], dim=1)
        return features, valid

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


def placement_matrix() -> torch.Tensor:
    """(1, T, 32) 0/1: P @ class_tile puts the tile's rows at rows 32..63 (the text's rows get 0)."""
    matrix = torch.zeros(1, PROMPT_TOKENS, TILE)
    matrix[0, TEXT_TOKENS + torch.arange(TILE), torch.arange(TILE)] = 1.0
    return matrix


def cxcywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """Centre-size boxes to corners, as transformers' box_cxcywh_to_xyxy."""
    cx, cy, w, h = np.moveaxis(boxes, -1, 0)
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1).astype(np.float32)
