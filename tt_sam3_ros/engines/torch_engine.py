"""SAM 3 through PyTorch (transformers' Sam3Model) on a CPU or a CUDA device.

Text prompts are run the way Meta's model runs them: its geometry encoder always
runs and appends its class token to the prompt. transformers skips the geometry
encoder for text-only calls, which changes logits by up to ~0.14; passing one
padded box (label -10, masked out) makes it run exactly as Meta's does. The padded
box carries no information, so the class token depends only on the image.

The prompt path is Sam3Model.forward composed stage by stage, so that what depends
only on the image runs once per image instead of once per prompt, and only the masks
that are asked for are computed:

- the geometry encoder's class token (the padded box is masked out);
- the first fusion-encoder layer's self-attention, which reads image tokens only;
- mask logits: the segmentation head's per-pixel embedding is kept and each selected
  query's 288x288 mask is computed in ``fetch_masks`` instead of all 200 per prompt,
  and the semantic-segmentation output nobody reads is skipped.

Every other operation is transformers' own module call, on the same inputs; the parity
tests hold it to the reference to 1e-4. `make bench` (model section) measures the
composed path against transformers' forward.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tt_sam3_ros.core import preprocess
from tt_sam3_ros.engines.base import MODEL_SIDE, TEXT_CONTEXT, DecodedBatch, Engine, EngineError


@dataclass
class ImageFeatures:
    """Everything of the prompt path that depends only on the image, batch 1, on the device.

    Attributes:
        vision: transformers' Sam3VisionEncoderOutput (FPN features and position encodings).
        class_token: (1, 2, D) geometry encoder output for one padded box (class token, pad).
        class_token_mask: bool (1, 2) valid positions of ``class_token``.
        image_tokens: (1, H*W, D) flattened coarsest FPN level, the fusion encoder's input.
        image_positions: (1, H*W, D) their position encodings.
        spatial_shapes: long (1, 2) (H, W) of that level.
        after_self_attention: (1, H*W, D) first fusion-encoder layer after its self-attention.
        serial: which ``encode_image`` call made it (exemplar tokens remember theirs).
    """

    vision: Any
    class_token: torch.Tensor
    class_token_mask: torch.Tensor
    image_tokens: torch.Tensor
    image_positions: torch.Tensor
    spatial_shapes: torch.Tensor
    after_self_attention: torch.Tensor
    serial: int = 0


@dataclass
class ExemplarTokens:
    """One concept's exemplar boxes as the geometry encoder encoded them, on the device.

    On the image they were drawn on, the concept's geometry prompt is ``box_tokens`` followed by
    ``class_token`` (SAM 3's own prompt); on a later image, ``box_tokens`` followed by that
    image's own class token (our extension: the concept carried to later frames).

    Attributes:
        box_tokens: (N, D) one token per box: its coordinates, the image region under it and its
            label (positive or negative), after the geometry encoder's layers.
        class_token: (1, D) the geometry encoder's class token, which attended to these boxes.
        image_serial: ``ImageFeatures.serial`` of the image they were drawn on.
    """

    box_tokens: torch.Tensor
    class_token: torch.Tensor
    image_serial: int


@dataclass
class MaskFactors:
    """What mask logits are made of, kept on the device until ``fetch_masks`` asks.

    mask logits[p, q] = query_embeddings[p, q] . pixel_embeddings[p] (a dot product per pixel).

    Attributes:
        query_embeddings: (P, Q, C) mask embeddings of every query.
        pixel_embeddings: (P, C, 288, 288) per-pixel instance embeddings.
    """

    query_embeddings: torch.Tensor
    pixel_embeddings: torch.Tensor


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


#: The dtypes the engine runs in, by the names parameters and the CLI use.
DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """'float32' / 'bfloat16' (or torch dtypes); None means bf16 on CUDA, fp32 on CPU."""
    if dtype in (None, "", "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPE_NAMES:
        choices = ", ".join(sorted(DTYPE_NAMES))
        raise EngineError(f"dtype {dtype!r} not supported by the torch engine; use one of {choices}")
    return DTYPE_NAMES[dtype]


class TorchEngine(Engine):
    """transformers' Sam3Model behind the Engine interface (engines/base.py)."""

    name = "torch"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: str | None = None,
        dtype: str | None = None,
        compile_image_encoder: bool = False,
    ) -> None:
        """Move ``model`` (in place) to ``device`` and ``dtype``.

        Args:
            compile_image_encoder: CUDA only, off by default and NOT yet run on a GPU here:
                wraps the image encoder (one static shape, most of the FLOPs) in
                torch.compile(mode="max-autotune"), which also replays it as CUDA graphs.
                The first frames then pay minutes of compiling (warmup() takes it).
        """
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.model: Any = model.to(device=self.device, dtype=self.dtype).eval()
        self.tokenizer = tokenizer
        self._image_serials = itertools.count(1)
        if compile_image_encoder:
            if self.device.type != "cuda":
                raise EngineError("compile_image_encoder is offered on CUDA devices only")
            self.model.vision_encoder = torch.compile(self.model.vision_encoder, mode="max-autotune")

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
    def encode_image(self, image: np.ndarray) -> ImageFeatures:
        """uint8 (1008, 1008, 3) -> the image's features and its prompt-independent stages."""
        if image.shape != (MODEL_SIDE, MODEL_SIDE, 3) or image.dtype != np.uint8:
            raise EngineError(
                f"image must be uint8 ({MODEL_SIDE}, {MODEL_SIDE}, 3), got {image.dtype} {image.shape}"
            )
        pixels = torch.from_numpy(preprocess.normalise(image)).to(device=self.device, dtype=self.dtype)
        return self.image_features(self._require_model().get_vision_features(pixel_values=pixels))

    @torch.inference_mode()
    def image_features(self, vision: Any) -> ImageFeatures:
        """The prompt path's image-only stages, from a Sam3VisionEncoderOutput.

        Public so that an engine running the image encoder elsewhere (the ttnn engine, on
        the chip) can hand its features to this prompt path. Only ``fpn_hidden_states``
        and ``fpn_position_encoding`` are read; they must be on this engine's device and dtype.
        """
        levels = vision.fpn_hidden_states[:-1]  # Sam3Model.forward drops the coarsest level
        positions = vision.fpn_position_encoding[:-1]
        class_token, class_token_mask = self._class_token(levels, positions)
        tokens, token_positions, spatial_shapes = (
            self._require_model().detr_encoder._prepare_multilevel_features([levels[-1]], [positions[-1]])
        )
        return ImageFeatures(
            vision=vision,
            class_token=class_token,
            class_token_mask=class_token_mask,
            image_tokens=tokens,
            image_positions=token_positions,
            spatial_shapes=spatial_shapes,
            after_self_attention=self._first_self_attention(tokens, token_positions),
            serial=next(self._image_serials),
        )

    def _class_token(
        self, levels: tuple[torch.Tensor, ...], positions: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Geometry encoder on one padded box: Meta's class token, identical for every prompt."""
        boxes = torch.zeros(1, 1, 4, device=self.device, dtype=self.dtype)
        # Sam3Model.forward turns label -10 into mask False and label 0.
        box_mask = torch.zeros(1, 1, device=self.device, dtype=torch.bool)
        box_labels = torch.zeros(1, 1, device=self.device, dtype=torch.long)
        geometry = self._require_model().geometry_encoder(
            box_embeddings=boxes,
            box_mask=box_mask,
            box_labels=box_labels,
            img_feats=levels,
            img_pos_embeds=positions,
        )
        return geometry.last_hidden_state, geometry.attention_mask

    @property
    def takes_exemplars(self) -> bool:
        return True

    @torch.inference_mode()
    def encode_exemplars(
        self, image_state: ImageFeatures, boxes: list[np.ndarray], labels: list[np.ndarray]
    ) -> list[ExemplarTokens]:
        """The geometry encoder on each concept's exemplar boxes, every concept in one batch.

        Sam3Model.forward's geometry step with ``input_boxes`` / ``input_boxes_labels``: a concept
        with fewer boxes than the longest is padded with masked-out boxes, which no valid token
        attends to.

        Args:
            image_state: the image the boxes were drawn on (``encode_image``).
            boxes: per concept, float32 (N, 4) cx, cy, w, h normalised to the model input, N >= 1.
            labels: per concept, int (N,) 1 positive, 0 negative.
        """
        vision = image_state.vision
        # the geometry encoder reads the scale-1 map only (the last level Sam3Model keeps)
        level, position = vision.fpn_hidden_states[-2], vision.fpn_position_encoding[-2]
        return self.exemplar_tokens(level, position, image_state.serial, boxes, labels)

    @torch.inference_mode()
    def exemplar_tokens(
        self,
        level: torch.Tensor,
        position: torch.Tensor,
        image_serial: int,
        boxes: list[np.ndarray],
        labels: list[np.ndarray],
    ) -> list[ExemplarTokens]:
        """``encode_exemplars`` given the scale-1 FPN map (1, D, H, W) and its sine position
        encoding directly: the ROI pooling of each box's region of the map (layer-normed), its
        position and label terms, and the geometry encoder's layers, which attend to the whole
        map. Public so that a prompt path that keeps the maps elsewhere (the ttnn engine's chip
        prompt path reads this one map back) can run the box path here."""
        count, longest = len(boxes), max(len(b) for b in boxes)
        padded = torch.zeros(count, longest, 4)
        valid = torch.zeros(count, longest, dtype=torch.bool)
        box_labels = torch.zeros(count, longest, dtype=torch.long)
        for row, (concept_boxes, concept_labels) in enumerate(zip(boxes, labels, strict=True)):
            size = len(concept_boxes)
            padded[row, :size] = torch.from_numpy(np.asarray(concept_boxes, dtype=np.float32))
            valid[row, :size] = True
            box_labels[row, :size] = torch.from_numpy(np.asarray(concept_labels, dtype=np.int64))
        level = level.to(device=self.device, dtype=self.dtype)
        position = position.to(device=self.device, dtype=self.dtype)
        geometry = (
            self._require_model()
            .geometry_encoder(
                box_embeddings=padded.to(device=self.device, dtype=self.dtype),
                box_mask=valid.to(self.device),
                box_labels=box_labels.to(self.device),
                img_feats=(level.expand(count, -1, -1, -1),),
                img_pos_embeds=(position.expand(count, -1, -1, -1),),
            )
            .last_hidden_state
        )
        # concat_padded_sequences puts the class token right after a concept's valid boxes.
        tokens = []
        for row, size in enumerate(len(b) for b in boxes):
            box_tokens, class_token = geometry[row, :size].clone(), geometry[row, size : size + 1].clone()
            tokens.append(ExemplarTokens(box_tokens, class_token, image_serial))
        return tokens

    def _geometry_prompts(
        self, image_state: ImageFeatures, count: int, exemplars: list[ExemplarTokens | None] | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(count, G, D) geometry tokens and (count, G) their valid positions, one row per prompt.

        A prompt without exemplars gets the image's class token (one padded box, as Meta's model
        runs a text prompt); one with exemplars its box tokens, then the class token that attended
        to them on the image they were drawn on, or this image's class token on a later image.
        """
        if exemplars is None or all(e is None for e in exemplars):
            shared = image_state.class_token.expand(count, -1, -1)
            return shared, image_state.class_token_mask.expand(count, -1)
        own = image_state.class_token[0, :1]  # the valid position; the padded box follows it
        rows = []
        for exemplar in exemplars:
            if exemplar is None:
                rows.append(own)
            elif exemplar.image_serial == image_state.serial:
                rows.append(torch.cat([exemplar.box_tokens, exemplar.class_token]))
            else:
                rows.append(torch.cat([exemplar.box_tokens, own]))
        longest = max(len(r) for r in rows)
        tokens = own.new_zeros(count, longest, own.shape[-1])
        valid = torch.zeros(count, longest, dtype=torch.bool, device=self.device)
        for index, row in enumerate(rows):
            tokens[index, : len(row)] = row
            valid[index, : len(row)] = True
        return tokens, valid

    def _first_self_attention(self, tokens: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        """Sam3DetrEncoderLayer.forward of layer 0 up to its cross-attention: image tokens only."""
        layer = self._require_model().detr_encoder.layers[0]
        normed = layer.layer_norm1(tokens)
        with_positions = normed + token_positions
        attended, _ = layer.self_attn(query=with_positions, key=with_positions, value=normed)
        return attended + tokens

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
    def decode(
        self,
        image_state: ImageFeatures,
        prompt_states: list[PromptFeatures],
        max_instances: int | None = None,
        exemplars: list[ExemplarTokens | None] | None = None,
    ) -> DecodedBatch:
        """All prompts against one image in one batch: Sam3Model.forward with one padded box, or
        with a prompt's exemplar boxes where ``exemplars`` (one entry per prompt, None for none)
        gives them; every query's outputs (max_instances is not used).

        Image-only tensors are expanded (views, not copies) to the prompt batch.
        """
        from transformers.models.sam3.modeling_sam3 import box_cxcywh_to_xyxy, inverse_sigmoid

        model = self._require_model()
        count = len(prompt_states)
        geometry, geometry_mask = self._geometry_prompts(image_state, count, exemplars)
        prompts = torch.cat([torch.stack([s.features for s in prompt_states]), geometry], dim=1)
        prompt_mask = torch.cat([torch.stack([s.mask for s in prompt_states]), geometry_mask], dim=1)
        encoded = self._fusion_encoder(image_state, prompts, prompt_mask)
        positions = image_state.image_positions.expand(count, -1, -1)
        decoded = model.detr_decoder(
            vision_features=encoded,
            text_features=prompts,
            vision_pos_encoding=positions,
            text_mask=prompt_mask,
            spatial_shapes=image_state.spatial_shapes,
        )
        box_offsets = model.detr_decoder.box_head(decoded.intermediate_hidden_states[-1])
        boxes = box_cxcywh_to_xyxy((inverse_sigmoid(decoded.reference_boxes[-1]) + box_offsets).sigmoid())
        logits = model.dot_product_scoring(
            decoder_hidden_states=decoded.intermediate_hidden_states[-1:],
            text_features=prompts,
            text_mask=prompt_mask,
        ).squeeze(-1)[-1]
        levels = tuple(f.expand(count, -1, -1, -1) for f in image_state.vision.fpn_hidden_states[:-1])
        masks = self._mask_factors(
            decoded.intermediate_hidden_states[-1], levels, encoded, prompts, prompt_mask
        )
        return DecodedBatch(
            logits=_host(logits),
            boxes=_host(boxes),
            presence=_host(decoded.presence_logits[-1]).reshape(count),
            mask_source=masks,
        )

    def _fusion_encoder(
        self, image_state: ImageFeatures, prompts: torch.Tensor, prompt_mask: torch.Tensor
    ) -> torch.Tensor:
        """Sam3DetrEncoder.forward, starting after layer 0's (shared) self-attention."""
        from transformers.masking_utils import create_bidirectional_mask

        encoder = self._require_model().detr_encoder
        count = prompts.shape[0]
        hidden = image_state.after_self_attention.expand(count, -1, -1)
        positions = image_state.image_positions.expand(count, -1, -1)
        cross_mask = create_bidirectional_mask(
            config=encoder.config,
            inputs_embeds=hidden,
            attention_mask=prompt_mask,
            encoder_hidden_states=prompts,
        )
        first = encoder.layers[0]
        attended, _ = first.cross_attn(
            query=first.layer_norm2(hidden), key=prompts, value=prompts, attention_mask=cross_mask
        )
        hidden = attended + hidden
        hidden = first.mlp(first.layer_norm3(hidden)) + hidden
        for layer in encoder.layers[1:]:
            hidden = layer(
                hidden, prompt_feats=prompts, vision_pos_encoding=positions, prompt_cross_attn_mask=cross_mask
            )
        return hidden

    def _mask_factors(
        self,
        queries: torch.Tensor,
        levels: tuple[torch.Tensor, ...],
        encoded: torch.Tensor,
        prompts: torch.Tensor,
        prompt_mask: torch.Tensor,
    ) -> MaskFactors:
        """Sam3MaskDecoder.forward up to the per-query dot product (made in ``fetch_masks``).

        The FPN levels stay expanded views: the pixel decoder only reads them.
        """
        from transformers.masking_utils import create_bidirectional_mask

        head = self._require_model().mask_decoder
        normed = head.prompt_cross_attn_norm(encoded)
        cross_mask = create_bidirectional_mask(
            config=head.config,
            inputs_embeds=normed,
            encoder_hidden_states=prompts,
            attention_mask=prompt_mask,
        )
        attended, _ = head.prompt_cross_attn(
            query=normed, key=prompts, value=prompts, attention_mask=cross_mask
        )
        encoded = encoded + attended
        count, channels = encoded.shape[0], encoded.shape[2]
        height, width = levels[-1].shape[-2:]
        coarsest = encoded[:, : height * width].transpose(1, 2).reshape(count, channels, height, width)
        pixels = head.pixel_decoder([*levels[:-1], coarsest])
        return MaskFactors(
            query_embeddings=head.mask_embedder(queries),
            pixel_embeddings=head.instance_projection(pixels),
        )

    @torch.inference_mode()
    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        """Mask logits of the selected queries only: one matrix product per prompt."""
        factors: MaskFactors = decoded.mask_source
        _, channels, height, width = factors.pixel_embeddings.shape
        device = factors.pixel_embeddings.device
        masks = torch.empty(len(prompt_index), height, width, device=device, dtype=torch.float32)
        for prompt in np.unique(prompt_index):
            rows = np.nonzero(prompt_index == prompt)[0]
            queries = factors.query_embeddings[
                int(prompt), torch.as_tensor(query_index[rows], device=device, dtype=torch.long)
            ]
            pixels = factors.pixel_embeddings[int(prompt)].reshape(channels, height * width)
            logits = (queries @ pixels).reshape(len(rows), height, width)
            masks[torch.as_tensor(rows, device=device, dtype=torch.long)] = logits.float()
        return _host(masks)

    def warmup(self) -> None:
        """One full pass on a grey image, so allocations and kernel selection happen now."""
        image = np.full((MODEL_SIDE, MODEL_SIDE, 3), 128, dtype=np.uint8)
        decoded = self.decode(self.encode_image(image), self.encode_prompts(["object"]))
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
