"""Model latency on one device: per stage, 1/4/16 prompts, eager vs compiled, vs the documented usage.

This is the GPU check (`python3 -m benchmarks --only model --device cuda`, or
tools/gpu_check.sh). It needs only torch, torchvision, transformers, numpy and OpenCV:
no ROS, no network, no install step, so it runs on a bare GPU image from the repo root.
`--device cpu --quick` runs the same code on the tiny model with small counts (part of
`make test`, so it cannot rot); its numbers say nothing about speed.

Parts, in order, each printed as soon as it is done (a run cut short keeps what it printed):

1. correctness: the tiny model on the device in bf16 (the engine's CUDA default) against
   the same seeded model on the CPU in fp32: mask pixel agreement over every query, max score
   difference (score = sigmoid(logit) * sigmoid(presence)), max logit difference;
2. our engine, eager: image encoder, text encoder, prompt path and frame-to-result for 1, 4
   and 16 prompts, and the device's memory peak;
3. transformers' documented usage (Sam3Processor + Sam3Model, one call per prompt) in the
   same dtype on the same weights, and the ratio of its time to ours;
4. our engine with ``compile_image_encoder=True`` (CUDA only; the engine refuses it
   elsewhere): compile time, the same stage table, agreement with eager.

Times on CUDA are CUDA events around each call after a synchronize, so they include the
host work of the call (the device is idle when the start event is recorded); elsewhere
perf_counter. Each figure is the median of ``repeats`` calls after ``warmup`` untimed ones.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tt_sam3_ros.engines.base import MASK_SIDE

from ..common import report, scenes

#: Prompt counts of every latency row: one, a few, and the most a call accepts.
PROMPT_COUNTS = (1, 4, 16)
#: 16 distinct prompts; the n-prompt rows take the first n.
LATENCY_PROMPTS = [
    *scenes.PROMPTS,
    "bicycle",
    "bus",
    "stop sign",
    "a person riding a bike",
    "truck",
    "traffic cone",
    "dog",
    "backpack",
    "bench",
    "motorcycle",
    "fire hydrant",
    "the red car on the left",
]
#: Instances the fixed-work frame keeps (threshold 0, best first), as in the host section's scene:
#: with random weights the default threshold may keep none, and then no mask is made at all.
KEPT_INSTANCES = 20
#: Bounds of the correctness part (bf16 against fp32 on the tiny model); outside them the
#: check fails. bf16 on this project's CPU was at 99.53 % and 2.9e-05 (torch 2.14.1).
MIN_MASK_AGREEMENT = 0.98
MAX_SCORE_DIFFERENCE = 0.05


@dataclass(frozen=True)
class Settings:
    """How much work each figure gets, and on what."""

    device: torch.device
    quick: bool
    repeats: int
    warmup: int
    reference_repeats: int
    reference_warmup: int
    reference_counts: tuple[int, ...] = PROMPT_COUNTS

    @classmethod
    def for_run(cls, device: torch.device, quick: bool) -> Settings:
        """Full: median of 20 after 3 warm-up calls; quick: just enough to run every line.

        The quick run leaves out the documented usage at 16 prompts (16 more full calls on
        a CPU, the same code as at 4).
        """
        if quick:
            return cls(
                device,
                quick,
                repeats=1,
                warmup=0,
                reference_repeats=1,
                reference_warmup=0,
                reference_counts=(1, 4),
            )
        return cls(device, quick, repeats=20, warmup=3, reference_repeats=20, reference_warmup=2)


class Clock:
    """Milliseconds of calls: CUDA events on a CUDA device, perf_counter elsewhere."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    @property
    def kind(self) -> str:
        return "CUDA events" if self.cuda else "perf_counter"

    def once(self, run: Callable[[], object]) -> float:
        """One call's milliseconds, started on an idle device and ended when its work is done."""
        if not self.cuda:
            start = time.perf_counter()
            run()
            return (time.perf_counter() - start) * 1000.0
        torch.cuda.synchronize(self.device)
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        start_event.record()
        run()
        end_event.record()
        end_event.synchronize()
        return start_event.elapsed_time(end_event)

    def median(self, run: Callable[[], object], repeats: int, warmup: int) -> float:
        """Median milliseconds of ``repeats`` calls after ``warmup`` untimed ones."""
        for _ in range(warmup):
            run()
        return statistics.median(self.once(run) for _ in range(repeats))


