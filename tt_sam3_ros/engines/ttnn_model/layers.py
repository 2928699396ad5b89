"""The two device calls every ported block makes: a linear layer and a LayerNorm, by weight name.

One home for them, so the image path (ViT, neck) and the prompt path (fusion encoder, decoder,
scoring, segmentation head) put their matmuls and norms on the chip with the same output dtype,
memory placement and kernel fidelity.
"""

from __future__ import annotations

from typing import Any

from .config import DeviceSettings


def linear(
    ttnn: Any, x: Any, w: dict[str, Any], name: str, settings: DeviceSettings, activation: str | None = None
) -> Any:
    """x @ w[name.weight] + w[name.bias] (bias optional), bfloat16 out, fused activation if given."""
    return ttnn.linear(
        x,
        w[f"{name}.weight"],
        bias=w.get(f"{name}.bias"),
        activation=activation,
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.matmul_kernel,
    )


def layer_norm(ttnn: Any, x: Any, w: dict[str, Any], name: str, eps: float, settings: DeviceSettings) -> Any:
    """LayerNorm with w[name.weight], w[name.bias] and the layer's own epsilon ``eps``."""
    return ttnn.layer_norm(
        x,
        epsilon=eps,
        weight=w[f"{name}.weight"],
        bias=w[f"{name}.bias"],
        memory_config=settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )
