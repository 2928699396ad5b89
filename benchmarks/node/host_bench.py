"""Host section: everything our code does per frame besides the model, vs a naive full upsample.

The frame is what a camera publishes (an rgb8 sensor_msgs/Image) and the model output is
canned (CannedEngine): K instances of realistic size among 200 queries. The steps are the
node's own calls, in its order: message -> pixels, Sam3Segmenter's pre- and post-processing,
the mono8 instance mask, the output messages.

The naive column does what transformers' post-processing does: every kept mask upsampled to
the whole image with F.interpolate and thresholded, then the label image painted from the
full-size masks.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from tt_sam3_ros.core import depth
from tt_sam3_ros.core.segmenter import Sam3Segmenter

from ..common import report, scenes
from ..common.engines import CannedEngine

FULL = {"size": (1080, 1920), "instances": 20, "repeats": 30}
QUICK = {"size": (480, 640), "instances": 5, "repeats": 3}
#: The depth rows' camera (a 1080p colour camera's K), validity limits and cloud stride.
DEPTH_K = (1380.0, 0.0, 959.5, 0.0, 1380.0, 539.5, 0.0, 0.0, 1.0)
DEPTH_LIMITS = depth.DepthLimits(min_m=0.1, max_m=10.0, min_points=20)
POINTS_STRIDE = 4
#: Stages of Sam3Segmenter's timing that are host work (the model stages are canned here).
HOST_STAGES = ("load", "preprocess", "postprocess")


def rgb8_message(rgb: np.ndarray):
    """An rgb8 sensor_msgs/Image holding ``rgb``, as a camera driver publishes it."""
    from sensor_msgs.msg import Image

    msg = Image()
    msg.height, msg.width = rgb.shape[:2]
    msg.encoding, msg.step = "rgb8", rgb.shape[1] * 3
    msg.data = rgb.tobytes()
    msg.header.frame_id = "camera"
    return msg


def bgr8_message(rgb: np.ndarray):
    """The same picture as bgr8 (what many OpenCV-based drivers publish)."""
    msg = rgb8_message(np.ascontiguousarray(rgb[:, :, ::-1]))
    msg.encoding = "bgr8"
    return msg


def naive_postprocess(engine: CannedEngine, image_size: tuple[int, int], threshold: float) -> np.ndarray:
    """Kept masks upsampled over the whole image (transformers' way), then the label image."""
    from tt_sam3_ros.core import postprocess

    decoded = engine.decoded
    selection = postprocess.select_instances(decoded.logits, decoded.presence, threshold, 255)
    postprocess.boxes_to_source(decoded.boxes[selection.prompt_index, selection.query_index], image_size)
    logits = torch.from_numpy(engine.fetch_masks(decoded, selection.prompt_index, selection.query_index))
    full = torch.nn.functional.interpolate(
        logits[None], size=image_size, mode="bilinear", align_corners=False
    )
    masks = (full[0] > 0).numpy()
    labels = np.zeros(image_size, dtype=np.uint8)
    for instance_id in range(len(masks), 0, -1):
        labels[masks[instance_id - 1]] = instance_id
    return labels


def median_ms(run: Callable[[], object], repeats: int) -> float:
    """Median wall milliseconds of ``run`` over ``repeats`` calls, after one untimed call."""
    return report.median_time(run, repeats) * 1000.0


@dataclass
class Frame:
    """One frame's inputs and the canned model output behind it."""

    rgb: np.ndarray
    msg: object
    bgr_msg: object
    engine: CannedEngine
    count: int
    depth_mm: np.ndarray


def make_frame(height: int, width: int, count: int) -> Frame:
    """A camera frame (rgb8 and bgr8 messages) and ``count`` instances' mask logits."""
    rgb = scenes.picture(height, width)
    engine = CannedEngine(scenes.instance_logits(count))
    labels = Sam3Segmenter(engine)(rgb, ["car"]).instance_mask()
    return Frame(rgb, rgb8_message(rgb), bgr8_message(rgb), engine, count, depth_mm(labels))


def depth_mm(labels: np.ndarray, seed: int = 0) -> np.ndarray:
    """uint16 millimetres as a registered depth camera sees the scene: each instance a tilted
    surface between 0.8 and 2.7 m, a wall at 3 m behind, 5 mm noise and 2% holes (0)."""
    rng = np.random.default_rng(seed)
    height, width = labels.shape
    rows, cols = np.mgrid[0:height, 0:width]
    metres = np.full(labels.shape, 3.0)
    for instance_id in range(1, int(labels.max()) + 1):
        mine = labels == instance_id
        tilt = rng.uniform(-0.3, 0.3, 2)
        metres[mine] = (
            0.8 + 0.1 * (instance_id - 1) + tilt[0] * rows[mine] / height + tilt[1] * cols[mine] / width
        )
    metres += rng.normal(0.0, 0.005, labels.shape)
    millimetres = np.round(metres * 1000.0).astype(np.uint16)
    millimetres[rng.random(labels.shape) < 0.02] = 0
    return millimetres


def exact_statistics(
    labels: np.ndarray,
    windows: list[tuple[slice, slice]],
    grid: depth.DepthImage,
    camera: depth.Camera,
) -> np.ndarray:
    """(instances, 3, 3) box centre, box size and median of each instance over every one of its pixels.

    The documented rule, with numpy: the EXTENT_PERCENTILES ends (ranks taken outward) widened
    by one pixel's footprint at the far end on x and y; the per-axis median.
    """
    found = np.full((len(windows), 3, 3), np.nan)
    low_q, high_q = depth.EXTENT_PERCENTILES
    for instance_id, window in enumerate(windows, start=1):
        points = depth.instance_points(labels, instance_id, window, grid, camera, DEPTH_LIMITS)
        if len(points) >= DEPTH_LIMITS.min_points:
            low = np.percentile(points, low_q, axis=0, method="lower")
            high = np.percentile(points, high_q, axis=0, method="higher")
            footprint = np.array([high[2] / camera.matrix[0, 0], high[2] / camera.matrix[1, 1], 0.0])
            low, high = low - footprint / 2, high + footprint / 2
            found[instance_id - 1] = (low + high) / 2, high - low, np.median(points, axis=0)
    return found


def cpu_ms(run: Callable[[], object], repeats: int) -> float:
    """Median process CPU milliseconds of ``run``: what it costs when other work shares the cores."""
    run()
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        samples.append(time.process_time() - start)
    return statistics.median(samples) * 1000.0


def depth_inputs(frame: Frame, result) -> tuple:
    """The arguments of ``depth.measure_instances`` for ``frame`` and its ``result``."""
    labels = result.instance_mask()
    grid = depth.depth_image(frame.depth_mm, labels.shape)
    camera = depth.Camera.from_k(DEPTH_K, labels.shape)
    return labels, depth.instance_windows(result), grid, camera


def measure(frame: Frame, repeats: int) -> dict[str, float]:
    """Median milliseconds of every host step for ``frame``, ours and naive."""
    from tt_sam3_ros.ros import messages

    segmenter = Sam3Segmenter(frame.engine)
    view = messages.image_to_rgb(frame.msg)
    header = frame.msg.header
    stage_samples: dict[str, list[float]] = {}
    for _ in range(repeats + 1):
        timing = segmenter(view, ["car"]).timing_ms
        for stage in HOST_STAGES:
            stage_samples.setdefault(stage, []).append(timing[stage])
    times = {stage: statistics.median(samples[1:]) for stage, samples in stage_samples.items()}
    result = segmenter(view, ["car"])
    times["decode_rgb8"] = median_ms(lambda: messages.image_to_rgb(frame.msg), repeats)
    times["decode_bgr8"] = median_ms(lambda: messages.image_to_rgb(frame.bgr_msg), repeats)
    times["instance_mask"] = median_ms(result.instance_mask, repeats)
    both = median_ms(
        lambda: (
            messages.result_to_detections(result, header),
            messages.instance_mask_to_image(result.instance_mask(), header),
        ),
        repeats,
    )
    times["messages"] = both - times["instance_mask"]
    times["naive"] = median_ms(lambda: naive_postprocess(frame.engine, frame.rgb.shape[:2], 0.5), repeats)
    labels, windows, grid, camera = depth_inputs(frame, result)
    times["depth_stats"] = median_ms(
        lambda: depth.measure_instances(labels, windows, grid, camera, DEPTH_LIMITS), repeats
    )
    times["depth_exact"] = median_ms(lambda: exact_statistics(labels, windows, grid, camera), repeats)
    times["depth_cloud"] = median_ms(
        lambda: depth.labelled_points(labels, grid, camera, DEPTH_LIMITS, POINTS_STRIDE), repeats
    )
    times["ours_post"] = times["load"] + times["postprocess"] + times["instance_mask"]
    shared = times["decode_rgb8"] + times["preprocess"] + times["messages"]
    times["ours_total"] = shared + times["ours_post"]
    times["naive_total"] = shared + times["naive"]
    return times


@contextmanager
def busy_cores() -> Iterator[int]:
    """One spinning process per core for the duration: the CPU as a robot's other work leaves it."""
    count = os.cpu_count() or 1
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)
        yield count
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def check_labels(frame: Frame) -> float:
    """Our crop-wise labels equal the naive full-upsample labels; returns the mean instance area (%)."""
    from tt_sam3_ros.ros import messages

    result = Sam3Segmenter(frame.engine)(messages.image_to_rgb(frame.msg), ["car"])
    assert len(result.instances) == frame.count, "the canned outputs must give every instance"
    np.testing.assert_array_equal(
        result.instance_mask(), naive_postprocess(frame.engine, frame.rgb.shape[:2], 0.5)
    )
    height, width = frame.rgb.shape[:2]
    return float(np.mean([instance.area for instance in result.instances]) / (height * width) * 100)