class Memory:
    """The device's allocation peak (CUDA only): reset before a measure, read after."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> str:
        if not self.cuda:
            return "-"
        return f"{torch.cuda.max_memory_allocated(self.device) / 2**20:.0f}"


@dataclass
class StageRow:
    """One row of the stage table: milliseconds per stage for one prompt count."""

    mode: str
    prompts: int
    image_ms: float
    text_ms: float
    prompt_path_ms: float
    frame_cached_ms: float
    frame_encoded_ms: float
    frame_kept_ms: float
    instances: int
    peak_mib: str


@dataclass
class Outcome:
    """What the run found: failed parts make the command exit non-zero."""

    failures: list[str] = field(default_factory=list)


def clip_tokenizer_or_stand_in() -> tuple[Any, str]:
    """The real CLIP tokenizer where open-clip-torch ships its vocabulary, else a stand-in.

    A bare GPU image has no open-clip-torch. The stand-in keeps CLIP's id space (49408
    tokens, start and end last) but no merges, so texts split into more tokens; every text
    is padded to 32 tokens either way, so the text encoder does the same work.
    """
    from tt_sam3_ros.weights.tiny_model import clip_tokenizer

    try:
        return clip_tokenizer(), "CLIP BPE tokenizer"
    except RuntimeError:
        return _stand_in_tokenizer(), "stand-in tokenizer (no open-clip-torch: bytes, no merges)"


def _stand_in_tokenizer() -> Any:
    from transformers import CLIPTokenizer

    from tt_sam3_ros.engines.base import TEXT_CONTEXT
    from tt_sam3_ros.weights.tiny_model import _byte_alphabet

    alphabet = _byte_alphabet()
    tokens = [*alphabet, *(c + "</w>" for c in alphabet)]
    tokens += [f"<|unused{i}|>" for i in range(49406 - len(tokens))]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    tokenizer = CLIPTokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=[])
    tokenizer.model_max_length = TEXT_CONTEXT
    return tokenizer


def cuda_line(device: torch.device) -> str:
    """The GPU, its memory, and the CUDA and cuDNN builds torch runs on."""
    properties = torch.cuda.get_device_properties(device)
    return (
        f"GPU: {properties.name}, compute capability {properties.major}.{properties.minor}, "
        f"{properties.total_memory / 2**30:.0f} GiB; torch CUDA {torch.version.cuda}, "
        f"cuDNN {torch.backends.cudnn.version()}"
    )


def full_size_model(device: torch.device) -> Any:
    """SAM 3 at full size with seeded random weights, created on ``device`` (fast on a GPU)."""
    from transformers import Sam3Config, Sam3Model

    torch.manual_seed(0)
    with torch.device(device):
        model = Sam3Model(Sam3Config())
    return model.eval()


def image_encoder_flops(config: Any) -> float:
    """FLOPs of one 1008x1008 image through the image encoder, counted on the meta device.

    torch's FlopCounterMode counts each matrix product as 2 x multiply-adds; the meta device
    gives shapes without computing anything, so this costs seconds even at full size.
    """
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import Sam3Model

    with torch.device("meta"):
        twin = Sam3Model(config).eval()
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        twin.get_vision_features(pixel_values=torch.empty(1, 3, 1008, 1008, device="meta"))
    return float(counter.get_total_flops())


def throughput_line(flops: float, rows: list[StageRow]) -> str:
    """The image encoder's work and the rate each row's median achieved."""
    rates = ", ".join(f"{r.prompts}: {flops / (r.image_ms / 1000) / 1e12:.3g}" for r in rows)
    return (
        f"image encoder: {flops / 1e12:.3g} TFLOP per image (torch FlopCounterMode, meta device); "
        f"achieved TFLOPS by prompt count: {rates} (a lower bound: the timed stage also runs "
        "the image-only prompt stages)"
    )


def everything(engine: Any, decoded: Any) -> tuple[np.ndarray, np.ndarray]:
    """(scores (P, Q), mask logits (P, Q, 288, 288)) of every query of a decoded batch."""
    from tt_sam3_ros.core.postprocess import sigmoid

    count, queries = decoded.logits.shape
    masks = engine.fetch_masks(
        decoded, np.repeat(np.arange(count), queries), np.tile(np.arange(queries), count)
    ).reshape(count, queries, MASK_SIDE, MASK_SIDE)
    scores = sigmoid(decoded.logits) * sigmoid(decoded.presence)[:, None]
    return scores, masks


def compare(ours: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """(fraction of mask pixels with the same sign, max |score difference|)."""
    agreement = float(np.mean((ours[1] > 0) == (other[1] > 0)))
    return agreement, float(np.max(np.abs(ours[0] - other[0])))


def correctness(settings: Settings, tokenizer: Any, outcome: Outcome) -> None:
    """The tiny model on the device in bf16 (the CUDA default) vs the CPU in fp32, same weights."""
    from tt_sam3_ros.core import preprocess
    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3

    report.progress("correctness: tiny model on the device vs the CPU in fp32")
    pixels = preprocess.resize_to_model(scenes.picture(480, 640))
    prompts = scenes.PROMPTS
    outputs = {}
    for name, device, dtype in (("cpu fp32", "cpu", "float32"), ("device", str(settings.device), "bfloat16")):
        engine = TorchEngine(build_tiny_sam3(seed=0), tokenizer, device=device, dtype=dtype)
        decoded = engine.decode(engine.encode_image(pixels), engine.encode_prompts(prompts))
        outputs[name] = (engine.describe(), everything(engine, decoded))
        engine.close()
    described = outputs["device"][0]
    agreement, score_diff = compare(outputs["device"][1], outputs["cpu fp32"][1])
    passed = agreement >= MIN_MASK_AGREEMENT and score_diff <= MAX_SCORE_DIFFERENCE
    report.title("model correctness: tiny SAM 3 on the device in bf16 vs the CPU in fp32")
    report.table(
        ["device", "dtype", "prompts", "mask pixel agreement", "max score diff", "within bounds"],
        [
            [
                described["device"],
                described["dtype"],
                len(prompts),
                f"{agreement * 100:.3f}%",
                f"{score_diff:.2e}",
                "yes" if passed else "NO",
            ]
        ],
    )
    print(
        f"bounds: agreement >= {MIN_MASK_AGREEMENT * 100:.0f}% of every query's 288x288 mask "
        f"pixels (logit > 0), max score difference <= {MAX_SCORE_DIFFERENCE}"
    )
    if not passed:
        outcome.failures.append("correctness: device outputs outside the bounds")
    print(graph_breaks(build_tiny_sam3(seed=0), preprocess.normalise(pixels)))


def graph_breaks(model: Any, pixels: np.ndarray) -> str:
    """How torch.compile sees the image encoder: one graph lets CUDA graphs replay all of it.

    Traced on the CPU with the tiny model (same code as the full one, fewer blocks), so it
    costs seconds and runs wherever the check runs.
    """
    report.progress("torch.compile's view of the image encoder (dynamo explain, tiny model, CPU)")
    with torch.inference_mode():
        explained = torch._dynamo.explain(model.vision_encoder)(torch.from_numpy(pixels))
    torch._dynamo.reset()
    reasons = "; ".join(sorted({str(b.reason) for b in explained.break_reasons}))
    return (
        f"torch.compile of the image encoder (dynamo explain, tiny model): "
        f"{explained.graph_count} graph(s), {explained.graph_break_count} graph break(s)"
        + (f": {reasons}" if reasons else "")
    )


def stage_rows(settings: Settings, segmenter: Any, image: np.ndarray, mode: str) -> list[StageRow]:
    """Per-stage and frame-to-result medians for every prompt count, on one engine."""
    rows = []
    for count in PROMPT_COUNTS:
        report.progress(f"{mode}: {count} prompt(s)")
        rows.append(stage_row(settings, segmenter, image, LATENCY_PROMPTS[:count], mode))
    return rows


def stage_row(
    settings: Settings, segmenter: Any, image: np.ndarray, prompts: list[str], mode: str
) -> StageRow:
    """Each stage alone, then whole frames, for one prompt set; the memory peak over all of it."""
    from tt_sam3_ros.core import preprocess
    from tt_sam3_ros.core.segmenter import Sam3Segmenter

    engine = segmenter.engine
    clock, memory = Clock(settings.device), Memory(settings.device)
    pixels = preprocess.resize_to_model(image)

    def median(run: Callable[[], object]) -> float:
        return clock.median(run, settings.repeats, settings.warmup)

    memory.reset()
    image_ms = median(lambda: engine.encode_image(pixels))
    text_ms = median(lambda: engine.encode_prompts(prompts))
    features, texts = engine.encode_image(pixels), engine.encode_prompts(prompts)
    path_ms = median(lambda: engine.decode(features, texts))
    results = []
    cached_ms = median(lambda: results.append(segmenter(image, prompts)))
    encoded_ms = median(lambda: Sam3Segmenter(engine)(image, prompts))
    kept_ms = median(lambda: segmenter(image, prompts, threshold=0.0, max_instances=KEPT_INSTANCES))
    instances = len(results[-1].instances)
    return StageRow(
        mode,
        len(prompts),
        image_ms,
        text_ms,
        path_ms,
        cached_ms,
        encoded_ms,
        kept_ms,
        instances,
        memory.peak(),
    )


def print_stage_table(rows: list[StageRow], settings: Settings, title: str) -> None:
    report.title(title)
    report.table(
        [
            "mode",
            "prompts",
            "image encoder ms",
            "text encoder ms",
            "prompt path ms",
            "frame ms (text cached)",
            "frame ms (text encoded)",
            "instances",
            f"frame ms ({KEPT_INSTANCES} kept)",
            "peak MiB",
        ],
        [
            [
                r.mode,
                r.prompts,
                report.ms(r.image_ms / 1000),
                report.ms(r.text_ms / 1000),
                report.ms(r.prompt_path_ms / 1000),
                report.ms(r.frame_cached_ms / 1000),
                report.ms(r.frame_encoded_ms / 1000),
                r.instances,
                report.ms(r.frame_kept_ms / 1000),
                r.peak_mib,
            ]
            for r in rows
        ],
    )
    print(
        f"median of {settings.repeats} after {settings.warmup} warm-up call(s), "
        f"{Clock(settings.device).kind}. image encoder: the resized uint8 image (1008, 1008, 3) to image "
        "features, with the image-only prompt stages; text encoder: the prompts in one batch; prompt path: "
        "decode of all prompts against one image; frame: Sam3Segmenter, uint8 pixels in, "
        "instances in source pixels out, with the prompts' encodings cached (a steady prompt set, "
        "as the node runs) or encoded in the call; instances: how many the default threshold "
        "(0.5) kept, arbitrary with random weights; frame (N kept): text cached, threshold 0 and "
        "at most N instances, so N masks are made and cropped every frame (random masks are "
        "larger than real ones); peak MiB: device allocation peak over the row, weights "
        "included (CUDA only)."
    )


def documented_call(model: Any, processor: Any, image: np.ndarray, prompt: str) -> Any:
    """transformers' documented SAM 3 call: processor, model on the device, post-processing."""
    inputs = processor(images=image, text=prompt, return_tensors="pt").to(model.device, dtype=model.dtype)
    with torch.inference_mode():
        outputs = model(**inputs)
    return processor.post_process_instance_segmentation(
        outputs, threshold=0.5, mask_threshold=0.5, target_sizes=[image.shape[:2]]
    )


