"""SAM 3 on a Tenstorrent Blackhole p150a through TT-NN: the image encoder on the chip, one trace per frame.

The engine is two parts, each replaceable:
- the image encoder on the chip (ttnn_model/image_encoder.py): patch embedding, the ViT blocks
  with window and global RoPE attention, the FPN neck and the geometry encoder's class token, as
  one metal trace replayed per frame; each frame's resized uint8 pixels are its only upload
  (cast, patchified, tilized and normalised inside the trace); it reads the four FPN maps back
  (the class token stays on the chip for a chip prompt path: the host prompt path makes its own);
- a prompt path (text encoder, geometry encoder, fusion encoder, decoder, heads), by default on
  the host: transformers' modules without the ViT, given the chip's maps wrapped (with the position
  encodings, computed once) in transformers' Sam3VisionEncoderOutput; ``prompt_path="chip"``
  puts the chip prompt path in its place.
The engine keeps no reference to the host's ViT once its weights are on the chip, and never
changes the caller's model: a prompt path in another dtype works on a copy of the prompt modules.

What overlaps in a stream of frames (``prefetch``, which Sam3Segmenter.segment_stream calls after
encode_image of frame N): frame N+1's upload, on command queue 1 into the image trace's staging
buffer, runs during frame N's image trace, prompt trace and reads on queue 0. What does not:
frame N+1's copy-in and image replay come after frame N's reads (that replay overwrites the
buffers frame N's prompt trace leaves for them), and the host's work on frame N's results
(post-processing) comes before frame N+1's replay is queued, so the chip waits for it.

``ttnn`` is an optional runtime dependency found in the environment (tt-metal's python_env
or Tenstorrent's container), never a pip requirement of this package; it is imported when
the engine is built, or injected (``ttnn_module=``), which is how tests run this engine on
the torch-backed emulator in test/support. This code was written against ttnn 0.81.1 and
has not yet run on a chip; see docs/blackhole.md and docs/device_validation.md.
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

import tt_sam3_ros.engines.ttnn_warmup as ttnn_warmup
from tt_sam3_ros.core.prompts import MAX_PROMPTS, check_max_prompts
from tt_sam3_ros.engines.base import TTNN_DTYPE_NAMES as DTYPE_NAMES
from tt_sam3_ros.engines.base import DecodedBatch, Engine, EngineError
from tt_sam3_ros.engines.ttnn_model import neck, prompt_check, stage_checks
from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig
from tt_sam3_ros.engines.ttnn_model.device import (
    COMMAND_QUEUES,
    DEFAULT_L1_SMALL,
    DEFAULT_TRACE_REGION,
    DISPATCH_MODES,
    WRITTEN_AGAINST_TTNN,
    BlackholeChips,
    find_mock_cluster,
    find_simulator,
    load_ttnn,
    open_blackhole,
    open_blackholes,
    ttnn_version,
)
from tt_sam3_ros.engines.ttnn_model.geometry_encoder import GeometryConfig
from tt_sam3_ros.engines.ttnn_model.image_encoder import GEOMETRY_PREFIX, ChipImageEncoder
from tt_sam3_ros.engines.ttnn_model.prompt_path import ChipPromptPath, sine_position
from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_geometry_encoder
from tt_sam3_ros.engines.ttnn_model.weights import HostWeight, fingerprint, prepare_neck, prepare_vit

__all__ = [
    "COMMAND_QUEUES",
    "DEFAULT_L1_SMALL",
    "DEFAULT_TRACE_REGION",
    "DISPATCH_MODES",
    "DTYPE_NAMES",
    "WRITTEN_AGAINST_TTNN",
    "BlackholeChips",
    "ChipImageEncoder",
    "PromptPath",
    "TtnnEngine",
    "host_prompt_path",
    "load_ttnn",
    "open_blackhole",
    "open_blackholes",
    "ttnn_version",
]

LOG = logging.getLogger(__name__)


class PromptPath(Protocol):
    """What the engine needs of a prompt path: the Engine methods after encode_image, plus
    ``image_features(vision)`` (its per-image state from Sam3VisionEncoderOutput) and the torch
    ``dtype`` it wants the FPN maps in."""

    dtype: torch.dtype

    def describe(self) -> dict[str, str]: ...
    def image_features(self, vision: Any) -> Any: ...
    def encode_prompts(self, prompts: list[str]) -> list[Any]: ...
    def decode(
        self, image_state: Any, prompt_states: list[Any], max_instances: int | None = None
    ) -> DecodedBatch: ...
    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray: ...
    def close(self) -> None: ...


def _without_vision_backbone(model: Any) -> Any:
    """A Sam3Model that shares every module of `model` except the ViT, which it does not hold.

    Shallow copies of the two container modules (their module tables copied, parameters
    shared): the caller's model is left as it was.
    """
    prompt_model = copy.copy(model)
    prompt_model._modules = dict(model._modules)
    vision = copy.copy(model.vision_encoder)
    vision._modules = dict(vision._modules)
    vision._modules["backbone"] = None
    prompt_model._modules["vision_encoder"] = vision
    return prompt_model


def host_prompt_path(model: Any, tokenizer: Any, dtype: str | None = None) -> PromptPath:
    """The prompt path on the host CPU: the torch engine over `model` without its ViT.

    The torch engine casts the model it is given; when `dtype` differs from the model's, it is
    given a copy of the prompt modules, so the caller's model keeps its dtype.
    """
    from tt_sam3_ros.engines.torch_engine import TorchEngine, resolve_dtype

    prompt_model = _without_vision_backbone(model)
    wanted = resolve_dtype(dtype, torch.device("cpu"))
    if any(p.dtype != wanted or p.device.type != "cpu" for p in prompt_model.parameters()):
        prompt_model = copy.deepcopy(prompt_model)
    return TorchEngine(prompt_model, tokenizer, device="cpu", dtype=dtype)


def _geometry_weights(model: Any, config: ImagePathConfig) -> dict[str, HostWeight]:
    """The geometry encoder's class-token weights, named "geometry.*", with the sine position
    encoding of the map it attends to (scale 1, the last one Sam3Model keeps)."""
    position = sine_position(model, neck.level_sides(config)[-2], config.fpn_dim)
    prepared = prepare_geometry_encoder(model.geometry_encoder, position)
    return {GEOMETRY_PREFIX + name: weight for name, weight in prepared.items()}


class TtnnEngine(Engine):
    """The image encoder on a p150a (one metal trace) composed with a prompt path (the host's by default).

    Args:
        model: transformers' Sam3Model (float32 weights; they are converted once). The engine
            keeps no reference to its ViT afterwards and does not modify it.
        tokenizer: the CLIP tokenizer the host prompt path uses.
        device_id: which chip to open.
        dtype: dtype of the host prompt path ("float32" default, "bfloat16").
        ttnn_module: the ttnn module to use (tests inject the emulator); None imports ttnn.
        mesh_shape: only (1, 1) is supported: one chip.
        weight_dtype: device dtype of matmul weights ("bfloat8_b" default, "bfloat16").
        param_dtype: device dtype of norms, biases, position terms ("bfloat16").
        weight_cache: directory for converted weights (a restart skips the conversion); None: no cache.
        use_trace: replay one captured trace per frame (default) or run the ops eagerly (debugging);
            off on a simulated chip (TT_METAL_SIMULATOR set: device.find_simulator), which runs
            slow dispatch with one command queue, and on a mock cluster (TT_METAL_MOCK_CLUSTER_DESC_PATH
            set: device.find_mock_cluster), where ttnn 0.81.1 segfaults in trace capture.
        dispatch: "auto" (default: Ethernet dispatch when the installed build can open it, else
            worker, tt-metal's Blackhole default), "worker", or "ethernet" (tried, with a fallback
            to worker dispatch); see open_blackhole.
        prompt_path: "host" (default: host_prompt_path(model, tokenizer, dtype)), "chip" (the
            ported stages on the chip, the rest on the host: ttnn_model/prompt_path.py), "auto"
            (the chip's when its warm-up check passes, else the host's: prompt_check.py; the
            verdict is in prompt_path_status and describe()), or a PromptPath object.
        max_prompts: the most prompts one decode takes, 1..16 (the chip prompt path compiles one
            trace per prompt-count bucket 1, 2, 4, ... up to it at warm-up, so a smaller value
            starts faster and holds less of the trace region).
        max_instances: the chip prompt path's k, queries kept per prompt by the on-device top-k
            (None: ttnn_model.prompt_path.KEPT_QUERIES); give the largest max_instances the
            segmenter will be called with: a call asking for more reads every query back.
        chips: with several engines in one process, one per chip, the same BlackholeChips for
            all of them: the chips are opened together (its sizes and dispatch, not this
            engine's), so each engine's close leaves the others serving. None: this engine
            opens its chip on its own (one chip per process).
    """

    name = "ttnn"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device_id: int = 0,
        dtype: str | None = None,
        *,
        ttnn_module: Any = None,
        mesh_shape: tuple[int, int] = (1, 1),
        weight_dtype: str = "bfloat8_b",
        param_dtype: str = "bfloat16",
        weight_cache: str | Path | None = None,
        use_trace: bool = True,
        l1_small_size: int = DEFAULT_L1_SMALL,
        trace_region_size: int = DEFAULT_TRACE_REGION,
        dispatch: str = "auto",
        prompt_path: PromptPath | str = "host",
        max_prompts: int = MAX_PROMPTS,
        max_instances: int | None = None,
        chips: BlackholeChips | None = None,
    ) -> None:
        if tuple(mesh_shape) != (1, 1):
            raise EngineError(
                f"mesh shape {tuple(mesh_shape)} is not supported: the ttnn engine drives one chip (1x1)"
            )
        for label, value in (("weight_dtype", weight_dtype), ("param_dtype", param_dtype)):
            if value not in DTYPE_NAMES:
                raise EngineError(f"{label} {value!r} is not one of {', '.join(DTYPE_NAMES)}")
        if dispatch not in DISPATCH_MODES:
            raise EngineError(f"dispatch {dispatch!r} is not one of {', '.join(DISPATCH_MODES)}")
        #: The most prompts one decode takes (the segmenter refuses more before any work).
        self.max_prompts = check_max_prompts(max_prompts)
        self.ttnn = ttnn = load_ttnn(ttnn_module)
        self.version = ttnn_version(ttnn)
        if not self.version.startswith(WRITTEN_AGAINST_TTNN):
            LOG.warning(
                "ttnn %s found; this engine was written and checked against ttnn %s",
                self.version,
                WRITTEN_AGAINST_TTNN,
            )
        self.config = ImagePathConfig.from_hf(model.config.vision_config)
        #: The simulated chip tt-metal opens instead of a real one (TT_METAL_SIMULATOR), or None.
        self.simulator = find_simulator()
        if self.simulator is not None and chips is not None:
            raise EngineError(
                f"TT_METAL_SIMULATOR is set ({self.simulator}): the simulator is one chip; open it without "
                "chips (devices), or unset TT_METAL_SIMULATOR to open the real chips"
            )
        if self.simulator is not None and use_trace:
            use_trace = False
            LOG.info("simulated Blackhole at %s: no trace (slow dispatch cannot capture one)", self.simulator)
        #: The mock cluster descriptor tt-metal opens instead of chips (find_mock_cluster), or None.
        self.mock_cluster = find_mock_cluster()
        if self.mock_cluster is not None and use_trace:
            use_trace = False
            LOG.warning(
                "mock Blackhole cluster %s: no trace (ttnn 0.81.1 segfaults in wait_for_event and trace "
                "capture on a mock); nothing computes, every output reads back as zeros",
                self.mock_cluster,
            )
        self.device_id = device_id
        self._weight_dtype_name = weight_dtype
        self._closed = False
        self.prompt_path: PromptPath | None = None
        #: How frames go up: uint8, cast on the chip, unless warm-up's check of that cast fails
        #: (then bfloat16 from the host); describe()'s "input" says which and why.
        self._input_dtype = "uint8"
        self.input_status = "uint8 upload, cast on the chip"
        self._input_checked = False
        self._stages_checked = False
        #: Warm-up's verdict per risky stage (stage_checks.py), in the order they ran: the input
        #: upload, the convs, top-k, GroupNorm, the whole prompt path.
        self.stage_checks: dict[str, stage_checks.StageCheck] = {}
        #: Which prompt path serves and why, in words (describe()'s "prompt_path").
        self.prompt_path_status = prompt_path if isinstance(prompt_path, str) else "given"
        self._auto_pending = prompt_path == "auto"
        # The frame prefetch() staged (the caller's array, and its host tensor kept alive until
        # the upload is consumed): the next encode_image of that array replays without uploading.
        self._prefetched: tuple[np.ndarray, Any] | None = None
        host_weights = prepare_vit(model.vision_encoder.backbone, self.config)
        host_weights.update(prepare_neck(model.vision_encoder.neck, self.config))
        host_weights.update(_geometry_weights(model, self.config))
        cache_dir = None
        if weight_cache is not None:
            key = fingerprint(host_weights, {"matmul": weight_dtype, "param": param_dtype})
            cache_dir = Path(weight_cache) / key
        dtypes = {"bfloat8_b": ttnn.bfloat8_b, "bfloat16": ttnn.bfloat16, "float32": ttnn.float32}
        self.image_encoder = ChipImageEncoder.open(
            ttnn,
            self.config,
            device_id,
            l1_small_size,
            trace_region_size,
            dispatch,
            chips=chips,
            simulator=self.simulator,
            matmul_dtype=dtypes[weight_dtype],
            param_dtype=dtypes[param_dtype],
            use_trace=use_trace,
            geometry=GeometryConfig.from_module(model.geometry_encoder),
        )
        try:
            self._check_single_chip()
            self.image_encoder.upload(host_weights, cache_dir)
            del host_weights  # the chip holds the image path now; nothing here keeps the host's ViT
            self.prompt_path = self._prompt_path(
                prompt_path, model, tokenizer, dtype, max_prompts, max_instances
            )
            self._position_encodings = self._neck_position_encodings(model)
        except BaseException:
            self.close()
            raise

    def _prompt_path(
        self,
        choice: PromptPath | str,
        model: Any,
        tokenizer: Any,
        dtype: str | None,
        max_prompts: int,
        max_instances: int | None,
    ) -> PromptPath:
        if not isinstance(choice, str):
            return choice
        if choice == "host":
            return host_prompt_path(model, tokenizer, dtype)
        if choice in ("chip", "auto"):
            host = host_prompt_path(model, tokenizer, "float32")
            return ChipPromptPath(self.ttnn, self.image_encoder, model, host, max_prompts, max_instances)
        raise EngineError(f"prompt_path {choice!r} is not one of auto, host, chip, or a PromptPath")

    # the parts, for tests and tools --------------------------------------------------------------
    @property
    def device(self) -> Any:
        return self.image_encoder.device

    @property
    def dispatch(self) -> str:
        return self.image_encoder.dispatch

    @property
    def settings(self) -> Any:
        return self.image_encoder.settings

    @property
    def weights(self) -> dict[str, Any]:
        return self.image_encoder.weights

    @property
    def _trace(self) -> Any:
        return self.image_encoder._trace

    # Engine interface ---------------------------------------------------------------------------
    def describe(self) -> dict[str, str]:
        """Engine, chip, grid and dtypes in words."""
        x, y = self.settings.grid
        emulated = " (emulated)" if getattr(self.ttnn, "IS_EMULATOR", False) else ""
        if self.simulator is not None:
            emulated += f" (simulated: {self.simulator}, no trace)"
        if self.mock_cluster is not None:
            emulated += f" (mock: {self.mock_cluster}, no trace)"
        prompt = self._require_prompt_path().describe()
        return {
            "engine": self.name,
            "device": f"Blackhole p150a {self.device_id}{emulated}, {x}x{y} compute grid, "
            f"{self.dispatch} dispatch, {self.image_encoder.command_queues} command queues",
            "dtype": f"image path: {self._weight_dtype_name} weights, bfloat16 activations; "
            f"prompt path on {prompt['device'].split(' ')[0]} ({prompt['dtype']})",
            "input": self.input_status,
            **{
                stage: check.reason
                for stage, check in self.stage_checks.items()
                if stage not in ("input", "prompt_path")
            },
            "prompt_path": self.prompt_path_status,
            "ttnn": self.version,
        }

    def encode_image(self, image: np.ndarray) -> Any:
        """uint8 (S, S, 3) resized RGB -> the prompt path's per-image state.

        The chip runs the image path (encode_vision); the prompt path derives its per-image
        state from the features read back.
        """
        outputs = self._run_image_path(image)
        path = self._require_prompt_path()
        if getattr(path, "reads_device_levels", False):
            return path.image_features(outputs)  # nothing read back: the prompt path runs on the chip
        return path.image_features(self._vision_output(outputs))

    def prefetch(self, image: np.ndarray) -> None:
        """Upload the next frame while the current one is in flight (see Engine.prefetch).

        The upload goes on command queue 1 into the image trace's staging buffer (trace.py): it
        waits only for the current frame's copy out of that buffer, which queue 0 ran before the
        current frame's image trace, and it touches neither the trace's input nor any trace's
        outputs, so the current frame's image and prompt traces run on meanwhile. The next
        encode_image of this same array then only replays (queue 0 waits for the upload, copies
        it in, replays); its replay comes after everything the current frame queued, the reads
        of its prompt trace included, since the caller reads those first. Another array in the
        next call is uploaded as usual over the staged one. With one command queue the upload
        goes on queue 0 behind the current frame's work (correct, no overlap); without a
        captured trace (eager mode, before warm-up) this does nothing.
        """
        self._require_open()
        self._prefetched = None
        encoder = self.image_encoder
        if not (encoder.use_trace and encoder.captured):
            return
        host_input = self._host_input(image)
        encoder.stage(host_input)
        self._prefetched = (image, host_input)

    def encode_vision(self, image: np.ndarray) -> Any:
        """uint8 (S, S, 3) resized RGB -> transformers' Sam3VisionEncoderOutput on the host.

        fpn_hidden_states: 4 maps (1, fpn_dim, side, side) for sides 4g, 2g, g, g/2 (g = S/14),
        read back from the chip; fpn_position_encoding: the matching sine encodings (computed
        once); last_hidden_state is not read back (nothing downstream uses it, and it would cost
        a 10 MB device read per frame).
        """
        return self._vision_output(self._run_image_path(image))

    def _run_image_path(self, image: np.ndarray) -> list[Any]:
        """One replay of the image trace: its outputs as device tensors (the four FPN maps, then the
        class token), valid until the next replay. A frame prefetch() staged is only replayed."""
        self._require_open()
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] is image and self.image_encoder.captured:
            return self.image_encoder.replay()
        return self.image_encoder.run(self._host_input(image))

    def _vision_output(self, outputs: list[Any]) -> Any:
        """The device maps read back as transformers' Sam3VisionEncoderOutput (the image trace's
        outputs after them, the class token, stay on the chip)."""
        from transformers.models.sam3.modeling_sam3 import Sam3VisionEncoderOutput

        sides = neck.level_sides(self.config)
        features = tuple(
            self._read_level(tensor, level_side)
            for tensor, level_side in zip(outputs[: len(sides)], sides, strict=True)
        )
        return Sam3VisionEncoderOutput(
            last_hidden_state=None, fpn_hidden_states=features, fpn_position_encoding=self._position_encodings
        )

    def encode_prompts(self, prompts: list[str]) -> list[Any]:
        """Text encoder on the prompt path (the host's by default)."""
        return self._require_prompt_path().encode_prompts(prompts)

    @property
    def takes_exemplars(self) -> bool:
        """On both built-in prompt paths (a given PromptPath: when it has encode_exemplars)."""
        return hasattr(self.prompt_path, "encode_exemplars")

    def encode_exemplars(
        self, image_state: Any, boxes: list[np.ndarray], labels: list[np.ndarray]
    ) -> list[Any]:
        """Exemplar boxes through the geometry encoder on the host, over the scale-1 FPN map the
        chip computed: the host prompt path has every map read back already; the chip prompt path
        reads that one map back on this frame (ttnn_model/prompt_path.py)."""
        encode = getattr(self._require_prompt_path(), "encode_exemplars", None)
        if encode is None:
            raise EngineError("exemplar boxes need a prompt path with the geometry encoder's box path")
        return encode(image_state, boxes, labels)

    def decode(
        self,
        image_state: Any,
        prompt_states: list[Any],
        max_instances: int | None = None,
        exemplars: list[Any] | None = None,
    ) -> DecodedBatch:
        """The prompt path over the chip's image features (max_instances, exemplars: see Engine.decode)."""
        path = self._require_prompt_path()
        if exemplars is None:
            return path.decode(image_state, prompt_states, max_instances)
        return path.decode(image_state, prompt_states, max_instances, exemplars=exemplars)

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        return self._require_prompt_path().fetch_masks(decoded, prompt_index, query_index)

    def warmup(self) -> None:
        """Compile, capture the image trace and run the whole path once, so frame 1 costs what frame 100 does.

        Call before serving: the node reports ready only after it.
        """
        if not self._input_checked and not self.image_encoder.captured:
            self.check_input_upload()
        if not self._stages_checked and not self.image_encoder.captured:
            self.check_stages()
        self.compile_prompt_path()
        pixels = self.warmup_image_path()
        if self._auto_pending:
            self.choose_prompt_path()
        # one instance: a chip prompt path reads back its kept rows only, as on most frames
        decoded = self.decode(self.encode_image(pixels), self.encode_prompts(["object"]), max_instances=1)
        self.fetch_masks(decoded, np.array([0]), np.array([int(np.argmax(decoded.logits[0]))]))

    def check_input_upload(self) -> bool:
        """Before anything is compiled or captured: upload one frame as uint8, cast it to
        bfloat16 on the chip and read it back (ttnn_warmup.check_input_upload). Any difference,
        or an error, means the chip's uint8 path cannot be trusted: frames then go up as
        bfloat16 from the host (twice the bytes, the same values), with the reason in
        describe()'s "input" and the log. Returns whether it passed."""
        self._input_checked = True
        check = ttnn_warmup.check_input_upload(self.ttnn, self.device, self.settings.memory, self.config)
        if not check.passed:
            self._input_dtype = "bfloat16"
        self.input_status = check.reason
        self.stage_checks["input"] = check
        return check.passed

    def check_stages(self) -> list[stage_checks.StageCheck]:
        """Before anything is compiled or captured: each risky stage on the chip against the host
        on inputs from the check frame, falling back per stage (ttnn_warmup.check_stages): the
        neck's convs, and with a chip prompt path its top-k, GroupNorm and pixel-decoder convs.
        Each verdict goes to the log, describe() and stage_checks; returns them."""
        self._require_open()
        self._stages_checked = True
        checks = ttnn_warmup.check_stages(
            self.ttnn, self.device, self.settings, self.image_encoder, self.config, self.prompt_path
        )
        self.stage_checks.update((check.stage, check) for check in checks)
        return checks

    def choose_prompt_path(self) -> prompt_check.PromptPathCheck:
        """prompt_path="auto": check the chip prompt path against the host's on one frame and
        keep it when it passes, else serve the host's (the chip path's device buffers freed;
        ttnn_warmup.choose_prompt_path). Needs the image path warmed up (warmup_image_path) and
        the chip path compiled."""
        chip = self._require_prompt_path()
        if not isinstance(chip, ChipPromptPath):
            raise EngineError("choose_prompt_path needs the chip prompt path (prompt_path 'auto')")
        outputs = self._run_image_path(prompt_check.check_frame(self.config.image_side))
        choice = ttnn_warmup.choose_prompt_path(chip, outputs, self._vision_output(outputs))
        self._auto_pending = False
        self.stage_checks["prompt_path"] = choice.check
        self.prompt_path_status = choice.status
        if choice.serves is not chip:
            self.prompt_path = choice.serves
            chip.release_device()
        return choice.verdict

    def compile_prompt_path(self) -> None:
        """Before the image trace is captured, compile every program the chip prompt path can
        run (one eager pass per prompt-count bucket on an eager image): a program compiled after
        a capture may sit where its replay writes. Nothing to do for a host prompt path."""
        path = self._require_prompt_path()
        if not getattr(path, "reads_device_levels", False) or self.image_encoder.captured:
            return
        side = self.config.image_side
        started = time.perf_counter()
        outputs = self.image_encoder.run_eager(self._host_input(np.zeros((side, side, 3), np.uint8)))
        path.compile(path.image_features(outputs))
        buckets = ", ".join(str(bucket) for bucket in getattr(path, "buckets", ()))
        LOG.info(
            "chip prompt path compiled for prompt buckets %s (max_prompts %d), keeping the %d best "
            "queries per prompt on the chip, in %.1f s",
            buckets,
            self.max_prompts,
            getattr(path, "kept", 0),
            time.perf_counter() - started,
        )

    def warmup_image_path(self) -> np.ndarray:
        """The chip's part of warmup: compile every program and capture the trace (on a grey image,
        which it returns), then replay it once."""
        self._require_open()
        side = self.config.image_side
        image = np.full((side, side, 3), 128, dtype=np.uint8)
        if self.image_encoder.use_trace and not self.image_encoder.captured:
            self.image_encoder.capture(self._host_input(image))
        self.encode_vision(image)
        return image

    def close(self) -> None:
        """Release the prompt path (its device buffers first), then the chip (trace, buffers,
        device); idempotent, and the chip is released even when closing the prompt path fails."""
        if self._closed:
            return
        self._closed = True
        self._prefetched = None
        try:
            if self.prompt_path is not None:
                self.prompt_path.close()
        finally:
            encoder = getattr(self, "image_encoder", None)
            if encoder is not None:
                encoder.close()

    def __enter__(self) -> TtnnEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals ----------------------------------------------------------------------------------
    def _require_open(self) -> None:
        if self._closed or self.image_encoder.closed:
            raise EngineError("the ttnn engine is closed")

    def _require_prompt_path(self) -> PromptPath:
        self._require_open()
        assert self.prompt_path is not None
        return self.prompt_path

    def _check_single_chip(self) -> None:
        count = self.device.get_num_devices() if hasattr(self.device, "get_num_devices") else 1
        if count != 1:
            raise EngineError(f"the opened device spans {count} chips; the ttnn engine drives one chip (1x1)")

    def _host_input(self, image: np.ndarray) -> Any:
        """uint8 (S, S, 3) pixels -> the host uint8 ROW_MAJOR tensor (1, S, 3*S) the trace's input takes.

        The same bytes, reshaped without a copy: the cast, the patching into window order, the
        tilize and the normalisation all run on the chip (vit.vit_embeddings), so the host's work
        per frame is the resize and this wrapping; benchmarks/blackhole/blackhole_host.py times it.
        """
        side = self.config.image_side
        if image.shape != (side, side, 3) or image.dtype != np.uint8:
            raise EngineError(f"image must be uint8 ({side}, {side}, 3), got {image.dtype} {image.shape}")
        pixels = torch.from_numpy(np.ascontiguousarray(image)).reshape(self.config.input_shape)
        if self._input_dtype == "bfloat16":  # the fallback: check_input_upload
            return self.ttnn.from_torch(
                pixels.to(torch.bfloat16), dtype=self.ttnn.bfloat16, layout=self.ttnn.ROW_MAJOR_LAYOUT
            )
        return self.ttnn.from_torch(pixels, dtype=self.ttnn.uint8, layout=self.ttnn.ROW_MAJOR_LAYOUT)

    def _read_level(self, tensor: Any, side: int) -> torch.Tensor:
        """(1, 1, side^2, F) device map -> (1, F, side, side) host tensor in the prompt path's dtype."""
        values = self.ttnn.to_torch(tensor).reshape(1, side, side, self.config.fpn_dim)
        return values.permute(0, 3, 1, 2).to(self._require_prompt_path().dtype).contiguous()

    def _neck_position_encodings(self, model: Any) -> tuple[torch.Tensor, ...]:
        """Sine position encodings of each FPN map: they depend only on the shape, so once."""
        encoding = model.vision_encoder.neck.position_encoding
        dtype = self._require_prompt_path().dtype
        with torch.no_grad():
            return tuple(
                encoding((1, self.config.fpn_dim, side, side), torch.device("cpu"), dtype)
                for side in neck.level_sides(self.config)
            )
