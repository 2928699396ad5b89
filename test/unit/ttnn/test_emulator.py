"""The TT-NN emulator against torch and hand-worked cases: numerics, layouts, placement, traces."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812


def _pcc(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten().double(), b.flatten().double()
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])


@pytest.fixture
def device(ttnn):
    dev = ttnn.open_device(device_id=0, l1_small_size=32768, trace_region_size=1 << 20)
    yield dev


def _dev(ttnn, device, x, dtype=None, layout=None):
    return ttnn.from_torch(x, dtype=dtype or ttnn.bfloat16, layout=layout or ttnn.TILE_LAYOUT, device=device)


# bfloat8_b -------------------------------------------------------------------------------------
def test_bfloat8_b_hand_worked_block(ttnn):
    # One block of 16, largest exponent 2^0: a step of 2^-6 for everybody in the block.
    block = torch.zeros(16)
    block[0] = 1.0
    block[1] = 1.5 * 2**-6  # tie between 1 and 2 steps -> even (2)
    block[2] = 2.5 * 2**-6  # tie between 2 and 3 steps -> even (2)
    block[3] = 2**-8  # a quarter step: lost
    block[4] = -(2**-8)  # lost, and the sign with it (no negative zero)
    block[5] = 127.6 / 64  # rounds to 128 steps: saturates at 127, no carry into the exponent
    block[6] = -0.75
    got = ttnn.quantize_bfloat8_b(block)
    want = torch.zeros(16)
    want[0], want[1], want[2], want[5], want[6] = 1.0, 2 * 2**-6, 2 * 2**-6, 127 / 64, -0.75
    assert torch.equal(got, want)
    assert not torch.signbit(got[4])


def test_bfloat8_b_blocks_are_16_along_the_last_dim(ttnn):
    # A large value only coarsens its own block: the next 16 values keep their precision.
    row = torch.full((32,), 0.3)
    row[0] = 1000.0
    got = ttnn.quantize_bfloat8_b(row)
    assert torch.all(got[1:16] == 0.0)  # 0.3 is below a 2^3 step of the first block
    assert torch.allclose(got[16:], torch.full((16,), 0.3), atol=2**-8)


def test_bfloat8_b_loses_what_the_format_loses_and_no_more(ttnn):
    torch.manual_seed(0)
    x = torch.randn(64, 96) * torch.exp(torch.randn(64, 96) * 2)
    got = ttnn.quantize_bfloat8_b(x)
    blocks = x.reshape(-1, 16)
    shared = torch.frexp(blocks.abs().amax(dim=1, keepdim=True))[1] - 1  # exponent of the largest
    step = torch.exp2(shared.double() - 6)
    err = (got.reshape(-1, 16).double() - blocks.double()).abs()
    saturated = got.reshape(-1, 16).abs() == 127 * step
    assert torch.all(err[~saturated] <= step.expand_as(err)[~saturated] / 2)
    assert torch.all(err[saturated] <= step.expand_as(err)[saturated])
    assert torch.equal(ttnn.quantize_bfloat8_b(got), got)  # representable values are kept exactly


def test_bfloat16_rounding_is_torchs(ttnn):
    x = torch.randn(8, 40)
    t = ttnn.from_torch(x, dtype=ttnn.bfloat16)
    assert torch.equal(ttnn.to_torch(t).float(), x.bfloat16().float())


# layouts and placement ---------------------------------------------------------------------------
def test_tile_pads_and_bfloat8_b_needs_tile(ttnn):
    t = ttnn.from_torch(torch.zeros(1, 1, 33, 17), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    assert list(t.shape) == [1, 1, 33, 17]
    assert list(t.padded_shape) == [1, 1, 64, 32]
    with pytest.raises(ttnn.EmulatorError, match="TILE"):
        ttnn.from_torch(torch.zeros(4, 32), dtype=ttnn.bfloat8_b, layout=ttnn.ROW_MAJOR_LAYOUT)


def test_matmul_refuses_row_major_and_host_tensors(ttnn, device):
    a = _dev(ttnn, device, torch.randn(32, 64), layout=ttnn.ROW_MAJOR_LAYOUT)
    b = _dev(ttnn, device, torch.randn(64, 32))
    with pytest.raises(ttnn.EmulatorError, match="TILE"):
        ttnn.matmul(a, b)
    host = ttnn.from_torch(torch.randn(32, 64), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    with pytest.raises(ttnn.EmulatorError, match="host"):
        ttnn.matmul(host, b)


def test_deallocated_tensor_cannot_be_used(ttnn, device):
    a = _dev(ttnn, device, torch.randn(32, 32))
    ttnn.deallocate(a)
    with pytest.raises(ttnn.EmulatorError, match="deallocated"):
        ttnn.add(a, 1.0)


def test_one_owner_per_chip(ttnn, device):
    with pytest.raises(ttnn.EmulatorError, match="in use"):
        ttnn.open_device(device_id=0)
    with pytest.raises(ttnn.EmulatorError, match="no chip"):
        ttnn.open_device(device_id=3)
    ttnn.close_device(device)
    ttnn.SETTINGS.busy_device_ids.add(0)
    with pytest.raises(ttnn.EmulatorError, match="in use"):
        ttnn.open_device(device_id=0)


def test_dispatch_choice_sets_the_grid(ttnn):
    eth = ttnn.DispatchCoreConfig(type=ttnn.DispatchCoreType.ETH)
    dev = ttnn.open_device(device_id=0, dispatch_core_config=eth)
    assert (dev.compute_with_storage_grid_size().x, dev.compute_with_storage_grid_size().y) == (12, 10)
    ttnn.close_device(dev)
    dev = ttnn.open_device(device_id=0)
    assert (dev.compute_with_storage_grid_size().x, dev.compute_with_storage_grid_size().y) == (11, 10)


def test_sharded_memory_configs_are_checked(ttnn, device):
    def sharded(x_end: int, y_end: int, shape: tuple[int, int]):
        grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(x_end, y_end))})
        spec = ttnn.ShardSpec(grid, shape, ttnn.ShardOrientation.ROW_MAJOR)
        return ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, spec)

    x = torch.randn(1, 1, 256, 64)
    ttnn.from_torch(
        x, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device, memory_config=sharded(7, 0, (32, 64))
    )
    with pytest.raises(ttnn.EmulatorError, match="compute grid"):
        ttnn.from_torch(
            x,
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=device,
            memory_config=sharded(11, 0, (32, 64)),
        )  # 12 columns: one is dispatch here
    with pytest.raises(ttnn.EmulatorError, match="divide"):
        ttnn.from_torch(
            x,
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=device,
            memory_config=sharded(2, 0, (96, 64)),
        )


# ops against torch -------------------------------------------------------------------------------
def test_linear_with_bias_and_gelu(ttnn, device):
    torch.manual_seed(1)
    x, w, b = torch.randn(2, 40, 64), torch.randn(64, 96) / 8, torch.randn(96)
    out = ttnn.linear(
        _dev(ttnn, device, x),
        _dev(ttnn, device, w, ttnn.bfloat8_b),
        bias=_dev(ttnn, device, b.reshape(1, 96)),
        activation="gelu",
    )
    want = F.gelu(x.bfloat16().float() @ ttnn.quantize_bfloat8_b(w) + b.bfloat16().float())
    assert list(out.shape) == [2, 40, 96]
    assert torch.allclose(ttnn.to_torch(out).float(), want, atol=2e-2, rtol=1e-2)
    with pytest.raises(ttnn.EmulatorError, match="inner dims"):
        ttnn.linear(_dev(ttnn, device, x), _dev(ttnn, device, w.T))


def test_layer_norm_matches_torch(ttnn, device):
    x, w, b = torch.randn(1, 64, 128), torch.randn(128), torch.randn(128)
    out = ttnn.layer_norm(
        _dev(ttnn, device, x),
        epsilon=1e-6,
        weight=_dev(ttnn, device, w.reshape(1, -1)),
        bias=_dev(ttnn, device, b.reshape(1, -1)),
    )
    want = F.layer_norm(x.bfloat16().float(), (128,), w.bfloat16().float(), b.bfloat16().float(), 1e-6)
    assert _pcc(ttnn.to_torch(out), want) > 0.9999


def test_attention_heads_split_attend_and_concatenate(ttnn, device):
    torch.manual_seed(2)
    heads, dim = 2, 32
    qkv = torch.randn(3, 64, 3 * heads * dim)
    q, k, v = ttnn.transformer.split_query_key_value_and_split_heads(
        _dev(ttnn, device, qkv), num_heads=heads, transpose_key=False
    )
    assert list(q.shape) == [3, heads, 64, dim] and list(k.shape) == [3, heads, 64, dim]
    config = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=32, k_chunk_size=64)
    attn = ttnn.transformer.scaled_dot_product_attention(
        q, k, v, is_causal=False, scale=dim**-0.5, program_config=config
    )
    merged = ttnn.transformer.concatenate_heads(attn)
    ref = qkv.bfloat16().float().reshape(3, 64, 3, heads, dim).permute(2, 0, 3, 1, 4)
    want = F.scaled_dot_product_attention(ref[0], ref[1], ref[2]).permute(0, 2, 1, 3).reshape(3, 64, -1)
    assert _pcc(ttnn.to_torch(merged), want) > 0.999
    bad = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=48, k_chunk_size=64)
    with pytest.raises(ttnn.EmulatorError, match="chunk"):
        ttnn.transformer.scaled_dot_product_attention(q, k, v, is_causal=False, program_config=bad)


def test_conv2d_and_max_pool_on_flattened_nhwc(ttnn, device):
    torch.manual_seed(3)
    x, w, b = torch.randn(1, 16, 12, 10), torch.randn(32, 16, 3, 3) / 12, torch.randn(32)
    flat = x.permute(0, 2, 3, 1).reshape(1, 1, 120, 16)
    host_w = ttnn.from_torch(w, dtype=ttnn.float32)
    host_b = ttnn.from_torch(b.reshape(1, 1, 1, 32), dtype=ttnn.float32)
    out, (h, wd), (dev_w, _) = ttnn.conv2d(
        input_tensor=_dev(ttnn, device, flat),
        weight_tensor=host_w,
        bias_tensor=host_b,
        device=device,
        in_channels=16,
        out_channels=32,
        batch_size=1,
        input_height=12,
        input_width=10,
        kernel_size=(3, 3),
        stride=(1, 1),
        padding=(1, 1),
        conv_config=ttnn.Conv2dConfig(weights_dtype=ttnn.bfloat8_b),
        return_output_dim=True,
        return_weights_and_bias=True,
    )
    assert (h, wd) == (12, 10) and dev_w.device() is device
    want = F.conv2d(x, w, b, padding=1).permute(0, 2, 3, 1).reshape(1, 1, 120, 32)
    assert _pcc(ttnn.to_torch(out), want) > 0.999
    pooled = ttnn.max_pool2d(
        _dev(ttnn, device, flat, layout=ttnn.ROW_MAJOR_LAYOUT), 1, 12, 10, 16, [2, 2], [2, 2], [0, 0], [1, 1]
    )
    want = F.max_pool2d(x.bfloat16().float(), 2).permute(0, 2, 3, 1).reshape(1, 1, 30, 16)
    assert torch.equal(ttnn.to_torch(pooled).float(), want)


def test_reshape_permute_and_layout_round_trip(ttnn, device):
    x = torch.randn(1, 6, 4, 8)
    t = ttnn.to_layout(_dev(ttnn, device, x), ttnn.ROW_MAJOR_LAYOUT)
    t = ttnn.permute(ttnn.reshape(t, (1, 2, 3, 4, 8)), (0, 2, 1, 3, 4))
    t = ttnn.to_layout(t, ttnn.TILE_LAYOUT)
    want = x.bfloat16().float().reshape(1, 2, 3, 4, 8).permute(0, 2, 1, 3, 4)
    assert torch.equal(ttnn.to_torch(t).float(), want)
    with pytest.raises(ttnn.EmulatorError, match="cannot become"):
        ttnn.reshape(t, (1, 5, 8))


def test_a_reshape_is_a_view_of_its_input(ttnn, device):
    source = _dev(ttnn, device, torch.randn(1, 64, 32))
    view = ttnn.reshape(source, (2, 32, 32))
    ttnn.deallocate(view)
    with pytest.raises(ttnn.EmulatorError, match="deallocated"):
        ttnn.add(source, 1.0)  # freeing the view freed the source's buffer


# metal traces ------------------------------------------------------------------------------------
def _path(ttnn, x, w):
    return ttnn.add(ttnn.matmul(x, w), 1.0)


def test_trace_replays_on_new_input_and_matches_eager(ttnn, device):
    torch.manual_seed(4)
    w = _dev(ttnn, device, torch.randn(32, 32))
    buffer = ttnn.allocate_tensor_on_device(ttnn.Shape([32, 32]), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    first, second = torch.randn(32, 32), torch.randn(32, 32)
    ttnn.copy_host_to_device_tensor(
        ttnn.from_torch(first, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT), buffer
    )
    eager = ttnn.to_torch(_path(ttnn, buffer, w))
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    out = _path(ttnn, buffer, w)
    ttnn.end_trace_capture(device, trace, cq_id=0)
    assert torch.isnan(ttnn.to_torch(out)).all()  # captured, not run
    ttnn.execute_trace(device, trace, cq_id=0, blocking=True)
    assert torch.equal(ttnn.to_torch(out), eager)
    ttnn.copy_host_to_device_tensor(
        ttnn.from_torch(second, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT), buffer
    )
    ttnn.execute_trace(device, trace, cq_id=0, blocking=True)
    want = second.bfloat16().float() @ ttnn.to_torch(w).float() + 1.0
    assert _pcc(ttnn.to_torch(out), want) > 0.9999
    assert not torch.equal(ttnn.to_torch(out), eager)
    ttnn.release_trace(device, trace)


def test_trace_rules(ttnn, device):
    w = _dev(ttnn, device, torch.randn(32, 32))
    x = _dev(ttnn, device, torch.randn(32, 32))
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="not compiled"):
        _path(ttnn, x, w)  # never run eagerly
    ttnn.end_trace_capture(device, trace, cq_id=0)
    ttnn.release_trace(device, trace)

    _path(ttnn, x, w)  # compile
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    out = _path(ttnn, x, w)
    with pytest.raises(ttnn.EmulatorError, match="inside a trace capture"):
        ttnn.to_torch(out)
    with pytest.raises(ttnn.EmulatorError, match="inside a trace capture"):
        ttnn.copy_host_to_device_tensor(
            ttnn.from_torch(torch.zeros(32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT), x
        )
    ttnn.end_trace_capture(device, trace, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="already captured"):
        ttnn.begin_trace_capture(device, cq_id=0)
    late = _dev(ttnn, device, torch.ones(32, 32))
    ttnn.execute_trace(device, trace, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="overwritten by a replay"):
        ttnn.to_torch(late)
    ttnn.deallocate(x)
    with pytest.raises(ttnn.EmulatorError, match="trace input"):
        ttnn.execute_trace(device, trace, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="release_trace first"):
        ttnn.close_device(device)
    ttnn.release_trace(device, trace)
    ttnn.close_device(device)


def test_only_command_queue_0_exists(ttnn, device):
    with pytest.raises(ttnn.EmulatorError, match="command queue 1"):
        ttnn.begin_trace_capture(device, cq_id=1)
    buffer = ttnn.allocate_tensor_on_device(ttnn.Shape([32, 32]), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    host = ttnn.from_torch(torch.zeros(32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    with pytest.raises(ttnn.EmulatorError, match="command queue 1"):
        ttnn.copy_host_to_device_tensor(host, buffer, cq_id=1)


def test_capture_needs_a_trace_region(ttnn):
    dev = ttnn.open_device(device_id=0)
    with pytest.raises(ttnn.EmulatorError, match="trace_region_size"):
        ttnn.begin_trace_capture(dev, cq_id=0)


def test_as_tensor_caches_the_conversion(ttnn, device, tmp_path):
    x = torch.randn(64, 64)
    first = ttnn.as_tensor(
        x, ttnn.bfloat8_b, layout=ttnn.TILE_LAYOUT, device=device, cache_file_name=tmp_path / "w"
    )
    files = list(tmp_path.iterdir())
    assert len(files) == 1
    second = ttnn.as_tensor(
        torch.zeros(64, 64),
        ttnn.bfloat8_b,
        layout=ttnn.TILE_LAYOUT,
        device=device,
        cache_file_name=tmp_path / "w",
    )  # served from the cache, not converted
    assert torch.equal(ttnn.to_torch(second), ttnn.to_torch(first))
    assert math.isclose(_pcc(ttnn.to_torch(first), x), 1.0, abs_tol=1e-3)