def reference_rows(
    settings: Settings, model: Any, tokenizer: Any, image: np.ndarray, ours: list[StageRow]
) -> None:
    """The documented usage (one call per prompt) timed per prompt count; ratios against ours."""
    from transformers import Sam3ImageProcessor, Sam3Processor

    processor = Sam3Processor(image_processor=Sam3ImageProcessor(), tokenizer=tokenizer)
    clock, memory = Clock(settings.device), Memory(settings.device)
    rows = []
    for row in (r for r in ours if r.prompts in settings.reference_counts):
        prompts = LATENCY_PROMPTS[: row.prompts]
        report.progress(f"documented usage: {row.prompts} prompt(s)")

        def every_prompt(prompts: list[str] = prompts) -> None:
            for prompt in prompts:
                documented_call(model, processor, image, prompt)

        memory.reset()
        reference_ms = clock.median(every_prompt, settings.reference_repeats, settings.reference_warmup)
        rows.append(
            [
                row.prompts,
                report.ms(reference_ms / 1000),
                report.ms(row.frame_encoded_ms / 1000),
                f"{reference_ms / row.frame_encoded_ms:.2f}x",
                report.ms(row.frame_cached_ms / 1000),
                f"{reference_ms / row.frame_cached_ms:.2f}x",
                memory.peak(),
                row.peak_mib,
            ]
        )
    dtype = str(model.dtype).removeprefix("torch.")
    report.title(f"model: transformers' documented usage vs ours (eager), {dtype}, same weights")
    report.table(
        [
            "prompts",
            "documented ms",
            "ours ms (text encoded)",
            "ratio",
            "ours ms (text cached)",
            "ratio (cached)",
            "documented peak MiB",
            "ours peak MiB",
        ],
        rows,
    )
    print(
        "documented: Sam3Processor(images, text) -> Sam3Model(**inputs) on the device in this "
        "dtype -> post_process_instance_segmentation, one call per prompt (each encodes the image "
        f"again); median of {settings.reference_repeats} after {settings.reference_warmup} warm-up "
        "call(s); ratio = documented / ours."
    )


