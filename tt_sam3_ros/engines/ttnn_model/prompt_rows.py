"""The chip prompt path's prompt rows, built on the host: what PromptBuffers uploads per prompt set.

A prompt is T = PROMPT_TOKENS rows (ttnn_model/prompt_path.py's module doc says why one length
serves every bucket): TEXT_TOKENS text rows, the image's class token at CLASS_ROW (placed on
the chip by placement_matrix's 0/1 matmul), then up to GEOMETRY_ROWS host geometry rows
(exemplar boxes). Kept apart from the chip's forward since nothing here touches the device: it
is torch on the host, run once per prompt set, and the row layout is the contract between the
two.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.engines.ttnn_model.config import TILE

#: Text tokens per prompt (CLIP's context) and the prompt tokens with the class-token tile.
TEXT_TOKENS = 32
PROMPT_TOKENS = TEXT_TOKENS + TILE
#: Where the image's class token sits among a prompt's tokens, and how many rows after it the
#: host's geometry tokens (exemplars) may fill.
CLASS_ROW = TEXT_TOKENS
GEOMETRY_ROWS = PROMPT_TOKENS - CLASS_ROW - 1


def prompt_rows(
    prompt_states: list[Any], exemplars: list[Any] | None = None, image_serial: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, t, C) prompt rows and their (P, t) validity: the text features, a zero row where
    the class token goes (valid unless the prompt's exemplars were drawn on this image and
    bring the class token that attended to them), then each prompt's host geometry rows
    (none for a text prompt; t = 33 + the most any prompt has)."""
    text = torch.stack([s.features.float() for s in prompt_states])
    text_valid = torch.stack([s.mask.bool() for s in prompt_states])
    count, width = text.shape[0], text.shape[-1]
    geometry = [geometry_rows(e, image_serial) for e in (exemplars or [None] * count)]
    longest = max(len(rows) for rows, _ in geometry)
    if longest > GEOMETRY_ROWS:
        raise EngineError(
            f"a prompt with {longest} geometry tokens: the chip prompt path takes at most "
            f"{GEOMETRY_ROWS} (the class token and {GEOMETRY_ROWS - 1} boxes)"
        )
    features = torch.zeros(count, CLASS_ROW + 1 + longest, width)
    valid = torch.zeros(count, CLASS_ROW + 1 + longest, dtype=torch.bool)
    features[:, :CLASS_ROW], valid[:, :CLASS_ROW] = text, text_valid
    for index, (rows, own_class_token) in enumerate(geometry):
        valid[index, CLASS_ROW] = own_class_token
        if len(rows):
            features[index, CLASS_ROW + 1 : CLASS_ROW + 1 + len(rows)] = rows
        valid[index, CLASS_ROW + 1 : CLASS_ROW + 1 + len(rows)] = True
    return features, valid


def geometry_rows(exemplar: Any, image_serial: int) -> tuple[torch.Tensor, bool]:
    """One prompt's host geometry rows (n, C) and whether it takes this image's class token:
    none and yes for a text prompt; on the image the boxes were drawn on, their class token
    then the box tokens, and no; on a later image the box tokens, and yes."""
    if exemplar is None:
        return torch.zeros(0), True
    if exemplar.image_serial == image_serial:
        return torch.cat([exemplar.class_token, exemplar.box_tokens]).float().cpu(), False
    return exemplar.box_tokens.float().cpu(), True


def placement_matrix() -> torch.Tensor:
    """(1, T, 32) 0/1: P @ class_tile puts the tile's row 0, the class token, at CLASS_ROW; every
    other row gets 0 (the text's and the geometry's rows come from the prompt buffers)."""
    matrix = torch.zeros(1, PROMPT_TOKENS, TILE)
    matrix[0, CLASS_ROW, 0] = 1.0
    return matrix
