"""trace.TracedPath on the emulator: a trace fed on a second command queue with the 2-CQ event pattern.

The emulator tracks which queue last wrote and read each buffer and raises on a cross-queue
race; these tests run frames back to back (no host read between a replay and the next upload,
which would order the queues by itself) and check that the pattern is race-free, that it
overlaps the next upload with the replay, and that dropping either of its waits is a race.
"""

from __future__ import annotations

import pytest
import torch

from tt_sam3_ros.engines.ttnn_model.trace import TracedPath


class DroppedWaits:
    """The emulator as the traced path sees it, except that waits issued on `queue` are dropped."""

    def __init__(self, ttnn, queue: int) -> None:
        self._ttnn, self._queue = ttnn, queue

    def __getattr__(self, name):
        return getattr(self._ttnn, name)

    def wait_for_event(self, cq_id, mesh_event):
        if cq_id != self._queue:
            self._ttnn.wait_for_event(cq_id, mesh_event)


def _open(ttnn, queues: int):
    return ttnn.open_mesh_device(ttnn.MeshShape(1, 1), trace_region_size=1 << 20, num_command_queues=queues)


def _path(ttnn, device, queues: int, module=None):
    """A small image-like path: a ROW_MAJOR input tilized inside the trace, a matmul, a bias."""
    torch.manual_seed(0)
    weight = ttnn.from_torch(torch.randn(64, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)

    def forward(x):
        tiles = ttnn.to_layout(x, ttnn.TILE_LAYOUT)
        out = ttnn.add(ttnn.matmul(tiles, weight), 1.0)
        ttnn.deallocate(tiles)
        return [out]

    return TracedPath(module or ttnn, device, forward, command_queues=queues), weight


def _frame(ttnn, seed: int):
    torch.manual_seed(seed)
    values = torch.randn(1, 1, 64, 64)
    return ttnn.from_torch(values, dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT), values


def _eager(ttnn, device, path, host):
    """The path run eagerly on `host` (before any capture): what every replay must give."""
    x = ttnn.to_device(host, device, ttnn.DRAM_MEMORY_CONFIG)
    (out,) = path.forward(x)
    values = ttnn.to_torch(out).float()
    ttnn.deallocate(out)
    ttnn.deallocate(x)
    return values


def test_pipelined_frames_on_two_queues_are_race_free_and_correct(ttnn):
    device = _open(ttnn, 2)
    path, _ = _path(ttnn, device, 2)
    frames = [_frame(ttnn, seed)[0] for seed in range(4)]
    expected = [_eager(ttnn, device, path, frame) for frame in frames]
    path.capture(frames[0])
    path.stage(frames[0])
    for index, want in enumerate(expected):
        outputs = path.replay()
        issued_before_upload = device._issued[0]
        if index + 1 < len(frames):
            path.stage(frames[index + 1])  # frame N+1 goes up while frame N's trace runs
            # Queue 1 waited for the staging copy only, not for the replay issued after it.
            assert device._seen[1][0] < issued_before_upload
        assert torch.equal(ttnn.to_torch(outputs[0]).float(), want), index
    assert device.replays == len(frames)
    path.release()
    ttnn.close_device(device)


@pytest.mark.parametrize(
    "dropped, why",
    [(1, "upload overwrites the staging buffer before queue 0 copied it"), (0, "copy before upload")],
)
def test_dropping_either_wait_is_a_race(ttnn, dropped, why):
    device = _open(ttnn, 2)
    path, _ = _path(ttnn, device, 2, module=DroppedWaits(ttnn, dropped))
    frames = [_frame(ttnn, seed)[0] for seed in range(3)]
    with pytest.raises(ttnn.EmulatorError, match="race on"):
        path.capture(frames[0])
        for frame in frames:
            path.stage(frame)
            path.replay()
    if path.captured:
        path.release()


def test_one_queue_writes_the_trace_input_directly(ttnn):
    device = _open(ttnn, 1)
    path, _ = _path(ttnn, device, 1)
    frames = [_frame(ttnn, seed)[0] for seed in (5, 6, 7)]
    expected = [_eager(ttnn, device, path, frame) for frame in frames]
    path.capture(frames[0])
    assert path.staging == []
    for frame, want in zip(frames[1:], expected[1:], strict=True):
        assert torch.equal(ttnn.to_torch(path.run(frame)[0]).float(), want)
    path.release()
    ttnn.close_device(device)


def test_two_queue_path_on_a_one_queue_device_is_refused(ttnn):
    device = _open(ttnn, 1)
    path, _ = _path(ttnn, device, 2)
    with pytest.raises(ttnn.EmulatorError, match="command queue 1"):
        path.capture(_frame(ttnn, 0)[0])
    path.release()
    ttnn.close_device(device)


def test_an_input_of_another_spec_is_refused_after_capture(ttnn):
    device = _open(ttnn, 2)
    path, _ = _path(ttnn, device, 2)
    path.capture(_frame(ttnn, 0)[0])
    wrong = ttnn.from_torch(torch.zeros(1, 1, 64, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    with pytest.raises(ValueError, match=r"input 0 is .*TILE.*; the trace was captured for .*ROW_MAJOR"):
        path.run(wrong)
    path.release()
    ttnn.close_device(device)


def test_a_uint8_row_major_input_goes_through_the_staging_copy(ttnn):
    """The image input may be raw uint8 pixels (cast on the device): the staging buffer and the
    copy into the trace's input take the host tensor's dtype and layout as they are."""
    device = _open(ttnn, 2)

    def forward(x):
        wide = ttnn.typecast(x, ttnn.bfloat16)
        tiles = ttnn.to_layout(wide, ttnn.TILE_LAYOUT)
        ttnn.deallocate(wide)
        return [tiles]

    path = TracedPath(ttnn, device, forward, command_queues=2)
    frames = [
        torch.randint(0, 256, (1, 1, 64, 64), generator=torch.Generator().manual_seed(s)) for s in range(3)
    ]
    hosts = [ttnn.from_torch(f, dtype=ttnn.uint8, layout=ttnn.ROW_MAJOR_LAYOUT) for f in frames]
    path.capture(hosts[0])
    assert path.staging[0].dtype == path.inputs[0].dtype == ttnn.uint8
    for host, values in zip(hosts[1:], frames[1:], strict=True):
        assert torch.equal(ttnn.to_torch(path.run(host)[0]).float(), values.float())
    path.release()
    ttnn.close_device(device)


def test_the_emulated_copy_keeps_the_devices_rules(ttnn):
    device = _open(ttnn, 2)
    source = ttnn.from_torch(torch.ones(32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    other = ttnn.from_torch(torch.ones(32, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    target = ttnn.allocate_tensor_on_device(ttnn.Shape([32, 32]), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    with pytest.raises(ttnn.EmulatorError, match="differ in shape"):
        ttnn.copy(other, target)
    host = ttnn.from_torch(torch.ones(32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    with pytest.raises(ttnn.EmulatorError, match="not a device tensor"):
        ttnn.copy(host, target)
    ttnn.copy(source, target)
    assert torch.equal(ttnn.to_torch(target).float(), torch.ones(32, 32))
    # Queue 1's write of the source is not seen by queue 0's copy without an event.
    ttnn.copy_host_to_device_tensor(host, source, cq_id=1)
    with pytest.raises(ttnn.EmulatorError, match="race on"):
        ttnn.copy(source, target)
    ttnn.close_device(device)