def compiled_rows(
    settings: Settings,
    model: Any,
    tokenizer: Any,
    image: np.ndarray,
    eager: tuple[np.ndarray, np.ndarray],
    flops: float,
    outcome: Outcome,
) -> None:
    """``compile_image_encoder=True``: compile time, the stage table, agreement with eager."""
    from tt_sam3_ros.core import preprocess
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.engines.base import EngineError
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    try:
        engine = TorchEngine(model, tokenizer, device=str(settings.device), compile_image_encoder=True)
    except EngineError as error:
        report.title("model: compile_image_encoder=True")
        print(f"not run on {settings.device}: {error}")
        return
    report.progress("compiling the image encoder (torch.compile max-autotune; minutes)")
    start = time.perf_counter()
    try:
        engine.warmup()
    except Exception as error:  # a failed compile is a finding to print, not a crash
        report.title("model: compile_image_encoder=True")
        print(f"FAILED while compiling: {type(error).__name__}: {error}")
        outcome.failures.append("compile_image_encoder=True failed")
        return
    compile_s = time.perf_counter() - start
    segmenter = Sam3Segmenter(engine)
    rows = stage_rows(settings, segmenter, image, "compiled")
    pixels = preprocess.resize_to_model(image)
    decoded = engine.decode(engine.encode_image(pixels), engine.encode_prompts(scenes.PROMPTS))
    agreement, score_diff = compare(everything(engine, decoded), eager)
    print_stage_table(rows, settings, "model: ours with compile_image_encoder=True (torch.compile)")
    print(throughput_line(flops, rows))
    print(
        f"compile: first call (warm-up, includes torch.compile max-autotune) {compile_s:.1f} s; "
        f"compiled vs eager, {len(scenes.PROMPTS)} prompts, full size: mask pixel agreement "
        f"{agreement * 100:.3f}%, max score diff {score_diff:.2e}"
    )


