"""Where SAM 3's weights come from, and how they become a transformers ``Sam3Model``.

Weights are looked for in this order, and the first hit wins:

1. ``weights_dir`` (or a ``model_id`` that is a local path): a folder in the
   transformers format (``config.json`` + ``model.safetensors``, possibly sharded), a
   folder holding Meta's original ``sam3.pt``, or the path of such a ``.pt`` file.
2. The Hugging Face cache at a pinned revision. This works offline, so a robot that
   was provisioned once never needs the network again.
3. The Hugging Face hub (a download; ``facebook/sam3`` is gated).

Meta's checkpoint is converted to transformers' layout by a key mapping written here
(``convert_meta_state_dict``); its inverse (``to_meta_state_dict``) exists so the tests
can fabricate a Meta-format checkpoint from the tiny model and prove the round trip.
The mapping's facts (names, fused q/k/v projections, the transposed CLIP projection,
the class-token row of the ViT position table) were read from transformers'
``convert_sam3_to_hf.py`` and Meta's ``sam3`` model code.

Every failure a user can fix raises :class:`WeightsError` whose message says what to
do. Importing this module downloads nothing and imports neither torch nor
transformers: both are imported inside the functions that need them.

This module reads no environment variable itself; huggingface_hub, which it calls,
honours HF_HOME / HF_HUB_CACHE (where the cache is), HF_TOKEN (access to the gated
repository) and HF_HUB_OFFLINE (never touch the network).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .tiny_model import TINY_MODEL_ID

if TYPE_CHECKING:
    import torch
    from transformers import Sam3Config, Sam3Model

LOG = logging.getLogger(__name__)

#: The official SAM 3 repository on the Hugging Face hub (gated, SAM License).
DEFAULT_MODEL_ID = "facebook/sam3"
#: The facebook/sam3 commit we load by default, so that a cache provisioned once keeps
#: matching and the weights never change under a deployed robot. Several public projects
#: pin this same commit for facebook/sam3 (with sam3.pt of the size below); a user may
#: pass ``revision="main"`` to follow the repository instead.
SAM3_PINNED_REVISION = "3c879f39826c281e95690f02c7821c4de09afae7"
#: Size in bytes of sam3.pt at the pinned revision, as published in the hub's file metadata
#: (cited with that commit by the same projects); only used to word a truncation error.
SAM3_PT_PUBLISHED_BYTES = 3_450_062_241
#: Meta's original checkpoint file name.
META_CHECKPOINT_NAME = "sam3.pt"
#: What we fetch from the hub: the transformers format and its tokenizer, not sam3.pt
#: (the repository holds both; downloading both would double 3.4 GB).
HUB_PATTERNS = ("*.json", "*.safetensors", "*.txt")

WeightsKind = Literal["transformers", "meta", "tiny"]
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json")
_META_SUFFIXES = (".pt", ".pth")
_SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024


class WeightsError(RuntimeError):
    """The weights cannot be found, fetched or read; the message says what to do about it."""


class HubUnreachableError(WeightsError):
    """The weights are not cached and the hub cannot be reached (offline, or no network)."""


@dataclass(frozen=True)
class ResolvedWeights:
    """Where the weights are, before anything heavy is loaded.

    Attributes:
        kind: "transformers" (a folder from_pretrained reads), "meta" (a sam3.pt or a Meta
            state dict in .safetensors, converted on load) or "tiny" (random, built in code).
        path: the folder (transformers) or the checkpoint file (meta); None for tiny.
        source: where it came from, in words, for logs and diagnostics.
    """

    kind: WeightsKind
    path: Path | None
    source: str


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


# --------------------------------------------------------------------------------------
# Resolution: local folder, then the Hugging Face cache, then the hub.
# --------------------------------------------------------------------------------------


def default_revision(model_id: str) -> str | None:
    """The pinned commit for facebook/sam3; None (the hub's "main") for any other repository."""
    return SAM3_PINNED_REVISION if model_id == DEFAULT_MODEL_ID else None


def resolve_weights(
    model_id: str = DEFAULT_MODEL_ID,
    revision: str | None = None,
    weights_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> ResolvedWeights:
    """Find the weights without loading them: local path, then HF cache, then the hub.

    Args:
        model_id: hub repository, a local path, or "tiny-random".
        revision: hub branch, tag or commit; None means the pinned commit for facebook/sam3.
        weights_dir: a local folder or .pt file; when given, nothing else is consulted.
        cache_dir: Hugging Face hub cache; None means huggingface_hub's default (HF_HOME).

    Raises:
        WeightsError: nothing usable was found and the hub could not provide it.
    """
    if weights_dir not in (None, ""):
        return inspect_local(Path(os.fspath(weights_dir)).expanduser())
    if not model_id or not model_id.strip():
        raise WeightsError(
            f"model_id is empty: pass a Hugging Face repository ({DEFAULT_MODEL_ID!r}), "
            f"{TINY_MODEL_ID!r}, or a local folder as weights_dir."
        )
    if model_id == TINY_MODEL_ID:
        return ResolvedWeights("tiny", None, f"{TINY_MODEL_ID}: seeded RANDOM weights, meaningless output")
    if _looks_like_path(model_id):
        return inspect_local(Path(model_id).expanduser())
    _check_repo_id(model_id)
    pinned = revision or default_revision(model_id)
    cached = _from_hf_cache(model_id, pinned, cache_dir)
    if cached is not None:
        return cached
    try:
        return _from_hub(model_id, pinned, cache_dir)
    except HubUnreachableError:
        # Any new commit to the repository (a README edit) moves "main": a robot provisioned
        # with a plain `hf download` must still start offline. Only for the default pin.
        fallback = _from_hf_cache(model_id, None, cache_dir) if revision is None and pinned else None
        if fallback is None:
            raise
        LOG.warning("%s is not cached; using the cached %s instead", f"{model_id}@{pinned}", fallback.source)
        return fallback


def _check_repo_id(model_id: str) -> None:
    """Reject a malformed hub id before any lookup, with the reason and the expected form."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model_id)
    except HFValidationError as error:
        raise WeightsError(
            f"{model_id!r} is neither an existing local path nor a valid Hugging Face repository id "
            f"(owner/name, e.g. {DEFAULT_MODEL_ID!r}): {error} Check the spelling, or pass a local "
            "folder as weights_dir."
        ) from error


def _looks_like_path(model_id: str) -> bool:
    """A model_id that names an existing file or folder is a local path, not a hub id."""
    return model_id.startswith((".", "/", "~")) or Path(model_id).expanduser().exists()


def inspect_local(path: Path) -> ResolvedWeights:
    """Classify a local folder or file as transformers or Meta format, or say what is wrong."""
    if not path.exists():
        raise WeightsError(
            f"weights_dir {path} does not exist. Pass a folder in the transformers format "
            "(config.json and model.safetensors, as `hf download facebook/sam3` writes them), "
            f"a folder holding Meta's {META_CHECKPOINT_NAME}, or the path of that file."
        )
    if path.is_file():
        return _inspect_file(path)
    return _inspect_folder(path)


def _inspect_file(path: Path) -> ResolvedWeights:
    """A single file must be Meta's checkpoint (.pt, or a Meta state dict saved as .safetensors)."""
    if path.suffix in _META_SUFFIXES:
        return ResolvedWeights("meta", path, f"Meta checkpoint {path} (converted on load)")
    if path.suffix == ".safetensors":
        keys = _safetensors_header(path).keys()
        if any(_is_meta_key(key) for key in keys):
            return ResolvedWeights("meta", path, f"Meta state dict {path} (converted on load)")
        raise WeightsError(
            f"{path} is a transformers-format weights file, which cannot be loaded without its "
            "config.json: pass the folder that holds both as weights_dir."
        )
    raise WeightsError(
        f"{path} is neither Meta's checkpoint ({META_CHECKPOINT_NAME}, .pt/.pth) nor a folder: "
        "pass the folder with config.json and model.safetensors, or the path of sam3.pt."
    )


def _inspect_folder(folder: Path) -> ResolvedWeights:
    """A folder in the transformers format wins over a Meta checkpoint next to it (no conversion)."""
    names = sorted(entry.name for entry in folder.iterdir())
    has_config = "config.json" in names
    if has_config and ("model.safetensors" in names or "model.safetensors.index.json" in names):
        return ResolvedWeights("transformers", folder, f"transformers-format folder {folder}")
    checkpoint = _meta_checkpoint_in(folder, names)
    if checkpoint is not None:
        return ResolvedWeights("meta", checkpoint, f"Meta checkpoint {checkpoint} (converted on load)")
    found = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    raise WeightsError(
        f"weights_dir {folder} holds no SAM 3 weights. Expected either the transformers format "
        "(config.json with model.safetensors, or model.safetensors.index.json and its shards) or "
        f"Meta's {META_CHECKPOINT_NAME}; found: {found or 'nothing (the folder is empty)'}. "
        f"Download them with `{hf_download_command(DEFAULT_MODEL_ID, None, folder)}` (after accepting "
        "the licence) or point weights_dir at the folder that holds them."
    )


def _meta_checkpoint_in(folder: Path, names: list[str]) -> Path | None:
    """sam3.pt, else the folder's only .pt/.pth file: users rename downloads."""
    if META_CHECKPOINT_NAME in names:
        return folder / META_CHECKPOINT_NAME
    candidates = [name for name in names if Path(name).suffix in _META_SUFFIXES]
    return folder / candidates[0] if len(candidates) == 1 else None


def _from_hf_cache(model_id: str, revision: str | None, cache_dir: Any) -> ResolvedWeights | None:
    """The cached snapshot at ``revision``, if complete; never touches the network."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            model_id,
            revision=revision,
            cache_dir=cache_dir,
            local_files_only=True,
            allow_patterns=list(HUB_PATTERNS),
        )
    except (LocalEntryNotFoundError, OSError, ValueError):
        folder = None
    if isinstance(folder, str) and _is_transformers_folder(Path(folder)):
        label = _cached_label(model_id, revision, Path(folder))
        return ResolvedWeights(
            "transformers", Path(folder), f"{label} from the Hugging Face cache ({folder})"
        )
    checkpoint = try_to_load_from_cache(
        model_id, META_CHECKPOINT_NAME, cache_dir=cache_dir, revision=revision
    )
    if isinstance(checkpoint, str):
        label = _cached_label(model_id, revision, Path(checkpoint).parent)
        return ResolvedWeights(
            "meta", Path(checkpoint), f"{label} {META_CHECKPOINT_NAME} from the Hugging Face cache"
        )
    return None


def _cached_label(model_id: str, revision: str | None, snapshot: Path) -> str:
    """repo@revision, plus the commit when the revision is a branch (snapshots are named by commit)."""
    if revision == snapshot.name:
        return f"{model_id}@{revision}"
    return f"{model_id}@{revision or 'main'} (commit {snapshot.name})"


def _is_transformers_folder(folder: Path) -> bool:
    """config.json next to model.safetensors or a shard index."""
    has_weights = (folder / "model.safetensors").is_file() or (
        folder / "model.safetensors.index.json"
    ).is_file()
    return (folder / "config.json").is_file() and has_weights


def _from_hub(model_id: str, revision: str | None, cache_dir: Any) -> ResolvedWeights:
    """Download the transformers-format files; each hub failure becomes an actionable message."""
    import httpx
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    LOG.info("downloading %s@%s from the Hugging Face hub", model_id, revision or "main")
    try:
        folder = snapshot_download(
            model_id, revision=revision, cache_dir=cache_dir, allow_patterns=list(HUB_PATTERNS)
        )
    except GatedRepoError as error:
        raise WeightsError(gated_message(model_id)) from error
    except RevisionNotFoundError as error:
        raise WeightsError(
            f"{model_id} has no revision {revision!r} on the Hugging Face hub. Pass an existing "
            "branch, tag or commit as revision, or leave it unset for the pinned default."
        ) from error
    except RepositoryNotFoundError as error:
        raise WeightsError(
            f"the Hugging Face hub has no repository {model_id!r} visible to you. Check the model id "
            f"(SAM 3 is {DEFAULT_MODEL_ID!r}); if it is private, log in with `hf auth login` or set "
            "HF_TOKEN."
        ) from error
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as error:
        raise HubUnreachableError(offline_message(model_id, revision)) from error
    except httpx.TransportError as error:
        # huggingface_hub 1.x lets httpx's connection errors through when there is no network.
        raise HubUnreachableError(offline_message(model_id, revision)) from error
    except (HfHubHTTPError, OSError) as error:
        raise WeightsError(
            f"downloading {model_id} from the Hugging Face hub failed ({error}). Check the network "
            "and retry, or pre-download the weights elsewhere and pass weights_dir. "
            + _download_hint(model_id, revision)
        ) from error
    if not isinstance(folder, str) or not _is_transformers_folder(Path(folder)):
        raise WeightsError(
            f"{model_id}@{revision or 'main'} on the Hugging Face hub has no transformers-format "
            "weights (config.json and model.safetensors). Use a repository that has them, or download "
            f"Meta's {META_CHECKPOINT_NAME} and pass its folder as weights_dir."
        )
    return ResolvedWeights(
        "transformers", Path(folder), f"{model_id}@{revision or 'main'} downloaded to {folder}"
    )


def hf_download_command(model_id: str, revision: str | None, local_dir: Path | None = None) -> str:
    """The `hf download` command line that fetches exactly what this module looks for."""
    revision_flag = f" --revision {revision}" if revision else ""
    includes = " ".join(f'--include "{pattern}"' for pattern in HUB_PATTERNS)
    local = f" --local-dir {local_dir}" if local_dir is not None else ""
    return f"hf download {model_id}{revision_flag} {includes}{local}"


def _download_hint(model_id: str, revision: str | None) -> str:
    """The exact pre-download command, with the revision this code will look for."""
    return f"To pre-download: `{hf_download_command(model_id, revision)}`."


def gated_message(model_id: str) -> str:
    """What to do when the hub refuses a gated repository."""
    return (
        f"{model_id} is a gated repository on the Hugging Face hub and your request was refused: "
        f"open https://huggingface.co/{model_id} while logged in, accept the licence (SAM License) "
        "and wait for access to be granted, then authenticate this machine with `hf auth login` or "
        "set HF_TOKEN to a read token in the environment of this process. Alternatively copy the "
        "weights from a machine that has them and pass weights_dir."
    )


def offline_message(model_id: str, revision: str | None) -> str:
    """What to do when the weights are not cached and the hub cannot be reached."""
    from huggingface_hub import constants

    return (
        f"SAM 3 weights {model_id}@{revision or 'main'} are not in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}) and the hub cannot be reached (offline: HF_HUB_OFFLINE=1, or no "
        f"network). {_download_hint(model_id, revision)} Run that on a machine with access and copy "
        "its cache (or set HF_HOME to it), or pass weights_dir=<a folder with config.json and "
        f"model.safetensors, or with Meta's {META_CHECKPOINT_NAME}>."
    )


# --------------------------------------------------------------------------------------
# Integrity checks that run before anything big is read.
# --------------------------------------------------------------------------------------


def _corrupt(path: Path, detail: str) -> WeightsError:
    """One wording for every damaged file: what is wrong and how to get a good copy."""
    return WeightsError(
        f"{path} is corrupt or truncated: {detail}. Delete it and download it again (an interrupted "
        "download is the usual cause), or point weights_dir at an intact copy."
    )


def _safetensors_header(path: Path) -> dict[str, Any]:
    """The tensor table of a .safetensors file, checked against the file's size.

    The format is an 8-byte little-endian header length, a JSON header giving every
    tensor's byte range, then the data; a download cut short is shorter than the ranges say.
    """
    size = path.stat().st_size
    with path.open("rb") as stream:
        prefix = stream.read(8)
        if len(prefix) < 8:
            raise _corrupt(path, f"the file is {size} bytes, too short for a safetensors header")
        header_length = int.from_bytes(prefix, "little")
        if header_length > min(size - 8, _SAFETENSORS_HEADER_LIMIT):
            raise _corrupt(path, f"its safetensors header claims {header_length} bytes in a {size}-byte file")
        try:
            header = json.loads(stream.read(header_length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise _corrupt(path, f"its safetensors header is not valid JSON ({error})") from error
    if not isinstance(header, dict):
        raise _corrupt(path, "its safetensors header is not a table of tensors")
    tensors = {name: info for name, info in header.items() if name != "__metadata__"}
    try:
        data_end = max((int(info["data_offsets"][1]) for info in tensors.values()), default=0)
    except (KeyError, TypeError, IndexError, ValueError) as error:
        raise _corrupt(path, f"its safetensors header lacks tensor offsets ({error})") from error
    expected = 8 + header_length + data_end
    if size != expected:
        raise _corrupt(path, f"the file is {size:,} bytes but its header describes {expected:,} bytes")
    return tensors


def _check_transformers_folder(folder: Path) -> None:
    """config.json parses, and every weight file (or shard) is present and whole."""
    try:
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _corrupt(folder / "config.json", f"it is not valid JSON ({error})") from error
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        _safetensors_header(folder / "model.safetensors")
        return
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, AttributeError) as error:
        raise _corrupt(index, f"it is not a valid shard index ({error})") from error
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise WeightsError(
            f"{folder} is missing weight shards listed in model.safetensors.index.json: "
            f"{', '.join(missing)}. Download them again (`hf download` resumes) or copy the whole folder."
        )
    for name in shards:
        _safetensors_header(folder / name)


# --------------------------------------------------------------------------------------
# Meta checkpoint <-> transformers state dict.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    """One module of transformers' Sam3Model and where Meta keeps it.

    ``hf`` is a regex for the key prefix (named group ``n`` for a layer index); ``meta`` the
    Meta prefix, formatted with the same groups; ``aliases`` older Meta names accepted on
    load. ``attention`` says how the module's q/k/v projections are fused in Meta's model:
    "vit" (one ``qkv`` Linear, output ``proj``) or "mha" (torch MultiheadAttention's
    ``in_proj_weight``, output ``out_proj``).
    """

    hf: str
    meta: str
    aliases: tuple[str, ...] = ()
    attention: Literal["vit", "mha"] | None = None


_N = r"(?P<n>\d+)"
_VIT = "backbone.vision_backbone.trunk."
_TEXT = "backbone.language_backbone.encoder."
_ENC = "transformer.encoder.layers.{n}."
_DEC = "transformer.decoder."


def _mlp_layers(hf: str, meta: str, count: int) -> list[_Rule]:
    """transformers names MLP layers layer1..layerK; Meta keeps them in a list, layers.0..K-1."""
    return [_Rule(rf"{hf}\.layer{k}\.", f"{meta}.layers.{k - 1}.") for k in range(1, count + 1)]


def _attention_block(hf: str, meta: str, hf_norms: dict[str, str]) -> list[_Rule]:
    """A DETR-style layer's feed-forward (linear1/linear2) and its norms, renamed."""
    rules = [_Rule(rf"{hf}\.mlp\.fc1\.", f"{meta}linear1."), _Rule(rf"{hf}\.mlp\.fc2\.", f"{meta}linear2.")]
    rules += [_Rule(rf"{hf}\.{name}\.", f"{meta}{target}.") for name, target in hf_norms.items()]
    return rules


_ENCODER_NORMS = {"layer_norm1": "norm1", "layer_norm2": "norm2", "layer_norm3": "norm3"}

#: transformers key prefix -> Meta key prefix, most specific first.
_RULES: tuple[_Rule, ...] = (
    # Vision trunk (ViT-L+ with windowed attention and RoPE).
    _Rule(
        r"vision_encoder\.backbone\.embeddings\.patch_embeddings\.projection\.", f"{_VIT}patch_embed.proj."
    ),
    _Rule(r"vision_encoder\.backbone\.layer_norm\.", f"{_VIT}ln_pre."),
    _Rule(rf"vision_encoder\.backbone\.layers\.{_N}\.layer_norm1\.", _VIT + "blocks.{n}.norm1."),
    _Rule(rf"vision_encoder\.backbone\.layers\.{_N}\.layer_norm2\.", _VIT + "blocks.{n}.norm2."),
    _Rule(
        rf"vision_encoder\.backbone\.layers\.{_N}\.attention\.", _VIT + "blocks.{n}.attn.", attention="vit"
    ),
    _Rule(rf"vision_encoder\.backbone\.layers\.{_N}\.mlp\.", _VIT + "blocks.{n}.mlp."),
    # Neck: 1x1 and 3x3 projections (the scale convolutions are named per level, below).
    _Rule(
        rf"vision_encoder\.neck\.fpn_layers\.{_N}\.proj1\.", "backbone.vision_backbone.convs.{n}.conv_1x1."
    ),
    _Rule(
        rf"vision_encoder\.neck\.fpn_layers\.{_N}\.proj2\.", "backbone.vision_backbone.convs.{n}.conv_3x3."
    ),
    # Text encoder (CLIP) and the projection to the detector's width.
    _Rule(r"text_encoder\.text_model\.embeddings\.token_embedding\.", f"{_TEXT}token_embedding."),
    _Rule(r"text_encoder\.text_model\.final_layer_norm\.", f"{_TEXT}ln_final."),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.self_attn\.",
        _TEXT + "transformer.resblocks.{n}.attn.",
        attention="mha",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.layer_norm1\.",
        _TEXT + "transformer.resblocks.{n}.ln_1.",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.layer_norm2\.",
        _TEXT + "transformer.resblocks.{n}.ln_2.",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.mlp\.fc1\.",
        _TEXT + "transformer.resblocks.{n}.mlp.c_fc.",
    ),
    _Rule(
        rf"text_encoder\.text_model\.encoder\.layers\.{_N}\.mlp\.fc2\.",
        _TEXT + "transformer.resblocks.{n}.mlp.c_proj.",
    ),
    _Rule(r"text_projection\.", "backbone.language_backbone.resizer."),
    # Geometry encoder (boxes; its CLS token is part of every text prompt in Meta's model).
    _Rule(
        rf"geometry_encoder\.layers\.{_N}\.cross_attn\.",
        "geometry_encoder.encode.{n}.cross_attn_image.",
        attention="mha",
    ),
    _Rule(
        rf"geometry_encoder\.layers\.{_N}\.self_attn\.",
        "geometry_encoder.encode.{n}.self_attn.",
        attention="mha",
    ),
    *_attention_block(rf"geometry_encoder\.layers\.{_N}", "geometry_encoder.encode.{n}.", _ENCODER_NORMS),
    _Rule(r"geometry_encoder\.vision_layer_norm\.", "geometry_encoder.img_pre_norm."),
    _Rule(r"geometry_encoder\.prompt_layer_norm\.", "geometry_encoder.norm."),
    _Rule(r"geometry_encoder\.output_layer_norm\.", "geometry_encoder.encode_norm."),
    _Rule(
        r"geometry_encoder\.(?P<name>label_embed|cls_embed|boxes_direct_project|boxes_pool_project"
        r"|boxes_pos_enc_project|final_proj)\.",
        "geometry_encoder.{name}.",
    ),
    # Fusion (DETR) encoder.
    _Rule(
        rf"detr_encoder\.layers\.{_N}\.cross_attn\.",
        _ENC + "cross_attn_image.",
        aliases=(_ENC + "cross_attn.",),
        attention="mha",
    ),
    _Rule(rf"detr_encoder\.layers\.{_N}\.self_attn\.", _ENC + "self_attn.", attention="mha"),
    *_attention_block(rf"detr_encoder\.layers\.{_N}", _ENC, _ENCODER_NORMS),
    # DETR decoder with box refinement and the presence token.
    _Rule(rf"detr_decoder\.layers\.{_N}\.self_attn\.", _DEC + "layers.{n}.self_attn.", attention="mha"),
    _Rule(rf"detr_decoder\.layers\.{_N}\.text_cross_attn\.", _DEC + "layers.{n}.ca_text.", attention="mha"),
    _Rule(
        rf"detr_decoder\.layers\.{_N}\.vision_cross_attn\.", _DEC + "layers.{n}.cross_attn.", attention="mha"
    ),
    *_attention_block(
        rf"detr_decoder\.layers\.{_N}",
        _DEC + "layers.{n}.",
        {
            "vision_cross_attn_layer_norm": "norm1",
            "text_cross_attn_layer_norm": "catext_norm",
            "self_attn_layer_norm": "norm2",
            "mlp_layer_norm": "norm3",
        },
    ),
    _Rule(
        r"detr_decoder\.(?P<name>query_embed|reference_points|presence_token)\.",
        _DEC + "{name}.",
    ),
    _Rule(r"detr_decoder\.presence_layer_norm\.", f"{_DEC}presence_token_out_norm."),
    _Rule(r"detr_decoder\.output_layer_norm\.", f"{_DEC}norm."),
    *_mlp_layers(r"detr_decoder\.presence_head", f"{_DEC}presence_token_head", 3),
    *_mlp_layers(r"detr_decoder\.box_head", f"{_DEC}bbox_embed", 3),
    *_mlp_layers(r"detr_decoder\.ref_point_head", f"{_DEC}ref_point_head", 2),
    *_mlp_layers(r"detr_decoder\.box_rpb_embed_x", f"{_DEC}boxRPB_embed_x", 2),
    *_mlp_layers(r"detr_decoder\.box_rpb_embed_y", f"{_DEC}boxRPB_embed_y", 2),
    # Scoring of queries against the prompt.
    *_mlp_layers(r"dot_product_scoring\.text_mlp", "dot_prod_scoring.prompt_mlp", 2),
    _Rule(r"dot_product_scoring\.text_mlp_out_norm\.", "dot_prod_scoring.prompt_mlp.out_norm."),
    _Rule(r"dot_product_scoring\.text_proj\.", "dot_prod_scoring.prompt_proj."),
    _Rule(r"dot_product_scoring\.query_proj\.", "dot_prod_scoring.hs_proj."),
    # Segmentation head.
    _Rule(r"mask_decoder\.pixel_decoder\.", "segmentation_head.pixel_decoder."),
    _Rule(
        r"mask_decoder\.mask_embedder\.",
        "segmentation_head.mask_predictor.mask_embed.",
        aliases=("segmentation_head.mask_embed.",),
    ),
    _Rule(r"mask_decoder\.instance_projection\.", "segmentation_head.instance_seg_head."),
    _Rule(r"mask_decoder\.semantic_projection\.", "segmentation_head.semantic_seg_head."),
    _Rule(r"mask_decoder\.prompt_cross_attn\.", "segmentation_head.cross_attend_prompt.", attention="mha"),
    _Rule(r"mask_decoder\.prompt_cross_attn_norm\.", "segmentation_head.cross_attn_norm."),
)
_COMPILED = tuple((re.compile(rule.hf), rule) for rule in _RULES)

#: Whole keys whose tensors change shape or layout between the two formats.
_POSITION_TABLE = "vision_encoder.backbone.embeddings.position_embeddings"
_CLIP_PROJECTION = "text_encoder.text_projection.weight"
_EXACT: dict[str, tuple[str, str | None]] = {
    # Meta's table has a leading row for the pre-training CLS token, which SAM 3 drops.
    _POSITION_TABLE: (f"{_VIT}pos_embed", "cls_row"),
    "text_encoder.text_model.embeddings.position_embedding.weight": (f"{_TEXT}positional_embedding", None),
    # Meta multiplies x @ P; nn.Linear stores P transposed.
    _CLIP_PROJECTION: (f"{_TEXT}text_projection", "transpose"),
}
#: transformers parameters that SAM 3 never uses; a checkpoint may omit them. Sam3Model
#: replaces CLIP's projected output with its own ``text_projection`` of the token states.
_OPTIONAL_HF_KEYS = frozenset({_CLIP_PROJECTION})

#: Meta keys with no counterpart in transformers' image model, dropped on purpose: RoPE tables
#: (recomputed), the tracker's own neck, point-prompt projections and instance queries that
#: Sam3Model does not implement.
_IGNORED_META = re.compile(
    r"^(?:backbone\.vision_backbone\.trunk\.blocks\.\d+\.attn\.freqs_cis"
    r"|backbone\.vision_backbone\.sam2_convs\."
    r"|geometry_encoder\.points_(?:direct|pool|pos_enc)_project\."
    r"|transformer\.decoder\.instance_)"
)
_FUSED_LEAF = re.compile(r"^(?P<proj>[qkv])_proj\.(?P<leaf>weight|bias)$")
_NECK_SCALE = re.compile(
    rf"^vision_encoder\.neck\.fpn_layers\.{_N}\.scale_layers\.(?P<index>\d+)\.(?P<leaf>.+)$"
)


@dataclass(frozen=True)
class MetaSource:
    """Where one transformers tensor lives in Meta's checkpoint.

    Attributes:
        keys: Meta key (without "detector."), then older aliases accepted on load.
        part: 0/1/2 when the tensor is the q/k/v third of a fused projection, else None.
        transform: "cls_row" (Meta has one extra leading position), "transpose", or None.
    """

    keys: tuple[str, ...]
    part: int | None = None
    transform: str | None = None


def meta_source(hf_key: str, config: Sam3Config) -> MetaSource:
    """The Meta checkpoint entry that holds transformers parameter ``hf_key``.

    Raises:
        KeyError: the key is not a parameter of transformers' Sam3Model this mapping knows.
    """
    if hf_key in _EXACT:
        meta_key, transform = _EXACT[hf_key]
        return MetaSource((meta_key,), transform=transform)
    neck = _NECK_SCALE.match(hf_key)
    if neck is not None:
        return MetaSource((_neck_scale_key(neck, config),))
    for pattern, rule in _COMPILED:
        match = pattern.match(hf_key)
        if match is None:
            continue
        rest = hf_key[match.end() :]
        prefixes = [template.format(**match.groupdict()) for template in (rule.meta, *rule.aliases)]
        if rule.attention is None:
            return MetaSource(tuple(prefix + rest for prefix in prefixes))
        return _attention_source(prefixes, rest, rule.attention, hf_key)
    raise KeyError(f"no Meta counterpart known for transformers parameter {hf_key!r}")


def _attention_source(prefixes: list[str], rest: str, style: str, hf_key: str) -> MetaSource:
    """q/k/v are thirds of one fused projection in Meta's model; the output projection is renamed."""
    fused = _FUSED_LEAF.match(rest)
    if fused is not None:
        part = "qkv".index(fused["proj"])
        leaf = f"qkv.{fused['leaf']}" if style == "vit" else f"in_proj_{fused['leaf']}"
        return MetaSource(tuple(prefix + leaf for prefix in prefixes), part=part)
    for hf_name in ("o_proj.", "out_proj."):
        if rest.startswith(hf_name):
            meta_name = "proj." if style == "vit" else "out_proj."
            return MetaSource(tuple(prefix + meta_name + rest[len(hf_name) :] for prefix in prefixes))
    raise KeyError(f"no Meta counterpart known for transformers parameter {hf_key!r}")


def _neck_scale_key(match: re.Match[str], config: Sam3Config) -> str:
    """Meta names the up-sampling convolutions per level: two at 4x (_0, _1), one at 2x."""
    level, index = int(match["n"]), int(match["index"])
    scale = float(config.vision_config.scale_factors[level])
    if scale == 4.0:
        name = {0: "dconv_2x2_0", 2: "dconv_2x2_1"}.get(index)
    else:
        name = "dconv_2x2" if scale == 2.0 and index == 0 else None
    if name is None:
        raise KeyError(f"no Meta counterpart known for neck level {level} (scale {scale}) layer {index}")
    return f"backbone.vision_backbone.convs.{level}.{name}.{match['leaf']}"


def expected_hf_shapes(config: Sam3Config) -> dict[str, tuple[int, ...]]:
    """Every parameter (and persistent buffer) of Sam3Model(config) with its shape.

    Built on the meta device, so the full 840M-parameter model costs no memory.
    """
    import torch
    from transformers import Sam3Model

    with torch.device("meta"):
        model = Sam3Model(config)
    return {key: tuple(value.shape) for key, value in model.state_dict().items()}


def _is_meta_key(key: str) -> bool:
    """Meta's detector keys start with module names transformers does not use.

    geometry_encoder is left out: both layouts have a module of that name.
    """
    if key.startswith(("detector.", "tracker.")):
        return True
    return key.split(".", 1)[0] in {"backbone", "transformer", "segmentation_head", "dot_prod_scoring"}


def _strip_meta_prefix(key: str) -> str | None:
    """Meta's sam3.pt prefixes the image model with "detector." and the tracker with "tracker."."""
    if key.startswith("tracker."):
        return None
    for prefix in ("detector.", "sam3_model."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def convert_meta_state_dict(
    meta_state: Mapping[str, torch.Tensor], config: Sam3Config, source: str = "the Meta checkpoint"
) -> dict[str, torch.Tensor]:
    """Meta's state dict (sam3.pt) -> transformers' Sam3Model state dict for ``config``.

    Accepts keys with or without the "detector." prefix; the tracker's keys and the known
    extras (see ``_IGNORED_META``) are dropped. The result holds views of the input where
    no reshaping is needed.

    Raises:
        WeightsError: a parameter is missing, a key is not known, or a shape differs.
    """
    state = {stripped: tensor for key, tensor in meta_state.items() if (stripped := _strip_meta_prefix(key))}
    converted: dict[str, torch.Tensor] = {}
    consumed: set[str] = set()
    missing: list[str] = []
    mismatched: list[str] = []
    for hf_key, shape in expected_hf_shapes(config).items():
        where = meta_source(hf_key, config)
        meta_key = next((key for key in where.keys if key in state), None)
        if meta_key is None:
            if hf_key not in _OPTIONAL_HF_KEYS:
                missing.append(where.keys[0])
            continue
        consumed.add(meta_key)
        tensor = _from_meta_tensor(state[meta_key], where)
        if tensor is None or tuple(tensor.shape) != shape:
            got = tuple(state[meta_key].shape)
            mismatched.append(f"{meta_key} {got} (transformers {hf_key} needs {shape})")
            continue
        converted[hf_key] = tensor
    unexpected = sorted(key for key in state if key not in consumed and not _IGNORED_META.match(key))
    if missing or unexpected or mismatched:
        raise WeightsError(_mismatch_message(source, missing, unexpected, mismatched))
    return converted


def _from_meta_tensor(tensor: torch.Tensor, where: MetaSource) -> torch.Tensor | None:
    """Undo Meta's layout for one tensor; None when its shape cannot hold what is asked."""
    if where.part is not None:
        if tensor.shape[0] % 3:
            return None
        return tensor.chunk(3, dim=0)[where.part]
    if where.transform == "cls_row":
        return tensor[:, 1:] if tensor.dim() == 3 and tensor.shape[1] > 1 else None
    if where.transform == "transpose":
        return tensor.t() if tensor.dim() == 2 else None
    return tensor


def _mismatch_message(
    source: str, missing: list[str], unexpected: list[str], mismatched: list[str], meta: bool = True
) -> str:
    """Counts and the first few names of each problem, in one paragraph."""
    problems = []
    for label, keys in (
        ("missing", missing),
        ("unexpected", unexpected),
        ("with the wrong shape", mismatched),
    ):
        if keys:
            problems.append(f"{len(keys)} {label} (e.g. {'; '.join(keys[:3])})")
    if meta:
        cause = (
            f"It is not Meta's original {META_CHECKPOINT_NAME}: another model or version, or a "
            "config.json next to it describes another architecture."
        )
    else:
        cause = "Its config.json and weights are not SAM 3's, or come from different versions."
    return (
        f"{source} does not match SAM 3's image model: {', '.join(problems)} tensors. {cause} Use "
        f"{DEFAULT_MODEL_ID}'s {META_CHECKPOINT_NAME} or its transformers-format files (config.json "
        "and model.safetensors), downloaded again if in doubt."
    )


def to_meta_state_dict(hf_state: Mapping[str, torch.Tensor], config: Sam3Config) -> dict[str, torch.Tensor]:
    """transformers' Sam3Model state dict -> Meta's layout, keys prefixed "detector." as in sam3.pt.

    The inverse of ``convert_meta_state_dict``; the tests use it to fabricate a Meta
    checkpoint from the tiny model. Meta's extra CLS position is written as zeros.

    Raises:
        KeyError: a key has no Meta counterpart (the mapping is incomplete for this model).
        ValueError: only some of a fused projection's q/k/v are present.
    """
    import torch

    meta: dict[str, torch.Tensor] = {}
    fused: dict[str, list[torch.Tensor | None]] = {}
    for hf_key, tensor in hf_state.items():
        where = meta_source(hf_key, config)
        key = where.keys[0]
        if where.part is not None:
            fused.setdefault(key, [None, None, None])[where.part] = tensor
        elif where.transform == "cls_row":
            meta[key] = torch.cat([torch.zeros_like(tensor[:, :1]), tensor], dim=1)
        elif where.transform == "transpose":
            meta[key] = tensor.t().contiguous()
        else:
            meta[key] = tensor
    for key, parts in fused.items():
        if any(part is None for part in parts):
            raise ValueError(f"{key}: only some of q, k and v are in the state dict")
        meta[key] = torch.cat(parts, dim=0)
    return {f"detector.{key}": tensor for key, tensor in meta.items()}


def read_meta_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """The state dict inside sam3.pt (or a Meta state dict saved as .safetensors).

    torch.load runs with weights_only=True (no code from the file is executed) and mmap,
    so the 3.4 GB file is paged in as tensors are used rather than read up front.
    """
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        _safetensors_header(path)
        return load_file(path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as error:
        if "mmap" not in str(error):
            raise _corrupt(path, _torch_load_detail(path, error)) from error
        loaded = _torch_load_unmapped(path)
    except Exception as error:  # pickle, EOF, zip errors: all mean an unreadable file
        raise _corrupt(path, _torch_load_detail(path, error)) from error
    return _unwrap_state_dict(loaded, path)


def _torch_load_unmapped(path: Path) -> Any:
    """Old (pre-zip) torch.save files cannot be memory-mapped; read them whole."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise _corrupt(path, _torch_load_detail(path, error)) from error


def _torch_load_detail(path: Path, error: BaseException) -> str:
    """torch's reason, plus the published size when the file is Meta's sam3.pt."""
    size = path.stat().st_size
    detail = f"torch.load failed ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    if path.name == META_CHECKPOINT_NAME and size != SAM3_PT_PUBLISHED_BYTES:
        detail += (
            f"; the file is {size:,} bytes while {DEFAULT_MODEL_ID}'s {META_CHECKPOINT_NAME} at revision "
            f"{SAM3_PINNED_REVISION[:7]} is {SAM3_PT_PUBLISHED_BYTES:,} bytes"
        )
    return detail


def _unwrap_state_dict(loaded: Any, path: Path) -> dict[str, torch.Tensor]:
    """Meta saves {"model": state_dict}; training tools sometimes use "state_dict"."""
    import torch

    for wrapper in ("model", "state_dict"):
        if isinstance(loaded, dict) and isinstance(loaded.get(wrapper), dict):
            loaded = loaded[wrapper]
            break
    if not isinstance(loaded, dict) or not all(
        isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in loaded.items()
    ):
        raise WeightsError(
            f"{path} loads, but holds no state dict of tensors (found {type(loaded).__name__}): it is "
            f"not a SAM 3 checkpoint. Use {DEFAULT_MODEL_ID}'s {META_CHECKPOINT_NAME}."
        )
    return loaded


# --------------------------------------------------------------------------------------
# Loading.
# --------------------------------------------------------------------------------------


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
    from .engines.torch_engine import DTYPE_NAMES

    # Loading may also use half precision, which the engines do not run in.
    names = {**DTYPE_NAMES, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in names:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(names)}")
    return names[dtype]


def _load_tiny(resolved: ResolvedWeights) -> LoadedModel:
    """The seeded tiny model: offline, 1.9M parameters, meaningless outputs."""
    from .tiny_model import build_tiny_sam3, clip_tokenizer

    return LoadedModel(build_tiny_sam3(0), clip_tokenizer(), resolved.source, is_random=True)


def _load_transformers(resolved: ResolvedWeights, dtype: torch.dtype | None) -> LoadedModel:
    """from_pretrained on a checked folder; missing or misshapen tensors are errors, not warnings."""
    from transformers import Sam3Model

    folder = resolved.path
    assert folder is not None
    _check_transformers_folder(folder)
    try:
        model, info = Sam3Model.from_pretrained(
            folder, dtype=dtype, local_files_only=True, output_loading_info=True
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
    missing = sorted(set(info.get("missing_keys") or ()) - _OPTIONAL_HF_KEYS)
    mismatched = [str(item) for item in info.get("mismatched_keys") or ()]
    unexpected = sorted(info.get("unexpected_keys") or ())
    if missing or mismatched or unexpected:
        raise WeightsError(_mismatch_message(source, missing, unexpected, mismatched, meta=meta))


def _tokenizer_for(folder: Path) -> Any:
    """The folder's own tokenizer when it has one, else the identical CLIP BPE built offline."""
    from .tiny_model import clip_tokenizer

    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return clip_tokenizer()
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
        raise _corrupt(config_file, f"it is not a SAM 3 config ({error})") from error


def _load_meta(resolved: ResolvedWeights, dtype: torch.dtype | None) -> LoadedModel:
    """Convert Meta's checkpoint in memory and hand it to from_pretrained (no random init).

    The architecture is transformers' default Sam3Config (SAM 3 as released) unless a
    config.json next to the checkpoint says otherwise.
    """
    from transformers import Sam3Config, Sam3Model

    checkpoint = resolved.path
    assert checkpoint is not None
    config = _config_beside(checkpoint.parent) or Sam3Config()
    converted = convert_meta_state_dict(read_meta_checkpoint(checkpoint), config, source=str(checkpoint))
    model, info = Sam3Model.from_pretrained(
        None, config=config, state_dict=converted, dtype=dtype, output_loading_info=True
    )
    _raise_on_loading_info(info, str(checkpoint))
    return LoadedModel(model, _tokenizer_for(checkpoint.parent), resolved.source, is_random=False)
