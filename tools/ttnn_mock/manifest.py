"""The image path's weights as a manifest for the mock runner: names, roles and shapes.

Runs where torch and transformers are (the project's 3.11 venv): builds the vision encoder
on torch's meta device (no memory, no values; the full-size model in about a second), runs
the engine's own ``prepare_vit`` / ``prepare_neck`` on it, and writes what image_path.py
needs in .venv-ttnn, which has no torch: the ImagePathConfig fields and one entry per
prepared weight. Values are not handed over: nothing computes on the mock.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

#: The two sizes the mock check runs: the project's tiny model and SAM 3's real architecture.
SIZES = ("tiny", "full")


def vision_config(size: str) -> Any:
    """transformers' Sam3VisionConfig of the tiny test model or of SAM 3 itself."""
    from transformers import Sam3Config

    if size == "tiny":
        from tt_sam3_ros.tiny_model import tiny_sam3_config

        return tiny_sam3_config().vision_config
    if size == "full":
        return Sam3Config().vision_config
    raise ValueError(f"size {size!r} is not one of {SIZES}")


def build(size: str, weight_dtype: str = "bfloat8_b", param_dtype: str = "bfloat16") -> dict[str, Any]:
    """The manifest of one size: {"config": ImagePathConfig fields, "weights": [name, kind, shape]}."""
    import torch
    from transformers.models.sam3.modeling_sam3 import Sam3VisionModel

    from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig
    from tt_sam3_ros.engines.ttnn_model.weights import prepare_neck, prepare_vit

    config = vision_config(size)
    with torch.device("meta"):
        encoder = Sam3VisionModel(config).eval()
    image_config = ImagePathConfig.from_hf(config)
    prepared = prepare_vit(encoder.backbone, image_config)
    prepared.update(prepare_neck(encoder.neck, image_config))
    return {
        "size": size,
        "config": dataclasses.asdict(image_config),
        "weight_dtype": weight_dtype,
        "param_dtype": param_dtype,
        "weights": [
            {"name": name, "kind": weight.kind, "shape": list(weight.values.shape)}
            for name, weight in prepared.items()
        ],
    }


def write(size: str, path: Path) -> Path:
    path.write_text(json.dumps(build(size)))
    return path
