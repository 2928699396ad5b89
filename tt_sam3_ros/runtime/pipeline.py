"""The per-frame pipeline of the node's cameras, without ROS: decode, segment, track, 3D, and the
outputs of one frame as plain data, with every failure sorted by whose fault it is.

The node calls ``FramePipeline.process`` once per frame on its worker thread and hands the
outputs to ROS through an ``Outputs`` of its own (the conversion modules build the messages),
so this module imports no message type and can be driven by a test, the CLI or another
tracker. Each camera's state (its counters, depth pairing and tracker) is one ``CameraState``.

Why failures are sorted here: a frame a user sent that cannot be used is bad input (a WARN, the
next frame is served); a fault of the engine counts towards ``ENGINE_ERROR_LIMIT`` in a row,
after which the node releases the engine; a fault after the engine answered (tracking, 3D,
publishing) is an output error, which never counts against the engine. Only ``InputError`` is
bad input: the engines raise ``ValueError`` too.

Log lines go to the ``tt_sam3_ros.runtime.pipeline`` logger (the node forwards the library's logging to
its ROS logger), each kind at most once per ``LOG_THROTTLE_S``: a camera sending bad frames at
30 Hz must not flood the log.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tt_sam3_ros.core import depth_pairing
from tt_sam3_ros.core.depth_pairing import Answer3D, DepthPairing, DepthStats
from tt_sam3_ros.core.errors import InputError, printable, quoted
from tt_sam3_ros.core.exemplars import BOX_ONLY_PROMPT, Exemplar
from tt_sam3_ros.core.results import FIRST_TRACK_ID, SegmentationResult
from tt_sam3_ros.core.settings import RunSettings
from tt_sam3_ros.core.tracking import (
    InstanceTracker,
    TrackIdSpace,
)
from tt_sam3_ros.core.video_engine import Sam3VideoEngine
from tt_sam3_ros.core.video_tracker import keep_best
from tt_sam3_ros.engines.base import EngineError
from tt_sam3_ros.runtime.exemplar_cache import ExemplarMemory, KeptFrames
from tt_sam3_ros.runtime.worker import SINGLE_CAMERA, CameraStats, FrameStats
from tt_sam3_ros.weights.errors import WeightsError

LOG = logging.getLogger(__name__)

#: Seconds between two log lines about the same kind of failure.
LOG_THROTTLE_S = 5.0
#: Frames failing in the engine in a row after which the engine counts as lost: the node says
#: so and takes the lifecycle's error path (engine released, back to unconfigured) instead of
#: failing every frame forever. A transient fault rarely hits this many frames in a row.
ENGINE_ERROR_LIMIT = 5
#: Longest exception message quoted in a log line or /diagnostics (it may hold input text).
REASON_LIMIT = 240


def is_expected_failure(error: BaseException) -> bool:
    """Whether a start-up failure is one a user acts on from its message alone.

    No TT-NN, no device, an engine option refused (``EngineError``), weights not found
    (``WeightsError``) and a refused value (``ValueError``, ``InputError``) say what to do;
    their traceback (through the worker thread and importlib) only hides that. Anything else
    is a fault whose traceback is the report.
    """
    return isinstance(error, EngineError | WeightsError | ValueError)


@dataclass(frozen=True)
class FrameInput:
    """One received frame as the pipeline sees it.

    ``decode(max_side)`` returns its pixels as uint8 (height, width, 3) RGB, or raises
    ``InputError`` (the node passes ``messages.decode_image`` over the message). ``stamp_ns``
    is the image stamp (0: unset), ``received_s`` when it arrived (monotonic seconds).
    """

    decode: Callable[[int], np.ndarray]
    stamp_ns: int = 0
    frame_id: str = ""
    received_s: float = 0.0
    camera: str = SINGLE_CAMERA
    #: Exemplar boxes drawn on this frame (prompt_boxes); the frame is answered with them and
    #: their encoding stays in force (``ExemplarMemory``) unless cleared since ``generation``.
    boxes: tuple[Exemplar, ...] = ()
    generation: int = 0


@dataclass(frozen=True)
class Wants:
    """Outputs that cost work and only matter while someone listens."""

    overlay: bool = False
    cloud: bool = False


@dataclass(frozen=True)
class FrameOutput:
    """The 2D outputs of one frame: the (tracked) result, its mono8 label image, the overlay.

    ``labels`` value k is the k-th instance of ``result`` (``result.detection_ids()[k - 1]`` is
    its id); ``class_ids`` maps each prompt to its class id; ``overlay`` is None unless wanted.
    ``exemplar_answer``: the frame exemplar boxes were drawn on, answered with them (an earlier
    frame, untracked, with no overlay): it goes out apart from the live stream.
    """

    result: SegmentationResult
    labels: np.ndarray
    class_ids: dict[str, int]
    overlay: np.ndarray | None = None
    exemplar_answer: bool = False


class Outputs(Protocol):
    """Where one frame's outputs go (the node: its publishers, for that frame's header)."""

    #: The depth path is on: the frame claims its depth at the start and gets a 3D answer.
    depth: bool

    def wants(self) -> Wants:
        """Asked once the result is in: subscribers come and go while the engine runs."""

    def publish(self, output: FrameOutput) -> None:
        """The 2D outputs, published before any 3D work starts."""

    def publish_3d(self, answer: Answer3D) -> None:
        """The 3D outputs of the same frame, after ``publish``."""


@dataclass(frozen=True)
class FrameReport:
    """How one frame ended: ``answered``, ``rejected`` (bad input), ``engine_error`` or
    ``output_error`` (the engine answered; tracking, 3D or publishing failed).

    ``engine_lost`` is set on the error that completes ``ENGINE_ERROR_LIMIT`` in a row.
    """

    outcome: str
    reason: str = ""
    engine_lost: bool = False


@dataclass
class CameraState:
    """Everything the pipeline keeps about one camera (``SINGLE_CAMERA`` without ``cameras``).

    ``tracker`` outlives the state (the pipeline keeps one per camera name for its life, all
    drawing ids from one space, so no track id is given twice, across cameras and configures);
    the counters and the depth pairing are new with each configure.
    """

    name: str
    stats: CameraStats
    tracker: InstanceTracker
    depth_pairing: DepthPairing = field(default_factory=DepthPairing)
    depth_stats: DepthStats = field(default_factory=DepthStats)
    exemplars: ExemplarMemory = field(default_factory=ExemplarMemory)
    #: With ``tracker: sam3``: the camera's SAM 3 session (made on its first frame) and its
    #: object ids mapped to the node's (drawn from the node's id space, never reused).
    video_tracker: Any = None
    video_ids: dict[int, int] = field(default_factory=dict)


class _Throttle:
    """Says whether a log line of a kind may go out: at most one per ``period_s`` per kind."""

    def __init__(self, period_s: float) -> None:
        self._period_s = period_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def allows(self, kind: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._period_s:
                return False
            self._last[kind] = now
            return True


class FramePipeline:
    """Decode, segment, track and measure one frame of one camera; count how it ended.

    One per node: it owns the engine's counters (every camera's frames together) and one
    tracker per camera name. Only the worker thread calls ``process``.
    """

    def __init__(self, now_ns: Callable[[], int] = time.time_ns) -> None:
        #: The engine's counters: every camera's frames together.
        self.engine_stats = FrameStats()
        self._now_ns = now_ns
        # All trackers take their ids from one space: a track id is never given twice while
        # the pipeline lives, across cameras and configures.
        # From FIRST_TRACK_ID: an untracked detection's id (its position) is never a track id.
        self._track_ids = TrackIdSpace(first=FIRST_TRACK_ID)
        self._trackers: dict[str, InstanceTracker] = {}
        self._throttle = _Throttle(LOG_THROTTLE_S)
        # Every camera's frames kept to draw exemplar boxes on: one byte budget for the node.
        self.kept_frames = KeptFrames()

    def make_cameras(self, names: Sequence[str]) -> dict[str, CameraState]:
        """Fresh state for each camera (no names: the one camera), counting into the engine's."""
        return {name: self._camera(name) for name in names or (SINGLE_CAMERA,)}

    def _camera(self, name: str) -> CameraState:
        tracker = self._trackers.get(name)
        if tracker is None:
            tracker = self._trackers[name] = InstanceTracker(id_space=self._track_ids)
        exemplars = ExemplarMemory(name, self.kept_frames)
        return CameraState(name, CameraStats(FrameStats(), self.engine_stats), tracker, exemplars=exemplars)

    def reset_tracks(self) -> None:
        """Forget every camera's tracks (the engine was released); ids are still never reused.

        SAM 3 sessions live in ``CameraState``, which the node makes anew at each configure.
        """
        for tracker in self._trackers.values():
            tracker.reset()

    def process(
        self,
        segmenter: Any,
        camera: CameraState,
        frame: FrameInput,
        settings: RunSettings,
        outputs: Outputs,
        chip: FrameStats | None = None,
        wait_turn: Callable[[], None] | None = None,
    ) -> FrameReport:
        """Answer one frame: its 2D outputs, then its 3D ones when the depth path is on.

        A frame with exemplar boxes (an earlier frame, sent again with the boxes drawn on it)
        is answered with them, neither tracked nor given 3D (its stamp is behind the live
        stream's); the boxes' encoding then stays in force for the camera's later frames.
        Bad input and engine faults are counted and logged, never raised.

        With several chips: ``chip`` is the counters of the chip that serves the frame (its
        errors in a row decide ``engine_lost``), and ``wait_turn`` is called once the engine
        answered, before anything of the camera's changes (exemplars kept, tracking, publishing):
        it returns when the camera's earlier frames, served on other chips, are out.
        """
        claimed = outputs.depth and not frame.boxes
        if claimed:
            camera.depth_pairing.claim(frame.stamp_ns)
        try:
            return self._process(segmenter, camera, frame, settings, outputs, chip, wait_turn)
        finally:
            if claimed:  # a frame refused, failed or given up has no 3D answer to take its depth
                camera.depth_pairing.forget(frame.stamp_ns)

    def _process(
        self,
        segmenter: Any,
        camera: CameraState,
        frame: FrameInput,
        settings: RunSettings,
        outputs: Outputs,
        chip: FrameStats | None,
        wait_turn: Callable[[], None] | None,
    ) -> FrameReport:
        started = time.monotonic()
        stats = camera.stats if chip is None else camera.stats.on_chip(chip)
        with_boxes = bool(frame.boxes)
        extra: dict[str, Any] = {}
        carried = camera.exemplars.states
        if carried:
            extra["carried"] = carried
        if with_boxes:
            extra["boxes"] = list(frame.boxes)
        try:
            rgb = frame.decode(segmenter.max_image_side)
            result = self._segment(segmenter, camera, rgb, settings, extra)
        except InputError as error:
            return self._rejected(stats, frame, error)
        except Exception as error:  # the engine's, whatever its type (torch raises ValueError too)
            return self._engine_error(stats, error)
        if wait_turn is not None:
            wait_turn()
        if with_boxes and camera.exemplars.keep(result.exemplars, frame.generation):
            names = ", ".join(quoted(name) if name else "box-only" for name in result.exemplars)
            LOG.info(f"exemplars in force on camera {quoted(camera.name)}: {names}")
        try:
            if not with_boxes:
                result = self._track(camera, result, frame, settings)
            labels = result.instance_mask()
            self._publish(camera, frame, rgb, result, labels, settings, outputs)
        except Exception as error:  # after the engine: ours or the outputs', never the engine's
            return self._output_error(stats, error)
        age_ms = (self._now_ns() - frame.stamp_ns) / 1e6 if frame.stamp_ns else None
        stats.count_processed((time.monotonic() - started) * 1000.0, age_ms)
        return FrameReport("answered")

    def _publish(
        self,
        camera: CameraState,
        frame: FrameInput,
        rgb: np.ndarray,
        result: SegmentationResult,
        labels: np.ndarray,
        settings: RunSettings,
        outputs: Outputs,
    ) -> None:
        wants = outputs.wants()
        overlay = None
        if settings.publish_overlay and wants.overlay and not frame.boxes:
            from tt_sam3_ros.core.overlay import draw_overlay

            overlay = draw_overlay(rgb, result, labels)
        class_ids = dict(settings.class_ids)
        if BOX_ONLY_PROMPT in result.prompts:
            class_ids[BOX_ONLY_PROMPT] = settings.box_only_class_id
        outputs.publish(FrameOutput(result, labels, class_ids, overlay, exemplar_answer=bool(frame.boxes)))
        if outputs.depth and not frame.boxes:
            answer = self._answer_3d(camera, frame, result, labels, settings, wants.cloud)
            if answer is not None:
                outputs.publish_3d(answer)
                camera.depth_stats.count_3d()

    @staticmethod
    def _segment(
        segmenter: Any, camera: CameraState, rgb: np.ndarray, settings: RunSettings, extra: dict[str, Any]
    ) -> SegmentationResult:
        """The engine's part: segment the frame, or, when the engine is SAM 3's video model (the
        node's ``tracker: sam3``, chosen at configure), track it in the camera's session."""
        prompts = list(settings.prompts)
        if not isinstance(segmenter, Sam3VideoEngine):
            return segmenter(
                rgb, prompts, threshold=settings.threshold, max_instances=settings.max_instances, **extra
            )
        if extra.get("boxes"):
            raise InputError("exemplar boxes are not taken with tracker 'sam3' (text prompts only)")
        if camera.video_tracker is None:
            camera.video_tracker = segmenter.new_tracker()
        return keep_best(camera.video_tracker(rgb, prompts), settings.threshold, settings.max_instances)

    def _sam3_ids(self, camera: CameraState, result: SegmentationResult) -> SegmentationResult:
        """SAM 3's object ids mapped into the node's id space: an object keeps its node id while
        its session tracks it; a new object gets a new one. Forgotten objects leave the map."""
        ids = camera.video_ids
        tracked = set(camera.video_tracker.object_ids)
        for obj_id in [o for o in ids if o not in tracked]:
            del ids[obj_id]
        new = [i.track_id for i in result.instances if i.track_id not in ids]
        ids.update(zip(new, self._track_ids.take(len(new)).tolist(), strict=True))
        instances = [i.with_track_id(ids[i.track_id]) for i in result.instances]
        return SegmentationResult(
            result.image_size, result.prompts, instances, result.presence, result.timing_ms
        )

    def _track(
        self, camera: CameraState, result: SegmentationResult, frame: FrameInput, settings: RunSettings
    ) -> SegmentationResult:
        """Give the instances their track ids from their camera's tracker (tracking on), or forget
        that camera's tracks (off).

        Tracks age by the image stamps; a stream without stamps ages them by arrival time.
        Tracks of prompts that were removed are dropped by the tracker itself.
        """
        tracker = camera.tracker
        if camera.video_tracker is not None:
            if not settings.tracking:  # ids are the positions: the session keeps tracking regardless
                return SegmentationResult(
                    result.image_size,
                    result.prompts,
                    [i.with_track_id(None) for i in result.instances],
                    result.presence,
                    result.timing_ms,
                )
            return self._sam3_ids(camera, result)
        if not settings.tracking:
            tracker.reset()
            return result
        tracker.configure(settings.track_max_age_s, settings.track_min_iou, settings.track_max_age_frames)
        if frame.stamp_ns:
            seconds, nanoseconds = divmod(frame.stamp_ns, 1_000_000_000)
            stamp_s = seconds + nanoseconds * 1e-9
        else:
            stamp_s = frame.received_s
        return tracker.update(result, stamp_s)

    def _answer_3d(
        self,
        camera: CameraState,
        frame: FrameInput,
        result: SegmentationResult,
        labels: np.ndarray,
        settings: RunSettings,
        want_cloud: bool,
    ) -> Answer3D | None:
        """The 3D answer of one answered frame; None (counted, logged) when it stays 2D only."""
        pairing = camera.depth_pairing.take(frame.stamp_ns, settings.depth.max_skew_s)
        if pairing.reason:
            camera.depth_stats.count_without_depth(pairing.reason)
            self._warn("without_depth", f"frame answered in 2D only: {pairing.reason}")
            return None
        try:
            return depth_pairing.answer(frame.frame_id, result, labels, pairing, settings.depth, want_cloud)
        except InputError as error:
            reason = f"depth refused: {error}"
            camera.depth_stats.count_rejected(reason)
            self._warn("depth_refused", f"frame answered in 2D only: {reason}")
            return None

    def _rejected(self, stats: CameraStats, frame: FrameInput, error: InputError) -> FrameReport:
        # Both come from the message: quoted and cut, so they cannot forge or flood a log line.
        source = f"frame_id {quoted(frame.frame_id)}" if frame.frame_id else "no frame_id"
        reason = f"bad input frame ({source}): {printable(error, REASON_LIMIT)}"
        stats.count_rejected(reason)
        self._warn("rejected", f"skipped {reason}")
        return FrameReport("rejected", reason)

    def _engine_error(self, stats: CameraStats, error: Exception) -> FrameReport:
        reason = f"engine error: {type(error).__name__}: {printable(error, REASON_LIMIT)}"
        in_a_row = stats.count_engine_error(reason)
        if self._throttle.allows("engine_error"):
            LOG.error(f"{reason}; skipping the frame and carrying on\n{traceback.format_exc()}")
        return FrameReport("engine_error", reason, engine_lost=in_a_row == ENGINE_ERROR_LIMIT)

    def _output_error(self, stats: CameraStats, error: Exception) -> FrameReport:
        reason = f"output error: {type(error).__name__}: {printable(error, REASON_LIMIT)}"
        stats.count_output_error(reason)
        if self._throttle.allows("output_error"):
            LOG.error(
                f"{reason}; the engine answered, this frame's outputs are lost\n{traceback.format_exc()}"
            )
        return FrameReport("output_error", reason)

    def _warn(self, kind: str, text: str) -> None:
        if self._throttle.allows(kind):
            LOG.warning(text)
