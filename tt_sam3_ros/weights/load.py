"""Building a ready transformers ``Sam3Model`` (and its tokenizer) from resolved weights."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tt_sam3_ros.weights.errors import WeightsError, corrupt
from tt_sam3_ros.weights.integrity import check_transformers_folder
from tt_sam3_ros.weights.meta_checkpoint import (
    OPTIONAL_HF_KEYS,
    convert_meta_state_dict,
    mismatch_message,
    read_meta_checkpoint,
)
from tt_sam3_ros.weights.meta_constants import apply_meta_constants
from tt_sam3_ros.weights.release import DEFAULT_MODEL_ID
from tt_sam3_ros.weights.resolve import ResolvedWeights, resolve_weights

if TYPE_CHECKING:
    import torch
    from transformers import Sam3Config, Sam3Model

LOG = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json")


@dataclass
class LoadedModel:
    """A ready model and the tokenizer that goes with it.

    Attributes:
        model: transformers ``Sam3Model`` in eval mode.
        tokenizer: SAM 3's CLIP BPE tokenizer (49408 tokens).
        source: where the weights came from, in words.
        is_random: True for the tiny random model, whose outputs are meaningless.
    """

    model: Sam3Model
    tokenizer: Any
    source: str
    is_random: bool


def load_sam3(
    model_id: str = DEFAULT_MODEL_ID,
    revision: str | None = None,
    weights_dir: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> LoadedModel:
    """Resolve the weights (see ``resolve_weights``) and load a Sam3Model in eval mode.

    Args:
        dtype: parameter dtype (torch dtype, or "float32" / "bfloat16"); None keeps float32.
        device: where to put the model; None leaves it on the CPU.

    Raises:
        WeightsError: the weights cannot be found, fetched or read.
    """
    resolved = resolve_weights(model_id, revision, weights_dir, cache_dir)
    torch_dtype = _torch_dtype(dtype)
    if resolved.kind == "tiny":
        loaded = _load_tiny(resolved)
    elif resolved.kind == "transformers":
        loaded = _load_transformers(resolved, torch_dtype)
    else:
        loaded = _load_meta(resolved, torch_dtype)
    if torch_dtype is not None or device is not None:
        loaded.model.to(device=device, dtype=torch_dtype)
    _own_aligned_memory(loaded.model)
    loaded.model.eval()
    LOG.info("SAM 3 weights: %s", loaded.source)
    return loaded


def _own_aligned_memory(model: Sam3Model) -> None:
    """Copy CPU tensors that still point into a loaded file to fresh, 64-byte aligned memory.

    from_pretrained leaves parameters as slices of the (memory-mapped) checkpoint at
    arbitrary offsets. CPU kernels pick different code paths for unaligned data, which made
    outputs differ from an in-memory model with the same weights by ~1e-8 (measured on the
    tiny model); owning aligned copies makes them bit-identical and unmaps the file.
    """
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.device.type == "cpu" and tensor.data_ptr() % 64:
            tensor.data = tensor.data.clone()


def _torch_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """Accept torch dtypes and their common names, so configs can say "bfloat16"."""
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    from tt_sam3_ros.engines.torch_engine import DTYPE_NAMES

    # Loading may also use half precision, which the engines do not run in.
    names = {**DTYPE_NAMES, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in names:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(names)}")
    return names[dtype]


def _load_tiny(resolved: ResolvedWeights) -> LoadedModel:
    """The seeded tiny model: offline, 1.9M parameters, meaningless outputs."""
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3, clip_tokenizer

    return LoadedModel(build_tiny_sam3(0), clip_tokenizer(), resolved.source, is_random=True)


def _load_transformers(resolved: ResolvedWeights, dtype: torch.dtype | None) -> LoadedModel:
    """from_pretrained on a checked folder; missing or misshapen tensors are errors, not warnings."""
    from transformers import Sam3Model

    folder = resolved.path
    assert folder is not None
    check_transformers_folder(folder)
    config = _config_beside(folder)
    assert config is not None  # check_transformers_folder found config.json
    _use_meta_constants(config, f"{folder / 'config.json'}")
    try:
        model, info = Sam3Model.from_pretrained(
            folder, config=config, dtype=dtype, local_files_only=True, output_loading_info=True
        )
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        raise WeightsError(
            f"transformers could not load {folder} ({type(error).__name__}: {error}). The folder is "
            f"not a SAM 3 checkpoint or is damaged: download it again with `hf download {DEFAULT_MODEL_ID}`."
        ) from error
    _raise_on_loading_info(info, str(folder), meta=False)
    return LoadedModel(model, _tokenizer_for(folder), resolved.source, is_random=False)


def _raise_on_loading_info(info: dict[str, Any], source: str, meta: bool = True) -> None:
    """transformers only warns about missing weights and initialises them randomly; we refuse."""
    missing = sorted(set(info.get("missing_keys") or ()) - OPTIONAL_HF_KEYS)
    mismatched = [str(item) for item in info.get("mismatched_keys") or ()]
    unexpected = sorted(info.get("unexpected_keys") or ())
    if missing or mismatched or unexpected:
        raise WeightsError(mismatch_message(source, missing, unexpected, mismatched, meta=meta))


def _tokenizer_for(folder: Path) -> Any:
    """The folder's own tokenizer when it has one, else the identical CLIP BPE built offline."""
    from tt_sam3_ros.weights.tiny_model import clip_tokenizer

    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        try:
            return clip_tokenizer()
        except WeightsError as error:
            raise WeightsError(
                f"{folder} holds no tokenizer files ({', '.join(_TOKENIZER_FILES)}), so {error} "
                f"Or copy {DEFAULT_MODEL_ID}'s tokenizer files beside the weights."
            ) from error
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, json.JSONDecodeError) as error:
        raise WeightsError(
            f"the tokenizer files in {folder} cannot be read ({type(error).__name__}: {error}). "
            "Download them again, or delete tokenizer.json, tokenizer_config.json, vocab.json and "
            "merges.txt from the folder to use the built-in CLIP tokenizer."
        ) from error


