"""Engine stand-ins for measuring: one that records, ones that cost nothing, one that is slow.

Each implements tt_sam3_ros.engines.base.Engine, so Sam3Segmenter and the node run their
real code around them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tt_sam3_ros.engines.base import DecodedBatch


class DelegatingEngine:
    """Passes every Engine call to ``inner``; subclasses override only what they change."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def describe(self) -> dict[str, str]:
        return self.inner.describe()

    def encode_image(self, image: np.ndarray) -> Any:
        return self.inner.encode_image(image)

    def encode_prompts(self, prompts: list[str]) -> list[Any]:
        return self.inner.encode_prompts(prompts)

    def decode(
        self, image_state: Any, prompt_states: list[Any], max_instances: int | None = None
    ) -> DecodedBatch:
        return self.inner.decode(image_state, prompt_states, max_instances)

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        return self.inner.fetch_masks(decoded, prompt_index, query_index)

    def warmup(self) -> None:
        self.inner.warmup()

    def close(self) -> None:
        self.inner.close()


class RecordingEngine(DelegatingEngine):
    """Delegates to a real engine and keeps the last DecodedBatch, to compare raw outputs."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.last_decoded: DecodedBatch | None = None

    def decode(
        self, image_state: Any, prompt_states: list[Any], max_instances: int | None = None
    ) -> DecodedBatch:
        self.last_decoded = self.inner.decode(image_state, prompt_states, max_instances)
        return self.last_decoded


class ScriptedEngine:
    """Returns one prepared DecodedBatch for every frame, its ``mask_source`` the (P, Q, 288, 288)
    mask logits: the host work around an engine (selection, upsampling, messages), no model."""

    name = "scripted"

    def __init__(self, decoded: DecodedBatch) -> None:
        self.decoded = decoded

    def describe(self) -> dict[str, str]:
        return {"engine": self.name, "device": "none", "dtype": "float32"}

    def encode_image(self, image: np.ndarray) -> None:
        return None

    def encode_prompts(self, prompts: list[str]) -> list[None]:
        return [None] * len(prompts)

    def decode(
        self, image_state: Any, prompt_states: list[Any], max_instances: int | None = None
    ) -> DecodedBatch:
        return self.decoded

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        return decoded.mask_source[prompt_index, query_index]

    def warmup(self) -> None:
        pass

    def close(self) -> None:
        pass


class CannedEngine(ScriptedEngine):
    """Returns the same prepared outputs for every frame: host work measured without a model.

    ``mask_logits`` (K, 288, 288) belong to queries 0..K-1 of prompt 0, whose scores are
    set above any threshold; every other query scores far below.
    """

    name = "canned"

    def __init__(self, mask_logits: np.ndarray, prompt_count: int = 1, queries: int = 200) -> None:
        count = len(mask_logits)
        self.mask_logits = np.zeros((prompt_count, queries, *mask_logits.shape[1:]), dtype=np.float32)
        self.mask_logits[0, :count] = mask_logits
        logits = np.full((prompt_count, queries), -10.0, dtype=np.float32)
        logits[0, :count] = np.linspace(6.0, 2.0, count)
        boxes = np.zeros((prompt_count, queries, 4), dtype=np.float32)
        boxes[0, :count] = [_box(m) for m in mask_logits]
        presence = np.full(prompt_count, 8.0, np.float32)
        super().__init__(
            DecodedBatch(logits=logits, boxes=boxes, presence=presence, mask_source=self.mask_logits)
        )


def _box(mask_logits: np.ndarray) -> list[float]:
    """Normalised x1 y1 x2 y2 around a mask's positive logits."""
    rows, cols = np.nonzero(mask_logits > 0)
    side_rows, side_cols = mask_logits.shape
    return [
        cols.min() / side_cols,
        rows.min() / side_rows,
        (cols.max() + 1) / side_cols,
        (rows.max() + 1) / side_rows,
    ]


class SlowEngine(DelegatingEngine):
    """A real engine made slower by a fixed sleep per image: a model slower than the frame period."""

    def __init__(self, inner: Any, extra_seconds: float) -> None:
        super().__init__(inner)
        self.extra_seconds = extra_seconds

    def describe(self) -> dict[str, str]:
        return {**self.inner.describe(), "slowed": f"+{self.extra_seconds * 1000:.0f} ms per image"}

    def encode_image(self, image: np.ndarray) -> Any:
        time.sleep(self.extra_seconds)
        return self.inner.encode_image(image)
