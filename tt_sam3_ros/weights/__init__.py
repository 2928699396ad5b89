"""Where SAM 3's weights come from, and how they become a transformers ``Sam3Model``.

One job per module:

- ``release``: facts about the released weights (hub repository, pinned commit, file names).
- ``resolve``: finding the weights (a local folder or file, the Hugging Face cache, the hub)
  without loading them, with an actionable message for each failure.
- ``integrity``: header and size checks that catch a truncated download before a big read.
- ``meta_checkpoint``: reading Meta's ``sam3.pt`` and mapping its keys to transformers' layout.
- ``meta_constants``: the epsilons and activations of Meta's code, which every load applies.
- ``load``: building the model and its tokenizer from what ``resolve`` found.
- ``errors``: ``WeightsError`` and its offline variant.

Importing the package downloads nothing and imports neither torch nor transformers: both are
imported inside the functions that need them.
"""

from __future__ import annotations

from tt_sam3_ros.weights.errors import HubUnreachableError, WeightsError
from tt_sam3_ros.weights.load import LoadedModel, load_sam3
from tt_sam3_ros.weights.meta_checkpoint import (
    MetaSource,
    convert_meta_state_dict,
    expected_hf_shapes,
    meta_source,
    read_meta_checkpoint,
    to_meta_state_dict,
)
from tt_sam3_ros.weights.release import (
    DEFAULT_MODEL_ID,
    HUB_PATTERNS,
    META_CHECKPOINT_NAME,
    SAM3_PINNED_REVISION,
    SAM3_PT_PUBLISHED_BYTES,
)
from tt_sam3_ros.weights.resolve import (
    ResolvedWeights,
    WeightsKind,
    default_revision,
    gated_message,
    hf_download_command,
    inspect_local,
    offline_message,
    resolve_weights,
)

__all__ = [
    "DEFAULT_MODEL_ID",
    "HUB_PATTERNS",
    "META_CHECKPOINT_NAME",
    "SAM3_PINNED_REVISION",
    "SAM3_PT_PUBLISHED_BYTES",
    "HubUnreachableError",
    "LoadedModel",
    "MetaSource",
    "ResolvedWeights",
    "WeightsError",
    "WeightsKind",
    "convert_meta_state_dict",
    "default_revision",
    "expected_hf_shapes",
    "gated_message",
    "hf_download_command",
    "inspect_local",
    "load_sam3",
    "meta_source",
    "offline_message",
    "read_meta_checkpoint",
    "resolve_weights",
    "to_meta_state_dict",
]
