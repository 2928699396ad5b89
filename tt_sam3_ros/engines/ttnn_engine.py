"""SAM 3 on a Tenstorrent Blackhole p150a through TT-NN: the image path on the chip, one trace per frame.

Part 1 of the Blackhole engine. The image path (patch embedding, the ViT blocks with window
and global RoPE attention, the FPN neck) runs on the chip as one metal trace replayed per
frame. The prompt path (text encoder, geometry encoder, fusion encoder, decoder, heads) still
runs on the host: this engine reads the four FPN maps back, wraps them (with the position
encodings, computed once) in transformers' Sam3VisionEncoderOutput and hands them to a
TorchEngine built over the same Sam3Model, which does encode_prompts, decode and fetch_masks.

``ttnn`` is an optional runtime dependency found in the environment (tt-metal's python_env
or Tenstorrent's container), never a pip requirement of this package; it is imported when
the engine is built, or injected (``ttnn_module=``), which is how tests run this engine on
the torch-backed emulator in test/support. This code was written against ttnn 0.81.1 and
has not yet run on a chip; see README.md ("The Blackhole (ttnn) engine") and DEVICE_VALIDATION.md.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .base import DecodedBatch, EngineError
from .ttnn_model import neck, vit
from .ttnn_model.config import ImagePathConfig, device_settings, patchify
from .ttnn_model.trace import TracedImagePath
from .ttnn_model.weights import fingerprint, prepare_neck, prepare_vit, upload

LOG = logging.getLogger(__name__)

#: The ttnn release this engine's calls were checked against (tools/ttnn_conformance.py).
WRITTEN_AGAINST_TTNN = "0.81.1"
#: Device memory for the captured command stream of the image path. Not yet measured on a
#: chip: DEVICE_VALIDATION.md asks for the size the capture reports.
DEFAULT_TRACE_REGION = 64 * 1024 * 1024
#: L1 reserved for conv2d's halo and config tensors.
DEFAULT_L1_SMALL = 32 * 1024
_DTYPE_NAMES = ("bfloat8_b", "bfloat16", "float32")
#: How the chip is opened: "worker" (tt-metal's Blackhole default) or "ethernet" (asked for).
DISPATCH_MODES = ("worker", "ethernet")


def load_ttnn(ttnn_module: Any = None) -> Any:
    """The injected module, else the environment's ttnn, with an actionable error if absent."""
    if ttnn_module is not None:
        return ttnn_module
    try:
        return importlib.import_module("ttnn")
    except ImportError as error:
        raise EngineError(
            "the ttnn engine needs TT-NN, which comes with tt-metal (activate its python_env or use "
            f"Tenstorrent's container); it is not a pip dependency of tt_sam3_ros: {error}"
        ) from error


def ttnn_version(ttnn: Any) -> str:
    """Installed ttnn version: package metadata, else the module's __version__, else 'unknown'."""
    version = getattr(ttnn, "__version__", None)
    if version:
        return str(version)
    try:
        return importlib.metadata.version("ttnn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def open_blackhole(
    ttnn: Any, device_id: int, l1_small_size: int, trace_region_size: int, dispatch: str = "worker"
) -> tuple[Any, str]:
    """Open one chip as current tt-metal supports it; returns (device, dispatch used).

    "worker": no dispatch arguments, so tt-metal picks its Blackhole default (worker cores on a
    column dispatch), which is how Tenstorrent's own SAM 3 demo opens the chip. "ethernet" is
    tried only when asked for: current Blackhole builds cannot open it (their Ethernet-dispatch
    core descriptor lists more cores than the chip has), and when it fails the chip is opened
    with worker dispatch in the same process, with a warning (the real library allows that
    retry on a mock p150a; DEVICE_VALIDATION.md asks a chip owner to confirm it on a chip).
    The compute grid is never assumed: callers read it from the opened device. When no open
    works, the error names the likely causes: no chip, or one held by another process.
    """
    if dispatch not in DISPATCH_MODES:
        raise EngineError(f"dispatch {dispatch!r} is not one of {', '.join(DISPATCH_MODES)}")
    sizes = dict(device_id=device_id, l1_small_size=l1_small_size, trace_region_size=trace_region_size)
    failures = []
    if dispatch == "ethernet":
        try:
            eth = ttnn.DispatchCoreConfig(type=ttnn.DispatchCoreType.ETH)
            return ttnn.open_device(**sizes, dispatch_core_config=eth), "ethernet"
        except Exception as error:
            failures.append(f"ethernet dispatch: {error}")
            LOG.warning("Ethernet dispatch did not open (%s); retrying with worker dispatch", error)
    try:
        return ttnn.open_device(**sizes), "worker"
    except Exception as error:
        failures.append(f"worker dispatch: {error}")
    raise EngineError(
        f"cannot open Blackhole chip {device_id}: it is absent, or held by another process (one process owns "
        f"a chip; check `tt-smi` and stop the other user). Details: {'; '.join(failures)}"
    )


