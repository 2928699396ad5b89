"""The one interface every engine implements, and the raw outputs it hands back.

An engine runs SAM 3 on one device and nothing else: it never sees source images,
thresholds or messages. Pre-processing (the resize) happens before it and
post-processing (scores, boxes in source pixels, mask upsampling) after it, in
code shared by every engine (preprocess.py, postprocess.py).

The split mirrors the model's cost: the image is encoded once per frame
(``encode_image``), each distinct prompt text once per process (``encode_prompts``,
cached by the caller), and ``decode`` runs the per-prompt stages for all prompts
at once against one image.

A caller with a sequence of frames may hand the next one to ``prefetch`` while the current
one is in flight (after ``encode_image``, before its outputs are read), so an engine whose
device has a second command queue uploads it during the current frame's compute. Engines
subclass ``Engine`` to inherit the no-op default; the protocol check (``isinstance``) still
accepts any object with the methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: Side of the square the model sees; every source image is squashed to it.
MODEL_SIDE = 1008
#: Side of the mask logits the segmentation head produces.
MASK_SIDE = 288
#: Device dtypes the ttnn engine takes for its weights (weight_dtype) and parameters (param_dtype);
#: here, not in the ttnn engine, so that validating a setting never imports ttnn.
TTNN_DTYPE_NAMES = ("bfloat8_b", "bfloat16", "float32")
#: CLIP text context SAM 3 pads every prompt to, in tokens.
TEXT_CONTEXT = 32


class EngineError(RuntimeError):
    """An engine could not run: a device missing or busy, an op that failed, bad weights."""


@dataclass
class DecodedBatch:
    """What ``Engine.decode`` returns for P prompts against one image (Q queries each).

    Attributes:
        logits: float32 (P, Q) classification logits of each query.
        boxes: float32 (P, Q, 4) boxes, x1 y1 x2 y2 normalised to [0, 1] of the model input.
        presence: float32 (P,) presence logits, one per prompt.
        mask_source: engine-owned handle that ``Engine.fetch_masks`` reads mask logits from;
            kept on the device so only the queries that survive the threshold cross to the host.
    """

    logits: np.ndarray
    boxes: np.ndarray
    presence: np.ndarray
    mask_source: Any


@runtime_checkable
class Engine(Protocol):
    """SAM 3 on one device. All calls come from one thread (the one that created it)."""

    #: Short engine name: "torch" or "ttnn".
    name: str

    def describe(self) -> dict[str, str]:
        """Engine, device and dtype in words, for logs and /diagnostics."""
        ...

    def encode_image(self, image: np.ndarray) -> Any:
        """Run the image path on one image, already resized to the model's square.

        Args:
            image: uint8 RGB (1008, 1008, 3) (preprocess.resize_to_model); normalising it
                (to [-1, 1]) is the engine's first step, so the host hands over a quarter
                of the bytes and a chip can fold it into its first layer.

        Returns:
            An engine-owned image state (features left on the device), valid until the
            next ``encode_image`` call.
        """
        ...

    def prefetch(self, image: np.ndarray) -> None:
        """Start uploading the next frame while the current one is in flight; optional.

        Called after ``encode_image`` of the current frame and before its outputs are read,
        with the very array (unchanged) the next ``encode_image`` will get; that call then
        skips the upload. Any other array in the next call is encoded as usual. The default
        does nothing: an engine without a queue to overlap on has nothing to gain.
        """
        return None

    def encode_prompts(self, prompts: list[str]) -> list[Any]:
        """Run the text encoder on prompt texts; returns one reusable state per prompt."""
        ...

    @property
    def takes_exemplars(self) -> bool:
        """Whether ``encode_exemplars`` works on this engine (checked before a call's work)."""
        return False

    def encode_exemplars(
        self, image_state: Any, boxes: list[np.ndarray], labels: list[np.ndarray]
    ) -> list[Any]:
        """Run the geometry encoder on exemplar boxes drawn on one image; optional.

        Args:
            image_state: what ``encode_image`` returned for the image the boxes were drawn on.
            boxes: per concept, float32 (N, 4) cx, cy, w, h normalised to the model input, N >= 1.
            labels: per concept, int (N,) 1 positive, 0 negative.

        Returns:
            One engine-owned state per concept, for ``decode``'s ``exemplars``; it stays valid
            for later images (the concept carried on). The default refuses: an engine without
            the geometry encoder's box path says so.
        """
        raise EngineError(f"the {getattr(self, 'name', 'this')} engine does not take exemplar boxes")

    def decode(
        self, image_state: Any, prompt_states: list[Any], max_instances: int | None = None
    ) -> DecodedBatch:
        """Run the prompt path (geometry class token, fusion encoder, decoder, heads).

        ``max_instances`` is the most instances the caller will keep from this batch (None: not
        known). An engine that selects on the device may then read back only each prompt's best
        ``max_instances`` queries and give the others a logit of -inf; the host post-processing
        picks the instances from the logits either way.

        An engine that implements ``encode_exemplars`` also takes ``exemplars=``: one entry per
        prompt, its ``encode_exemplars`` state or None. Callers pass it only when some prompt
        has exemplars."""
        ...

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        """Mask logits of the selected (prompt, query) pairs: float32 (K, 288, 288)."""
        ...

    def warmup(self) -> None:
        """Run the whole path once so the first real frame pays no compile or allocation cost."""
        ...

    def close(self) -> None:
        """Release the device and everything allocated on it. Idempotent."""
        ...
