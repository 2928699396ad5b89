"""Model section: our torch engine vs transformers' documented SAM 3 usage, same weights.

The reference is what transformers' documentation shows: Sam3Processor + Sam3Model, one
call per prompt, fp32, each call encoding the image again, then the processor's own
post-processing. Ours is Sam3Segmenter over TorchEngine: the image encoded once, every
prompt in one batch. Both run on the same random weights, so their outputs can be
compared: the agreement columns say how far apart they are.

Our engine appends the geometry class token (one padded box) as Meta's model does; the
documented text-only call skips it, so logits legitimately differ by up to ~0.14. The
table therefore also compares against the reference called with the padded box (the
documented vision-embedding reuse path), where the difference is float rounding only.

That table is the CPU's. With ``--device cuda`` (and with ``--quick`` on the CPU too) the
section runs the latency check in benchmarks/model/model_latency.py: stages, 1/4/16 prompts,
eager vs compiled, beside the documented usage in the same dtype.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tt_sam3_ros.engines.base import MASK_SIDE

from ..common import report, scenes
from ..common.engines import RecordingEngine

#: Source image side of the full run: the model's own input size, so no resize blurs the comparison.
FULL_IMAGE_SIDE = 1008
QUICK_IMAGE_SIZE = (240, 320)


@dataclass
class Setup:
    """Weights, tokenizer and processor shared by every row (one model object, converted last)."""

    model: Any
    tokenizer: Any
    processor: Any
    image: np.ndarray
    description: str
    repeats: int


@dataclass
class Run:
    """Timings and raw outputs of one way of running P prompts on the image.

    Attributes:
        seconds_one: wall time of one prompt (one call for the reference, a 1-prompt call for ours).
        seconds_all: wall time of all P prompts on the image.
        logits: float32 (P, Q) query logits of the P-prompt run.
        masks: float32 (P, Q, 288, 288) mask logits of the P-prompt run.
        stages_ms: our per-stage times of the P-prompt call (empty for the reference).
    """

    seconds_one: float
    seconds_all: float
    logits: np.ndarray
    masks: np.ndarray
    stages_ms: dict[str, float]


def build_setup(quick: bool) -> Setup:
    """The full-size SAM 3 with random weights (or the tiny one), the real CLIP tokenizer."""
    from transformers import Sam3Config, Sam3ImageProcessor, Sam3Model, Sam3Processor

    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3, clip_tokenizer

    tokenizer = clip_tokenizer()
    processor = Sam3Processor(image_processor=Sam3ImageProcessor(), tokenizer=tokenizer)
    if quick:
        model, image = build_tiny_sam3(seed=0), scenes.picture(*QUICK_IMAGE_SIZE)
    else:
        torch.manual_seed(0)
        model, image = Sam3Model(Sam3Config()).eval(), scenes.picture(FULL_IMAGE_SIDE, FULL_IMAGE_SIDE)
    size = "tiny" if quick else "full-size"
    params = sum(p.numel() for p in model.parameters()) / 1e6
    description = f"{size} SAM 3, random weights, {params:.1f}M parameters"
    return Setup(model, tokenizer, processor, image, description, repeats=1)


def reference_call(setup: Setup, prompt: str) -> tuple[Any, Any]:
    """One documented call: processor(images, text) -> model(**inputs) -> post-processing."""
    inputs = setup.processor(images=setup.image, text=prompt, return_tensors="pt")
    with torch.inference_mode():
        outputs = setup.model(**inputs)
    results = setup.processor.post_process_instance_segmentation(
        outputs, threshold=0.5, mask_threshold=0.5, target_sizes=[setup.image.shape[:2]]
    )
    return outputs, results


def run_reference(setup: Setup, prompts: list[str]) -> Run:
    """The documented usage, one call per prompt; the 1-prompt time is the median call."""
    per_call: list[float] = []
    totals: list[float] = []
    outputs: list[Any] = []
    for _ in range(setup.repeats):
        outputs = []
        start_all = time.perf_counter()
        for prompt in prompts:
            report.progress(f"reference: documented call for {prompt!r}")
            start = time.perf_counter()
            outputs.append(reference_call(setup, prompt)[0])
            per_call.append(time.perf_counter() - start)
        totals.append(time.perf_counter() - start_all)
    return Run(
        seconds_one=statistics.median(per_call),
        seconds_all=statistics.median(totals),
        logits=np.stack([o.pred_logits[0].float().numpy() for o in outputs]),
        masks=np.stack([o.pred_masks[0].float().numpy() for o in outputs]),
        stages_ms={},
    )


def reference_with_class_token(setup: Setup, prompts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Reference outputs with one padded box (Meta's class token), for agreement only.

    Uses transformers' documented reuse of vision embeddings (one image encode, one call
    per prompt); it is not timed.
    """
    report.progress("reference with the padded box (agreement only)")
    pixels = setup.processor(images=setup.image, return_tensors="pt")["pixel_values"]
    logits, masks = [], []
    with torch.inference_mode():
        vision = setup.model.get_vision_features(pixel_values=pixels)
        for prompt in prompts:
            text = setup.processor(text=prompt, return_tensors="pt")
            outputs = setup.model(
                vision_embeds=vision,
                input_ids=text["input_ids"],
                attention_mask=text["attention_mask"],
                input_boxes=torch.zeros(1, 1, 4),
                input_boxes_labels=torch.full((1, 1), -10),
            )
            logits.append(outputs.pred_logits[0].float().numpy())
            masks.append(outputs.pred_masks[0].float().numpy())
    return np.stack(logits), np.stack(masks)


