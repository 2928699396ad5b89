"""The per-frame pipeline without ROS: what one frame gives, and whose fault a failure is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tt_sam3_ros.core.depth_pairing import Answer3D, CameraInfoData, DepthFrame
from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.results import FIRST_TRACK_ID, Instance, SegmentationResult
from tt_sam3_ros.core.settings import RunSettings
from tt_sam3_ros.core.video_engine import Sam3VideoEngine
from tt_sam3_ros.runtime.pipeline import ENGINE_ERROR_LIMIT, FrameInput, FrameOutput, FramePipeline, Wants

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

import depth_scene as scene  # noqa: E402

SETTINGS = RunSettings(prompts=("box",), class_ids=(("box", 3),))
FRAME = "camera_color_optical_frame"
S = 1_000_000_000


class FixedSegmenter:
    """Gives one instance over a facing rectangle at 1 m, or raises what it is told to."""

    max_image_side = 4096

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.fail_with = fail_with
        self.calls = 0
        self.scene = scene.render([[scene.facing_rectangle((0.0, 0.0, 1.0), 0.2, 0.1)]])

    def __call__(self, rgb: np.ndarray, prompts: list[str], **_: Any) -> SegmentationResult:
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        labels = self.scene.labels
        rows, cols = np.nonzero(labels)
        crop = labels[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] == 1
        box = (float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1))
        instance = Instance("box", 0, 0.8, box, crop, (int(rows.min()), int(cols.min())), labels.shape)
        return SegmentationResult(labels.shape, list(prompts), [instance], {"box": 0.9})


class RecordedOutputs:
    """An ``Outputs`` that keeps what it was handed."""

    def __init__(
        self, depth: bool = False, wants: Wants | None = None, fail: Exception | None = None
    ) -> None:
        self.depth = depth
        self._wants = wants or Wants()
        self.fail = fail
        self.published: list[FrameOutput] = []
        self.published_3d: list[Answer3D] = []

    def wants(self) -> Wants:
        return self._wants

    def publish(self, output: FrameOutput) -> None:
        if self.fail is not None:
            raise self.fail
        self.published.append(output)

    def publish_3d(self, answer: Answer3D) -> None:
        self.published_3d.append(answer)


def frame(stamp_ns: int = 10 * S, decode: Any = None, frame_id: str = FRAME) -> FrameInput:
    pixels = np.zeros((scene.HEIGHT, scene.WIDTH, 3), np.uint8)
    return FrameInput(decode or (lambda _max_side: pixels), stamp_ns, frame_id, 0.0)


def snapshot(camera: Any) -> Any:
    return camera.stats.camera.snapshot()


def test_importing_the_pipeline_loads_no_ros_module() -> None:
    code = (
        "import sys, tt_sam3_ros.runtime.pipeline, tt_sam3_ros.core.depth_pairing\n"
        "ros = ('rclpy', 'sensor_msgs', 'std_msgs', 'vision_msgs', 'diagnostic_msgs', 'rcl_interfaces')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ros))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_an_answered_frame_gives_tracked_instances_labels_and_class_ids() -> None:
    pipeline = FramePipeline(now_ns=lambda: 10 * S + 250_000_000)
    camera = pipeline.make_cameras(())[""]
    outputs = RecordedOutputs()
    for stamp in (10 * S, 11 * S):
        assert (
            pipeline.process(FixedSegmenter(), camera, frame(stamp), SETTINGS, outputs).outcome == "answered"
        )
    first, second = outputs.published
    assert first.result.detection_ids() == second.result.detection_ids() == [FIRST_TRACK_ID]
    assert first.class_ids == {"box": 3} and first.overlay is None
    assert set(np.unique(first.labels)) == {0, 1}
    stats = snapshot(camera)
    assert (stats.processed, stats.rejected, stats.engine_errors) == (2, 0, 0)
    assert pipeline.engine_stats.snapshot().processed == 2
    assert stats.output_age_ms[0] == pytest.approx(250.0)


def test_the_overlay_is_drawn_only_while_wanted() -> None:
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    outputs = RecordedOutputs(wants=Wants(overlay=True))
    pipeline.process(FixedSegmenter(), camera, frame(), SETTINGS, outputs)
    (output,) = outputs.published
    assert output.overlay is not None and output.overlay.shape == (scene.HEIGHT, scene.WIDTH, 3)


def test_bad_input_is_rejected_before_the_engine_with_the_frame_quoted() -> None:
    def refuse(_max_side: int) -> np.ndarray:
        raise InputError("unsupported image encoding 'yuv422'")

    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    segmenter = FixedSegmenter()
    report = pipeline.process(
        segmenter, camera, frame(decode=refuse, frame_id="cam\n1"), SETTINGS, RecordedOutputs()
    )
    assert report.outcome == "rejected" and segmenter.calls == 0
    assert report.reason == "bad input frame (frame_id 'cam\\n1'): unsupported image encoding 'yuv422'"
    assert (snapshot(camera).rejected, snapshot(camera).engine_errors) == (1, 0)


def test_an_engine_value_error_is_an_engine_error_and_a_run_of_them_loses_the_engine() -> None:
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    segmenter = FixedSegmenter(fail_with=ValueError("expected 4D input (got 3D input)"))
    reports = [
        pipeline.process(segmenter, camera, frame(), SETTINGS, RecordedOutputs())
        for _ in range(ENGINE_ERROR_LIMIT)
    ]
    assert [r.outcome for r in reports] == ["engine_error"] * ENGINE_ERROR_LIMIT
    assert [r.engine_lost for r in reports] == [False] * (ENGINE_ERROR_LIMIT - 1) + [True]
    assert reports[0].reason == "engine error: ValueError: expected 4D input (got 3D input)"
    assert snapshot(camera).rejected == 0


def depth_frame(stamp_ns: int) -> DepthFrame:
    return DepthFrame(stamp_ns, FRAME, FixedSegmenter().scene.depth_16uc1())


def camera_info() -> CameraInfoData:
    return CameraInfoData(FRAME, scene.HEIGHT, scene.WIDTH, tuple(float(v) for v in scene.K.ravel()))


def test_with_depth_the_3d_answer_follows_the_2d_one_with_the_track_ids() -> None:
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    camera.depth_pairing.set_camera_info(camera_info())
    outputs = RecordedOutputs(depth=True, wants=Wants(cloud=True))
    camera.depth_pairing.add_depth(depth_frame(10 * S))
    pipeline.process(FixedSegmenter(), camera, frame(10 * S), SETTINGS, outputs)
    (answer,) = outputs.published_3d
    (geometry,) = answer.geometries
    np.testing.assert_allclose(geometry.centre, (0.0, 0.0, 1.0), atol=0.005)
    assert set(answer.points["instance"]) == {FIRST_TRACK_ID}
    assert camera.depth_stats.snapshot()["frames_3d"] == "1"


def test_a_frame_without_a_3d_answer_lets_go_of_its_depth() -> None:
    """Refused or failed in the engine with depth on: the frame's claim on its depth frame ends
    with it (a claim holds a whole depth image)."""
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    camera.depth_pairing.add_depth(depth_frame(10 * S))

    def refuse(_max_side: int) -> np.ndarray:
        raise InputError("unsupported image encoding 'yuv422'")

    failing = FixedSegmenter(fail_with=ValueError("expected 4D input (got 3D input)"))
    for segmenter, decode, stamp in ((FixedSegmenter(), refuse, 10 * S), (failing, None, 11 * S)):
        outputs = RecordedOutputs(depth=True)
        pipeline.process(segmenter, camera, frame(stamp, decode=decode), SETTINGS, outputs)
    assert camera.depth_pairing._claimed == {}


def test_without_depth_the_frame_is_answered_in_2d_and_says_why() -> None:
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    outputs = RecordedOutputs(depth=True)
    report = pipeline.process(FixedSegmenter(), camera, frame(), SETTINGS, outputs)
    assert report.outcome == "answered" and len(outputs.published) == 1 and outputs.published_3d == []
    values = camera.depth_stats.snapshot()
    assert values["frames_without_depth"] == "1" and values["last_error"] == "no depth frame received yet"
    camera.depth_pairing.set_camera_info(camera_info())
    camera.depth_pairing.add_depth(DepthFrame(10 * S, FRAME, None, "unsupported depth encoding 'yuv'"))
    pipeline.process(FixedSegmenter(), camera, frame(), SETTINGS, outputs)
    values = camera.depth_stats.snapshot()
    assert (
        values["depth_rejected"] == "1"
        and values["last_error"] == "depth refused: unsupported depth encoding 'yuv'"
    )


def test_a_new_configure_keeps_each_camera_s_tracker() -> None:
    pipeline = FramePipeline()
    first = pipeline.make_cameras(("front", "rear"))
    second = pipeline.make_cameras(("front", "rear"))
    assert first["front"].tracker is second["front"].tracker
    assert first["front"].tracker is not first["rear"].tracker
    assert first["front"].stats is not second["front"].stats


def test_a_failure_to_publish_is_an_output_error_and_never_loses_the_engine() -> None:
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    outputs = RecordedOutputs(fail=RuntimeError("publisher's context is invalid"))
    reports = [
        pipeline.process(FixedSegmenter(), camera, frame(), SETTINGS, outputs)
        for _ in range(ENGINE_ERROR_LIMIT + 1)
    ]
    assert {r.outcome for r in reports} == {"output_error"} and not any(r.engine_lost for r in reports)
    assert reports[0].reason == "output error: RuntimeError: publisher's context is invalid"
    stats = snapshot(camera)
    assert (stats.engine_errors, stats.output_errors, stats.processed) == (0, ENGINE_ERROR_LIMIT + 1, 0)
    assert pipeline.engine_stats.snapshot().consecutive_engine_errors == 0


def test_a_failure_in_the_3d_path_is_an_output_error_after_the_2d_outputs(monkeypatch) -> None:
    from tt_sam3_ros.core import depth_pairing

    def broken(*_args: Any, **_kwargs: Any) -> Answer3D:
        raise IndexError("index 3 is out of bounds")

    monkeypatch.setattr(depth_pairing, "answer", broken)
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    camera.depth_pairing.set_camera_info(camera_info())
    camera.depth_pairing.add_depth(depth_frame(10 * S))
    outputs = RecordedOutputs(depth=True)
    report = pipeline.process(FixedSegmenter(), camera, frame(10 * S), SETTINGS, outputs)
    assert (report.outcome, report.engine_lost) == ("output_error", False)
    assert len(outputs.published) == 1 and outputs.published_3d == []
    assert (snapshot(camera).engine_errors, snapshot(camera).output_errors) == (0, 1)


def test_a_frame_the_engine_answered_breaks_its_run_of_errors_even_if_publishing_failed() -> None:
    """Engine errors in a row count engine failures: a frame lost in publishing proves the engine ran."""
    pipeline = FramePipeline()
    camera = pipeline.make_cameras(())[""]
    failing = FixedSegmenter(fail_with=RuntimeError("device lost"))
    reports = [pipeline.process(failing, camera, frame(), SETTINGS, RecordedOutputs()) for _ in range(4)]
    unpublished = RecordedOutputs(fail=RuntimeError("publisher gone"))
    reports.append(pipeline.process(FixedSegmenter(), camera, frame(), SETTINGS, unpublished))
    reports += [pipeline.process(failing, camera, frame(), SETTINGS, RecordedOutputs()) for _ in range(4)]
    assert not any(report.engine_lost for report in reports)
    assert ENGINE_ERROR_LIMIT == 5


class ScriptedVideoTracker:
    """A SAM 3 session stand-in: each call gives the scripted SAM 3 object ids of that frame."""

    def __init__(self, script: list[list[int]]) -> None:
        self.script = list(script)
        self.object_ids: list[int] = []

    def __call__(self, rgb: np.ndarray, prompts: list[str]) -> SegmentationResult:
        ids = self.script.pop(0)
        self.object_ids = ids
        crop = np.ones((2, 2), dtype=bool)
        instances = [
            Instance("box", 0, 0.9 - 0.1 * k, (k, 0, k + 2, 2), crop, (0, k), (8, 8), track_id=obj_id)
            for k, obj_id in enumerate(ids)
        ]
        return SegmentationResult((8, 8), list(prompts), instances, {})


class ScriptedVideoEngine(Sam3VideoEngine):
    """A ``Sam3VideoEngine`` without a model: each camera's session plays the same script."""

    def __init__(self, script: list[list[int]]) -> None:
        self.max_image_side = 4096
        self.script = script

    def new_tracker(self) -> ScriptedVideoTracker:
        return ScriptedVideoTracker(self.script)


