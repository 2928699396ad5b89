"""SAM 3 through PyTorch (transformers' Sam3Model) on a CPU or a CUDA device.

Text prompts are run the way Meta's model runs them: its geometry encoder always
runs and appends its class token to the prompt. transformers skips the geometry
encoder for text-only calls, which changes logits by up to ~0.14; passing one
padded box (label -10, masked out) makes it run exactly as Meta's does. The padded
box carries no information, so the class token depends only on the image.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .base import MODEL_SIDE, DecodedBatch, EngineError

LOG = logging.getLogger(__name__)

#: transformers' marker for a padding box: masked out of the geometry encoder.
PADDING_BOX_LABEL = -10
#: CLIP context SAM 3 pads prompts to.
TEXT_CONTEXT = 32


@dataclass
class PromptFeatures:
    """One prompt's text encoding, on the engine's device.

    Attributes:
        features: (32, D) projected text features.
        mask: bool (32,) valid token positions.
    """

    features: torch.Tensor
    mask: torch.Tensor


def resolve_device(device: str | None) -> torch.device:
    """'cpu', 'cuda', 'cuda:1' or None (CUDA when available, else CPU)."""
    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise EngineError(f"device {device!r} requested but torch sees no CUDA device")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """'float32' / 'bfloat16' (or torch dtypes); None means bf16 on CUDA, fp32 on CPU."""
    if dtype in (None, "", "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
    }
    if dtype not in names:
        raise EngineError(f"dtype {dtype!r} not supported by the torch engine; use one of {sorted(names)}")
    return names[dtype]


class TorchEngine:
    """transformers' Sam3Model behind the Engine interface (engines/base.py)."""

    name = "torch"

    def __init__(
        self, model: Any, tokenizer: Any, device: str | None = None, dtype: str | None = None
    ) -> None:
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.model: Any = model.to(device=self.device, dtype=self.dtype).eval()
        self.tokenizer = tokenizer

    def describe(self) -> dict[str, str]:
        """Engine, device and dtype in words."""
        device = str(self.device)
        if self.device.type == "cuda":
            device = f"{device} ({torch.cuda.get_device_name(self.device)})"
        else:
            device = f"cpu ({torch.get_num_threads()} threads)"
        return {"engine": self.name, "device": device, "dtype": str(self.dtype).removeprefix("torch.")}

    def _require_model(self) -> Any:
        if self.model is None:
            raise EngineError("the torch engine is closed")
        return self.model

    @torch.inference_mode()
    def encode_image(self, pixel_values: np.ndarray) -> Any:
        """float32 (1, 3, 1008, 1008) -> transformers' Sam3VisionEncoderOutput on the device."""
        if pixel_values.shape != (1, 3, MODEL_SIDE, MODEL_SIDE):
            raise EngineError(
                f"pixel_values must be (1, 3, {MODEL_SIDE}, {MODEL_SIDE}), got {pixel_values.shape}"
            )
        pixels = torch.from_numpy(pixel_values).to(device=self.device, dtype=self.dtype)
        return self._require_model().get_vision_features(pixel_values=pixels)

    @torch.inference_mode()
    def encode_prompts(self, prompts: list[str]) -> list[PromptFeatures]:
        """Tokenise (padded to 32) and encode texts in one batch; one state per prompt."""
        tokens = self.tokenizer(
            prompts, padding="max_length", max_length=TEXT_CONTEXT, truncation=True, return_tensors="pt"
        )
        input_ids = tokens["input_ids"].to(self.device)
        attention_mask = tokens["attention_mask"].to(self.device)
        text = self._require_model().get_text_features(input_ids=input_ids, attention_mask=attention_mask)
        return [PromptFeatures(text.pooler_output[i], attention_mask[i].bool()) for i in range(len(prompts))]

    @torch.inference_mode()
    def decode(self, image_state: Any, prompt_states: list[PromptFeatures]) -> DecodedBatch:
        """All prompts against one image in one batch."""
        from transformers.modeling_outputs import BaseModelOutputWithPooling
        from transformers.models.sam3.modeling_sam3 import Sam3VisionEncoderOutput

        count = len(prompt_states)
        # A view, not a copy: every prompt reads the same image features.
        vision = Sam3VisionEncoderOutput(
            fpn_hidden_states=tuple(f.expand(count, -1, -1, -1) for f in image_state.fpn_hidden_states),
            fpn_position_encoding=tuple(
                p.expand(count, -1, -1, -1) for p in image_state.fpn_position_encoding
            ),
        )
        text = BaseModelOutputWithPooling(pooler_output=torch.stack([s.features for s in prompt_states]))
        mask = torch.stack([s.mask for s in prompt_states]).long()
        boxes = torch.zeros(count, 1, 4, device=self.device, dtype=self.dtype)
        labels = torch.full((count, 1), PADDING_BOX_LABEL, device=self.device, dtype=torch.long)
        outputs = self._require_model()(
            vision_embeds=vision,
            text_embeds=text,
            attention_mask=mask,
            input_boxes=boxes,
            input_boxes_labels=labels,
        )
        return DecodedBatch(
            logits=_host(outputs.pred_logits),
            boxes=_host(outputs.pred_boxes),
            presence=_host(outputs.presence_logits).reshape(count),
            mask_source=outputs.pred_masks,
        )

    @torch.inference_mode()
    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        """Only the selected queries' 288x288 mask logits cross to the host."""
        masks = decoded.mask_source
        index_p = torch.as_tensor(prompt_index, device=masks.device, dtype=torch.long)
        index_q = torch.as_tensor(query_index, device=masks.device, dtype=torch.long)
        return _host(masks[index_p, index_q])

    def warmup(self) -> None:
        """One full pass on a grey image, so allocations and kernel selection happen now."""
        pixels = np.zeros((1, 3, MODEL_SIDE, MODEL_SIDE), dtype=np.float32)
        decoded = self.decode(self.encode_image(pixels), self.encode_prompts(["object"]))
        self.fetch_masks(decoded, np.array([0]), np.array([0]))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Drop the model; on CUDA also return cached blocks to the driver."""
        if self.model is None:
            return
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _host(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(device="cpu", dtype=torch.float32).numpy()
