"""The depth path of the node, without the node: pairing depth with colour by stamp, its counters,
and the 3D answer to one frame, all over plain data.

No message types here: the node's callbacks turn a depth Image and a CameraInfo into a
``DepthFrame`` and a ``CameraInfoData`` (``messages_3d``), and the node turns an ``Answer3D``
into Detection3DArray and PointCloud2 (``messages_3d`` again); the status is ``diagnostics``'.

Why pairing keeps so little: a 1080p 16UC1 frame is 4 MB and a camera sends 30 a second, while
the worker may take a second per colour frame. So the buffer keeps the last few depth frames
(those that came just before a colour frame), and each colour frame in play (waiting in the slot
or being segmented) keeps the depth frame nearest its stamp seen so far, updated as later depth
frames arrive (drivers often publish depth a few milliseconds after colour). Its 3D answer then
uses the nearest of both.

Callbacks (executor threads) call ``add_depth``, ``set_camera_info`` and ``note_colour``; the
worker calls ``claim`` when it takes a frame, then ``take`` and ``answer`` (or ``forget``, when
the frame gets no 3D answer); every shared field is guarded by one lock. With several chips, a
camera's frames may be claimed by two workers at once: each claim collects on its own.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tt_sam3_ros.core import depth
from tt_sam3_ros.core.camera_model import Camera
from tt_sam3_ros.core.errors import InputError, quoted
from tt_sam3_ros.core.results import SegmentationResult

#: Depth frames kept from before a colour frame's arrival (4 at 30 Hz: the last 130 ms).
DEPTH_HISTORY = 4
#: Colour frames noted and not yet claimed by the worker: the slot's, and one racing the worker.
PENDING_COLOUR_FRAMES = 3
#: Colour frames claimed by a worker and not yet taken: one per chip serving the camera (its
#: frames may run on several chips at once). A frame with no 3D answer (refused, failed) is
#: ``forget``-ed; should one not be, beyond this many the oldest claim is dropped.
CLAIMED_COLOUR_FRAMES = 16


@dataclass(frozen=True)
class DepthFrame:
    """One received depth image as plain data: its stamp, frame and pixels, or why it is unusable.

    ``pixels`` is 2-D uint16 (millimetres) or float32 (metres). A message that could not be
    read keeps its stamp and frame with ``pixels`` None and the reason in ``refusal``: it still
    pairs by stamp, and the frame it pairs with is answered in 2D with that reason.
    """

    stamp_ns: int
    frame_id: str
    pixels: np.ndarray | None
    refusal: str = ""


@dataclass(frozen=True)
class CameraInfoData:
    """The colour camera's CameraInfo as plain data (the fields the depth path reads)."""

    frame_id: str
    height: int
    width: int
    k: tuple[float, ...]
    p: tuple[float, ...] = ()
    binning: tuple[int, int] = (0, 0)
    #: x_offset, y_offset, height, width (all 0: the full image).
    roi: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True)
class Pairing:
    """What the worker gets for one colour frame: depth and camera_info, or why not."""

    depth: DepthFrame | None
    camera_info: CameraInfoData | None
    reason: str = ""


class DepthPairing:
    """Recent depth frames, the latest camera_info, and the best depth for each colour frame in play.

    A colour frame is in play from ``note_colour`` (it entered the slot) through ``claim`` (the
    worker took it) to ``take`` (its 3D answer, after segmentation): all along, depth frames that
    arrive are offered to it, so one published a few milliseconds after its colour frame is found
    however long the model takes.

    Depth without a stamp (0, as some drivers and bridges publish) cannot be paired by time: the
    newest unstamped frame received when the worker takes a colour frame's answer is its depth,
    unless a stamped depth frame lies within the skew.
    """

    def __init__(self, history: int = DEPTH_HISTORY) -> None:
        self._lock = threading.Lock()
        self._recent: deque[DepthFrame] = deque(maxlen=history)
        self._camera_info: CameraInfoData | None = None
        # Colour frames noted but not yet claimed (the slot's, and one racing the worker).
        self._pending: dict[int, DepthFrame | None] = {}
        # Colour frames the workers took, each collecting until its answer takes it.
        self._claimed: dict[int, DepthFrame | None] = {}
        self._newest_unstamped: DepthFrame | None = None

    def add_depth(self, msg: DepthFrame) -> None:
        """A depth frame arrived: keep it, and give it to each colour frame in play it is nearer to."""
        with self._lock:
            if msg.stamp_ns == 0:
                self._newest_unstamped = msg
                return
            self._recent.append(msg)
            for stamp, best in self._pending.items():
                self._pending[stamp] = _nearest(stamp, [best, msg])
            for stamp, best in self._claimed.items():
                self._claimed[stamp] = _nearest(stamp, [best, msg])

    def set_camera_info(self, msg: CameraInfoData) -> None:
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
            self._claimed[colour_stamp_ns] = _nearest(colour_stamp_ns, [best, *self._recent])
            while len(self._claimed) > CLAIMED_COLOUR_FRAMES:
                del self._claimed[next(iter(self._claimed))]

    def forget(self, colour_stamp_ns: int) -> None:
        """The claimed colour frame will have no 3D answer (refused, failed): stop collecting for it."""
        with self._lock:
            self._claimed.pop(colour_stamp_ns, None)

    def take(self, colour_stamp_ns: int, max_skew_s: float) -> Pairing:
        """The depth frame nearest ``colour_stamp_ns`` within ``max_skew_s``, and camera_info."""
        with self._lock:
            candidates: list[DepthFrame | None] = list(self._recent)
            if colour_stamp_ns in self._claimed:
                candidates.append(self._claimed.pop(colour_stamp_ns))
            camera_info = self._camera_info
            unstamped = self._newest_unstamped
        best = _nearest(colour_stamp_ns, candidates)
        skew_s = abs(best.stamp_ns - colour_stamp_ns) / 1e9 if best is not None else math.inf
        if unstamped is not None and skew_s > max_skew_s:
            best, skew_s = unstamped, 0.0
        if best is None:
            return Pairing(None, camera_info, "no depth frame received yet")
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
            self._claimed.clear()
            self._newest_unstamped = None