def run_ours(setup: Setup, prompts: list[str], dtype: str) -> Run:
    """Sam3Segmenter over TorchEngine; a fresh segmenter per call, so text is encoded every time.

    Converts ``setup.model`` to ``dtype`` in place (TorchEngine does), so bf16 runs go last.
    """
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    engine = RecordingEngine(TorchEngine(setup.model, setup.tokenizer, device="cpu", dtype=dtype))

    def call(count: int) -> dict[str, float]:
        report.progress(f"ours {dtype}: {count} prompt(s)")
        return Sam3Segmenter(engine)(setup.image, prompts[:count]).timing_ms

    one = [_timed(lambda: call(1))[0] for _ in range(setup.repeats)]
    runs = [_timed(lambda: call(len(prompts))) for _ in range(setup.repeats)]
    decoded = engine.last_decoded
    count, queries = decoded.logits.shape
    prompt_index = np.repeat(np.arange(count), queries)
    query_index = np.tile(np.arange(queries), count)
    masks = engine.fetch_masks(decoded, prompt_index, query_index).reshape(
        count, queries, MASK_SIDE, MASK_SIDE
    )
    return Run(
        seconds_one=statistics.median(one),
        seconds_all=statistics.median(seconds for seconds, _ in runs),
        logits=decoded.logits,
        masks=masks,
        stages_ms=runs[-1][1],
    )


