"""`tt-sam3 segment` as a user runs it: files written, warnings shown, errors without tracebacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CLI = [sys.executable, "-m", "tt_sam3_ros.cli.main"]


@pytest.fixture
def picture(tmp_path: Path) -> Path:
    rows, cols = np.mgrid[0:120, 0:160]
    image = np.stack([rows * 2, cols, (rows + cols) % 256], axis=-1).astype(np.uint8)
    path = tmp_path / "street.png"
    Image.fromarray(image).save(path)
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180)


def test_segment_writes_overlay_png_and_json(picture: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run(
        "segment", str(picture), "--prompt", "car", "--prompt", "person",
        "--model", "tiny-random", "--engine", "torch", "--threshold", "0", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "MEANINGLESS" in done.stderr
    overlay = np.asarray(Image.open(out / "street_overlay.png"))
    assert overlay.shape == (120, 160, 3)
    assert not np.array_equal(overlay, np.asarray(Image.open(picture)))  # something was drawn
    report = json.loads((out / "street.json").read_text())
    assert report["prompts"] == ["car", "person"]
    assert report["image_size"] == {"height": 120, "width": 160}
    assert report["instances"] and [i["id"] for i in report["instances"]] == list(
        range(1, len(report["instances"]) + 1)
    )
    assert {i["prompt"] for i in report["instances"]} <= {"car", "person"}
    assert "meaningless" in report["warning"]
    assert report["engine"]["engine"] == "torch"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", " "], "empty or only whitespace"),
        (["--prompt", "car", "--threshold", "2"], "threshold"),
    ],
)
def test_bad_arguments_exit_2_with_the_reason(picture: Path, tmp_path: Path, args, message) -> None:
    done = run("segment", str(picture), "--model", "tiny-random", "--out", str(tmp_path), *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_segment_takes_positive_and_negative_boxes(picture: Path, tmp_path: Path) -> None:
    """--box refines the only --prompt; a box named "=" (empty) is the box-only concept."""
    out = tmp_path / "out"
    done = run(
        "segment", str(picture), "--prompt", "car", "--box", "10,20,60,90", "--negative-box", "100,10,150,50",
        "--box", "=5,5,40,40", "--model", "tiny-random", "--engine", "torch", "--threshold", "0",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "street.json").read_text())
    assert report["prompts"] == ["car", ""]
    assert {i["prompt"] for i in report["instances"]} == {"car", ""}
    assert "geometry_encoder" in report["timing_ms"]


def test_segment_with_boxes_only(picture: Path, tmp_path: Path) -> None:
    done = run(
        "segment", str(picture), "--box", "10,20,60,90", "--model", "tiny-random", "--engine", "torch",
        "--threshold", "0", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "street.json").read_text())["prompts"] == [""]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", "car", "--prompt", "bus", "--box", "1,2,30,40"], "does not say which prompt"),
        (["--prompt", "car", "--box", "1,2,30"], "must be x1,y1,x2,y2"),
        (["--prompt", "car", "--box", "bus=1,2,30,40"], "'bus', which is not one of this call's prompts"),
        (["--prompt", "car", "--box", "30,2,1,40"], "has no area"),
        (["--prompt", "car", "--box", "nan,2,30,40"], "not a finite number"),
        (["--prompt", "car", "--box", "200,200,300,300"], "lies outside the 160x120 image"),
        ([], "give at least one --prompt or --box"),
    ],
)
def test_bad_boxes_exit_2_with_the_reason(picture: Path, tmp_path: Path, args, message) -> None:
    done = run("segment", str(picture), "--model", "tiny-random", "--out", str(tmp_path), *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_missing_image_is_reported_without_traceback(tmp_path: Path) -> None:
    done = run("segment", str(tmp_path / "nope.png"), "--prompt", "car", "--model", "tiny-random")
    assert done.returncode == 2
    assert "nope.png" in done.stderr and "Traceback" not in done.stderr


def test_undecodable_image_is_reported(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.jpg"
    bogus.write_bytes(b"\xff\xd8\xff garbage")
    done = run("segment", str(bogus), "--prompt", "car", "--model", "tiny-random")
    assert done.returncode == 2 and "cannot decode" in done.stderr


def test_publish_images_help_is_its_own() -> None:
    done = run("publish-images", "--help")
    assert done.returncode == 0
    assert "--rate" in done.stdout and "--topic" in done.stdout


def test_unwritable_output_folder_is_reported(picture: Path, tmp_path: Path) -> None:
    taken = tmp_path / "a_file"
    taken.write_text("not a folder")
    done = run("segment", str(picture), "--prompt", "car", "--model", "tiny-random", "--out", str(taken))
    assert done.returncode == 2
    assert "a_file" in done.stderr and "Traceback" not in done.stderr


def test_missing_weights_are_reported_without_traceback(picture: Path, tmp_path: Path) -> None:
    done = run("segment", str(picture), "--prompt", "car", "--weights-dir", str(tmp_path / "none"))
    assert done.returncode == 1
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr


def test_an_engine_refusal_is_reported_without_traceback(picture: Path, tmp_path: Path) -> None:
    done = run(
        "segment", str(picture), "--prompt", "car", "--model", "tiny-random", "--engine", "torch",
        "--dtype", "float16", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2
    assert "float16" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "fault",
    [
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        ValueError("Expected 4-dimensional input for 4-dimensional weight"),
        OSError("[Errno 5] Input/output error"),
    ],
    ids=["runtime", "value", "os"],
)
def test_a_fault_that_is_no_message_for_the_user_keeps_its_traceback(
    monkeypatch: pytest.MonkeyPatch, picture: Path, tmp_path: Path, fault: Exception
) -> None:
    """A CUDA out-of-memory or a bug inside torch is not a user's mistake: it must not be
    turned into a one-line message (which hides where it came from)."""
    from tt_sam3_ros.cli import main as cli
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    def failing(*args: object, **kwargs: object) -> None:
        raise fault

    monkeypatch.setattr(Sam3Segmenter, "from_pretrained", failing)
    with pytest.raises(type(fault), match=re.escape(str(fault))):
        cli.main(
            ["segment", str(picture), "--prompt", "car", "--model", "tiny-random", "--out", str(tmp_path)]
        )


@pytest.mark.parametrize("command", ["segment", "track"])
def test_the_cli_sizes_the_engine_to_its_prompts(
    monkeypatch: pytest.MonkeyPatch, picture: Path, tmp_path: Path, command: str
) -> None:
    """The chip prompt path compiles a bucket per prompt count up to max_prompts at warm-up: a
    one-off run with two prompts should not pay for sixteen."""
    from tt_sam3_ros.cli import main as cli
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    asked: dict[str, object] = {}

    class StopError(Exception):
        pass

    def record(*args: object, **kwargs: object) -> None:
        asked.update(kwargs)
        raise StopError

    monkeypatch.setattr(Sam3Segmenter, "from_pretrained", record)
    source = str(picture)
    if command == "track":
        import cv2

        source = str(tmp_path / "clip.avi")
        writer = cv2.VideoWriter(source, cv2.VideoWriter_fourcc(*"FFV1"), 10.0, (32, 24))
        writer.write(np.zeros((24, 32, 3), np.uint8))
        writer.release()
    with pytest.raises(StopError):
        prompts = ["--prompt", "car", "--prompt", "person"]
        cli.main([command, source, *prompts, "--max-instances", "7", "--out", str(tmp_path)])
    assert asked["max_prompts"] == 2 and asked["max_instances"] == 7


def test_help_shows_examples_and_how_to_get_the_weights() -> None:
    """A first `tt-sam3 --help` says what to type and why the default weights may be refused."""
    done = run("--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # argparse rewraps; compare words, not lines
    assert "tt-sam3 segment street.png --prompt car --prompt person --out results" in text
    assert "--model tiny-random" in text
    assert "facebook/sam3 is gated" in text and "hf auth login" in text
    assert "--model /path/to/sam3" in text  # a local copy needs no login


def test_model_help_says_a_local_path_works() -> None:
    done = run("segment", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "hub id, a local folder" in text
