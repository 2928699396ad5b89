"""The tracking section's ``sam3`` rows: what SAM 3's own tracker costs per frame and per object.

``tracker: sam3`` runs SAM 3's video inference on every frame (``Sam3VideoTracker``): the
detector, then per tracked object memory attention (the frame against the object's memory of
past frames), the tracker's mask decoder and the memory encoder (the frame's mask into a new
memory). The image-only path (``tracker: association``) runs the detector alone and associates
its instances (``InstanceTracker``). Every stage is timed by hooks on transformers' modules, in
CPU time of one torch thread: the work a frame costs, which other processes on the cores move
less than wall time.

- Tiny: the tiny video model (its input side, 336) with 1, 4 and 8 objects, beside the tiny
  image model's image-only path (which, as every engine, runs at 1008x1008).
- Full size: SAM 3's tracker at its real sizes (``Sam3VideoConfig()``: memory attention of 4
  layers at width 256 over 72x72 features, 7 memory frames, 16 object pointers) with random
  weights, a few frames only. Its detector keeps SAM 3's heads but one ViT layer of 32 (a full
  ViT costs about 40 s a frame on 2 CPU cores; the model section measures it): the tracker reads
  the ViT's last layer through its own neck, so its work is the same.
- The state per object: the tensors the session keeps per object and kept frame, measured on the
  full-size tracker, and the caps that bound them.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..common import report

PROMPTS = ("car", "person")
#: Hooked modules of a Sam3VideoModel, by the stage they count for.
STAGES = {
    "image encoder": "detector_model.vision_encoder",
    "detector heads": "detector_model",
    "tracker neck": "tracker_neck",
    "memory attention": "tracker_model.memory_attention",
    "mask decoder": "tracker_model.mask_decoder",
    "memory encoder": "tracker_model.memory_encoder",
}
TRACKER_STAGES = ("tracker neck", "memory attention", "mask decoder", "memory encoder")
#: Frames before the measured ones: an object's memory fills up over its first 7 frames.
WARMUP_FRAMES = 8
TINY = {"frames": WARMUP_FRAMES + 8, "objects": (1, 4)}
QUICK = {"frames": WARMUP_FRAMES + 2, "objects": (1,)}
#: Full-size frames measured after the first (which only finds the objects): the memory then
#: holds 1, 2, ... of its 7 frames.
FULL_SIZE_FRAMES = 2
FULL_SIZE_OBJECTS = 2


@dataclass
class StageClock:
    """CPU seconds spent inside each hooked module since the last ``take()``."""

    spent: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    _started: dict[str, float] = field(default_factory=dict)
    _depth: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def attach(self, model: Any) -> None:
        for stage, path in STAGES.items():
            module = model
            for part in path.split("."):
                module = getattr(module, part)
            module.register_forward_pre_hook(self._enter(stage))
            module.register_forward_hook(self._leave(stage))

    def _enter(self, stage: str) -> Callable:
        def hook(*_: Any) -> None:
            if self._depth[stage] == 0:
                self._started[stage] = time.process_time()
            self._depth[stage] += 1

        return hook

    def _leave(self, stage: str) -> Callable:
        def hook(*_: Any) -> None:
            self._depth[stage] -= 1
            if self._depth[stage] == 0:
                self.spent[stage] += time.process_time() - self._started.pop(stage)

        return hook

    def take(self) -> dict[str, float]:
        spent, self.spent = dict(self.spent), defaultdict(float)
        return spent


@dataclass
class FrameCost:
    """One frame: wall and CPU seconds, CPU seconds by stage, objects tracked after it."""

    wall_s: float
    cpu_s: float
    stages: dict[str, float]
    objects: int


@contextmanager
def one_thread() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def frames_of(clip: list[np.ndarray], count: int) -> Iterator[np.ndarray]:
    """``count`` frames of ``clip``, played forwards and back (no jump)."""
    loop = clip + clip[-2:0:-1]
    for index in range(count):
        yield loop[index % len(loop)]


def stream_costs(tracker: Any, clip: list[np.ndarray], count: int, clock: StageClock) -> list[FrameCost]:
    costs = []
    for frame in frames_of(clip, count):
        clock.take()
        wall, cpu = time.perf_counter(), time.process_time()
        tracker(frame, list(PROMPTS))
        costs.append(
            FrameCost(
                time.perf_counter() - wall, time.process_time() - cpu, clock.take(), len(tracker.object_ids)
            )
        )
    return costs


def image_only_costs(clip: list[np.ndarray], count: int) -> list[FrameCost]:
    """The tiny image model's Sam3Segmenter plus InstanceTracker on the same frames."""
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.core.tracking import InstanceTracker
    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3, clip_tokenizer

    segmenter = Sam3Segmenter(TorchEngine(build_tiny_sam3(seed=0), clip_tokenizer(), device="cpu"))
    tracker = InstanceTracker()
    costs = []
    for index, frame in enumerate(frames_of(clip, count)):
        wall, cpu = time.perf_counter(), time.process_time()
        result = tracker.update(segmenter(frame, list(PROMPTS)), index / 15.0)
        costs.append(
            FrameCost(time.perf_counter() - wall, time.process_time() - cpu, {}, len(result.instances))
        )
    segmenter.close()
    return costs


