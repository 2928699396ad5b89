"""`python -m benchmarks.tracking.score_clip`: both tracking modes scored on a user's annotated clip."""

from __future__ import annotations

from pathlib import Path

import cv2
import pytest
from frames import random_frame

from benchmarks.tracking import score_clip

#: Two walking people (class 1) over 6 frames, one box not to score (flag 0), one car (class 3).
BOXES = {1: (10, 20, 30, 40), 2: (100, 50, 20, 60)}


def _write_truth(path: Path, frames: int = 6) -> Path:
    lines = []
    for frame in range(1, frames + 1):
        for gid, (left, top, width, height) in BOXES.items():
            lines.append(f"{frame},{gid},{left + 3 * frame},{top},{width},{height},1,1,1.0")
        lines.append(f"{frame},7,200,10,30,30,0,1,1.0")  # flag 0: not scored
        lines.append(f"{frame},8,150,150,40,20,1,3,1.0")  # a car
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ground_truth_keeps_flagged_boxes_of_the_chosen_classes_in_0_based_pixels(tmp_path) -> None:
    truth = score_clip.load_truth(_write_truth(tmp_path / "gt.txt"), classes=[1])
    assert sorted(truth.boxes) == list(range(6))
    assert sorted(truth.boxes[0]) == [1, 2]
    assert truth.boxes[0][1] == (12.0, 19.0, 42.0, 59.0)  # MOT's 1-based left/top made 0-based
    assert sorted(score_clip.load_truth(tmp_path / "gt.txt").boxes[0]) == [1, 2, 8]


def test_the_truth_itself_scores_1_and_swapped_ids_score_less(tmp_path) -> None:
    truth = score_clip.load_truth(_write_truth(tmp_path / "gt.txt"), classes=[1])
    perfect = [[(gid, box) for gid, box in truth.boxes[i].items()] for i in range(6)]
    figures = score_clip.score(truth, perfect)
    assert figures["idf1"] == 1.0 and figures["num_switches"] == 0 and figures["num_misses"] == 0
    # negative control: the two ids trade places from frame 3 on
    swapped = [[(3 - gid if i >= 3 else gid, box) for gid, box in found] for i, found in enumerate(perfect)]
    figures = score_clip.score(truth, swapped)
    assert figures["idf1"] < 0.6 and figures["num_switches"] == 2


def test_results_are_written_in_the_motchallenge_format_and_read_back(tmp_path) -> None:
    truth = score_clip.load_truth(_write_truth(tmp_path / "gt.txt"), classes=[1])
    outputs = [[(gid, box) for gid, box in truth.boxes[i].items()] for i in range(6)]
    score_clip.write_mot(tmp_path / "out.txt", outputs)
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert len(lines) == 12 and all(len(line.split(",")) == 10 for line in lines)
    assert lines[0].startswith("1,1,13.0,20.0,30.0,40.0,")  # as the ground truth wrote it
    assert score_clip.load_truth(tmp_path / "out.txt").boxes == truth.boxes


def test_a_picture_folder_without_a_frame_rate_is_refused(tmp_path) -> None:
    (tmp_path / "img1").mkdir()
    with pytest.raises(SystemExit, match="needs --fps"):
        score_clip.frame_rate(tmp_path / "img1", None)
    (tmp_path / "seqinfo.ini").write_text("[Sequence]\nname=clip\nframeRate=25\n")
    assert score_clip.frame_rate(tmp_path / "img1", None) == 25.0


def test_both_modes_score_a_picture_folder_with_the_tiny_model(tmp_path, capsys) -> None:
    folder = tmp_path / "clip" / "img1"
    folder.mkdir(parents=True)
    for index in range(3):
        cv2.imwrite(str(folder / f"{index + 1:06d}.jpg"), random_frame(index, (64, 96)))
    (tmp_path / "clip" / "seqinfo.ini").write_text("[Sequence]\nframeRate=10\n")
    gt = _write_truth(tmp_path / "gt.txt", frames=3)
    out = tmp_path / "scores"
    argv = [str(folder), "--gt", str(gt), "--prompt", "person", "--model", "tiny-random", "--out", str(out)]
    assert score_clip.main([*argv, "--frames", "1", "--threshold", "0", "--max-instances", "5"]) == 0
    printed = capsys.readouterr().out
    rows = {line.split(" | ")[0]: line.split(" | ") for line in printed.splitlines() if " | " in line}
    assert set(rows) >= {"association", "sam3"}
    assert rows["association"][6] == rows["sam3"][6] == "3"  # 1 frame x 3 scored boxes
    for mode in ("association", "sam3"):
        lines = (out / f"{mode}.txt").read_text().splitlines()
        assert lines, f"{mode} wrote no boxes"
        assert {int(line.split(",")[0]) for line in lines} == {1}
