"""A tiny, seeded, random SAM 3 built from the real architecture code.

Its outputs are meaningless; it exists so that every layer of the project (weights
loading, engines, post-processing, the node, the CLI) can run end to end offline,
in tests and in ``--model tiny-random``, on the exact classes the real model uses.
Only the widths and depths shrink: the input stays 1008x1008 (72x72 patches,
24x24 windows) and the masks 288x288, so every shape outside the model is real.

Meaningless is not constant: its weights are drawn at a gain that keeps activations alive
through every layer, so its scores, boxes, presence and logits depend on the image and the
prompt as a trained model's do (at transformers' 0.02 initialisation every score sat at 0.25
whatever the frame, and a test comparing them could not see which image was used).

The tokenizer is the real CLIP BPE (49408 tokens), rebuilt from the vocabulary file
that the open-clip-torch package ships (a run-time requirement), so no download is needed;
the loaders also use it for weights that come without tokenizer files (Meta's sam3.pt).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tt_sam3_ros.engines.base import TEXT_CONTEXT

if TYPE_CHECKING:
    import torch
    from transformers import (
        CLIPTokenizer,
        Sam3Config,
        Sam3Model,
        Sam3VideoConfig,
        Sam3VideoModel,
        Sam3VideoProcessor,
    )

#: The name users pass (``--model tiny-random``, ``model_id:=tiny-random``).
TINY_MODEL_ID = "tiny-random"
_BPE_FILE = "bpe_simple_vocab_16e6.txt.gz"
#: The package that ships _BPE_FILE, as requirements/core.txt pins it.
OPEN_CLIP_REQUIREMENT = "open-clip-torch==3.3.0"
_BPE_MERGES = 49152 - 256 - 2


def tiny_sam3_config(head_width: int = 32) -> Sam3Config:
    """SAM 3's architecture at width 32 with one or two layers per stage (1.9M parameters).

    ``head_width`` widens what follows the ViT (FPN neck, text projection, geometry encoder,
    DETR encoder and decoder, mask decoder): SAM 3's memory tracker reads the neck's features and
    needs them at least as wide as its 64-channel memories. Its epsilons and activations are
    Meta's, as the loaders give every real checkpoint.
    """
    from transformers import Sam3Config

    from tt_sam3_ros.weights.meta_constants import apply_meta_constants

    small = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2}
    head = {"hidden_size": head_width, "intermediate_size": 2 * head_width, "num_attention_heads": 2}
    config = Sam3Config(
        vision_config={
            "backbone_config": {**small, "num_hidden_layers": 2, "global_attn_indexes": [1]},
            "fpn_hidden_size": head_width,
        },
        text_config={**small, "num_hidden_layers": 2, "projection_dim": head_width},
        geometry_encoder_config={**head, "num_layers": 1},
        detr_encoder_config={**head, "num_layers": 1},
        detr_decoder_config={**head, "num_layers": 2, "num_queries": 20},
        mask_decoder_config={"hidden_size": head_width, "num_attention_heads": 2},
    )
    apply_meta_constants(config)
    return config


#: Standard deviation of a layer's weights times sqrt(fan_in), per part of the model. The vision
#: encoder (ViT and FPN neck) runs above 1 so that its features stay alive through its layers and
#: depend on the image; everything else (text encoder, prompt path) runs at 1, where a small change
#: of its input makes a small change of its output, as in a trained model. At 1.25 throughout, the
#: bfloat16 rounding of the chip's features (PCC 0.9997) moved the decoded logits to PCC 0.98.
VISION_GAIN = 1.5
WEIGHT_GAIN = 1.0
#: The score and presence heads' last layers are drawn this much larger, so that detection scores
#: spread over the frames (at unit gain they stayed within 0.13-0.18 of each other).
SCORE_GAIN = 2.0
#: Standard deviation of biases, of the norms' weights around 1 and of their biases around 0.
BIAS_STD = 0.1
NORM_STD = 0.2
#: Standard deviation of embedding tables (tokens, queries, positions of the prompt path): at 0.02
#: the text features hardly depend on the prompt and the queries on nothing.
EMBEDDING_STD = 1.0
#: Scale of the box head's last layer: a trained head refines each reference box by small steps;
#: at full gain every box collapsed to zero height.
BOX_STEP_SCALE = 0.15


def build_tiny_sam3(seed: int = 0) -> Sam3Model:
    """The tiny model with weights drawn from ``seed``: the same seed gives the same weights.

    Seed 0 (what ``tiny-random`` serves) is the one whose image sensitivity the tests check.
    """
    import torch
    from transformers import Sam3Model

    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Sam3Model(tiny_sam3_config())
    finally:
        torch.random.set_rng_state(generator_state)
    _draw_live_weights(model, torch.Generator().manual_seed(seed))
    return model.eval()


def _fan_in(module: torch.nn.Module) -> int:
    """Inputs that sum into one output of a Linear, Conv2d or ConvTranspose2d."""
    import torch

    weight = module.weight
    if isinstance(module, torch.nn.ConvTranspose2d):  # weight is (in, out, kh, kw)
        return weight.shape[0] * weight[0, 0].numel()
    return weight[0].numel()


def _draw_live_weights(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Re-draw every layer, norm and embedding of ``model`` in place from ``generator``."""
    import torch

    layers = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.ConvTranspose2d)
    gains = {module: VISION_GAIN for module in model.vision_encoder.modules()}
    for head in (model.dot_product_scoring.query_proj, model.detr_decoder.presence_head.layer3):
        gains[head] = SCORE_GAIN * WEIGHT_GAIN
    norms = (torch.nn.LayerNorm, torch.nn.GroupNorm)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, layers):
                std = gains.get(module, WEIGHT_GAIN) / _fan_in(module) ** 0.5
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                if module.bias is not None:
                    module.bias.copy_(torch.randn(module.bias.shape, generator=generator) * BIAS_STD)
            elif isinstance(module, norms):
                module.weight.copy_(1 + NORM_STD * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(NORM_STD * torch.randn(module.bias.shape, generator=generator))
            elif isinstance(module, torch.nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * EMBEDDING_STD)
        box_step = model.detr_decoder.box_head.layer3
        box_step.weight.mul_(BOX_STEP_SCALE)
        box_step.bias.mul_(BOX_STEP_SCALE)


#: The tiny video model's input side: 24x24 patches instead of SAM 3's 72x72, so that its memory
#: attention (every pixel of the frame against every pixel of seven memory frames, per object)
#: costs milliseconds on a CPU and a stream of thousands of frames can run in a test session.
TINY_VIDEO_SIDE = 336
#: Detection settings of the tiny video model. Its random detector scores every query near
#: 0.25 (Meta's 0.5 would find nothing), so objects are admitted just above that level, and it
#: finds a new object on almost every frame, so at most 8 are tracked (SAM 3's own cap, 10,000
#: by default), which keeps a stream's frames cheap; the values only make the tracker's
#: bookkeeping (new, matched, lost objects) run in tests.
TINY_VIDEO_SETTINGS = {"score_threshold_detection": 0.2515, "new_det_thresh": 0.256, "max_num_objects": 8}


def tiny_sam3_video_config(image_size: int = TINY_VIDEO_SIDE, **overrides: float | int) -> Sam3VideoConfig:
    """A tiny SAM 3 video model: the tiny detector and SAM 3's memory tracker at width 128.

    The tracker's memory attention reads 64-channel memories (a width fixed in transformers'
    code) and splits each object pointer into memory-width tokens, so its own width, and that
    of the detector's neck it shares, must be a multiple of 64 above 64: 128. The ViT and text
    encoder stay the tiny detector's (width 32); one memory-attention layer instead of four.
    Everything else (7 memory frames, 16 object pointers, 4 conditioning frames in attention,
    association, keep-alive and reconditioning rules) is SAM 3's. ``overrides`` set any other
    field of ``Sam3VideoConfig`` (thresholds, ``max_num_objects``).
    """
    from transformers import Sam3VideoConfig

    width = 128
    detector = tiny_sam3_config(head_width=width)
    tracker = {
        "vision_config": {
            "model_type": "sam3_vision_model",
            "backbone_config": detector.vision_config.backbone_config.to_dict(),
            "fpn_hidden_size": width,
        },
        "prompt_encoder_config": {"hidden_size": width},
        "mask_decoder_config": {
            "hidden_size": width,
            "mlp_dim": 2 * width,
            "num_attention_heads": 2,
            "iou_head_hidden_dim": width,
        },
        "memory_attention_hidden_size": width,
        "memory_attention_num_layers": 1,
        "memory_attention_feed_forward_hidden_size": 2 * width,
        "memory_encoder_hidden_size": width,
        "memory_encoder_output_channels": 64,
        "mask_downsampler_embed_dim": width,
        "memory_fuser_embed_dim": width,
        "memory_fuser_intermediate_dim": 2 * width,
    }
    config = Sam3VideoConfig(
        detector_config=detector.to_dict(),
        tracker_config=tracker,
        low_res_mask_size=4 * image_size // 14,
        **{**TINY_VIDEO_SETTINGS, **overrides},
    )
    config.image_size = image_size
    return config


#: Bias of the last layer of the tracker's object-score head (sigmoid(2) = 0.88): the logit that
#: a tracked object is in the frame. SAM 3 blanks the mask of an object whose logit is <= 0
#: (occluded, not shown); at transformers' initialisation (zero bias, weights of std 0.02) the
#: logit was -0.0013 for every object on every frame, so every object vanished after the frame
#: the detector found it on. A trained tracker sees an object that is still there.
OBJECT_SCORE_BIAS = 2.0


def build_tiny_sam3_video(
    seed: int = 0, image_size: int = TINY_VIDEO_SIDE, **overrides: float | int
) -> Sam3VideoModel:
    """The tiny video model with weights drawn from ``seed`` (the same seed, the same weights);
    ``image_size``: its input side, a multiple of 14 (smaller: cheaper frames).

    The tracker's object-score head leans to "visible" (``OBJECT_SCORE_BIAS``), so the objects of
    a static scene stay tracked on later frames as with trained weights; its weights still move
    the logit with the frame, by about a thousandth, so it never reaches 0 and the tracker never
    declares an object occluded.
    """
    import torch
    from transformers import Sam3VideoModel

    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Sam3VideoModel(tiny_sam3_video_config(image_size, **overrides))
    finally:
        torch.random.set_rng_state(generator_state)
    with torch.no_grad():
        model.tracker_model.mask_decoder.pred_obj_score_head.proj_out.bias.fill_(OBJECT_SCORE_BIAS)
    return model.eval()


def tiny_sam3_video_processor(config: Sam3VideoConfig | None = None) -> Sam3VideoProcessor:
    """transformers' video processor for the tiny video model: its image side, the real CLIP tokenizer."""
    from transformers import Sam2VideoVideoProcessor, Sam3ImageProcessor, Sam3VideoProcessor

    side = (config or tiny_sam3_video_config()).image_size
    size = {"height": side, "width": side}
    return Sam3VideoProcessor(
        image_processor=Sam3ImageProcessor(size=size),
        video_processor=Sam2VideoVideoProcessor(size=size),
        tokenizer=clip_tokenizer(),
    )


def _bpe_vocabulary_path() -> Path:
    """The CLIP BPE merges file inside open-clip-torch, found without importing it.

    Raises:
        WeightsError: open-clip-torch is not installed; the message names the requirement.
    """
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        from tt_sam3_ros.weights.errors import WeightsError

        raise WeightsError(
            "SAM 3's CLIP tokenizer is built from the vocabulary file that the open-clip-torch "
            f"package ships, and open-clip-torch is not installed: `pip install {OPEN_CLIP_REQUIREMENT}` "
            "(a run-time requirement, pinned in requirements/core.txt)."
        )
    return Path(next(iter(spec.submodule_search_locations))) / _BPE_FILE


def _byte_alphabet() -> list[str]:
    """GPT-2/CLIP byte-level alphabet: each byte as a printable character, in CLIP's order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return [chr(c) for c in chars]


@lru_cache(maxsize=1)
def clip_vocabulary() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """CLIP's token table and merge list, rebuilt as OpenAI's tokenizer builds them."""
    with gzip.open(_bpe_vocabulary_path(), "rt", encoding="utf-8") as bpe:
        lines = bpe.read().split("\n")
    merges = [tuple(line.split()) for line in lines[1 : _BPE_MERGES + 1]]
    alphabet = _byte_alphabet()
    tokens = [*alphabet, *(c + "</w>" for c in alphabet), *("".join(m) for m in merges)]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {token: index for index, token in enumerate(tokens)}, merges


def clip_tokenizer() -> CLIPTokenizer:
    """The real CLIP BPE tokenizer (49408 tokens), as SAM 3's processor uses it."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocabulary()
    tokenizer = CLIPTokenizer(vocab=vocab, merges=list(merges))
    tokenizer.model_max_length = TEXT_CONTEXT
    return tokenizer


def save_tiny_sam3(directory: str | Path, seed: int = 0) -> Path:
    """Write the tiny model in the transformers format (what ``weights_dir`` accepts)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    build_tiny_sam3(seed).save_pretrained(directory)
    clip_tokenizer().save_pretrained(directory)
    (directory / "TINY_RANDOM_MODEL.json").write_text(
        json.dumps({"warning": "random weights: outputs are meaningless", "seed": seed})
    )
    return directory
