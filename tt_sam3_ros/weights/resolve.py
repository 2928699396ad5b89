"""Finding SAM 3's weights without loading them: a local path, the Hugging Face cache, the hub.

Weights are looked for in this order, and the first hit wins:

1. ``weights_dir`` (or a ``model_id`` that is a local path): a folder in the
   transformers format (``config.json`` + ``model.safetensors``, possibly sharded), a
   folder holding Meta's original ``sam3.pt``, or the path of such a ``.pt`` file.
2. The Hugging Face cache at a pinned revision. This works offline, so a robot that
   was provisioned once never needs the network again.
3. The Hugging Face hub (a download; ``facebook/sam3`` is gated).

Every failure a user can fix raises :class:`WeightsError` whose message says what to do.
This module reads no environment variable itself; huggingface_hub, which it calls,
honours HF_HOME / HF_HUB_CACHE (where the cache is), HF_TOKEN (access to the gated
repository) and HF_HUB_OFFLINE (never touch the network).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tt_sam3_ros.weights.errors import HubUnreachableError, WeightsError
from tt_sam3_ros.weights.integrity import safetensors_header
from tt_sam3_ros.weights.meta_checkpoint import is_meta_key
from tt_sam3_ros.weights.release import (
    DEFAULT_MODEL_ID,
    HUB_PATTERNS,
    META_CHECKPOINT_NAME,
    SAM3_PINNED_REVISION,
)
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

LOG = logging.getLogger(__name__)

WeightsKind = Literal["transformers", "meta", "tiny"]
_META_SUFFIXES = (".pt", ".pth")


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
        keys = safetensors_header(path).keys()
        if any(is_meta_key(key) for key in keys):
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
