"""Random SAM 3 weights at a gain where a wrong layer shows, for tests that compare implementations.

transformers' 0.02 initialisation leaves attention nearly uniform and every detection score near
0.25, so a wrong stage can pass a comparison; unit gain cannot hide it.
"""

from __future__ import annotations

import torch


def full_size_sam3(seed: int) -> torch.nn.Module:
    """transformers' full-size Sam3Model (Sam3Config(), SAM 3 as released) with Meta's constants
    (its epsilons and activations), in eval mode, its initialisation drawn from `seed`: the same
    seed, the same model, and the caller's global RNG left as it was."""
    from transformers import Sam3Config, Sam3Model

    from tt_sam3_ros.weights.meta_constants import apply_meta_constants

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        config = Sam3Config()
        apply_meta_constants(config)
        return Sam3Model(config).eval()
    finally:
        torch.random.set_rng_state(state)


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


def randomise_prompt_embeddings(model: torch.nn.Module, seed: int = 20) -> None:
    """Re-draw the learned embeddings of `model`'s prompt path at unit std, in place: the geometry
    encoder's label and class embeddings, the decoder's queries, reference points and presence
    token. randomise() leaves nn.Embedding at transformers' 0.02, where every query starts alike
    (a full-size model's 200 logits then lie within about 1e-3 of each other) and a box's label
    barely counts beside its position, so a comparison could not tell the labels apart."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in PROMPT_MODULES:
            for m in getattr(model, name).modules():
                if isinstance(m, torch.nn.Embedding):
                    m.weight.copy_(torch.randn(m.weight.shape, generator=generator))
