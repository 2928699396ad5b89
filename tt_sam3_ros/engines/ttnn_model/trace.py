"""The image path as one metal trace: init (persistent input), capture, run (one replay), release.

Trace rules this code keeps (tt-metal's, and the emulator enforces them):
- the input lives in one device buffer allocated before capture; each frame's pixels are
  written into it with copy_host_to_device_tensor, never re-allocated;
- the path runs once eagerly before capture, so every program is compiled (and conv weights
  prepared, a host write) outside the capture;
- nothing inside the capture reads from or writes to the host;
- the capture's outputs are the buffers every replay writes; they are read after the replay;
- the trace is released before capturing again and before the device closes; a capture that
  fails is ended and released at once, so no trace id outlives it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class TracedImagePath:
    """Runs `forward(input_buffer) -> outputs` as a captured trace, one replay per frame."""

    def __init__(
        self,
        ttnn: Any,
        device: Any,
        forward: Callable[[Any], list[Any]],
        input_shape: Sequence[int],
        input_layout: Any = None,
    ) -> None:
        self.ttnn = ttnn
        self.device = device
        self.forward = forward
        self.input_shape = tuple(input_shape)
        self.input_layout = input_layout if input_layout is not None else ttnn.TILE_LAYOUT
        self.input: Any = None
        self.outputs: list[Any] = []
        self.trace_id: Any = None

    @property
    def captured(self) -> bool:
        return self.trace_id is not None

    def capture(self, host_input: Any) -> None:
        """Allocate the input buffer, compile with one eager run on `host_input`, then capture."""
        ttnn = self.ttnn
        if self.captured:
            raise RuntimeError("the image trace is already captured; release it first")
        if self.input is None:
            self.input = ttnn.allocate_tensor_on_device(
                ttnn.Shape(self.input_shape),
                ttnn.bfloat16,
                self.input_layout,
                self.device,
                ttnn.DRAM_MEMORY_CONFIG,
            )
        ttnn.copy_host_to_device_tensor(host_input, self.input, cq_id=0)
        for tensor in self.forward(self.input):
            ttnn.deallocate(tensor)
        ttnn.synchronize_device(self.device)
        trace_id = ttnn.begin_trace_capture(self.device, cq_id=0)
        try:
            outputs = self.forward(self.input)
        except BaseException:
            # A failed capture keeps no trace: end it, release it, and look uncaptured.
            ttnn.end_trace_capture(self.device, trace_id, cq_id=0)
            ttnn.release_trace(self.device, trace_id)
            raise
        ttnn.end_trace_capture(self.device, trace_id, cq_id=0)
        self.trace_id, self.outputs = trace_id, outputs
        ttnn.synchronize_device(self.device)

    def run(self, host_input: Any) -> list[Any]:
        """Copy one frame in and replay; returns the output buffers (valid until the next run)."""
        ttnn = self.ttnn
        if not self.captured:
            raise RuntimeError("the image trace has not been captured")
        ttnn.copy_host_to_device_tensor(host_input, self.input, cq_id=0)
        ttnn.execute_trace(self.device, self.trace_id, cq_id=0, blocking=False)
        return self.outputs

    def release(self) -> None:
        """Release the trace and free its buffers. Idempotent."""
        ttnn = self.ttnn
        if self.trace_id is not None:
            ttnn.release_trace(self.device, self.trace_id)
            self.trace_id = None
        for tensor in self.outputs:
            ttnn.deallocate(tensor)
        self.outputs = []
        if self.input is not None:
            ttnn.deallocate(self.input)
            self.input = None
