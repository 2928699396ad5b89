"""Sam3Segmenter: pixels and prompts in, instances in source pixels out. No ROS.

    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    segmenter = Sam3Segmenter.from_pretrained()            # facebook/sam3, best engine here
    result = segmenter(image, ["car", "person"])           # image: uint8 RGB HxWx3 (or path, bytes, PIL)
    labels = result.instance_mask()                        # uint8 HxW, 0 = background

    # Exemplar boxes (source pixels): refine a prompt, or stand alone as a box-only concept.
    result = segmenter(image, ["bolt"], boxes=[Exemplar((10, 20, 60, 90), prompt="bolt"),
                                               Exemplar((200, 40, 240, 80), positive=False, prompt="bolt")])

One call encodes the image once, runs every prompt against it in one batch, and
reuses the text encoding of prompts it has seen before (bounded LRU), so a steady
prompt set costs no text-encoder time after the first frame.

A sequence of frames (a video) can go through ``segment_stream`` instead: the same result
for each frame, but frame N+1 is loaded, resized and handed to ``Engine.prefetch`` while
frame N is in flight (after its image path started, before its outputs are read), so its
host work and, on the ttnn engine with two command queues, its upload overlap frame N's
compute.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tt_sam3_ros.core import exemplars as exemplar_boxes
from tt_sam3_ros.core import postprocess, preprocess
from tt_sam3_ros.core.errors import InputError, StartCancelledError
from tt_sam3_ros.core.exemplars import Exemplar
from tt_sam3_ros.core.prompts import MAX_PROMPTS, validate_prompts
from tt_sam3_ros.core.results import MAX_LABELLED_INSTANCES, Instance, SegmentationResult
from tt_sam3_ros.engines.base import Engine

LOG = logging.getLogger(__name__)

#: Prompt encodings kept; a robot cycling through more texts than this re-encodes some.
DEFAULT_TEXT_CACHE_SIZE = 256
#: Most instances one call returns unless asked otherwise.
DEFAULT_MAX_INSTANCES = 50
#: Score an instance must exceed unless asked otherwise.
DEFAULT_THRESHOLD = 0.5
#: Thresholds accepted, both ends included. Scores lie in [0, 1] and an instance is kept when
#: its score is above the threshold, so 1 keeps nothing (a pause without unsubscribing).
THRESHOLD_RANGE = (0.0, 1.0)


class Sam3Segmenter:
    """SAM 3 text-prompted instance segmentation on one engine."""

    def __init__(
        self,
        engine: Engine,
        max_image_side: int = preprocess.DEFAULT_MAX_IMAGE_SIDE,
        text_cache_size: int = DEFAULT_TEXT_CACHE_SIZE,
        model_description: str = "",
        is_random: bool = False,
    ) -> None:
        if max_image_side < preprocess.MIN_IMAGE_SIDE:
            raise ValueError(f"max_image_side must be at least {preprocess.MIN_IMAGE_SIDE}")
        self.engine = engine
        self.max_image_side = max_image_side
        self.model_description = model_description
        self.is_random = is_random
        self._text_cache: OrderedDict[str, Any] = OrderedDict()
        self._text_cache_size = text_cache_size

    @classmethod
    def from_pretrained(
        cls,
        model_id: str = "facebook/sam3",
        revision: str | None = None,
        weights_dir: str | None = None,
        engine: str = "auto",
        device: str | None = None,
        dtype: str | None = None,
        max_image_side: int = preprocess.DEFAULT_MAX_IMAGE_SIDE,
        ttnn_options: dict[str, object] | None = None,
        max_prompts: int = MAX_PROMPTS,
        max_instances: int | None = None,
        chips: Any = None,
        stopping: Callable[[], bool] | None = None,
    ) -> Sam3Segmenter:
        """Load weights (the ``weights`` package decides from where) and open the engine.

        ``ttnn_options``: the ttnn engine's weight_cache, weight_dtype, param_dtype, prompt_path
        (engines.TTNN_OPTIONS). ``max_prompts``: the most prompts a call will carry (1..16); the
        ttnn engine's chip prompt path compiles a trace per bucket up to it, so fewer start faster.
        ``max_instances``: the most instances a call will ask for (None: the engine's default);
        the chip prompt path keeps that many queries per prompt on the chip, and a call asking
        for more still gets them, by reading every query back (slower).
        ``chips``: with one segmenter per chip in one process, the ``BlackholeChips`` they share
        (opened together, so one chip's close leaves the others serving); None: one chip alone.
        ``stopping``: asked between the weights and the engine (each may take minutes); True gives
        the start up there, before any device is opened.

        Raises:
            tt_sam3_ros.weights.WeightsError: the weights cannot be had; the message says what to do.
            tt_sam3_ros.engines.EngineError: the engine or device cannot be used.
            tt_sam3_ros.core.errors.StartCancelledError: ``stopping`` said so after the weights loaded.
        """
        from tt_sam3_ros.engines import create_engine
        from tt_sam3_ros.weights import load_sam3

        loaded = load_sam3(model_id=model_id, revision=revision, weights_dir=weights_dir)
        if loaded.is_random:
            LOG.warning("random weights loaded (%s)", loaded.source)
        if stopping is not None and stopping():
            raise StartCancelledError("stopped after the weights loaded, before the engine opened")
        runner = create_engine(
            engine,
            loaded.model,
            loaded.tokenizer,
            device=device,
            dtype=dtype,
            ttnn_options=ttnn_options,
            max_prompts=max_prompts,
            max_instances=max_instances,
            chips=chips,
        )
        return cls(runner, max_image_side, model_description=loaded.source, is_random=loaded.is_random)

    def describe(self) -> dict[str, str]:
        """Engine, device, dtype and model, in words."""
        return {**self.engine.describe(), "model": self.model_description}

    def warmup(self) -> None:
        """Run the engine once so the first real frame pays no compile or allocation cost."""
        self.engine.warmup()

    def close(self) -> None:
        """Release the engine and its device. Idempotent."""
        self._text_cache.clear()
        self.engine.close()

    def __enter__(self) -> Sam3Segmenter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __call__(
        self,
        image: object,
        prompts: list[str],
        threshold: float = DEFAULT_THRESHOLD,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        boxes: Sequence[Exemplar] = (),
        carried: Mapping[str, Any] | None = None,
    ) -> SegmentationResult:
        """Segment every instance of every prompt in one image.

        Args:
            image: uint8 RGB (H, W, 3) array (grey and RGBA accepted), a path, PNG/JPEG bytes
                or a PIL image; each side between 2 and ``max_image_side`` pixels.
            prompts: 1 to the engine's max_prompts (16 unless opened with fewer) non-empty texts
                of at most 256 characters; may be empty when ``boxes`` holds a box-only concept.
            threshold: keep instances whose score is above this, in [0, 1] (1 keeps none).
            max_instances: at most this many instances, best first (1..255 fit one mono8 mask).
            boxes: exemplar boxes in this image's pixels (exemplars.py: at most 16, clipped to
                the image). A box naming a prompt refines it; boxes without a prompt form one
                box-only concept, which comes after the prompts in the batch and in the result
                (its name there is "", and it counts against max_prompts).
            carried: exemplars encoded on an earlier image (that call's ``result.exemplars``),
                carried to this one, by concept name: a prompt of this call without boxes here
                takes its carried box tokens (with this image's class token), and a carried
                box-only concept ("") joins the call unless this call has box-only boxes. Our
                extension of SAM 3, which defines exemplars per image; entries for prompts not
                in this call are ignored.

        Raises:
            InputError (a ValueError): bad image, prompts, boxes or settings, with the limit named.
        """
        carried = dict(carried or {})
        prompts, boxes = self._checked_prompts(prompts, threshold, max_instances, boxes, "" in carried)
        return self._segment(self._load(image), prompts, threshold, max_instances, None, boxes, carried)

    def segment_stream(
        self,
        frames: Iterable[object],
        prompts: list[str],
        threshold: float = DEFAULT_THRESHOLD,
        max_instances: int = DEFAULT_MAX_INSTANCES,
    ) -> Iterator[SegmentationResult]:
        """Segment a sequence of frames with the same prompts: one result per frame, in order.

        Each result equals what ``segmenter(frame, prompts, ...)`` returns; what changes is the
        order of the work. While frame N is in flight (its image path started, nothing read
        back yet) frame N+1 is loaded, resized and given to ``Engine.prefetch``, so on the ttnn
        engine with two command queues its upload runs during frame N's traces (on other
        engines only the host's load and resize move). Frame N's ``timing_ms`` gains
        "prefetch" (that call); frame N+1's load and resize count in its own timing, though
        they ran during frame N.

        The iterator is read one frame ahead of the results: right for files and buffers; a
        live source that blocks until its next frame exists would hold frame N's result back
        until then.

        Args:
            frames: images as ``__call__`` takes them (arrays, paths, bytes, PIL images).
            prompts, threshold, max_instances: as for ``__call__``, fixed for the stream.

        Raises:
            InputError (a ValueError): bad prompts or settings, at once; a bad frame raises
                when its result is due, after every earlier frame's result.
        """
        prompts, _ = self._checked_prompts(prompts, threshold, max_instances)
        return self._stream(iter(frames), prompts, threshold, max_instances)

    def _checked_prompts(
        self,
        prompts: list[str],
        threshold: float,
        max_instances: int,
        boxes: Sequence[Exemplar] = (),
        box_only_carried: bool = False,
    ) -> tuple[list[str], list[Exemplar]]:
        """The prompts and boxes validated against the engine's max_prompts; raises InputError
        for bad prompts, boxes or settings, before any work."""
        max_prompts = getattr(self.engine, "max_prompts", MAX_PROMPTS)
        box_only = box_only_carried or (
            not isinstance(boxes, (str, bytes))
            and any(isinstance(b, Exemplar) and not b.prompt for b in boxes)
        )
        if box_only and isinstance(prompts, Sequence) and not isinstance(prompts, str) and len(prompts) == 0:
            prompts = []  # the box-only concept is the whole request
        else:
            prompts = validate_prompts(prompts, max_prompts)
        checked = exemplar_boxes.check_exemplars(boxes, prompts)
        if (checked or box_only_carried) and not getattr(self.engine, "takes_exemplars", False):
            raise InputError(
                f"the {getattr(self.engine, 'name', 'current')} engine does not take exemplar boxes as "
                "opened (its prompt path has no box path): use the torch engine, or the ttnn engine's "
                "own prompt paths (prompt_path auto, chip or host)"
            )
        if box_only and len(prompts) + 1 > max_prompts:
            raise InputError(
                f"too many prompts: {len(prompts)} given and the box-only concept makes "
                f"{len(prompts) + 1}; at most {max_prompts} allowed"
            )
        check_settings(threshold, max_instances)
        return prompts, checked

    def _load(self, image: object) -> _Frame:
        """One frame loaded and resized to the model's square, with its load and preprocess times."""
        timing: dict[str, float] = {}
        with _timed(timing, "load"):
            rgb = preprocess.load_image(image, self.max_image_side)
        with _timed(timing, "preprocess"):
            return _Frame(rgb, preprocess.resize_to_model(rgb), timing)

    def _stream(
        self, frames: Iterator[object], prompts: list[str], threshold: float, max_instances: int
    ) -> Iterator[SegmentationResult]:
        upcoming = self._next_frame(frames)
        while upcoming is not None:
            if isinstance(upcoming, Exception):
                raise upcoming
            current: _Frame = upcoming

            def read_ahead(current: _Frame = current) -> None:
                nonlocal upcoming
                upcoming = self._next_frame(frames)
                if isinstance(upcoming, _Frame):
                    with _timed(current.timing, "prefetch"):
                        self.engine.prefetch(upcoming.model_image)

            yield self._segment(current, prompts, threshold, max_instances, read_ahead)

    def _next_frame(self, frames: Iterator[object]) -> _Frame | Exception | None:
        """The next frame loaded and resized; the error it raised (kept until its turn); None at the end."""
        try:
            image = next(frames, _END)
            return None if image is _END else self._load(image)
        except Exception as error:  # a bad frame: raised after the frames before it are answered
            return error

    def _segment(
        self,
        frame: _Frame,
        prompts: list[str],
        threshold: float,
        max_instances: int,
        while_in_flight: Callable[[], None] | None = None,
        boxes: list[Exemplar] | None = None,
        carried: dict[str, Any] | None = None,
    ) -> SegmentationResult:
        """The engine's part of one frame; `while_in_flight` runs after encode_image, before any read.

        ``boxes`` (checked) and ``carried`` turn the prompts into concepts: each prompt with its
        boxes, then the box-only concept if there is one."""
        timing = frame.timing
        image_size = frame.rgb.shape[:2]
        concepts = None
        carried = {name: state for name, state in (carried or {}).items() if name in prompts or not name}
        if boxes or carried:
            clipped = exemplar_boxes.clip_to_image(boxes or [], image_size)
            concepts = exemplar_boxes.concepts(prompts, clipped, image_size, box_only="" in carried)
            prompts = [c.name for c in concepts]
        with _timed(timing, "image_encoder"):
            image_state = self.engine.encode_image(frame.model_image)
        if while_in_flight is not None:
            while_in_flight()
        with _timed(timing, "text_encoder"):
            prompt_states = self._prompt_states([c.text for c in concepts] if concepts else prompts)
        extra: dict[str, Any] = {}
        if concepts:
            with _timed(timing, "geometry_encoder"):
                extra["exemplars"] = self._exemplar_states(image_state, concepts, carried or {})
        with _timed(timing, "decoder"):
            decoded = self.engine.decode(image_state, prompt_states, max_instances, **extra)
        with _timed(timing, "postprocess"):
            result = self._instances(decoded, prompts, image_size, threshold, max_instances)
        if concepts:
            states = zip(prompts, extra["exemplars"], strict=True)
            result.exemplars = {name: state for name, state in states if state is not None}
        result.timing_ms = {**timing, "total": sum(timing.values())}
        return result

    def _exemplar_states(
        self, image_state: Any, concepts: list[exemplar_boxes.Concept], carried: dict[str, Any]
    ) -> list[Any]:
        """Each concept's exemplar state: its boxes encoded on this image (one batch for all), or
        the one carried from an earlier image, or None."""
        with_boxes = [c for c in concepts if len(c.boxes)]
        encoded = iter(())
        if with_boxes:
            boxes, labels = [c.boxes for c in with_boxes], [c.labels for c in with_boxes]
            encoded = iter(self.engine.encode_exemplars(image_state, boxes, labels))
        return [next(encoded) if len(c.boxes) else carried.get(c.name) for c in concepts]

    def _prompt_states(self, prompts: list[str]) -> list[Any]:
        """Encodings of ``prompts``, encoding only the ones not cached (in one batch)."""
        missing = list(dict.fromkeys(p for p in prompts if p not in self._text_cache))
        if missing:
            for prompt, state in zip(missing, self.engine.encode_prompts(missing), strict=True):
                self._text_cache[prompt] = state
        for prompt in prompts:
            self._text_cache.move_to_end(prompt)
        states = [self._text_cache[p] for p in prompts]
        while len(self._text_cache) > self._text_cache_size:
            self._text_cache.popitem(last=False)
        return states

    def _instances(
        self,
        decoded: Any,
        prompts: list[str],
        image_size: tuple[int, int],
        threshold: float,
        max_instances: int,
    ) -> SegmentationResult:
        selection = postprocess.select_instances(decoded.logits, decoded.presence, threshold, max_instances)
        boxes = postprocess.boxes_to_source(
            decoded.boxes[selection.prompt_index, selection.query_index], image_size
        )
        mask_logits = (
            self.engine.fetch_masks(decoded, selection.prompt_index, selection.query_index)
            if len(selection.scores)
            else np.zeros((0, 0, 0), dtype=np.float32)
        )
        instances = []
        for k, (prompt_index, score) in enumerate(zip(selection.prompt_index, selection.scores, strict=True)):
            crop, origin = postprocess.mask_crop(mask_logits[k], image_size)
            instances.append(
                Instance(
                    prompt=prompts[prompt_index],
                    prompt_index=int(prompt_index),
                    score=float(score),
                    box=tuple(float(v) for v in boxes[k]),
                    mask_crop=crop,
                    crop_origin=origin,
                    image_size=image_size,
                )
            )
        presence = postprocess.sigmoid(decoded.presence)
        return SegmentationResult(
            image_size=image_size,
            prompts=list(prompts),
            instances=instances,
            presence={prompt: float(presence[i]) for i, prompt in enumerate(prompts)},
        )


#: Marks the end of a frame iterator (a frame may be any object, None included).
_END = object()


@dataclass
class _Frame:
    """One frame ready for the engine: the source RGB, the model's square, timings so far."""

    rgb: np.ndarray
    model_image: np.ndarray
    timing: dict[str, float]


def check_settings(threshold: float, max_instances: int) -> None:
    """Raise InputError unless threshold is in THRESHOLD_RANGE and max_instances in 1..255."""
    low, high = THRESHOLD_RANGE
    if not low <= threshold <= high:
        raise InputError(f"threshold must be in [{low:g}, {high:g}], got {threshold}")
    if not 1 <= max_instances <= MAX_LABELLED_INSTANCES:
        raise InputError(
            f"max_instances must be between 1 and {MAX_LABELLED_INSTANCES} (one mono8 mask), "
            f"got {max_instances}"
        )


@contextmanager
def _timed(timing: dict[str, float], stage: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timing[stage] = (time.perf_counter() - start) * 1000.0
