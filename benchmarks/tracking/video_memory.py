"""Memory of a long live stream through SAM 3's video tracker, with the tiny video model.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.tracking.video_memory --frames 10000
    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.tracking.video_memory --frames 200 --unbounded

Streams a clip of discs entering, crossing and leaving (looped) through ``Sam3VideoTracker``
frame by frame, the detector blinded on 12 frames of every 30 (no detection, as when the objects
leave the picture: the tracker forgets them, new ones come with new ids), and prints, after each
tenth of the stream (at the same point of the 30-frame cycle), the process's
resident memory, the live torch tensors (every tensor object the garbage collector sees) and what the
session holds. ``--unbounded`` runs transformers' own streaming session instead (the same
model, frames and prompts), whose state grows with every frame. One torch thread: the figures
do not depend on speed.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import time


def resident_mb() -> float:
    """The process's resident memory now (not its peak), in MB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def live_tensors() -> int:
    import torch

    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, torch.Tensor))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--unbounded", action="store_true", help="transformers' own session (grows)")
    parser.add_argument("--max-objects", type=int, default=4, help="SAM 3's max_num_objects")
    parser.add_argument("--forget-after", type=int, default=10, help="forget_after_frames")
    parser.add_argument(
        "--image-side",
        type=int,
        default=None,
        help="the tiny video model's input side, a multiple of 14 (default its own, 336; 112 runs a "
        "frame about four times cheaper: what the state holds per object shrinks, its bounds do not change)",
    )
    args = parser.parse_args(argv)

    import torch

    from benchmarks.common.scenes import moving_objects_clip
    from tt_sam3_ros.core.video_session import tensors_in
    from tt_sam3_ros.core.video_tracker import Sam3VideoTracker
    from tt_sam3_ros.weights.tiny_model import (
        TINY_VIDEO_SIDE,
        build_tiny_sam3_video,
        tiny_sam3_video_processor,
    )

    torch.set_num_threads(1)
    side = args.image_side or TINY_VIDEO_SIDE
    model = build_tiny_sam3_video(seed=0, image_size=side, max_num_objects=args.max_objects)
    processor = tiny_sam3_video_processor(model.config)
    clip = moving_objects_clip(60, height=120, width=160)
    prompts = ["car", "person"]
    if args.unbounded:
        session = processor.init_video_session(inference_device="cpu", dtype=torch.float32)
        processor.add_text_prompt(session, prompts)

        def step(frame):
            pixels = processor(images=frame, return_tensors="pt").pixel_values[0]
            with torch.inference_mode():
                model(inference_session=session, frame=pixels)

        def held() -> str:
            return f"session tensors {len(tensors_in(vars(session)))}, objects {len(session.obj_ids)}"
    else:
        tracker = Sam3VideoTracker(model, processor, forget_after_frames=args.forget_after)

        def step(frame):
            tracker(frame, prompts)

        def held() -> str:
            state = tracker.state()
            return (
                f"session tensors {state.tensors} ({state.tensor_bytes / 1e6:.1f} MB), "
                f"objects {state.objects}, memory frames {state.memory_frames}, "
                f"conditioning frames {state.conditioning_frames}, next object id {tracker.next_object_id}"
            )

    # After each tenth of the stream, all at the same point of the 30-frame cycle, so they compare
    # like with like.
    checkpoints = {max(17, (args.frames * k // 10 - 17) // 30 * 30 + 17) for k in range(1, 11)}
    mode = "transformers' streaming session" if args.unbounded else "Sam3VideoTracker"
    print(f"{mode}, tiny video model at {side}x{side}, {args.frames} frames of 160x120, prompts {prompts}")
    started = time.process_time()
    seeing = model.score_threshold_detection
    for index in range(1, args.frames + 1):
        model.score_threshold_detection = 1.1 if index % 30 >= 18 else seeing
        step(clip[(index - 1) % len(clip)])
        if index in checkpoints:
            cpu_s = time.process_time() - started
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # KiB on Linux
            print(
                f"frame {index}: RSS {resident_mb():.1f} MB (peak {peak_mb:.1f}), "
                f"live tensors {live_tensors()}, {held()}; {cpu_s / index * 1e3:.0f} CPU-ms per frame",
                flush=True,
            )


if __name__ == "__main__":
    main()
