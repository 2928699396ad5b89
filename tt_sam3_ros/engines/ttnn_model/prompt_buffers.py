"""The prompt embeddings in persistent device buffers, and one prompt trace per prompt-count bucket.

The prompt trace (fusion encoder, decoder, scoring, segmentation head) reads the prompts' text
features and their key-padding masks from device buffers this class owns. They are written with
copy_host_to_device_tensor only when the prompt set changes, never per frame, and a trace is
captured for a prompt count's bucket the first time that bucket is needed.

Why buckets, and these: a replay's cost grows with the prompts it carries, with no fixed part a
padded batch would share. In the roofline cost model (benchmarks/blackhole/trace_cost.py, full size; its
figures for 1, 4 and 16 prompts are in docs/figures/blackhole.md, and
tools/ttnn_mock/prompt_batch_cost.py prices every count) a replay costs nearly the same per
prompt at every count (the fusion encoder's self-attention over the 5184 image tokens of each
prompt is most of it). One padded maximum with masked keys would make a 1-prompt frame pay for 16.
Power-of-two buckets (1, 2, 4, 8, ... up to max_prompts) pay at most twice the prompts' own
cost for log2(max_prompts) + 1 captures; a bucket per count would pay nothing extra but hold
max_prompts traces in the trace region and compile max_prompts variants at warm-up.

Trace rules this class keeps (trace.py's, and the emulator enforces them):
- every bucket's buffers are allocated when the class is built: build it before the device's
  first capture (a replay may overwrite buffers allocated after a capture ended);
- compile() runs the forward of every bucket eagerly: call it before the device's first
  capture too, since a program compiled after a capture may land where replays write; the
  lazy capture of a bucket later compiles nothing;
- each bucket's trace is captured after the image trace, and its outputs stay allocated: they
  are read after its replay and before the image trace's next one, so the trace acknowledges
  them as corruptible to tt-metal's trace allocation tracker (trace.py);
- uploads go on command queue 0, the queue that replays: they are ordered after the replay that
  read the old prompts and before the next one, with no event (prompt changes are rare; the
  stream stalls for the upload only).
Padded prompts (bucket > count) get zero features and only their first key unmasked (a fully
masked row would be a softmax over nothing); their outputs are computed and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask
from tt_sam3_ros.engines.ttnn_model.trace import TracedPath

#: forward(bucket, features, masks, *inputs) -> outputs: the prompt path on `bucket` prompts.
PromptForward = Callable[..., list[Any]]


def power_of_two_buckets(max_prompts: int) -> tuple[int, ...]:
    """1, 2, 4, ... below max_prompts, then max_prompts itself."""
    if max_prompts < 1:
        raise ValueError(f"max_prompts must be at least 1, got {max_prompts}")
    buckets, size = [], 1
    while size < max_prompts:
        buckets.append(size)
        size *= 2
    return (*buckets, max_prompts)


def bucket_of(count: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds `count` prompts."""
    for size in sorted(buckets):
        if count <= size:
            return size
    raise InputError(f"{count} prompts: at most {max(buckets)} fit (max_prompts)")


class PromptBuffers:
    """Text features (B, T, C) and additive key masks (B, 1, rows, T) per bucket B, on the device.

    Args:
        ttnn: the ttnn module (or the emulator).
        device: the open device.
        forward: forward(bucket, features, masks, *inputs) -> outputs, the prompt path for
            `bucket` prompts reading these buffers (features, and masks by name) and the device
            tensors `inputs` (the image trace's outputs); it must leave all of them allocated.
        tokens: T, the prompt tokens padded to a tile.
        hidden: C, the features' width.
        mask_rows: name -> query rows of each mask the path needs (the fusion encoder's
            cross-attention: the image tokens; the decoder's: its padded queries).
        max_prompts: the most prompts one replay carries.
        buckets: prompt counts a trace is captured for (default: power_of_two_buckets).
    """

    def __init__(
        self,
        ttnn: Any,
        device: Any,
        forward: PromptForward,
        *,
        tokens: int,
        hidden: int,
        mask_rows: Mapping[str, int],
        max_prompts: int,
        buckets: Sequence[int] | None = None,
        use_trace: bool = True,
    ) -> None:
        self.ttnn = ttnn
        #: Capture one trace per bucket (default), or run each bucket's forward eagerly on every
        #: call (the engine's eager mode, and a simulated chip: slow dispatch cannot capture).
        self.use_trace = use_trace
        self._eager_outputs: list[Any] = []
        self.device = device
        self.forward = forward
        self.tokens, self.hidden = tokens, hidden
        self.mask_rows = dict(mask_rows)
        self.buckets = tuple(sorted(buckets or power_of_two_buckets(max_prompts)))
        if self.buckets[-1] != max_prompts:
            raise ValueError(f"the largest bucket must be max_prompts ({max_prompts}), got {self.buckets}")
        self.features: dict[int, Any] = {}
        self.masks: dict[int, dict[str, Any]] = {}
        for size in self.buckets:
            self.features[size] = self._allocate((size, tokens, hidden))
            self.masks[size] = {
                name: self._allocate((size, 1, rows, tokens)) for name, rows in mask_rows.items()
            }
        self.traces: dict[int, TracedPath] = {}
        self._trace_inputs: dict[int, tuple[Any, ...]] = {}
        self._held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.count = 0
        self.bucket = 0
        self.uploads = 0

    @property
    def captures(self) -> int:
        """How many buckets have a captured trace."""
        return sum(trace.captured for trace in self.traces.values())

    def compile(self, *inputs: Any) -> None:
        """Run every bucket's forward once eagerly (its programs compiled); before any capture."""
        for size in self.buckets:
            for tensor in self.forward(size, self.features[size], self.masks[size], *inputs):
                self.ttnn.deallocate(tensor)

    def set_prompts(self, features: torch.Tensor, valid: torch.Tensor) -> bool:
        """Hold these prompts: features (P, t, C), valid (P, t) bool (True for a real token).

        Uploads into the bucket's buffers only when they do not already hold exactly these
        prompts; returns whether it uploaded.
        """
        count, given, width = self._check(features, valid)
        size = bucket_of(count, self.buckets)
        self.count, self.bucket = count, size
        held = self._held.get(size)
        if held is not None and torch.equal(held[0], features) and torch.equal(held[1], valid):
            return False
        padded = torch.zeros(size, self.tokens, width)
        padded[:count, :given] = features.float()
        keep = torch.zeros(size, self.tokens, dtype=torch.bool)
        keep[:count, :given] = valid.bool()
        keep[count:, 0] = True  # padded prompts: one key, so no row is a softmax over nothing
        ttnn = self.ttnn
        ttnn.copy_host_to_device_tensor(self._host(padded), self.features[size], cq_id=0)
        for name, rows in self.mask_rows.items():
            mask = key_padding_mask(rows, keep, self.tokens)
            ttnn.copy_host_to_device_tensor(self._host(mask), self.masks[size][name], cq_id=0)
        self._held[size] = (features.clone(), valid.clone())
        self.uploads += 1
        return True

    def run(self, *inputs: Any) -> list[Any]:
        """Replay the held prompts' bucket on `inputs` (captured on first use); the outputs'
        first `count` rows are the prompts', valid until the next replay of this bucket."""
        if not self.count:
            raise RuntimeError("no prompts set: call set_prompts first")
        size = self.bucket
        if not self.use_trace:
            self._free_eager_outputs()
            self._eager_outputs = self.forward(size, self.features[size], self.masks[size], *inputs)
            return self._eager_outputs
        trace = self.traces.get(size)
        if trace is None:
            features, masks = self.features[size], self.masks[size]

            def forward() -> list[Any]:
                return self.forward(size, features, masks, *inputs)

            trace = self.traces[size] = TracedPath(
                self.ttnn, self.device, forward, name=f"prompt x{size}", corruptible_outputs=True
            )
            self._trace_inputs[size] = inputs
            trace.capture()
        elif any(a is not b for a, b in zip(self._trace_inputs[size], inputs, strict=True)):
            raise RuntimeError(f"the prompt x{size} trace was captured on other input buffers")
        return trace.run()

    def release(self) -> None:
        """Release every bucket's trace and free the buffers. Idempotent."""
        self._free_eager_outputs()
        for trace in self.traces.values():
            trace.release()
        self.traces, self._trace_inputs, self._held = {}, {}, {}
        for tensor in [
            *self.features.values(),
            *(m for masks in self.masks.values() for m in masks.values()),
        ]:
            self.ttnn.deallocate(tensor)
        self.features, self.masks = {}, {}
        self.count = self.bucket = 0

    # internals ----------------------------------------------------------------------------------
    def _free_eager_outputs(self) -> None:
        for tensor in self._eager_outputs:
            if tensor.is_allocated():
                self.ttnn.deallocate(tensor)
        self._eager_outputs = []

    def _allocate(self, shape: tuple[int, ...]) -> Any:
        ttnn = self.ttnn
        return ttnn.allocate_tensor_on_device(
            ttnn.Shape(shape), ttnn.bfloat16, ttnn.TILE_LAYOUT, self.device, ttnn.DRAM_MEMORY_CONFIG
        )

    def _host(self, values: torch.Tensor) -> Any:
        return self.ttnn.from_torch(values, dtype=self.ttnn.bfloat16, layout=self.ttnn.TILE_LAYOUT)

    def _check(self, features: torch.Tensor, valid: torch.Tensor) -> tuple[int, int, int]:
        if features.dim() != 3 or valid.shape != features.shape[:2]:
            raise InputError(
                f"prompt features must be (P, t, C) with a (P, t) validity mask, got "
                f"{tuple(features.shape)} and {tuple(valid.shape)}"
            )
        count, given, width = features.shape
        if count < 1:
            raise InputError("at least one prompt is needed")
        if given > self.tokens or width != self.hidden:
            raise InputError(
                f"prompt features {tuple(features.shape)}: at most {self.tokens} tokens "
                f"of width {self.hidden}"
            )
        return count, given, width
