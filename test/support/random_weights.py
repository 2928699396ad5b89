"""Random SAM 3 weights at a gain where a wrong layer shows, for tests that compare implementations.

transformers' 0.02 initialisation leaves attention nearly uniform and every detection score near
0.25, so a wrong stage can pass a comparison; unit gain cannot hide it.
"""

from __future__ import annotations

import torch


def randomise(module: torch.nn.Module, seed: int) -> None:
    """Weights of unit gain (std 1/sqrt(fan_in)) and perturbed norms, all from `seed` (no module
    keeps its global-RNG init): attention cannot hide and every run draws the same model."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator) / fan_in**0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=generator) * 0.1)
            elif isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm)):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=generator))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=generator))


#: The prompt path's modules of a Sam3Model (everything after the image encoder and text encoder).
PROMPT_MODULES = ("geometry_encoder", "detr_encoder", "detr_decoder", "dot_product_scoring", "mask_decoder")


def randomise_prompt_path(model: torch.nn.Module, first_seed: int = 10) -> None:
    """Re-draw every prompt-path module of `model` in place, each from its own seed."""
    for seed, name in enumerate(PROMPT_MODULES, first_seed):
        randomise(getattr(model, name), seed)
