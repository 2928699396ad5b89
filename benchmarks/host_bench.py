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

import statistics
from collections.abc import Callable

import numpy as np
import torch

from tt_sam3_ros.segmenter import Sam3Segmenter

from . import report, scenes
from .engines import CannedEngine

FULL = {"size": (1080, 1920), "instances": 20, "repeats": 30}
QUICK = {"size": (480, 640), "instances": 5, "repeats": 3}
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
    from tt_sam3_ros import postprocess

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


def main(quick: bool) -> None:
    """Print the host table: per-step milliseconds, ours vs naive, and the totals."""
    from tt_sam3_ros import messages
    from tt_sam3_ros.overlay import draw_overlay

    settings = QUICK if quick else FULL
    height, width = settings["size"]
    count, repeats = settings["instances"], settings["repeats"]
    rgb = scenes.picture(height, width)
    engine = CannedEngine(scenes.instance_logits(count))
    segmenter = Sam3Segmenter(engine)
    msg, bgr_msg = rgb8_message(rgb), bgr8_message(rgb)
    header = msg.header
    view = messages.image_to_rgb(msg)

    stage_samples: dict[str, list[float]] = {}
    for _ in range(repeats + 1):
        timing = segmenter(view, ["car"]).timing_ms
        for stage in HOST_STAGES:
            stage_samples.setdefault(stage, []).append(timing[stage])
    stages = {stage: statistics.median(samples[1:]) for stage, samples in stage_samples.items()}
    result = segmenter(view, ["car"])
    assert len(result.instances) == count, "the canned outputs must give every instance"
    labels = result.instance_mask()
    np.testing.assert_array_equal(labels, naive_postprocess(engine, (height, width), 0.5))

    decode_rgb8 = median_ms(lambda: messages.image_to_rgb(msg), repeats)
    decode_bgr8 = median_ms(lambda: messages.image_to_rgb(bgr_msg), repeats)
    instance_mask = median_ms(result.instance_mask, repeats)
    out_messages = (
        median_ms(
            lambda: (
                messages.result_to_detections(result, header),
                messages.instance_mask_to_image(result.instance_mask(), header),
            ),
            repeats,
        )
        - instance_mask
    )
    naive = median_ms(lambda: naive_postprocess(engine, (height, width), 0.5), repeats)
    overlay = median_ms(lambda: draw_overlay(rgb, result), max(3, repeats // 5))

    ours_post = stages["load"] + stages["postprocess"] + instance_mask
    ours_total = decode_rgb8 + stages["preprocess"] + ours_post + out_messages
    naive_total = decode_rgb8 + stages["preprocess"] + naive + out_messages
    area = np.mean([instance.area for instance in result.instances]) / (height * width) * 100
    report.title("host: our work per frame besides the model")
    print(
        f"frame {width}x{height} rgb8, {count} instances (mean area {area:.1f}% of the frame) among 200 "
        f"queries, 1 prompt; median of {repeats}; torch threads {torch.get_num_threads()}"
    )
    rows = [
        ["message -> pixels (rgb8: a view)", _f(decode_rgb8), _f(decode_rgb8)],
        ["  (bgr8 message instead: one reorder)", _f(decode_bgr8), _f(decode_bgr8)],
        [
            "pre-processing (resize to 1008x1008, normalise)",
            _f(stages["preprocess"]),
            _f(stages["preprocess"]),
        ],
        ["post-processing: scores, boxes, masks (+ checks)", _f(stages["load"] + stages["postprocess"]), "-"],
        ["instance mask (mono8 labels)", _f(instance_mask), "-"],
        ["naive: full-image upsample + labels from full masks", "-", _f(naive)],
        ["output messages (Detection2DArray, mono8 Image)", _f(out_messages), _f(out_messages)],
        ["total per frame (rgb8)", _f(ours_total), _f(naive_total)],
    ]
    report.table(["step", "ours ms", "naive ms"], rows)
    print(
        f"post-processing + instance mask: ours {ours_post:.2f} ms vs naive full upsample {naive:.2f} ms: "
        f"{naive / ours_post:.1f}x; whole host work {naive_total / ours_total:.1f}x"
    )
    print(f"overlay (only while /sam3/overlay has subscribers, not in the total): {overlay:.2f} ms")
    print("labels from our crops equal the naive full-upsample labels pixel for pixel (checked).")


def _f(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"
