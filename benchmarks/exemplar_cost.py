"""`python -m benchmarks.exemplar_cost [--quick] [--device cpu]`: what exemplar boxes cost.

Two figures, on the torch engine with random full-size weights (``--quick``: the tiny model, a
smoke run): the geometry encoder on the frame the boxes were drawn on (``encode_exemplars``,
once per request), and the prompt path of every later frame that carries them (``decode`` with
the boxes' tokens added to the prompt) against the same prompt without them. Median of the
repeats, milliseconds, one prompt; the image encoder runs once and is not timed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

BOX_COUNTS = (1, 4, 16)


def _model(quick: bool):
    from transformers import Sam3Config, Sam3Model

    from tt_sam3_ros.tiny_model import build_tiny_sam3
    from tt_sam3_ros.weights.meta_constants import apply_meta_constants

    if quick:
        return build_tiny_sam3(seed=0)
    torch.manual_seed(0)
    config = Sam3Config()
    apply_meta_constants(config)
    return Sam3Model(config).eval()


def _median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def _with_boxes(engine, images, text, count: int, rng, repeats: int) -> tuple[float, float]:
    """(geometry encoder ms on the drawn frame, decode ms on a later frame carrying the boxes)."""
    drawn, later = images
    corners = rng.uniform(0.1, 0.4, (count, 2))
    boxes = np.concatenate([corners + 0.2, np.full((count, 2), 0.2)], axis=1).astype(np.float32)
    labels = np.ones(count, dtype=np.int64)
    encode = _median_ms(lambda: engine.encode_exemplars(drawn, [boxes], [labels]), repeats)
    carried = engine.encode_exemplars(drawn, [boxes], [labels])
    return encode, _median_ms(lambda: engine.decode(later, text, exemplars=carried), repeats)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exemplar_cost", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny model: a smoke run, not a measure")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.tiny_model import clip_tokenizer

    engine = TorchEngine(_model(args.quick), clip_tokenizer(), device=args.device, dtype="float32")
    rng = np.random.default_rng(0)
    image = engine.encode_image(rng.integers(0, 256, (1008, 1008, 3), dtype=np.uint8))
    later = engine.encode_image(rng.integers(0, 256, (1008, 1008, 3), dtype=np.uint8))
    text = engine.encode_prompts(["bolt"])
    print(
        f"torch engine, {engine.describe()['device']}, {'tiny' if args.quick else 'full-size'} random weights"
    )
    plain = _median_ms(lambda: engine.decode(later, text), args.repeats)
    header = ("boxes", "geometry encoder, drawn frame (ms)", "later frame decode (ms)", "vs none")
    print(" | ".join(header))
    print(f"{0:>5} | {'-':>34} | {plain:>23.1f} |")
    for count in BOX_COUNTS:
        encode, decode = _with_boxes(engine, (image, later), text, count, rng, args.repeats)
        print(f"{count:>5} | {encode:>34.1f} | {decode:>23.1f} | {decode / plain - 1:>+7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
