"""tt-metal's trace allocation rule (TT_METAL_TRACE_ALLOC_TRACKING=1), in the emulator and in the
engine: a replay of a trace raises while a buffer allocated after that trace's capture is alive
and not marked corruptible (tt-metal's tests/ttnn/unit_tests/test_single_device_trace.py
checks the same rule on a chip).

The engine keeps the rule with the chip prompt path: the image trace is captured first, then a
prompt trace per prompt-count bucket (one at warm-up, the others on their first frame), and the
image trace is replayed every frame while the prompt traces' outputs are alive.
"""

from __future__ import annotations

import numpy as np
import pytest

SHAPE = (1, 1, 32, 32)


@pytest.fixture
def tracking(emulator):
    emulator.reset()
    emulator.SETTINGS.trace_alloc_tracking = True
    yield emulator
    emulator.reset()


def _captured_sigmoid(ttnn):
    device = ttnn.open_device(device_id=0, trace_region_size=200_000)
    spec = (ttnn.Shape(SHAPE), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    source = ttnn.allocate_tensor_on_device(*spec)
    ttnn.deallocate(ttnn.sigmoid(source))  # compile before the capture
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    output = ttnn.sigmoid(source)
    ttnn.end_trace_capture(device, trace, cq_id=0)
    return device, spec, trace, output


def test_a_buffer_allocated_after_the_capture_fails_the_replay(tracking):
    ttnn = tracking
    device, spec, trace, _ = _captured_sigmoid(ttnn)
    ttnn.execute_trace(device, trace, cq_id=0)  # its own output: fine
    late = ttnn.allocate_tensor_on_device(*spec)
    with pytest.raises(ttnn.EmulatorError, match=r"TT_METAL_TRACE_ALLOC_TRACKING=1\): 1 buffer"):
        ttnn.execute_trace(device, trace, cq_id=0)
    ttnn.mark_corruptible(late)
    ttnn.execute_trace(device, trace, cq_id=0)
    other = ttnn.allocate_tensor_on_device(*spec)
    with pytest.raises(ttnn.EmulatorError, match="allocated after trace"):
        ttnn.execute_trace(device, trace, cq_id=0)
    ttnn.deallocate(other)  # freed before the replay: fine
    ttnn.execute_trace(device, trace, cq_id=0)
    ttnn.release_trace(device, trace)


def test_without_tracking_the_replay_only_clobbers_the_late_buffer(emulator):
    ttnn = emulator
    ttnn.reset()
    device, spec, trace, _ = _captured_sigmoid(ttnn)
    late = ttnn.allocate_tensor_on_device(*spec)
    ttnn.execute_trace(device, trace, cq_id=0)
    assert late.clobbered_by_replay
    ttnn.release_trace(device, trace)
    ttnn.reset()


def test_another_traces_outputs_count_as_late_buffers(tracking):
    """Trace B captured after trace A: B's outputs, alive, fail A's next replay until they are
    acknowledged as corruptible (ttnn 0.81.1's call), or allocated in a corruptible scope."""
    ttnn = tracking
    device = ttnn.open_device(device_id=0, trace_region_size=200_000)
    source = ttnn.allocate_tensor_on_device(ttnn.Shape(SHAPE), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    for op in (ttnn.sigmoid, ttnn.relu):
        ttnn.deallocate(op(source))  # both compiled before the first capture
    traces = []
    for op in (ttnn.sigmoid, ttnn.relu):
        trace = ttnn.begin_trace_capture(device, cq_id=0)
        output = op(source)
        ttnn.end_trace_capture(device, trace, cq_id=0)
        traces.append(trace)
    first, second = traces
    ttnn.execute_trace(device, second, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="allocated after trace"):
        ttnn.execute_trace(device, first, cq_id=0)
    ttnn.tools.trace_allocation_tracker.acknowledge_corruptible(output)
    ttnn.execute_trace(device, first, cq_id=0)
    with ttnn.tools.trace_allocation_tracker.corruptible_allocation_scope(device):
        scratch = ttnn.allocate_tensor_on_device(ttnn.Shape(SHAPE), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    ttnn.execute_trace(device, first, cq_id=0)
    assert scratch.clobbered_by_replay
    for trace in traces:
        ttnn.release_trace(device, trace)


@pytest.mark.timeout(900)  # builds, warms up and runs a chip prompt path engine on the emulator
def test_the_chip_prompt_path_keeps_the_rule_frame_after_frame(tracking, tiny_model, tokenizer):
    """Warm-up (image trace, then the one-prompt trace), frames with 1 and 2 prompts (the 2-prompt
    bucket's trace captured on its first frame), then both again: every image and prompt replay
    under tracking. Failed on the engine before its prompt traces acknowledged their outputs (12
    buffers alive at the image trace's replay)."""
    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    rng = np.random.default_rng(5)
    engine = TtnnEngine(tiny_model, tokenizer, ttnn_module=tracking, prompt_path="chip", max_prompts=2)
    with engine:
        engine.warmup()
        for prompts in (["car"], ["car", "person"], ["car"], ["car", "person"]):
            frame = rng.integers(0, 256, (1008, 1008, 3), dtype=np.uint8)
            decoded = engine.decode(
                engine.encode_image(frame), engine.encode_prompts(prompts), max_instances=2
            )
            best = np.argmax(decoded.logits, axis=1)
            masks = engine.fetch_masks(decoded, np.arange(len(prompts)), best)
            assert masks.shape[0] == len(prompts) and np.isfinite(masks).all()
        assert engine.prompt_path.prompts.captures == 2
