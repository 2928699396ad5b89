"""The image encoder on one chip: open, upload the weights once, compile, capture, one replay per frame.

This is the chip's half of the ttnn engine, with no model object and no prompt path: it takes the
prepared host weights (weights.py) and returns the four FPN maps as device tensors, then, when a
geometry config is given, the geometry encoder's class token (geometry_encoder.py: it depends on
the image only, so it is made once per frame in the image trace, for the prompt trace to read).
The same code runs under the emulator, under the real library on a mock p150a (tools/ttnn_mock)
and on a chip. The engine (ttnn_engine.py) composes it with a prompt path.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tt_sam3_ros.engines.ttnn_model import neck, vit
from tt_sam3_ros.engines.ttnn_model.attention import sub_weights
from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig, device_settings
from tt_sam3_ros.engines.ttnn_model.device import (
    COMMAND_QUEUES,
    SIMULATOR_COMMAND_QUEUES,
    BlackholeChips,
    open_blackhole,
)
from tt_sam3_ros.engines.ttnn_model.geometry_encoder import GeometryConfig, class_token
from tt_sam3_ros.engines.ttnn_model.trace import TracedPath
from tt_sam3_ros.engines.ttnn_model.weights import HostWeight, upload

LOG = logging.getLogger(__name__)
#: Name prefix of the geometry encoder's weights among the image path's.
GEOMETRY_PREFIX = "geometry."


class ChipImageEncoder:
    """Patch embedding, ViT, FPN neck and (optionally) the geometry encoder's class token on an open chip.

    Args:
        ttnn: the ttnn module (or the emulator).
        config: the image path's shapes.
        device: an open device (see open()).
        dispatch: how it was opened, in words ("worker", "ethernet").
        matmul_dtype, param_dtype: device dtypes of matmul weights and of norms/biases/tables.
        use_trace: replay one captured trace per frame, or run the ops eagerly (debugging).
        command_queues: how many command queues `device` was opened with (open() opens it with
            device.COMMAND_QUEUES, 2): with 2, each frame is uploaded on queue 1 while queue 0
            replays (trace.py).
        geometry: the geometry encoder's shapes; its weights are the uploaded ones named
            "geometry.*" (prompt_weights.prepare_geometry_encoder). None: FPN maps only.
    """

    def __init__(
        self,
        ttnn: Any,
        config: ImagePathConfig,
        device: Any,
        dispatch: str,
        matmul_dtype: Any,
        param_dtype: Any,
        use_trace: bool = True,
        command_queues: int = 1,
        geometry: GeometryConfig | None = None,
    ) -> None:
        self.ttnn = ttnn
        self.config = config
        self.device = device
        self.dispatch = dispatch
        self.use_trace = use_trace
        self.command_queues = command_queues
        self.geometry = geometry
        self._geometry_weights: dict[str, Any] = {}
        self._matmul_dtype = matmul_dtype
        self._param_dtype = param_dtype
        self.weights: dict[str, Any] = {}
        self._conv_weights: dict[str, Any] = {}
        self._trace: TracedPath | None = None
        self._eager_outputs: list[Any] = []
        self._closed = False
        self.settings = device_settings(ttnn, device)

    @classmethod
    def open(
        cls,
        ttnn: Any,
        config: ImagePathConfig,
        device_id: int,
        l1_small_size: int,
        trace_region_size: int,
        dispatch: str,
        chips: BlackholeChips | None = None,
        simulator: Path | None = None,
        **options: Any,
    ) -> ChipImageEncoder:
        """Open chip `device_id` (open_blackhole; the simulated one with `simulator`) and wrap it;
        the chip is closed again on failure.

        With `chips`, the chip comes from that set, opened together with the others (its own
        sizes and dispatch apply, not the arguments here), so closing it leaves them serving.
        """
        if chips is not None:
            device, used = chips.device(device_id)
        else:
            device, used = open_blackhole(
                ttnn, device_id, l1_small_size, trace_region_size, dispatch, simulator
            )
        queues = COMMAND_QUEUES if simulator is None else SIMULATOR_COMMAND_QUEUES
        try:
            encoder = cls(ttnn, config, device, used, command_queues=queues, **options)
        except BaseException:
            ttnn.close_device(device)
            raise
        x, y = encoder.settings.grid
        LOG.info(
            "Blackhole chip %d open: %s dispatch, %dx%d compute grid, %d command queues",
            device_id,
            used,
            x,
            y,
            encoder.command_queues,
        )
        return encoder

    @property
    def closed(self) -> bool:
        return self._closed

    def upload(self, host_weights: dict[str, HostWeight], cache_dir: Path | None = None) -> None:
        """Convert and place every weight once (weights.upload)."""
        self.weights = upload(
            self.ttnn, self.device, host_weights, self._matmul_dtype, self._param_dtype, cache_dir
        )
        self._geometry_weights = sub_weights(self.weights, GEOMETRY_PREFIX)
        if self.geometry is not None and not self._geometry_weights:
            raise ValueError(f"a geometry config was given but no {GEOMETRY_PREFIX}* weights were uploaded")

    def forward(self, image: Any) -> list[Any]:
        """The image path on the device: uint8 pixels buffer -> 4 FPN maps, then the (1, 32, C)
        class-token tile when a geometry config is set (the FPN maps stay first, in scale order);
        leaves `image` allocated."""
        trunk = vit.sam3_vit_model(self.ttnn, image, self.weights, self.config, self.settings)
        maps = neck.sam3_vision_neck(
            self.ttnn,
            self.device,
            trunk,
            self.weights,
            self.config,
            self.settings,
            self._conv_weights,
            self._matmul_dtype,
        )
        if self.geometry is None:
            return maps
        # Sam3Model drops the coarsest map; the geometry encoder reads the last one left (scale 1).
        token = class_token(self.ttnn, maps[-2], self._geometry_weights, self.geometry, self.settings)
        return [*maps, token]

    @property
    def captured(self) -> bool:
        return self._trace is not None and self._trace.captured

    def capture(self, host_input: Any) -> None:
        """Compile every program (one eager run) and capture the trace on `host_input`, whose
        spec (shape, dtype, layout) the trace's input buffers take."""
        if self._trace is None:
            self._trace = TracedPath(self.ttnn, self.device, self.forward, self.command_queues, "image")
        self._trace.capture(host_input)

    def run(self, host_input: Any) -> list[Any]:
        """One frame: the FPN maps as device tensors, valid until the next run."""
        if self._closed:
            raise RuntimeError("the chip image encoder is closed")
        if self.use_trace:
            if not self.captured:
                LOG.warning("image trace captured on the first frame: call warmup() before serving")
                self.capture(host_input)
            assert self._trace is not None
            return self._trace.run(host_input)
        return self.run_eager(host_input)

    def run_eager(self, host_input: Any) -> list[Any]:
        """One frame without the trace (each op dispatched): what compiles every program before a
        capture; the outputs are valid until the next run."""
        for tensor in self._eager_outputs:
            self.ttnn.deallocate(tensor)
        image = self.ttnn.to_device(host_input, self.device, memory_config=self.ttnn.DRAM_MEMORY_CONFIG)
        self._eager_outputs = outputs = self.forward(image)
        self.ttnn.deallocate(image)
        return outputs

    def stage(self, host_input: Any) -> None:
        """Upload the next frame without replaying (traced path only): with two queues it goes up
        on queue 1 while queue 0 may still replay the current frame, so a caller that stages
        frame N+1 before reading frame N's maps overlaps the upload with the replay."""
        if self._closed or not self.captured:
            raise RuntimeError("stage() needs an open chip image encoder with a captured trace")
        assert self._trace is not None
        self._trace.stage(host_input)

    def replay(self) -> list[Any]:
        """Replay the trace on the last staged frame; its outputs (forward), valid until the next replay."""
        if self._closed or not self.captured:
            raise RuntimeError("replay() needs an open chip image encoder with a captured trace")
        assert self._trace is not None
        return self._trace.replay()

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
                if tensor is not None and tensor.device() is not None:
                    ttnn.deallocate(tensor)
        finally:
            self._trace = None
            self._eager_outputs, self.weights, self._conv_weights = [], {}, {}
            self._geometry_weights = {}
            if self.device is not None:
                ttnn.close_device(self.device)
                self.device = None
