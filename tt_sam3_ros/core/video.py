"""Videos in and out for `tt-sam3 track`: frames with their times, an annotated MP4, JSON lines.

OpenCV reads and writes the video (its FFmpeg backend, in opencv-python-headless). A frame's
time is its index divided by the container's frame rate (what the tracker ages tracks by), so a
video with a missing or zero rate is refused rather than given made-up times.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import cv2
import numpy as np

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.overlay import draw_overlay
from tt_sam3_ros.core.results import SegmentationResult


@dataclass(frozen=True)
class VideoInfo:
    """What the container says about a video."""

    fps: float
    frame_count: int  # as the container reports it (0 when unknown): for progress bars only
    size: tuple[int, int]  # (height, width)


def probe(path: Path) -> VideoInfo:
    """Open ``path`` once and read its rate, frame count and size.

    Raises:
        InputError: the file cannot be opened as a video, or has no usable frame rate or size.
    """
    capture = _open(path)
    try:
        fps = float(capture.get(cv2.CAP_PROP_FPS))
        count = int(max(0.0, capture.get(cv2.CAP_PROP_FRAME_COUNT)))
        height, width = (
            int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
            int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
        )
    finally:
        capture.release()
    if not (np.isfinite(fps) and fps > 0.0):
        raise InputError(f"{path}: the video states no frame rate, so frame times are unknown")
    if height <= 0 or width <= 0:
        raise InputError(f"{path}: the video states no frame size")
    return VideoInfo(fps, count, (height, width))


def frames(path: Path) -> Iterator[tuple[int, np.ndarray]]:
    """(index, uint8 RGB) for every frame of the video at ``path``, in order.

    Raises:
        InputError: OpenCV cannot open the file as a video.
    """
    capture = _open(path)
    try:
        index = 0
        while True:
            ok, bgr = capture.read()
            if not ok:
                return
            yield index, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            index += 1
    finally:
        capture.release()


def _open(path: Path) -> cv2.VideoCapture:
    if not path.is_file():
        raise InputError(f"no such video file: {path}")
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        capture.release()
        raise InputError(f"{path}: OpenCV cannot read this file as a video")
    return capture


class TrackWriter:
    """Writes each tracked frame to an annotated MP4 and a JSON-lines file.

    In the MP4, every instance is drawn with its track id's colour and the label
    "<track id> <prompt> <score>", so an object keeps its colour and number across frames.
    Each JSON line is one frame: {"frame", "time_s", then ``SegmentationResult.to_dict()``},
    in which each instance has "id" (its value in that frame's mask) and "track_id".
    """

    def __init__(self, video_path: Path, jsonl_path: Path, fps: float, size: tuple[int, int]) -> None:
        height, width = size
        self._paths = (video_path, jsonl_path)
        self._writer = cv2.VideoWriter(str(video_path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
        if not self._writer.isOpened():
            raise OSError(f"OpenCV cannot write an MP4 (mp4v) to {video_path}")
        self._size = size
        self._lines: IO[str] = jsonl_path.open("w", encoding="utf-8")

    def write(
        self, index: int, time_s: float, rgb: np.ndarray, result: SegmentationResult, **extra: Any
    ) -> None:
        """Append one frame (``rgb`` is the picture ``result`` was computed on)."""
        annotated = draw_overlay(rgb, result)
        if annotated.shape[:2] != self._size:  # a frame of another size: an MP4 holds one size
            annotated = cv2.resize(annotated, (self._size[1], self._size[0]))
        self._writer.write(cv2.cvtColor(annotated, cv2.COLOR_RGB2BGR))
        line = {"frame": index, "time_s": round(time_s, 6), **result.to_dict(), **extra}
        self._lines.write(json.dumps(line) + "\n")

    @property
    def paths(self) -> tuple[Path, Path]:
        """(MP4, JSON lines) being written."""
        return self._paths

    def close(self) -> None:
        """Finish both files. Idempotent."""
        self._writer.release()
        if not self._lines.closed:
            self._lines.close()

    def discard(self) -> None:
        """Close and delete both files: for a run that failed before writing any frame, so it
        leaves no empty results behind."""
        self.close()
        for path in self._paths:
            path.unlink(missing_ok=True)

    def __enter__(self) -> TrackWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