def _config_beside(folder: Path) -> Sam3Config | None:
    """The image model's config from a config.json next to the checkpoint, if there is one.

    The hub's config.json may describe the video model (model_type "sam3_video"), which
    nests the image model's config as ``detector_config``.
    """
    from transformers import Sam3Config, Sam3VideoConfig

    config_file = folder / "config.json"
    if not config_file.is_file():
        return None
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
        if model_type == "sam3_video":
            return Sam3VideoConfig.from_pretrained(folder).detector_config
        return Sam3Config.from_pretrained(folder)
    except (OSError, ValueError, AttributeError) as error:
        raise corrupt(config_file, f"it is not a SAM 3 config ({error})") from error


def _load_meta(resolved: ResolvedWeights, dtype: torch.dtype | None) -> LoadedModel:
    """Convert Meta's checkpoint in memory and hand it to from_pretrained (no random init).

    The architecture is transformers' default Sam3Config (SAM 3 as released) unless a
    config.json next to the checkpoint says otherwise; its constants are Meta's either way.
    """
    from transformers import Sam3Config, Sam3Model

    checkpoint = resolved.path
    assert checkpoint is not None
    config = _config_beside(checkpoint.parent)
    if config is None:
        config = Sam3Config()
        _use_meta_constants(config, "transformers' default Sam3Config")
    else:
        _use_meta_constants(config, f"{checkpoint.parent / 'config.json'}")
    converted = convert_meta_state_dict(read_meta_checkpoint(checkpoint), config, source=str(checkpoint))
    model, info = Sam3Model.from_pretrained(
        None, config=config, state_dict=converted, dtype=dtype, output_loading_info=True
    )
    _raise_on_loading_info(info, str(checkpoint))
    return LoadedModel(model, _tokenizer_for(checkpoint.parent), resolved.source, is_random=False)


def _use_meta_constants(config: Sam3Config, described_by: str) -> None:
    """Meta's epsilons and activations (see meta_constants) on ``config``, logged once if they differ."""
    changes = apply_meta_constants(config)
    if changes:
        LOG.info(
            "SAM 3 runs with Meta's constants, which its weights were trained with, where %s differs: %s",
            described_by,
            "; ".join(changes),
        )
