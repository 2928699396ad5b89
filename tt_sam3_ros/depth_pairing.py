"""The depth path of the node, without the node: pairing depth with colour by stamp, its counters,
its /diagnostics status, and the 3D answer to one frame.

Why pairing keeps so little: a 1080p 16UC1 frame is 4 MB and a camera sends 30 a second, while
the worker may take a second per colour frame. So the buffer keeps the last few depth frames
(those that came just before a colour frame), and each colour frame in play (waiting in the slot
or being segmented) keeps the depth frame nearest its stamp seen so far, updated as later depth
frames arrive (drivers often publish depth a few milliseconds after colour). Its 3D answer then
uses the nearest of both.

Callbacks (executor threads) call ``add_depth``, ``set_camera_info`` and ``note_colour``; the
worker calls ``claim`` when it takes a frame, then ``take`` and ``answer``; every shared field is
guarded by one lock.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header
from vision_msgs.msg import Detection2DArray, Detection3DArray

from tt_sam3_ros import depth, messages_3d
from tt_sam3_ros.results import SegmentationResult

#: Depth frames kept from before a colour frame's arrival (4 at 30 Hz: the last 130 ms).
DEPTH_HISTORY = 4
#: Colour frames noted and not yet claimed by the worker: the slot's, and one racing the worker.
PENDING_COLOUR_FRAMES = 3


def stamp_ns(header: Header) -> int:
    """A header's stamp in nanoseconds."""
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


@dataclass(frozen=True)
class Pairing:
    """What the worker gets for one colour frame: depth and camera_info, or why not."""

    depth: Image | None
    camera_info: CameraInfo | None
    reason: str = ""


class DepthPairing:
    """Recent depth frames, the latest camera_info, and the best depth for each colour frame in play.

    A colour frame is in play from ``note_colour`` (it entered the slot) through ``claim`` (the
    worker took it) to ``take`` (its 3D answer, after segmentation): all along, depth frames that
    arrive are offered to it, so one published a few milliseconds after its colour frame is found
    however long the model takes.
    """

    def __init__(self, history: int = DEPTH_HISTORY) -> None:
        self._lock = threading.Lock()
        self._recent: deque[Image] = deque(maxlen=history)
        self._camera_info: CameraInfo | None = None
        # Colour frames noted but not yet claimed (the slot's, and one racing the worker).
        self._pending: dict[int, Image | None] = {}
        self._claimed: tuple[int, Image | None] | None = None

    def add_depth(self, msg: Image) -> None:
        """A depth frame arrived: keep it, and give it to each colour frame in play it is nearer to."""
        with self._lock:
            self._recent.append(msg)
            for stamp, best in self._pending.items():
                self._pending[stamp] = _nearest(stamp, [best, msg])
            if self._claimed is not None:
                stamp, best = self._claimed
                self._claimed = (stamp, _nearest(stamp, [best, msg]))

    def set_camera_info(self, msg: CameraInfo) -> None:
        with self._lock:
            self._camera_info = msg

    def note_colour(self, colour_stamp_ns: int) -> None:
        """A colour frame went into the slot: from now on it collects its nearest depth frame."""
        with self._lock:
            self._pending[colour_stamp_ns] = _nearest(colour_stamp_ns, list(self._recent))
            while len(self._pending) > PENDING_COLOUR_FRAMES:
                del self._pending[next(iter(self._pending))]

    def claim(self, colour_stamp_ns: int) -> None:
        """The worker took this colour frame: keep collecting for it until ``take``."""
        with self._lock:
            best = self._pending.pop(colour_stamp_ns, None)
            self._claimed = (colour_stamp_ns, _nearest(colour_stamp_ns, [best, *self._recent]))

    def take(self, colour_stamp_ns: int, max_skew_s: float) -> Pairing:
        """The depth frame nearest ``colour_stamp_ns`` within ``max_skew_s``, and camera_info."""
        with self._lock:
            candidates: list[Image | None] = list(self._recent)
            if self._claimed is not None and self._claimed[0] == colour_stamp_ns:
                candidates.append(self._claimed[1])
                self._claimed = None
            camera_info = self._camera_info
        best = _nearest(colour_stamp_ns, candidates)
        if best is None:
            return Pairing(None, camera_info, "no depth frame received yet")
        skew_s = abs(stamp_ns(best.header) - colour_stamp_ns) / 1e9
        if skew_s > max_skew_s:
            return Pairing(
                None,
                camera_info,
                f"nearest depth frame is {skew_s * 1000:.1f} ms from the colour frame "
                f"(depth_max_skew_s {max_skew_s:g})",
            )
        if camera_info is None:
            return Pairing(best, None, "no camera_info received yet")
        return Pairing(best, camera_info)

    def clear(self) -> None:
        """Forget everything (deactivate): stale depth must not pair with the next session's frames."""
        with self._lock:
            self._recent.clear()
            self._camera_info = None
            self._pending.clear()
            self._claimed = None