def _nearest(stamp: int, candidates: list[DepthFrame | None]) -> DepthFrame | None:
    """The candidate whose stamp is nearest ``stamp`` (None when there is none)."""
    present = [frame for frame in candidates if frame is not None]
    if not present:
        return None
    return min(present, key=lambda frame: abs(frame.stamp_ns - stamp))


@dataclass(frozen=True)
class DepthSettings:
    """The depth parameters the worker reads at the start of each frame."""

    limits: depth.DepthLimits = field(default_factory=depth.DepthLimits)
    max_skew_s: float = 0.02
    points_stride: int = 4


@dataclass(frozen=True)
class Answer3D:
    """The 3D answer to one frame: each measured instance, and the labelled points when asked for.

    ``points`` is ``depth.POINT_DTYPE`` with ``instance`` holding each point's detection id
    (the track id while tracking), as Detection3D.id does.
    """

    geometries: list[depth.InstanceGeometry]
    points: np.ndarray | None


def check_frames(image_frame_id: str, depth_frame: DepthFrame, info: CameraInfoData) -> None:
    """Depth and camera_info must be in the colour image's frame: registered depth is.

    Raises:
        InputError: a frame_id that differs from the colour image's, quoted.
    """
    for name, frame_id in (("depth", depth_frame.frame_id), ("camera_info", info.frame_id)):
        if frame_id != image_frame_id:
            raise InputError(
                f"{name} frame_id {quoted(frame_id)} is not the colour image's "
                f"{quoted(image_frame_id)}: depth must be registered to the colour camera"
            )


def camera_from_info(
    info: CameraInfoData, image_size: tuple[int, int], depth_size: tuple[int, int]
) -> Camera:
    """The pinhole camera of the colour image's pixel grid from the colour camera's CameraInfo.

    P[:3, :3] when P is set (a rectified image), K otherwise (``camera_model.Camera.from_calibration``).
    ``info`` may describe the colour image's size, or the depth image's when that is an integer
    scale of it (the matrix is then scaled). Distortion (D) is not applied.

    Raises:
        InputError: a size that matches neither image, binning or a region of interest, a P of
            another stereo camera than the left, or a matrix that ``camera_model.Camera`` refuses.
    """
    info_size = (int(info.height), int(info.width))
    if info_size not in (tuple(image_size), tuple(depth_size)):
        raise InputError(
            f"camera_info is {info_size[1]}x{info_size[0]} but the colour image is "
            f"{image_size[1]}x{image_size[0]} and the depth {depth_size[1]}x{depth_size[0]}"
        )
    camera = Camera.from_calibration(info.k, info.p, info_size, binning=info.binning, roi=info.roi)
    return camera.scaled_to(image_size)


def answer(
    image_frame_id: str,
    result: SegmentationResult,
    labels: np.ndarray,
    pairing: Pairing,
    settings: DepthSettings,
    want_cloud: bool,
) -> Answer3D:
    """The 3D answer for one colour frame (``image_frame_id``) and its paired depth.

    ``labels`` is the published mono8 mask (overlaps resolved); instance k of it is the k-th
    detection, whose id ``result.detection_ids()`` gives.

    Raises:
        InputError: depth or camera_info from another frame, an unusable depth image, size
            or K; the message says which.
    """
    assert pairing.depth is not None and pairing.camera_info is not None
    check_frames(image_frame_id, pairing.depth, pairing.camera_info)
    pixels = pairing.depth.pixels
    if pixels is None:
        raise InputError(pairing.depth.refusal)
    camera = camera_from_info(pairing.camera_info, labels.shape, pixels.shape)
    grid = depth.depth_image(pixels, labels.shape)
    geometries = depth.measure_instances(
        labels, depth.instance_windows(result), grid, camera, settings.limits
    )
    points = None
    if want_cloud:
        points = depth.labelled_points(labels, grid, camera, settings.limits, settings.points_stride)
        # Each point names its object by its detection's id (the track id while tracking), as
        # Detection3D.id does; the mask value k is only the detection's position in this frame.
        ids = np.array([0, *result.detection_ids()], dtype=points["instance"].dtype)
        points["instance"] = ids[points["instance"]]
    return Answer3D(geometries, points)


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

    def snapshot(self) -> dict[str, str]:
        """The counters as /diagnostics values, with the last outcome (none, ok, without_depth,
        rejected) under ``last_outcome``; taken under the lock."""
        with self.lock:
            return {
                "depth_received": str(self.depth_received),
                "camera_info_received": str(self.camera_info_received),
                "frames_3d": str(self.frames_3d),
                "frames_without_depth": str(self.frames_without_depth),
                "depth_rejected": str(self.depth_rejected),
                "last_error": self.last_error,
                "last_outcome": self.last_outcome,
            }