def main(settings: Settings) -> list[str]:
    """Run the four parts; returns the failures (empty when everything ran within bounds)."""
    from tt_sam3_ros.core import preprocess
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.engines.torch_engine import TorchEngine
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3

    outcome = Outcome()
    start = time.perf_counter()
    if settings.device.type == "cuda":
        print(cuda_line(settings.device))
    tokenizer, tokenizer_name = clip_tokenizer_or_stand_in()
    correctness(settings, tokenizer, outcome)

    report.progress("building the model on the device")
    if settings.quick:
        model, image = build_tiny_sam3(seed=0), scenes.picture(240, 320)
    else:
        model, image = full_size_model(settings.device), scenes.picture(1008, 1008)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    engine = TorchEngine(model, tokenizer, device=str(settings.device))
    described = engine.describe()
    report.progress("eager warm-up")
    engine.warmup()
    segmenter = Sam3Segmenter(engine)
    rows = stage_rows(settings, segmenter, image, "eager")
    height, width = image.shape[:2]
    print_stage_table(
        rows,
        settings,
        f"model latency: {'tiny' if settings.quick else 'full-size'} SAM 3 ({params:.1f}M parameters, "
        f"random weights), {described['device']}, {described['dtype']}, image {width}x{height} "
        f"(model input 1008x1008), {tokenizer_name}",
    )
    flops = image_encoder_flops(model.config)
    print(throughput_line(flops, rows))
    eager_decoded = engine.decode(
        engine.encode_image(preprocess.resize_to_model(image)), engine.encode_prompts(scenes.PROMPTS)
    )
    eager = everything(engine, eager_decoded)
    del eager_decoded
    reference_rows(settings, model, tokenizer, image, rows)
    compiled_rows(settings, model, tokenizer, image, eager, flops, outcome)
    print(f"\nmodel latency check: {time.perf_counter() - start:.0f} s in all")
    return outcome.failures
