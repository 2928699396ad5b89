"""How much a SAM 3's answers depend on the image: the figures the tiny model is held to.

    PYTHONPATH=$PWD .venv/bin/python test/support/image_sensitivity.py

prints them for the tiny model (``tiny-random``) over frames.distinct_frames().
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import pcc
from frames import distinct_frames

#: Prompts the figures are taken over.
PROMPTS = ("car", "person")


@dataclass
class Sensitivity:
    """Figures over a set of frames, each decoded for every prompt in PROMPTS.

    Attributes:
        score_spread: per prompt, max - min over frames of the best instance score.
        presence_spread: per prompt, max - min over frames of sigmoid(presence logit).
        max_logits_pcc: highest PCC of the query logits between two different frames.
        min_box_shift_px: smallest mean absolute box-coordinate difference between two frames,
            in pixels of the 1008-pixel model input.
        min_mask_change: smallest fraction of mask pixels whose sign differs between two frames.
    """

    score_spread: tuple[float, ...]
    presence_spread: tuple[float, ...]
    max_logits_pcc: float
    min_box_shift_px: float
    min_mask_change: float


def measure(model, tokenizer, frames: dict[str, np.ndarray] | None = None) -> Sensitivity:
    """Decode every frame with the torch engine (fp32, CPU) and compare the answers."""
    from tt_sam3_ros.core import preprocess
    from tt_sam3_ros.core.postprocess import sigmoid
    from tt_sam3_ros.engines.base import MODEL_SIDE
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    engine = TorchEngine(model, tokenizer, device="cpu", dtype="float32")
    prompts = engine.encode_prompts(list(PROMPTS))
    decoded, masks = [], []
    for frame in (frames or distinct_frames()).values():
        batch = engine.decode(engine.encode_image(preprocess.resize_to_model(frame)), prompts)
        count, queries = batch.logits.shape
        every = np.repeat(np.arange(count), queries), np.tile(np.arange(queries), count)
        decoded.append(batch)
        masks.append(engine.fetch_masks(batch, *every) > 0)
    best = np.stack([(sigmoid(d.logits) * sigmoid(d.presence)[:, None]).max(axis=1) for d in decoded])
    presence = np.stack([sigmoid(d.presence) for d in decoded])
    pairs = list(itertools.combinations(range(len(decoded)), 2))
    return Sensitivity(
        score_spread=tuple(float(s) for s in best.max(axis=0) - best.min(axis=0)),
        presence_spread=tuple(float(s) for s in presence.max(axis=0) - presence.min(axis=0)),
        max_logits_pcc=max(pcc(decoded[i].logits, decoded[j].logits) for i, j in pairs),
        min_box_shift_px=min(
            float(np.abs(decoded[i].boxes - decoded[j].boxes).mean()) * MODEL_SIDE for i, j in pairs
        ),
        min_mask_change=min(float((masks[i] != masks[j]).mean()) for i, j in pairs),
    )


def main() -> None:
    """Print the tiny model's figures."""
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3, clip_tokenizer

    figures = measure(build_tiny_sam3(seed=0), clip_tokenizer())
    print(f"frames: {', '.join(distinct_frames())}; prompts: {', '.join(PROMPTS)}")
    for name, value in vars(figures).items():
        shown = ", ".join(f"{v:.4f}" for v in value) if isinstance(value, tuple) else f"{value:.4f}"
        print(f"{name}: {shown}")


if __name__ == "__main__":
    main()
