"""Exemplar boxes: "more like this box, not like that one", drawn on the image being segmented.

SAM 3 takes two kinds of prompt: a noun phrase, and image exemplars, boxes marked positive
("this kind of thing") or negative ("not this"). A box either refines a text prompt (the box
is attached to it by name) or, with other unnamed boxes, stands alone as a box-only concept
(SAM 3 pairs such a concept with the text "visual", as Meta's and transformers' processors do).

Boxes are given in the source image's pixels, x1 y1 x2 y2 with pixel i spanning [i, i + 1).
The model sees them normalised to its squashed square input as (cx, cy, w, h) in [0, 1]: the
mapping of transformers' Sam3Processor (x / width, y / height, then corners to centre and size),
in float32.

Rules for what a user sends (the Python API, the CLI and the node share them):
- at most ``MAX_BOXES`` boxes per call, all concepts together;
- every coordinate finite, x2 > x1 and y2 > y1;
- a box reaching past the image's edge is clipped to it (an operator's drag that overshoots
  still means the object inside); a box less than ``MIN_BOX_SIDE`` pixel wide or high inside
  the image (outside it, or a click without a drag) is refused;
- a named box must name one of the call's prompts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tt_sam3_ros.core.errors import InputError, quoted

#: Most exemplar boxes one call may carry (all concepts together): each adds a token to its
#: concept's prompt and a region to pool, and an operator marks a handful, not hundreds.
MAX_BOXES = 16
#: Least width and height of a box inside the image, in pixels.
MIN_BOX_SIDE = 1.0
#: The name results give the box-only concept (its instances' ``prompt``); the node publishes
#: box prompts for it with an empty class_id.
BOX_ONLY_PROMPT = ""
#: The text SAM 3 pairs with a box-only concept.
BOX_ONLY_TEXT = "visual"


@dataclass(frozen=True)
class Exemplar:
    """One exemplar box.

    Attributes:
        box: (x1, y1, x2, y2) in source-image pixels.
        positive: True for "more like this", False for "not like this".
        prompt: the text prompt it refines; None (or "") for the box-only concept.
    """

    box: tuple[float, float, float, float]
    positive: bool = True
    prompt: str | None = None

    @property
    def concept(self) -> str:
        """The prompt this box belongs to, BOX_ONLY_PROMPT for a box-only one."""
        return self.prompt if self.prompt else BOX_ONLY_PROMPT


@dataclass(frozen=True)
class Concept:
    """One row of the prompt batch: a text and the boxes that refine it.

    Attributes:
        name: the prompt as results report it (BOX_ONLY_PROMPT for the box-only concept).
        text: what the text encoder reads (BOX_ONLY_TEXT for the box-only concept).
        boxes: float32 (N, 4) normalised cx, cy, w, h of the model input (N may be 0).
        labels: int64 (N,) 1 positive, 0 negative.
    """

    name: str
    text: str
    boxes: np.ndarray
    labels: np.ndarray


def check_exemplars(boxes: object, prompts: Sequence[str]) -> list[Exemplar]:
    """The boxes checked against everything but the image: type, count, finite coordinates,
    orientation, known prompt names. Prompt names are matched after stripping surrounding
    whitespace, as prompts are.

    Raises:
        InputError: naming the box (its index) and what is wrong with it.
    """
    if isinstance(boxes, (str, bytes)) or not isinstance(boxes, Sequence):
        raise InputError(f"boxes must be a list of Exemplar, got {type(boxes).__name__}")
    if len(boxes) > MAX_BOXES:
        raise InputError(f"too many exemplar boxes: {len(boxes)} given, at most {MAX_BOXES} allowed")
    known = set(prompts)
    checked = []
    for index, exemplar in enumerate(boxes):
        if not isinstance(exemplar, Exemplar):
            raise InputError(f"box {index} must be an Exemplar, got {type(exemplar).__name__}")
        checked.append(_checked(index, exemplar, known))
    return checked


def _checked(index: int, exemplar: Exemplar, known: set[str]) -> Exemplar:
    if not isinstance(exemplar.positive, (bool, np.bool_)):
        raise InputError(f"box {index}: positive must be True or False, got {quoted(exemplar.positive)}")
    prompt = exemplar.prompt
    if prompt is not None and not isinstance(prompt, str):
        raise InputError(f"box {index}: prompt must be a string or None, got {type(prompt).__name__}")
    name = prompt.strip() if prompt else BOX_ONLY_PROMPT
    if name and name not in known:
        raise InputError(
            f"box {index} names prompt {quoted(prompt)}, which is not one of this call's prompts "
            f"({', '.join(quoted(p) for p in sorted(known)) or 'none'})"
        )
    coordinates = exemplar.box
    try:
        values = np.asarray(coordinates, dtype=np.float64)
    except (TypeError, ValueError):
        values = None
    if isinstance(coordinates, (str, bytes)) or values is None or values.shape != (4,):
        raise InputError(f"box {index} must be 4 numbers x1, y1, x2, y2 (pixels), got {quoted(coordinates)}")
    x1, y1, x2, y2 = (float(v) for v in values)
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
        raise InputError(f"box {index} has a coordinate that is not a finite number: {quoted(coordinates)}")
    if not (x2 > x1 and y2 > y1):
        raise InputError(
            f"box {index} ({x1:g}, {y1:g}, {x2:g}, {y2:g}) has no area: x2 must exceed x1 and y2 exceed y1"
        )
    return Exemplar((x1, y1, x2, y2), bool(exemplar.positive), name or None)


def clip_to_image(exemplars: list[Exemplar], image_size: tuple[int, int]) -> list[Exemplar]:
    """Boxes (checked by ``check_exemplars``) clipped to the image; a box with less than
    MIN_BOX_SIDE pixels of width or height inside it is refused.

    Raises:
        InputError: naming the box and the image's size.
    """
    height, width = image_size
    clipped = []
    for index, exemplar in enumerate(exemplars):
        x1, y1, x2, y2 = exemplar.box
        inside = (min(max(x1, 0.0), width), min(max(y1, 0.0), height), min(x2, width), min(y2, height))
        if inside[2] <= inside[0] or inside[3] <= inside[1]:
            raise InputError(
                f"box {index} ({x1:g}, {y1:g}, {x2:g}, {y2:g}) lies outside the {width}x{height} image"
            )
        if inside[2] - inside[0] < MIN_BOX_SIDE or inside[3] - inside[1] < MIN_BOX_SIDE:
            raise InputError(
                f"box {index} ({x1:g}, {y1:g}, {x2:g}, {y2:g}) is less than {MIN_BOX_SIDE:g} pixel wide "
                f"or high inside the {width}x{height} image"
            )
        clipped.append(Exemplar(inside, exemplar.positive, exemplar.prompt))
    return clipped


def model_boxes(boxes_xyxy: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """Source-pixel corners (N, 4) -> float32 (N, 4) cx, cy, w, h normalised to the model input.

    Sam3Processor's arithmetic in its order and precision: x / width and y / height in float32,
    then ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1).
    """
    height, width = image_size
    corners = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4).copy()
    corners[:, 0::2] /= np.float32(width)
    corners[:, 1::2] /= np.float32(height)
    x1, y1, x2, y2 = corners.T
    return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=-1).astype(np.float32)


def concepts(
    prompts: Sequence[str], exemplars: list[Exemplar], image_size: tuple[int, int], box_only: bool = False
) -> list[Concept]:
    """The prompt batch: each prompt with its boxes, then the box-only concept if any box has no
    prompt (or ``box_only``: one carried from an earlier image). ``exemplars`` must be checked
    and clipped; boxes keep their order within a concept."""
    box_only = box_only or any(e.prompt is None for e in exemplars)
    names = [*prompts, *([BOX_ONLY_PROMPT] if box_only else [])]
    batch = []
    for name in names:
        mine = [e for e in exemplars if e.concept == name]
        boxes = model_boxes(np.array([e.box for e in mine], dtype=np.float64).reshape(-1, 4), image_size)
        labels = np.array([1 if e.positive else 0 for e in mine], dtype=np.int64)
        batch.append(Concept(name, name or BOX_ONLY_TEXT, boxes, labels))
    return batch