def check_depth(frame: Frame) -> tuple[float, float, float]:
    """Our sampled statistics vs the exact ones over every pixel: largest box centre, box size and
    median gaps (mm)."""
    result = Sam3Segmenter(frame.engine)(frame.rgb, ["car"])
    labels, windows, grid, camera = depth_inputs(frame, result)
    ours = depth.measure_instances(labels, windows, grid, camera, DEPTH_LIMITS)
    exact = exact_statistics(labels, windows, grid, camera)
    assert len(ours) == int(np.count_nonzero(np.isfinite(exact[:, 0, 0]))), "the same instances are measured"
    gaps = [
        max(np.abs(np.subtract(getattr(g, name), exact[g.instance_id - 1, k])).max() for g in ours)
        for k, name in enumerate(("centre", "size", "median"))
    ]
    return tuple(float(gap) * 1000.0 for gap in gaps)


def main(quick: bool) -> None:
    """Print the host table: per-step milliseconds, ours vs naive, idle and with the cores busy."""
    from tt_sam3_ros.core.overlay import draw_overlay

    settings = QUICK if quick else FULL
    height, width = settings["size"]
    repeats = settings["repeats"]
    frame = make_frame(height, width, settings["instances"])
    area = check_labels(frame)
    centre_gap_mm, size_gap_mm, median_gap_mm = check_depth(frame)
    columns = {"idle": measure(frame, repeats)}
    if not quick:  # the smoke run must not load a machine that runs other tests
        with busy_cores() as spinners:
            columns[f"{spinners} cores busy"] = measure(frame, repeats)
    result = Sam3Segmenter(frame.engine)(frame.rgb, ["car"])
    overlay = median_ms(lambda: draw_overlay(frame.rgb, result), max(3, repeats // 5))

    report.title("host: our work per frame besides the model")
    print(
        f"frame {width}x{height} rgb8, {frame.count} instances (mean area {area:.1f}% of the frame) among "
        f"200 queries, 1 prompt; median of {repeats}; torch threads {torch.get_num_threads()}; 'cores busy': "
        "one spinning process per core"
    )
    steps = [
        ("message -> pixels (rgb8: a view)", "decode_rgb8", "decode_rgb8"),
        ("  (bgr8 message instead: one reorder)", "decode_bgr8", "decode_bgr8"),
        ("pre-processing (resize to 1008x1008, normalise)", "preprocess", "preprocess"),
        ("post-processing: scores, boxes, mask crops (+ checks)", "post", None),
        ("instance mask (mono8 labels)", "instance_mask", None),
        ("naive: full-image upsample + labels from full masks", None, "naive"),
        ("output messages (Detection2DArray, mono8 Image)", "messages", "messages"),
        ("total per frame (rgb8)", "ours_total", "naive_total"),
        ("3D (depth: true): centres and sizes; naive: over every pixel", "depth_stats", "depth_exact"),
        (f"3D: labelled cloud, points_stride {POINTS_STRIDE} (while subscribed)", "depth_cloud", None),
    ]
    for times in columns.values():
        times["post"] = times["load"] + times["postprocess"]
    headers, rows = ["step"], []
    for name in columns:
        headers += [f"ours ms, {name}", f"naive ms, {name}"]
    for label, ours, naive in steps:
        row = [label]
        for times in columns.values():
            row += [_f(times[ours]) if ours else "-", _f(times[naive]) if naive else "-"]
        rows.append(row)
    report.table(headers, rows)
    for name, times in columns.items():
        print(
            f"{name}: post-processing + instance mask ours {times['ours_post']:.2f} ms vs naive "
            f"full upsample {times['naive']:.2f} ms: {times['naive'] / times['ours_post']:.1f}x; "
            f"whole host work {times['naive_total'] / times['ours_total']:.1f}x"
        )
    print(f"overlay (only while /sam3/overlay has subscribers, not in the total), idle: {overlay:.2f} ms")
    labels, windows, grid, camera = depth_inputs(frame, result)
    stats_cpu = cpu_ms(lambda: depth.measure_instances(labels, windows, grid, camera, DEPTH_LIMITS), repeats)
    print(
        f"3D rows (not in the total): {width}x{height} 16UC1 depth, {frame.count} instances, "
        f"depth_min_points {DEPTH_LIMITS.min_points}; ours reads about {depth.STATS_POINT_BUDGET} pixels "
        f"per instance: largest gap to the exact statistics {centre_gap_mm:.2f} mm (box centre), "
        f"{size_gap_mm:.2f} mm (box size), {median_gap_mm:.2f} mm (median); process CPU time of ours "
        f"{stats_cpu:.2f} ms"
    )
    for name, times in columns.items():
        print(f"{name}: 3D statistics ours vs exact {times['depth_exact'] / times['depth_stats']:.1f}x")
    print("labels from our crops equal the naive full-upsample labels pixel for pixel (checked).")


def _f(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"