def _median_ms(values: list[float]) -> str:
    return report.ms(statistics.median(values))


def _row(name: str, costs: list[FrameCost]) -> list[object]:
    measured = costs[WARMUP_FRAMES:] if len(costs) > WARMUP_FRAMES else costs
    objects = statistics.mean(c.objects for c in measured)

    def stage(names: tuple[str, ...]) -> list[float]:
        return [sum(c.stages.get(n, 0.0) for n in names) for c in measured]

    detector = stage(("image encoder", "detector heads"))
    tracker = stage(TRACKER_STAGES)
    per_object = [t / max(c.objects, 1) for t, c in zip(tracker, measured, strict=True)]
    hooked = bool(measured[0].stages)
    return [
        name,
        f"{objects:.1f}",
        _median_ms([c.wall_s for c in measured]),
        _median_ms([c.cpu_s for c in measured]),
        _median_ms(detector) if hooked else "-",
        _median_ms(tracker) if hooked else "-",
        _median_ms(per_object) if hooked else "-",
    ]


def tiny_table(quick: bool) -> None:
    from benchmarks.common.scenes import moving_objects_clip
    from tt_sam3_ros.core.video_tracker import Sam3VideoTracker
    from tt_sam3_ros.weights.tiny_model import (
        TINY_VIDEO_SIDE,
        build_tiny_sam3_video,
        tiny_sam3_video_processor,
    )

    settings = QUICK if quick else TINY
    clip = moving_objects_clip(30, height=240, width=320)
    rows = []
    with one_thread():
        image_only = image_only_costs(clip, settings["frames"])
        rows.append(
            _row("image-only: Sam3Segmenter + InstanceTracker (tiny image model, 1008x1008)", image_only)
        )
        for objects in settings["objects"]:
            model = build_tiny_sam3_video(seed=0, max_num_objects=objects)
            clock = StageClock()
            clock.attach(model)
            tracker = Sam3VideoTracker(model, tiny_sam3_video_processor(model.config))
            costs = stream_costs(tracker, clip, settings["frames"], clock)
            rows.append(
                _row(f"sam3: Sam3VideoTracker (tiny video model, {TINY_VIDEO_SIDE}x{TINY_VIDEO_SIDE})", costs)
            )
    report.title("tracking: sam3 mode, cost per frame with the tiny models")
    measured = settings["frames"] - WARMUP_FRAMES
    print(
        f"{measured} frames per row after {WARMUP_FRAMES} (the memory filling up), 320x240 discs crossing, "
        f"prompts {list(PROMPTS)}, one torch thread; objects: tracked after each frame (mean); CPU ms "
        "by stage from hooks on transformers' modules: detector = image encoder + detector heads, tracker = "
        "its neck + memory attention + mask decoder + memory encoder; the rest of a frame is association, "
        "pre- and post-processing"
    )
    report.table(HEADERS, rows)


HEADERS = [
    "path",
    "objects",
    "median ms",
    "median CPU ms",
    "detector CPU ms",
    "tracker CPU ms",
    "tracker CPU ms per object",
]


def full_size_model(objects: int) -> Any:
    """SAM 3's video model at full size with random weights, its ViT cut to one layer (see above),
    admitting every query as a detection so that ``objects`` objects are tracked."""
    import torch
    from transformers import Sam3VideoConfig, Sam3VideoModel

    from tt_sam3_ros.weights.meta_constants import apply_meta_constants

    # No detection NMS: over every query's mask it needs a (queries x queries x mask pixels) array.
    config = Sam3VideoConfig(
        score_threshold_detection=0.0, new_det_thresh=0.0, det_nms_thresh=0.0, max_num_objects=objects
    )
    apply_meta_constants(config.detector_config)
    backbone = config.detector_config.vision_config.backbone_config
    backbone.num_hidden_layers = 1
    backbone.global_attn_indexes = [0]
    config.detector_config.text_config.num_hidden_layers = 1
    torch.manual_seed(0)
    return Sam3VideoModel(config).eval()


