"""The prompt path with its stages on the chip, fed by the image trace's output buffers.

SAM 3's prompt path, in order: the geometry encoder's class token (once per image), the fusion
encoder (image tokens attend to the prompt tokens), the DETR decoder with its box refinement,
scoring, and the segmentation head (prompt cross-attention, pixel decoder, mask embeddings).
Here each stage that is ported runs on the chip, from device tensors, and the first stage that
is not ported yet takes over on the host through the torch engine's own code (``host``), from
the last device output read back once. ``ON_CHIP`` and ``ON_HOST`` name the split in
``describe()``; the engine's end-to-end test holds the composition to the torch engine's
instances whatever the split.

Today the split is after the fusion encoder: its six layers run on the chip for all prompts in
one batch (P prompts, one (P, 5184, C) activation), and the decoder onwards runs on the host.
The stages that still lack a chip version (ttnn_model/ has the decoder layer, scoring and the
head's attention and mask logits, not yet the decoder's glue, the pixel decoder or the class
token) move here one by one; then the whole path becomes the second trace (issue 12).

Device tensors (bfloat16, TILE, DRAM interleaved): the image tokens are the neck's level-2 map
(1, 1, 72*72, C), already in row order, repeated to the prompt batch; their sine position
encoding (1, S, C) is uploaded once (it depends only on the shape); the prompt tokens (P, T, C)
with T = padded_length(34) = 64, and their additive key mask (P, 1, S, T), are uploaded per
decode (the class token changes with the image).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..base import DecodedBatch, EngineError
from .attention import key_padding_mask
from .config import DeviceSettings
from .fusion_encoder import fusion_encoder
from .prompt_config import PromptLayerConfig, padded_length
from .prompt_weights import prepare_fusion_encoder
from .weights import upload

#: The stages on the chip and on the host, in the order the prompt path runs them.
ON_CHIP = ("fusion encoder",)
ON_HOST = ("text encoder", "class token", "decoder", "scoring", "segmentation head")
#: Prompt counts the chip runs: P prompts run as the smallest bucket >= P (the extra rows repeat
#: the first prompt and are dropped), so every program is compiled at warm-up, before the first
#: trace capture (a program compiled after a capture breaks its replays), at most 2x the work.
PROMPT_BUCKETS = (1, 2, 4, 8, 16)
#: The level of the neck's outputs the fusion encoder reads (Sam3Model drops the coarsest of
#: the four, and the encoder takes the last of the rest: 72x72 for a 1008 image).
FUSION_LEVEL = 2


def buckets_up_to(max_prompts: int) -> tuple[int, ...]:
    """The buckets a path serving at most `max_prompts` prompts compiles."""
    if not 1 <= max_prompts <= PROMPT_BUCKETS[-1]:
        raise ValueError(f"max_prompts {max_prompts}: the chip prompt path runs 1 to {PROMPT_BUCKETS[-1]}")
    return (*(b for b in PROMPT_BUCKETS if b < max_prompts), bucket_for(max_prompts))


def bucket_for(count: int) -> int:
    """The prompt-count bucket that runs `count` prompts."""
    for bucket in PROMPT_BUCKETS:
        if count <= bucket:
            return bucket
    raise ValueError(f"{count} prompts: the chip prompt path runs at most {PROMPT_BUCKETS[-1]}")


@dataclass
class ChipImageState:
    """One image as the chip prompt path needs it.

    Attributes:
        host: the torch engine's ImageFeatures (class token, positions, FPN maps on the host)
            for the stages that still run there.
        tokens: (1, S, C) device view of the neck's level-2 map: valid until the next image.
    """

    host: Any
    tokens: Any


class ChipPromptPath:
    """The prompt path on an open chip, the stages not yet ported finishing on `host`.

    ``image_features`` takes the image encoder's device outputs besides the read-back maps
    (``reads_device_levels``), so the fusion encoder starts from the chip's own buffers.

    Args:
        ttnn: the ttnn module (or the emulator).
        device: the open device the image encoder runs on (the same chip, so nothing crosses).
        settings: that device's DeviceSettings.
        model: transformers' Sam3Model (its prompt modules are read, never changed).
        host: the host prompt path (a TorchEngine over the model without its ViT, float32).
        matmul_dtype, param_dtype: device dtypes of the uploaded weights.
        max_prompts: the most prompts one decode takes: warm-up compiles the buckets up to it.
    """

    reads_device_levels = True

    def __init__(
        self,
        ttnn: Any,
        device: Any,
        settings: DeviceSettings,
        model: Any,
        host: Any,
        matmul_dtype: Any,
        param_dtype: Any,
        max_prompts: int = PROMPT_BUCKETS[-1],
    ) -> None:
        self.ttnn = ttnn
        self.buckets = buckets_up_to(max_prompts)
        self.device = device
        self.settings = settings
        self.host = host
        self.dtype = host.dtype
        encoder = model.detr_encoder
        self.fusion_config = PromptLayerConfig.from_layer(encoder.layers[0])
        self.fusion_layers = len(encoder.layers)
        self.weights = upload(ttnn, device, prepare_fusion_encoder(encoder), matmul_dtype, param_dtype)
        self._position: Any = None
        self._closed = False

    def describe(self) -> dict[str, str]:
        host = self.host.describe()
        return {
            "engine": "ttnn prompt path",
            "device": f"chip: {', '.join(ON_CHIP)}; host {host['device']}: {', '.join(ON_HOST)}",
            "dtype": f"chip bfloat16 activations; host {host['dtype']}",
        }

    def image_features(self, vision: Any, levels: list[Any]) -> ChipImageState:
        """The image's state: the host's image-only stages on the read-back maps (`vision`), and
        the device's level-2 map (`levels`, the image encoder's outputs) as the fusion encoder's
        image tokens."""
        host = self.host.image_features(vision)
        level = levels[FUSION_LEVEL]
        tokens = self.ttnn.reshape(level, (1, level.shape[-2], level.shape[-1]))
        if self._position is None:
            self._position = self._upload(host.image_positions)
        return ChipImageState(host=host, tokens=tokens)

    def encode_prompts(self, prompts: list[str]) -> list[Any]:
        """The text encoder, on the host (cached per prompt by the segmenter)."""
        return self.host.encode_prompts(prompts)

    def compile(self, image_state: ChipImageState) -> None:
        """Run every prompt-count bucket once, so all their programs exist before a capture."""
        prompt = self.encode_prompts(["object"])
        for bucket in self.buckets:
            self.decode(image_state, prompt * bucket)

    def decode(self, image_state: ChipImageState, prompt_states: list[Any]) -> DecodedBatch:
        """All prompts in one batch: the fusion encoder on the chip, the rest on the host."""
        ttnn = self.ttnn
        real = len(prompt_states)
        if real > self.buckets[-1]:
            raise EngineError(f"{real} prompts: this engine was warmed up for at most {self.buckets[-1]}")
        padded = bucket_for(real)
        prompts, prompt_mask = self.host.prompt_tokens(
            image_state.host, [*prompt_states, *[prompt_states[0]] * (padded - real)]
        )
        count, tokens = prompts.shape[0], padded_length(prompts.shape[1])
        sequence = image_state.tokens.shape[1]
        prompt = self._upload(torch.nn.functional.pad(prompts.float(), (0, 0, 0, tokens - prompts.shape[1])))
        mask = self._upload(key_padding_mask(sequence, prompt_mask, tokens))
        # The encoder consumes its input: a fresh copy per decode (a repeat by ones would hand back
        # the image trace's own output buffer).
        if count == 1:
            vision = ttnn.clone(image_state.tokens, memory_config=self.settings.memory)
        else:
            vision = ttnn.repeat(image_state.tokens, (count, 1, 1), memory_config=self.settings.memory)
        try:
            encoded = fusion_encoder(
                ttnn,
                vision,
                prompt,
                self._position,
                mask,
                self.weights,
                self.fusion_config,
                self.settings,
                self.fusion_layers,
            )
        finally:
            ttnn.deallocate(prompt)
            ttnn.deallocate(mask)
        encoded_host = ttnn.to_torch(encoded)[:real].to(self.dtype)
        ttnn.deallocate(encoded)
        return self.host.decode_encoded(image_state.host, prompts[:real], prompt_mask[:real], encoded_host)

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        return self.host.fetch_masks(decoded, prompt_index, query_index)

    def close(self) -> None:
        """Free the device weights and tables (the chip itself is the image encoder's to close)."""
        if self._closed:
            return
        self._closed = True
        for tensor in [*self.weights.values(), self._position]:
            if tensor is not None and tensor.is_allocated():
                self.ttnn.deallocate(tensor)
        self.weights, self._position = {}, None
        self.host.close()

    def _upload(self, values: torch.Tensor) -> Any:
        ttnn = self.ttnn
        return ttnn.from_torch(
            values.float(),
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=self.device,
            memory_config=ttnn.DRAM_MEMORY_CONFIG,
        )
