"""Facts about the released SAM 3 weights: where they live, which commit, what the files are called.

Everything else in the package refers to these names, so a new pin or a renamed file is one edit.
"""

from __future__ import annotations

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
