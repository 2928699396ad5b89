"""`tt-sam3 track` and Sam3Tracker as a user runs them: an MP4 and JSON lines with stable ids."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from tt_sam3_ros.core.overlay import draw_overlay, instance_colour
from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.core.tracking import Sam3Tracker

CLI = [sys.executable, "-m", "tt_sam3_ros.cli.main"]
FRAMES = 6


def write_video(path: Path, frames: list[np.ndarray], fps: float = 10.0) -> Path:
    """A lossless AVI (FFV1): what is read back equals what was written, frame for frame."""
    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"FFV1"), fps, (width, height))
    assert writer.isOpened()
    for rgb in frames:
        writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def scene() -> np.ndarray:
    rows, cols = np.mgrid[0:96, 0:128]
    image = np.stack([rows * 2, cols * 2, (rows + cols) % 256], axis=-1).astype(np.uint8)
    image[30:60, 40:90] = (250, 30, 30)
    return image


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=240)


def test_track_writes_an_annotated_mp4_and_one_json_line_per_frame(tmp_path: Path) -> None:
    video = write_video(tmp_path / "street.avi", [scene()] * FRAMES)
    out = tmp_path / "out"
    done = run(
        "track", str(video), "--prompt", "car", "--prompt", "person", "--model", "tiny-random",
        "--engine", "torch", "--threshold", "0", "--max-instances", "4", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "MEANINGLESS" in done.stderr
    assert "tracking" in done.stderr and f"{FRAMES}/{FRAMES}" in done.stderr  # the progress bar

    capture = cv2.VideoCapture(str(out / "street_tracked.mp4"))
    written = []
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        written.append(bgr)
    assert len(written) == FRAMES and written[0].shape == (96, 128, 3)
    assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(10.0)
    assert not np.allclose(cv2.cvtColor(written[0], cv2.COLOR_BGR2RGB), scene(), atol=12)  # drawn on

    lines = [json.loads(line) for line in (out / "street.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(FRAMES))
    assert [line["time_s"] for line in lines] == pytest.approx([k / 10.0 for k in range(FRAMES)])
    first = lines[0]["instances"]
    assert [i["id"] for i in first] == [1, 2, 3, 4]  # the mask values, as in `segment`
    # The same picture in every frame: every object keeps its track id from the first frame on.
    for line in lines:
        assert [(i["prompt"], i["track_id"]) for i in line["instances"]] == [
            (i["prompt"], i["track_id"]) for i in first
        ]
    assert len({i["track_id"] for i in first}) == 4
    assert "meaningless" in lines[0]["warning"]
    assert f"{FRAMES} frame(s), 4 track(s)" in done.stdout


def test_track_with_the_sam3_tracker_writes_its_object_ids(tmp_path: Path) -> None:
    """SAM 3's video tracker over the video: every line carries its object ids, each object keeps
    its id from the frame it appears on (SAM 3's ids count from 0)."""
    video = write_video(tmp_path / "street.avi", [scene()] * FRAMES)
    out = tmp_path / "out"
    done = run(
        "track", str(video), "--prompt", "car", "--model", "tiny-random", "--tracker", "sam3",
        "--threshold", "0", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "MEANINGLESS" in done.stderr
    lines = [json.loads(line) for line in (out / "street.jsonl").read_text().splitlines()]
    assert [line["frame"] for line in lines] == list(range(FRAMES))
    first = {i["track_id"]: i["prompt"] for i in lines[0]["instances"]}
    print("ids per frame:", [[i["track_id"] for i in line["instances"]] for line in lines])
    assert first and min(first) == 0
    assert all(line["instances"] for line in lines)  # a static scene: its objects stay answered
    for line in lines:
        ids = [i["track_id"] for i in line["instances"]]
        assert len(ids) == len(set(ids))
        assert all(first.get(i, "car") == "car" for i in ids)
    assert "(SAM 3 tracker)" in done.stdout and (out / "street_tracked.mp4").stat().st_size > 0


def test_track_refuses_the_sam3_tracker_on_the_ttnn_engine(tmp_path: Path) -> None:
    video = write_video(tmp_path / "v.avi", [scene()] * 2)
    done = run(
        "track", str(video), "--prompt", "car", "--model", "tiny-random", "--tracker", "sam3",
        "--engine", "ttnn", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "tracker 'sam3' cannot run on the ttnn engine" in done.stderr
    assert not (tmp_path / "v.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min-iou", "0"], "track_min_iou"),
        (["--max-age-s", "-1"], "track_max_age_s"),
        (["--max-age-frames", "0"], "track_max_age_frames"),
        (["--threshold", "2"], "threshold"),
    ],
)
def test_bad_settings_exit_2_with_the_reason_before_the_model_loads(tmp_path: Path, args, message) -> None:
    video = write_video(tmp_path / "v.avi", [scene()] * 2)
    done = run(
        "track", str(video), "--prompt", "car", "--model", "tiny-random", "--out", str(tmp_path), *args
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_missing_or_unreadable_video_is_reported_without_traceback(tmp_path: Path) -> None:
    missing = run("track", str(tmp_path / "nope.mp4"), "--prompt", "car", "--model", "tiny-random")
    assert missing.returncode == 2 and "nope.mp4" in missing.stderr and "Traceback" not in missing.stderr
    bogus = tmp_path / "bogus.mp4"
    bogus.write_bytes(b"not a video at all")
    unreadable = run("track", str(bogus), "--prompt", "car", "--model", "tiny-random")
    assert unreadable.returncode == 2 and "bogus.mp4" in unreadable.stderr
    assert "Traceback" not in unreadable.stderr


def test_sam3_tracker_keeps_ids_over_frames_and_gives_new_ones_after_reset(segmenter) -> None:
    tracker = Sam3Tracker(segmenter)
    picture = scene()
    first = tracker(picture, ["car"], 0.0, threshold=0.0, max_instances=3)
    second = tracker(picture, ["car"], 0.1, threshold=0.0, max_instances=3)
    assert [i.track_id for i in first.instances] == [i.track_id for i in second.instances] == [1, 2, 3]
    tracker.reset()
    assert [i.track_id for i in tracker(picture, ["car"], 0.2, threshold=0.0, max_instances=3).instances] == [
        4,
        5,
        6,
    ]


def test_the_overlay_draws_a_tracked_instance_in_its_track_colour() -> None:
    crop = np.ones((20, 20), dtype=bool)
    tracked = Instance("car", 0, 0.9, (10.0, 30.0, 30.0, 50.0), crop, (30, 10), (64, 64), track_id=7)
    image = np.zeros((64, 64, 3), dtype=np.uint8)
    drawn = draw_overlay(image, SegmentationResult((64, 64), ["car"], [tracked], {}))
    expected = np.array(instance_colour(7)) * 0.5
    assert np.allclose(drawn[40, 20], expected, atol=1)  # inside the mask, away from box and label
    assert not np.allclose(drawn[40, 20], np.array(instance_colour(1)) * 0.5, atol=1)


def test_a_model_that_fails_to_load_leaves_no_output_files(tmp_path: Path) -> None:
    """The writer opens its files before the (slow) model load, so a bad --out fails at once;
    when the load itself fails (here: a weights folder with no weights), those files are
    removed again, not left as an empty JSON-lines file and a header-only MP4."""
    video = write_video(tmp_path / "v.avi", [scene()] * 2)
    empty, out = tmp_path / "empty", tmp_path / "out"
    empty.mkdir()
    done = run("track", str(video), "--prompt", "car", "--weights-dir", str(empty), "--out", str(out))
    assert done.returncode != 0 and "holds no SAM 3 weights" in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == []
