"""A device path as one metal trace over persistent input buffers, fed on a second command queue.

One class for every trace of the engine (the image trace and the prompt trace): several
can live on one device, each with its own input buffers (written from the host) and its own
output buffers (the capture's, rewritten by every replay). Inputs that are not written from the
host (another trace's outputs, the prompt embeddings of prompt_buffers.py) reach ``forward``
through its closure; they must be allocated before the first capture on the device, since a
replay may overwrite any buffer allocated after a capture ended.

Trace rules this code keeps (tt-metal's, and the emulator enforces them):
- the inputs live in device buffers allocated before the capture, written with
  copy_host_to_device_tensor, never re-allocated;
- the path runs once eagerly before capture, so every program is compiled (and conv weights
  prepared, a host write) outside the capture; that includes the staging copy below;
- nothing inside the capture reads from or writes to the host, synchronizes or records events;
- the capture's outputs are the buffers every replay writes; they are read after the replay;
- the trace is released before capturing again and before the device closes; a capture that
  fails is ended and released at once, so no trace id outlives it.

Several traces on one device, and tt-metal's trace allocation tracking
(TT_METAL_TRACE_ALLOC_TRACKING=1, which refuses a replay while a buffer allocated after that
trace's capture is alive): a trace captured after another one (the prompt traces, after the
image trace) leaves its outputs alive, allocated after the first capture. Those outputs are
read after their own replay and before the next replay of any other trace (the emulator holds
the engine to that), so they are what the tracker calls corruptible: such a trace acknowledges
its outputs as corruptible at capture (``corruptible_outputs``), with ttnn 0.81.1's
ttnn.tools.trace_allocation_tracker.acknowledge_corruptible (a newer ttnn's ttnn.mark_corruptible
where it has one). Nothing else may stay allocated after a capture.

Two command queues (a device opened with two, device.COMMAND_QUEUES): queue 0 replays, queue 1
uploads the next frame meanwhile, with the event pattern of Tenstorrent's trace + 2-CQ runners.
Each host input has a staging buffer next to the trace's input buffer:
- stage(): queue 1 waits for the *op event* (queue 0 has copied the previous frame out of the
  staging buffer), writes the frame into the staging buffer, records the *write event*;
- replay(): queue 0 waits for the write event, copies the staging buffer into the trace's input
  buffer (ttnn.copy, in place, outside the trace), records the op event, then replays.
The op event is recorded before the replay, so the upload of frame N+1 waits for the copy of
frame N only, not for its trace: the upload overlaps the replay. A second input buffer instead
of the staging copy would need a second captured trace (a trace reads fixed addresses), twice
the trace region and capture time; the copy moves one input (a few MB of DRAM) per frame. On a
device with one queue, stage() writes the trace's input buffer directly on queue 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The queue that replays traces and runs every op; the queue that uploads (with two queues).
REPLAY_QUEUE = 0
UPLOAD_QUEUE = 1


@dataclass(frozen=True)
class BufferSpec:
    """What a persistent device buffer holds: shape, dtype, layout (DRAM interleaved)."""

    shape: tuple[int, ...]
    dtype: Any
    layout: Any

    @classmethod
    def of(cls, host_tensor: Any) -> BufferSpec:
        """The spec of a host tensor, so the buffer takes whatever the caller uploads."""
        dtype = host_tensor.get_dtype() if hasattr(host_tensor, "get_dtype") else host_tensor.dtype
        layout = host_tensor.get_layout() if hasattr(host_tensor, "get_layout") else host_tensor.layout
        return cls(tuple(int(d) for d in host_tensor.shape), dtype, layout)

    def allocate(self, ttnn: Any, device: Any) -> Any:
        return ttnn.allocate_tensor_on_device(
            ttnn.Shape(self.shape), self.dtype, self.layout, device, ttnn.DRAM_MEMORY_CONFIG
        )


class TracedPath:
    """Runs `forward(*input_buffers) -> outputs` as a captured trace, one replay per call.

    Args:
        ttnn: the ttnn module (or the emulator).
        device: an open device.
        forward: the path; takes the input buffers (one per host input) and returns its outputs;
            it must leave the input buffers allocated.
        command_queues: how many queues the device was opened with (1 or 2): with 2, uploads go
            through staging buffers on queue 1 (see the module docstring).
        name: for error messages ("image", "prompt").
        corruptible_outputs: acknowledge the outputs as corruptible to the trace allocation
            tracker (a trace captured after another one whose outputs are read before that
            one's next replay: see the module docstring).
    """

    def __init__(
        self,
        ttnn: Any,
        device: Any,
        forward: Callable[..., list[Any]],
        command_queues: int = 1,
        name: str = "image",
        corruptible_outputs: bool = False,
    ) -> None:
        if command_queues not in (1, 2):
            raise ValueError(f"command_queues must be 1 or 2, got {command_queues}")
        self.ttnn = ttnn
        self.device = device
        self.forward = forward
        self.two_queues = command_queues == 2
        self.name = name
        self.corruptible_outputs = corruptible_outputs
        self.specs: tuple[BufferSpec, ...] = ()
        self.allocated = False
        self.inputs: list[Any] = []
        self.staging: list[Any] = []
        self.outputs: list[Any] = []
        self.trace_id: Any = None
        self._write_event: Any = None
        self._op_event: Any = None

    @property
    def captured(self) -> bool:
        return self.trace_id is not None

    def capture(self, *host_inputs: Any) -> None:
        """Allocate the buffers (spec of `host_inputs`), compile with one eager run, then capture."""
        ttnn = self.ttnn
        if self.captured:
            raise RuntimeError(f"the {self.name} trace is already captured; release it first")
        self._allocate(host_inputs)
        self.stage(*host_inputs)
        self._consume_staged()  # compiles the staging copy before the capture
        for tensor in self.forward(*self.inputs):
            ttnn.deallocate(tensor)
        ttnn.synchronize_device(self.device)
        trace_id = ttnn.begin_trace_capture(self.device, cq_id=REPLAY_QUEUE)
        try:
            outputs = self.forward(*self.inputs)
        except BaseException:
            # A failed capture keeps no trace: end it, release it, and look uncaptured.
            ttnn.end_trace_capture(self.device, trace_id, cq_id=REPLAY_QUEUE)
            ttnn.release_trace(self.device, trace_id)
            raise
        ttnn.end_trace_capture(self.device, trace_id, cq_id=REPLAY_QUEUE)
        self.trace_id, self.outputs = trace_id, outputs
        if self.corruptible_outputs:
            for tensor in outputs:
                acknowledge_corruptible(ttnn, tensor)
        ttnn.synchronize_device(self.device)

    def stage(self, *host_inputs: Any) -> None:
        """Upload the next call's inputs: on queue 1 into the staging buffers (after the previous
        frame was copied out of them), else on queue 0 into the trace's inputs."""
        ttnn = self.ttnn
        if len(host_inputs) != len(self.specs) or not self.allocated:
            raise RuntimeError(f"the {self.name} trace takes {len(self.specs)} input(s) once captured")
        for index, (host, spec) in enumerate(zip(host_inputs, self.specs, strict=True)):
            if BufferSpec.of(host) != spec:
                raise ValueError(
                    f"{self.name} trace: input {index} is {BufferSpec.of(host)}; the trace was "
                    f"captured for {spec}"
                )
        if not host_inputs:
            return
        if not self.two_queues:
            for host, buffer in zip(host_inputs, self.inputs, strict=True):
                ttnn.copy_host_to_device_tensor(host, buffer, cq_id=REPLAY_QUEUE)
            return
        if self._op_event is not None:
            ttnn.wait_for_event(UPLOAD_QUEUE, self._op_event)
        for host, buffer in zip(host_inputs, self.staging, strict=True):
            ttnn.copy_host_to_device_tensor(host, buffer, cq_id=UPLOAD_QUEUE)
        self._write_event = ttnn.record_event(self.device, UPLOAD_QUEUE)

    def replay(self) -> list[Any]:
        """Replay on the last staged inputs (queue 0, not blocking); returns the output buffers,
        valid until the next replay of any trace that writes them."""
        if not self.captured:
            raise RuntimeError(f"the {self.name} trace has not been captured")
        self._consume_staged()
        self.ttnn.execute_trace(self.device, self.trace_id, cq_id=REPLAY_QUEUE, blocking=False)
        return self.outputs

    def run(self, *host_inputs: Any) -> list[Any]:
        """One call: stage the inputs, then replay."""
        if not self.captured:
            raise RuntimeError(f"the {self.name} trace has not been captured")
        self.stage(*host_inputs)
        return self.replay()

    def release(self) -> None:
        """Release the trace and free its buffers. Idempotent."""
        ttnn = self.ttnn
        if self.trace_id is not None:
            ttnn.release_trace(self.device, self.trace_id)
            self.trace_id = None
        for tensor in [*self.outputs, *self.inputs, *self.staging]:
            ttnn.deallocate(tensor)
        self.outputs, self.inputs, self.staging = [], [], []
        self.allocated = False
        self._write_event = self._op_event = None

    # internals ----------------------------------------------------------------------------------
    def _allocate(self, host_inputs: Sequence[Any]) -> None:
        specs = tuple(BufferSpec.of(host) for host in host_inputs)
        if self.allocated and specs != self.specs:
            raise RuntimeError(f"the {self.name} trace's inputs changed spec: {self.specs} -> {specs}")
        if not self.allocated:
            self.allocated = True
            self.specs = specs
            self.inputs = [spec.allocate(self.ttnn, self.device) for spec in specs]
            if self.two_queues:
                self.staging = [spec.allocate(self.ttnn, self.device) for spec in specs]

    def _consume_staged(self) -> None:
        """Queue 0: wait for the upload, copy the staging buffers into the trace's inputs, and
        record the op event that lets queue 1 overwrite them (nothing to do on one queue, or
        when nothing new was staged)."""
        if not self.two_queues or self._write_event is None:
            return
        ttnn = self.ttnn
        ttnn.wait_for_event(REPLAY_QUEUE, self._write_event)
        self._write_event = None
        for staging, buffer in zip(self.staging, self.inputs, strict=True):
            ttnn.copy(staging, buffer)
        self._op_event = ttnn.record_event(self.device, REPLAY_QUEUE)


def acknowledge_corruptible(ttnn: Any, tensor: Any) -> None:
    """Tell tt-metal's trace allocation tracker that replays of earlier traces may overwrite
    `tensor` (a no-op unless TT_METAL_TRACE_ALLOC_TRACKING=1): ttnn.mark_corruptible on a ttnn
    that has it, else 0.81.1's ttnn.tools.trace_allocation_tracker.acknowledge_corruptible."""
    mark = getattr(ttnn, "mark_corruptible", None)
    if mark is None:
        mark = ttnn.tools.trace_allocation_tracker.acknowledge_corruptible
    mark(tensor)


#: The name the image encoder (and older callers) use.
TracedImagePath = TracedPath