def _nearest(stamp: int, candidates: list[Image | None]) -> Image | None:
    """The candidate whose stamp is nearest ``stamp`` (None when there is none)."""
    present = [msg for msg in candidates if msg is not None]
    if not present:
        return None
    return min(present, key=lambda msg: abs(stamp_ns(msg.header) - stamp))


@dataclass(frozen=True)
class DepthSettings:
    """The depth parameters the worker reads at the start of each frame."""

    limits: depth.DepthLimits = field(default_factory=depth.DepthLimits)
    max_skew_s: float = 0.02
    points_stride: int = 4


@dataclass(frozen=True)
class Answer3D:
    """The 3D messages for one frame (``cloud`` only when asked for)."""

    detections: Detection3DArray
    cloud: PointCloud2 | None


def answer(
    header: Header,
    result: SegmentationResult,
    labels: Any,
    detections_2d: Detection2DArray,
    pairing: Pairing,
    settings: DepthSettings,
    want_cloud: bool,
) -> Answer3D:
    """Detection3DArray (and the labelled cloud) for one colour frame and its paired depth.

    ``labels`` is the published mono8 mask (overlaps resolved), ``detections_2d`` the published
    Detection2DArray; both with ``header``, the colour image's, which the 3D outputs carry too.

    Raises:
        InputError: depth or camera_info from another frame, an unusable encoding, buffer, size
            or K; the message says which.
    """
    assert pairing.depth is not None and pairing.camera_info is not None
    messages_3d.check_frames(header, pairing.depth, pairing.camera_info)
    pixels = messages_3d.depth_to_array(pairing.depth)
    camera = messages_3d.camera_from_info(pairing.camera_info, labels.shape, pixels.shape)
    grid = depth.depth_image(pixels, labels.shape)
    geometries = depth.measure_instances(
        labels, depth.instance_windows(result), grid, camera, settings.limits
    )
    detections = messages_3d.detections_3d(detections_2d, geometries, header)
    cloud = None
    if want_cloud:
        points = depth.labelled_points(labels, grid, camera, settings.limits, settings.points_stride)
        # Each point names its object by its detection's id (the track id while tracking), as
        # Detection3D.id does; the mask value k is only the detection's position in this frame.
        ids = np.array([0, *(int(d.id) for d in detections_2d.detections)], dtype=points["instance"].dtype)
        points["instance"] = ids[points["instance"]]
        cloud = messages_3d.cloud_to_message(points, header)
    return Answer3D(detections, cloud)


@dataclass
class DepthStats:
    """Counters of the depth path, for the ``<node>: depth`` status; every method holds ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    depth_received: int = 0
    camera_info_received: int = 0
    frames_3d: int = 0
    frames_without_depth: int = 0
    depth_rejected: int = 0
    last_error: str = ""
    last_outcome: str = "none"  # none | ok | without_depth | rejected

    def count_depth(self) -> None:
        with self.lock:
            self.depth_received += 1

    def count_camera_info(self) -> None:
        with self.lock:
            self.camera_info_received += 1

    def count_3d(self) -> None:
        with self.lock:
            self.frames_3d += 1
            self.last_outcome = "ok"

    def count_without_depth(self, reason: str) -> None:
        with self.lock:
            self.frames_without_depth += 1
            self.last_error = reason
            self.last_outcome = "without_depth"

    def count_rejected(self, reason: str) -> None:
        with self.lock:
            self.depth_rejected += 1
            self.last_error = reason
            self.last_outcome = "rejected"

    def status(self, node_name: str) -> DiagnosticStatus:
        """The ``<node>: depth`` status: WARN while the last frame got no 3D answer."""
        with self.lock:
            values = {
                "depth_received": str(self.depth_received),
                "camera_info_received": str(self.camera_info_received),
                "frames_3d": str(self.frames_3d),
                "frames_without_depth": str(self.frames_without_depth),
                "depth_rejected": str(self.depth_rejected),
                "last_error": self.last_error,
            }
            outcome, last_error = self.last_outcome, self.last_error
        if outcome in ("without_depth", "rejected"):
            level, message = DiagnosticStatus.WARN, last_error
        elif outcome == "none":
            level, message = DiagnosticStatus.OK, "waiting for a frame"
        else:
            level, message = DiagnosticStatus.OK, "3D from depth"
        return DiagnosticStatus(
            level=level,
            name=f"{node_name}: depth",
            message=message,
            values=[KeyValue(key=key, value=value) for key, value in values.items()],
        )
