"""The image path's weights as a manifest for the mock runner: names, roles and shapes.

Runs where torch and transformers are (the project's 3.11 venv): builds the vision encoder
on torch's meta device (no memory, no values; the full-size model in about a second) and the
geometry encoder on the CPU (8M parameters: its start token is computed at preparation), runs
the engine's own preparation on them (``prepare_vit``, ``prepare_neck`` and the engine's
geometry weights), and writes what image_path.py needs in .venv-ttnn, which has no torch: the
ImagePathConfig and GeometryConfig fields and one entry per prepared weight. Values are not
handed over: nothing computes on the mock.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

#: The two sizes the mock check runs: the project's tiny model and SAM 3's real architecture.
SIZES = ("tiny", "full")


def model_config(size: str) -> Any:
    """transformers' Sam3Config of the tiny test model or of SAM 3 itself."""
    from transformers import Sam3Config

    if size == "tiny":
        from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

        return tiny_sam3_config()
    if size == "full":
        return Sam3Config()
    raise ValueError(f"size {size!r} is not one of {SIZES}")


def vision_config(size: str) -> Any:
    """transformers' Sam3VisionConfig of the tiny test model or of SAM 3 itself."""
    return model_config(size).vision_config


def build(size: str, weight_dtype: str = "bfloat8_b", param_dtype: str = "bfloat16") -> dict[str, Any]:
    """The manifest of one size: {"config": ImagePathConfig fields, "geometry": GeometryConfig
    fields, "weights": [name, kind, shape]}."""
    import types

    import torch
    from transformers.models.sam3.modeling_sam3 import Sam3GeometryEncoder, Sam3VisionModel

    from tt_sam3_ros.engines.ttnn_engine import _geometry_weights
    from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig
    from tt_sam3_ros.engines.ttnn_model.geometry_encoder import GeometryConfig
    from tt_sam3_ros.engines.ttnn_model.weights import prepare_neck, prepare_vit

    full = model_config(size)
    config = full.vision_config
    with torch.device("meta"):
        encoder = Sam3VisionModel(config).eval()
    geometry = Sam3GeometryEncoder(full.geometry_encoder_config).eval()
    image_config = ImagePathConfig.from_hf(config)
    prepared = prepare_vit(encoder.backbone, image_config)
    prepared.update(prepare_neck(encoder.neck, image_config))
    # The engine's own geometry weights (the neck's sine position encoding has no parameters).
    model = types.SimpleNamespace(vision_encoder=encoder, geometry_encoder=geometry)
    prepared.update(_geometry_weights(model, image_config))
    return {
        "size": size,
        "config": dataclasses.asdict(image_config),
        "geometry": dataclasses.asdict(GeometryConfig.from_module(geometry)),
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