def test_sam3_object_ids_are_mapped_into_the_node_id_space_per_camera() -> None:
    """Two cameras whose sessions both say 0 and 1 publish distinct ids; an object keeps its id
    while its session tracks it; one forgotten and a new one get ids never given before."""
    pipeline = FramePipeline()
    cameras = pipeline.make_cameras(("front", "back"))
    engine = ScriptedVideoEngine([[0, 1], [1, 0], [1, 2]])
    published: dict[str, list[list[int]]] = {}
    for _ in range(3):
        for name, camera in cameras.items():
            outputs = RecordedOutputs()
            assert pipeline.process(engine, camera, frame(), SETTINGS, outputs).outcome == "answered"
            published.setdefault(name, []).append(outputs.published[0].result.detection_ids())
    front, back = published["front"], published["back"]
    assert not {i for ids in front for i in ids} & {i for ids in back for i in ids}  # unique across cameras
    earlier = {i for ids in front[:2] + back[:2] for i in ids}
    for first, second, third in (front, back):
        assert second == first[::-1]  # SAM 3's objects 1 and 0 keep their node ids
        assert third[0] == first[1] and third[1] not in earlier  # object 2 is new: a new id
    off = RunSettings(prompts=("box",), class_ids=(("box", 3),), tracking=False)
    camera = pipeline.make_cameras(("side",))["side"]
    outputs = RecordedOutputs()
    pipeline.process(ScriptedVideoEngine([[4, 7]]), camera, frame(), off, outputs)
    assert outputs.published[0].result.detection_ids() == [1, 2]  # positions with tracking off