def full_size_tables(quick: bool) -> None:
    from benchmarks.common.scenes import moving_objects_clip
    from tt_sam3_ros.core.video_tracker import Sam3VideoTracker

    if quick:
        print("\n(tracking: the full-size sam3 rows are not in --quick)")
        return
    from tt_sam3_ros.weights.tiny_model import tiny_sam3_video_processor

    report.progress("building SAM 3's full-size video model (random weights)")
    model = full_size_model(FULL_SIZE_OBJECTS)
    processor = tiny_sam3_video_processor(model.config)  # transformers' processor at the model's side
    clip = moving_objects_clip(30, height=240, width=320)
    clock = StageClock()
    clock.attach(model)
    tracker = Sam3VideoTracker(model, processor)
    rows = []
    with one_thread():
        for index, frame in enumerate(frames_of(clip, FULL_SIZE_FRAMES + 1)):
            report.progress(f"full-size frame {index + 1} of {FULL_SIZE_FRAMES + 1}")
            cpu = time.process_time()
            tracker(frame, list(PROMPTS[:1]))
            spent = clock.take()
            if index == 0:
                continue  # the objects are found: no memory yet
            objects = max(len(tracker.object_ids), 1)
            rows.append(
                [
                    index + 1,
                    len(tracker.object_ids),
                    min(index, tracker.model.config.tracker_config.num_maskmem),
                    report.ms(spent.get("memory attention", 0.0) / objects),
                    report.ms(spent.get("mask decoder", 0.0) / objects),
                    report.ms(spent.get("memory encoder", 0.0) / objects),
                    report.ms(sum(spent.get(s, 0.0) for s in TRACKER_STAGES)),
                    report.ms(spent.get("detector heads", 0.0)),
                    report.ms(time.process_time() - cpu),
                ]
            )
    report.title("tracking: sam3 mode at full size, the tracker per object")
    print(
        "SAM 3's tracker at its real sizes (Sam3VideoConfig(): 72x72 features, memory attention 4 layers "
        "at width 256, 7 memory frames, 16 object pointers), random weights, CPU ms of one torch thread; "
        f"1 prompt, {FULL_SIZE_OBJECTS} objects (every query admitted); the detector's ViT cut to 1 layer of "
        "32 (the image encoder of a full-size frame is in the model section); memory frames: what memory "
        "attention reads (SAM 3 reads at most 7: the conditioning frame and the 6 latest)"
    )
    report.table(
        [
            "frame",
            "objects",
            "memory frames",
            "memory attention CPU ms per object",
            "mask decoder CPU ms per object",
            "memory encoder CPU ms per object",
            "tracker CPU ms",
            "detector heads CPU ms",
            "frame CPU ms (1-layer ViT)",
        ],
        rows,
    )
    state_table(tracker)


def state_table(tracker: Any) -> None:
    """Bytes per object and kept frame of each tensor the session keeps, and per object at the caps."""
    from tt_sam3_ros.core.video_tracker import MEMORY_KEYS

    session = tracker._session
    outputs = next(iter(session.output_dict_per_obj.values()))
    kept_outputs = [*outputs["cond_frame_outputs"].values(), *outputs["non_cond_frame_outputs"].values()]
    kept = tracker.memory_frames + tracker.max_conditioning_frames
    rows, per_frame = [], 0
    for key in sorted(MEMORY_KEYS):
        tensor = kept_outputs[-1][key]
        own = tensor.numel() * tensor.element_size()
        storages = {frame[key].untyped_storage().data_ptr() for frame in kept_outputs}
        if len(kept_outputs) > 1 and len(storages) == 1:  # the same tensor in every kept frame
            rows.append([key, "x".join(map(str, tensor.shape)), _dtype(tensor), "one for every frame", own])
            continue
        per_frame += own
        rows.append([key, "x".join(map(str, tensor.shape)), _dtype(tensor), own, own * kept])
    rows.append(["per kept frame", "", "", per_frame, per_frame * kept])
    state = tracker.state()
    report.title("tracking: sam3 mode at full size, the state per object")
    print(
        f"per object the session keeps {tracker.memory_frames} past frames (memory attention reads the 6 "
        f"latest, object pointers all {tracker.memory_frames}) and up to {tracker.max_conditioning_frames} "
        f"conditioning frames: {kept} kept frames at most; bytes of each tensor's own elements (the position "
        "encoding is one cached tensor that every kept frame refers to). After the last frame above: "
        f"{state.objects} objects, {state.tensors} session tensors, {state.tensor_bytes / 1e6:.1f} MB"
    )
    report.table(
        ["tensor", "shape", "dtype", "bytes per kept frame", f"bytes per object ({kept} frames)"], rows
    )


def _dtype(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def main(quick: bool) -> None:
    from . import tracker_trace

    tiny_table(quick)
    full_size_tables(quick)
    tracker_trace.chip_table()