class TtnnEngine:
    """Image path on a p150a (one metal trace); prompt path on the host through a TorchEngine.

    Args:
        model: transformers' Sam3Model (float32 weights; they are converted once).
        tokenizer: the CLIP tokenizer the torch prompt path uses.
        device_id: which chip to open.
        dtype: dtype of the host prompt path ("float32" default, "bfloat16").
        ttnn_module: the ttnn module to use (tests inject the emulator); None imports ttnn.
        mesh_shape: only (1, 1) is supported: one chip.
        weight_dtype: device dtype of matmul weights ("bfloat8_b" default, "bfloat16").
        param_dtype: device dtype of norms, biases, position terms ("bfloat16").
        weight_cache: directory for converted weights (a restart skips the conversion); None: no cache.
        use_trace: replay one captured trace per frame (default) or run the ops eagerly (debugging).
        dispatch: "worker" (default, tt-metal's Blackhole default) or "ethernet" (tried, with a
            fallback to worker dispatch; see open_blackhole).
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
        dispatch: str = "worker",
    ) -> None:
        if tuple(mesh_shape) != (1, 1):
            raise EngineError(
                f"mesh shape {tuple(mesh_shape)} is not supported: the ttnn engine drives one chip (1x1)"
            )
        for label, value in (("weight_dtype", weight_dtype), ("param_dtype", param_dtype)):
            if value not in _DTYPE_NAMES:
                raise EngineError(f"{label} {value!r} is not one of {', '.join(_DTYPE_NAMES)}")
        if dispatch not in DISPATCH_MODES:
            raise EngineError(f"dispatch {dispatch!r} is not one of {', '.join(DISPATCH_MODES)}")
        self.ttnn = ttnn = load_ttnn(ttnn_module)
        self.version = ttnn_version(ttnn)
        if not self.version.startswith(WRITTEN_AGAINST_TTNN):
            LOG.warning(
                "ttnn %s found; this engine was written and checked against ttnn %s",
                self.version,
                WRITTEN_AGAINST_TTNN,
            )
        self.config = ImagePathConfig.from_hf(model.config.vision_config)
        self.use_trace = use_trace
        self._weight_dtype_name = weight_dtype
        dtypes = {"bfloat8_b": ttnn.bfloat8_b, "bfloat16": ttnn.bfloat16, "float32": ttnn.float32}
        self._matmul_dtype = dtypes[weight_dtype]
        self._param_dtype = dtypes[param_dtype]
        self.device: Any = None
        self.weights: dict[str, Any] = {}
        self._conv_weights: dict[str, Any] = {}
        self._trace: TracedImagePath | None = None
        self._eager_outputs: list[Any] = []
        self._closed = False
        host_weights = prepare_vit(model.vision_encoder.backbone, self.config)
        host_weights.update(prepare_neck(model.vision_encoder.neck, self.config))
        cache_dir = None
        if weight_cache is not None:
            key = fingerprint(host_weights, {"matmul": weight_dtype, "param": param_dtype})
            cache_dir = Path(weight_cache) / key
        self.device, self.dispatch = open_blackhole(
            ttnn, device_id, l1_small_size, trace_region_size, dispatch
        )
        self.device_id = device_id
        try:
            self._check_single_chip()
            self.settings = device_settings(ttnn, self.device)
            LOG.info(
                "Blackhole chip %d open: %s dispatch, %dx%d compute grid",
                device_id,
                self.dispatch,
                *self.settings.grid,
            )
            self.weights = upload(
                ttnn, self.device, host_weights, self._matmul_dtype, self._param_dtype, cache_dir
            )
            from .torch_engine import TorchEngine

            self.prompt_engine = TorchEngine(model, tokenizer, device="cpu", dtype=dtype)
            self._position_encodings = self._neck_position_encodings(model)
        except BaseException:
            self.close()
            raise

    # Engine interface ---------------------------------------------------------------------------
    def describe(self) -> dict[str, str]:
        """Engine, chip, grid and dtypes in words."""
        x, y = self.settings.grid
        emulated = " (emulated)" if getattr(self.ttnn, "IS_EMULATOR", False) else ""
        return {
            "engine": self.name,
            "device": f"Blackhole p150a {self.device_id}{emulated}, {x}x{y} compute grid, "
            f"{self.dispatch} dispatch",
            "dtype": f"image path: {self._weight_dtype_name} weights, bfloat16 activations; "
            f"prompt path on host ({self.prompt_engine.describe()['dtype']})",
            "ttnn": self.version,
        }

    def encode_image(self, pixel_values: np.ndarray) -> Any:
        """float32 (1, 3, S, S) normalised pixels -> the host prompt path's per-image state.

        The chip runs the image path (encode_vision); the prompt engine derives its per-image
        state from the features read back (_host_image_state).
        """
        return self._host_image_state(self.encode_vision(pixel_values))

    def encode_vision(self, pixel_values: np.ndarray) -> Any:
        """float32 (1, 3, S, S) normalised pixels -> transformers' Sam3VisionEncoderOutput on the host.

        fpn_hidden_states: 4 maps (1, fpn_dim, side, side) for sides 4g, 2g, g, g/2 (g = S/14),
        read back from the chip; fpn_position_encoding: the matching sine encodings (computed
        once); last_hidden_state is not read back (nothing downstream uses it, and it would cost
        a 10 MB device read per frame).
        """
        from transformers.models.sam3.modeling_sam3 import Sam3VisionEncoderOutput

        self._require_open()
        side = self.config.image_side
        if pixel_values.shape != (1, 3, side, side):
            raise EngineError(f"pixel_values must be (1, 3, {side}, {side}), got {pixel_values.shape}")
        host_input = self._host_input(pixel_values)
        if self.use_trace:
            if self._trace is None or not self._trace.captured:
                LOG.warning("image trace captured on the first frame: call warmup() before serving")
                self._capture(host_input)
            outputs = self._trace.run(host_input)
        else:
            for tensor in self._eager_outputs:
                self.ttnn.deallocate(tensor)
            patches = self.ttnn.to_device(host_input, self.device, memory_config=self.ttnn.DRAM_MEMORY_CONFIG)
            self._eager_outputs = outputs = self._forward(patches)
            self.ttnn.deallocate(patches)
        features = tuple(
            self._read_level(tensor, level_side)
            for tensor, level_side in zip(outputs, neck.level_sides(self.config), strict=True)
        )
        return Sam3VisionEncoderOutput(
            last_hidden_state=None, fpn_hidden_states=features, fpn_position_encoding=self._position_encodings
        )

    def encode_prompts(self, prompts: list[str]) -> list[Any]:
        """Text encoder on the host (part 2 moves it to the chip)."""
        return self.prompt_engine.encode_prompts(prompts)

    def decode(self, image_state: Any, prompt_states: list[Any]) -> DecodedBatch:
        """Prompt path on the host over the chip's image features."""
        return self.prompt_engine.decode(image_state, prompt_states)

    def fetch_masks(
        self, decoded: DecodedBatch, prompt_index: np.ndarray, query_index: np.ndarray
    ) -> np.ndarray:
        return self.prompt_engine.fetch_masks(decoded, prompt_index, query_index)

    def warmup(self) -> None:
        """Compile, capture the image trace and run the whole path once, so frame 1 costs what frame 100 does.

        Call before serving: the node reports ready only after it.
        """
        pixels = self.warmup_image_path()
        decoded = self.decode(self.encode_image(pixels), self.encode_prompts(["object"]))
        self.fetch_masks(decoded, np.array([0]), np.array([0]))

    def warmup_image_path(self) -> np.ndarray:
        """The chip's part of warmup: compile every program and capture the trace (on a grey image,
        which it returns), then replay it once."""
        self._require_open()
        side = self.config.image_side
        pixels = np.zeros((1, 3, side, side), dtype=np.float32)
        if self.use_trace and (self._trace is None or not self._trace.captured):
            self._capture(self._host_input(pixels))
        self.encode_vision(pixels)
        return pixels

    def close(self) -> None:
        """Release the trace, every device buffer, then the chip; idempotent, and closes the chip even
        when a release step fails."""
        if self._closed:
            return
        self._closed = True
        ttnn = self.ttnn
        try:
            if self._trace is not None:
                self._trace.release()
            for tensor in [
                *self._eager_outputs,
                *self.weights.values(),
                *(t for pair in self._conv_weights.values() for t in pair if t is not None),
            ]:
                if self._on_device(tensor):
                    ttnn.deallocate(tensor)
        finally:
            self._trace = None
            self._eager_outputs, self.weights, self._conv_weights = [], {}, {}
            if self.device is not None:
                ttnn.close_device(self.device)
                self.device = None
            engine = getattr(self, "prompt_engine", None)
            if engine is not None:
                engine.close()

    def __enter__(self) -> TtnnEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals ----------------------------------------------------------------------------------
    def _require_open(self) -> None:
        if self._closed or self.device is None:
            raise EngineError("the ttnn engine is closed")

    def _check_single_chip(self) -> None:
        count = self.device.get_num_devices() if hasattr(self.device, "get_num_devices") else 1
        if count != 1:
            raise EngineError(f"the opened device spans {count} chips; the ttnn engine drives one chip (1x1)")

    @staticmethod
    def _on_device(tensor: Any) -> bool:
        return tensor is not None and tensor.device() is not None

    def _host_input(self, pixel_values: np.ndarray) -> Any:
        """Pixels -> host bfloat16 TILE tensor (1, 1, tokens, 3*p*p) of window-ordered patches."""
        pixels = torch.from_numpy(np.ascontiguousarray(pixel_values, dtype=np.float32))[0]
        return self.ttnn.from_torch(
            patchify(pixels, self.config), dtype=self.ttnn.bfloat16, layout=self.ttnn.TILE_LAYOUT
        )

    def _forward(self, patches: Any) -> list[Any]:
        """The image path on the device: patches buffer -> 4 FPN maps; leaves `patches` allocated."""
        trunk = vit.sam3_vit_model(self.ttnn, patches, self.weights, self.config, self.settings)
        return neck.sam3_vision_neck(
            self.ttnn,
            self.device,
            trunk,
            self.weights,
            self.config,
            self.settings,
            self._conv_weights,
            self._matmul_dtype,
        )

    def _capture(self, host_input: Any) -> None:
        if self._trace is None:
            shape = (1, 1, self.config.tokens, self.config.patch_features)
            self._trace = TracedImagePath(self.ttnn, self.device, self._forward, shape)
        self._trace.capture(host_input)

    def _read_level(self, tensor: Any, side: int) -> torch.Tensor:
        """(1, 1, side^2, F) device map -> (1, F, side, side) host tensor in the prompt path's dtype."""
        values = self.ttnn.to_torch(tensor).reshape(1, side, side, self.config.fpn_dim)
        return values.permute(0, 3, 1, 2).to(self.prompt_engine.dtype).contiguous()

    def _host_image_state(self, vision: Any) -> Any:
        """The prompt engine's per-image state built from the chip's vision features.

        A TorchEngine whose encode_image returns more than the vision features (image-only
        prompt-path stages computed once per image) must expose that step as
        ``image_features(vision)``; one that decodes straight from the vision features gets them.
        """
        build = getattr(self.prompt_engine, "image_features", None)
        if callable(build):
            return build(vision)
        from . import torch_engine

        if hasattr(torch_engine, "ImageFeatures"):
            raise EngineError(
                "TorchEngine.decode expects ImageFeatures but TorchEngine has no image_features(vision) "
                "to build them from the chip's vision features"
            )
        return vision

    def _neck_position_encodings(self, model: Any) -> tuple[torch.Tensor, ...]:
        """Sine position encodings of each FPN map: they depend only on the shape, so once."""
        encoding = model.vision_encoder.neck.position_encoding
        dtype = self.prompt_engine.dtype
        with torch.no_grad():
            return tuple(
                encoding((1, self.config.fpn_dim, side, side), torch.device("cpu"), dtype)
                for side in neck.level_sides(self.config)
            )