def _timed(run: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def prompt_path_ablation(setup: Setup, prompts: list[str]) -> tuple[float, float]:
    """Median seconds of the prompt path for all prompts: transformers' forward vs our composed one.

    Both start from the same image features and text encodings and run the same batch with
    one padded box; the forward is what our engine called before it was composed stage by
    stage. The two alternate so that load from other processes falls on both alike.
    """
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    from transformers.models.sam3.modeling_sam3 import Sam3VisionEncoderOutput

    from tt_sam3_ros.core import preprocess
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    engine = TorchEngine(setup.model, setup.tokenizer, device="cpu", dtype="float32")
    image = engine.encode_image(preprocess.resize_to_model(setup.image))
    texts = engine.encode_prompts(prompts)
    count = len(prompts)
    vision = Sam3VisionEncoderOutput(
        fpn_hidden_states=tuple(f.expand(count, -1, -1, -1) for f in image.vision.fpn_hidden_states),
        fpn_position_encoding=tuple(p.expand(count, -1, -1, -1) for p in image.vision.fpn_position_encoding),
    )

    def forward() -> None:
        with torch.inference_mode():
            setup.model(
                vision_embeds=vision,
                text_embeds=BaseModelOutputWithPooling(
                    pooler_output=torch.stack([t.features for t in texts])
                ),
                attention_mask=torch.stack([t.mask for t in texts]).long(),
                input_boxes=torch.zeros(count, 1, 4),
                input_boxes_labels=torch.full((count, 1), -10),
            )

    def composed() -> None:
        engine.decode(image, texts)

    report.progress("prompt path: transformers' forward vs our composed path")
    forward_s, composed_s = [], []
    for _ in range(setup.repeats + 1):
        forward_s.append(_timed(forward)[0])
        composed_s.append(_timed(composed)[0])
    return statistics.median(forward_s), statistics.median(composed_s)


def agreement(ours: Run, logits: np.ndarray, masks: np.ndarray) -> tuple[str, str]:
    """(mask pixel agreement over every query's 288x288 mask, max |logit difference|)."""
    pixels = float(np.mean((ours.masks > 0) == (masks > 0)))
    return f"{pixels * 100:.3f}%", f"{float(np.max(np.abs(ours.logits - logits))):.2e}"


def main(quick: bool, device: str = "cpu") -> list[str]:
    """The model section on ``device``; returns what failed (nothing when all ran within bounds).

    On the CPU: the comparison table below (fp32 reference, ours fp32 and bf16), as the README
    reports it. On CUDA, and with ``--quick`` everywhere: the latency check
    (benchmarks/model/model_latency.py), so the GPU check runs on the CPU in every ``make test``.
    """
    from tt_sam3_ros.engines.torch_engine import resolve_device

    from . import model_latency

    resolved = resolve_device(device)
    failures: list[str] = []
    if resolved.type == "cpu":
        comparison(quick)
    if resolved.type != "cpu" or quick:
        failures = model_latency.main(model_latency.Settings.for_run(resolved, quick))
    return failures


def comparison(quick: bool) -> None:
    """Print the CPU table: reference, ours fp32, ours bf16; times, ratio, agreement."""
    report.progress("building the model")
    setup = build_setup(quick)
    prompts = scenes.PROMPTS
    height, width = setup.image.shape[:2]
    report.title("model: our torch engine vs transformers' documented SAM 3 usage")
    print(f"{setup.description}; image {width}x{height}; prompts {prompts}; device cpu")
    reference = run_reference(setup, prompts)
    token_logits, token_masks = reference_with_class_token(setup, prompts)
    runs = {"float32": run_ours(setup, prompts, "float32")}
    forward_s, composed_s = prompt_path_ablation(setup, prompts)
    runs["bfloat16"] = run_ours(setup, prompts, "bfloat16")
    rows: list[list[object]] = [
        [
            "reference (processor + model per prompt)",
            "float32",
            _s(reference.seconds_one),
            _s(reference.seconds_all),
            "1.00x",
            "1.00x",
            "-",
            "-",
            "-",
            "-",
        ],
    ]
    for dtype, run in runs.items():
        doc_pixels, doc_logits = agreement(run, reference.logits, reference.masks)
        token_pixels, token_max = agreement(run, token_logits, token_masks)
        rows.append(
            [
                "ours (Sam3Segmenter, TorchEngine)",
                dtype,
                _s(run.seconds_one),
                _s(run.seconds_all),
                _ratio(reference.seconds_one, run.seconds_one),
                _ratio(reference.seconds_all, run.seconds_all),
                doc_pixels,
                doc_logits,
                token_pixels,
                token_max,
            ]
        )
    count = len(prompts)
    report.table(
        [
            "run",
            "dtype",
            "1 prompt s",
            f"{count} prompts s",
            "speed-up 1",
            f"speed-up {count}",
            "mask agree (doc)",
            "max dlogit (doc)",
            "mask agree (+box)",
            "max dlogit (+box)",
        ],
        rows,
    )
    print(
        "agreement: all queries' 288x288 mask logits > 0 and query logits of the "
        f"{count}-prompt run; (doc) vs the documented text-only call, (+box) vs the reference "
        "with the padded box, i.e. Meta's class token, which our engine adds."
    )
    print(
        f"prompt path alone, {count} prompts, float32, same image features (median of "
        f"{setup.repeats + 1}, alternating): transformers' forward with the padded box "
        f"{forward_s:.2f} s, our composed path (class token and first self-attention once "
        f"per image, masks only when fetched) {composed_s:.2f} s: {forward_s / composed_s:.2f}x"
    )
    for dtype, run in runs.items():
        stages = ", ".join(f"{k} {v:.0f}" for k, v in run.stages_ms.items())
        print(f"ours {dtype}, {count} prompts, ms per stage: {stages}")


def _s(seconds: float) -> str:
    return f"{seconds:.3f}" if seconds < 1 else f"{seconds:.2f}" if seconds < 100 else f"{seconds:.0f}"


def _ratio(reference_seconds: float, seconds: float) -> str:
    return f"{reference_seconds / seconds:.2f}x"
