"""The TT-NN emulator against torch and hand-worked cases: numerics, layouts, placement, traces."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from compare import pcc as _pcc


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


@pytest.mark.parametrize("harvested, worker, ethernet", [(0, 13, 14), (1, 12, 13), (2, 11, 12)])
def test_the_grid_follows_harvesting_and_dispatch(ttnn, harvested, worker, ethernet):
    ttnn.SETTINGS.harvested_columns = harvested
    dev = ttnn.open_device(device_id=0)  # tt-metal's default on Blackhole: worker dispatch on a column
    assert (dev.compute_with_storage_grid_size().x, dev.compute_with_storage_grid_size().y) == (worker, 10)
    ttnn.close_device(dev)
    ttnn.SETTINGS.eth_dispatch_opens = True
    eth = ttnn.DispatchCoreConfig(type=ttnn.DispatchCoreType.ETH)
    dev = ttnn.open_device(device_id=0, dispatch_core_config=eth)
    assert (dev.compute_with_storage_grid_size().x, dev.compute_with_storage_grid_size().y) == (ethernet, 10)


def test_ethernet_dispatch_fails_to_open_on_current_builds(ttnn):
    eth = ttnn.DispatchCoreConfig(type=ttnn.DispatchCoreType.ETH)
    with pytest.raises(ttnn.EmulatorError, match="No core coordinate found"):
        ttnn.open_device(device_id=0, dispatch_core_config=eth)
    ttnn.close_device(ttnn.open_device(device_id=0))  # the default: a retry in the same process works
    ttnn.SETTINGS.failed_open_breaks_process = True
    with pytest.raises(ttnn.EmulatorError, match="No core coordinate found"):
        ttnn.open_device(device_id=0, dispatch_core_config=eth)
    with pytest.raises(ttnn.EmulatorError, match="cannot open a device any more"):
        ttnn.open_device(device_id=0)


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
        )  # 12 columns: a p150a computes on 11 with worker dispatch
    with pytest.raises(ttnn.EmulatorError, match="divide"):
        ttnn.from_torch(
            x,
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=device,
            memory_config=sharded(2, 0, (96, 64)),
        )


# ops against torch -------------------------------------------------------------------------------
def _fidelity(ttnn, name: str):
    return ttnn.WormholeComputeKernelConfig(math_fidelity=getattr(ttnn.MathFidelity, name))


def test_linear_with_bias_and_gelu(ttnn, device):
    torch.manual_seed(1)
    x, w, b = torch.randn(2, 40, 64), torch.randn(64, 96) / 8, torch.randn(96)
    out = ttnn.linear(
        _dev(ttnn, device, x),
        _dev(ttnn, device, w, ttnn.bfloat8_b),
        bias=_dev(ttnn, device, b.reshape(1, 96)),
        activation="gelu",
        compute_kernel_config=_fidelity(ttnn, "HiFi4"),
    )
    # The fused gelu is the approximate one (the tanh form models it).
    exact = x.bfloat16().float() @ ttnn.quantize_bfloat8_b(w) + b.bfloat16().float()
    want = F.gelu(exact, approximate="tanh")
    assert list(out.shape) == [2, 40, 96]
    assert torch.allclose(ttnn.to_torch(out).float(), want, atol=2e-2, rtol=1e-2)
    with pytest.raises(ttnn.EmulatorError, match="inner dims"):
        ttnn.linear(_dev(ttnn, device, x), _dev(ttnn, device, w.T))


def _program(ttnn, **changes):
    """A 2-D multicast program for (1, 5184, 1024) @ (1024, 4736) on 11x10 with GELU fused: the one
    the real library on a mock p150a accepts (162 row tiles over 10 rows of 17, 148 column tiles
    over 11 columns of 14); `changes` breaks one rule."""
    fields = dict(
        compute_with_storage_grid_size=ttnn.CoreCoord(11, 10),
        in0_block_w=2,
        out_subblock_h=1,
        out_subblock_w=2,
        out_block_h=1,
        out_block_w=14,
        per_core_M=17,
        per_core_N=14,
        transpose_mcast=False,
        fused_activation=ttnn.UnaryWithParam(ttnn.UnaryOpType.GELU, 1.0),
    )
    return ttnn.MatmulMultiCoreReuseMultiCastProgramConfig(**{**fields, **changes})


def test_a_matmul_program_fuses_bias_and_gelu_in_one_op(ttnn, device):
    torch.manual_seed(2)
    x, w, b = torch.randn(1, 5184, 1024) / 4, torch.randn(1024, 4736) / 32, torch.randn(4736)
    args = (_dev(ttnn, device, x), _dev(ttnn, device, w, ttnn.bfloat8_b))
    bias = _dev(ttnn, device, b.reshape(1, -1))
    kernel = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.LoFi, fp32_dest_acc_en=True)
    before = len(device.ops)
    fused = ttnn.linear(*args, bias=bias, program_config=_program(ttnn), compute_kernel_config=kernel)
    assert len(device.ops) == before + 1
    separate = ttnn.linear(*args, bias=bias, activation="gelu", compute_kernel_config=kernel)
    assert torch.equal(ttnn.to_torch(fused), ttnn.to_torch(separate))


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (dict(per_core_M=16), "row tiles need more grid rows"),
        (dict(per_core_N=13, out_block_w=13, out_subblock_w=1), "column tiles need more columns"),
        (dict(in0_block_w=3), "Kt \\(32\\) must be divisible by in0_block_w"),
        (dict(out_subblock_w=7), "4 destination tiles"),
        (dict(out_subblock_w=4), "out_block_w must be divisible by out_subblock_w"),
        (dict(compute_with_storage_grid_size=(12, 10)), "does not fit the compute grid"),
    ],
)
def test_a_matmul_program_is_refused_where_the_real_library_refuses_it(ttnn, device, change, rule):
    """Each change is one the real library on a mock p150a refuses (TT_FATAL in its
    matmul_device_operation.cpp); the unchanged program is accepted (the test above)."""
    x = _dev(ttnn, device, torch.zeros(1, 5184, 1024))
    w = _dev(ttnn, device, torch.zeros(1024, 4736), ttnn.bfloat8_b)
    kernel = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.LoFi, fp32_dest_acc_en=True)
    with pytest.raises(ttnn.EmulatorError, match=rule):
        ttnn.linear(x, w, program_config=_program(ttnn, **change), compute_kernel_config=kernel)


def test_a_matmul_program_and_a_separate_activation_are_not_both_taken(ttnn, device):
    x = _dev(ttnn, device, torch.zeros(1, 5184, 1024))
    w = _dev(ttnn, device, torch.zeros(1024, 4736), ttnn.bfloat8_b)
    kernel = ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity.LoFi, fp32_dest_acc_en=True)
    with pytest.raises(ttnn.EmulatorError, match="activation= beside"):
        ttnn.linear(x, w, activation="gelu", program_config=_program(ttnn), compute_kernel_config=kernel)


def test_each_fidelity_keeps_the_operand_bits_the_matrix_engine_keeps(ttnn, device):
    # Activation 1 + 2^-7 has its lowest bfloat16 bit set: SrcB (7 bits) drops it below HiFi3.
    # Weight 1 + 2^-5 needs 6 bits: SrcA's first phase (5 bits) drops it at LoFi only.
    a = _dev(ttnn, device, torch.full((32, 32), 1 + 2**-7))
    w = torch.zeros(32, 32)
    w[0, 0] = 1 + 2**-5
    w_dev = _dev(ttnn, device, w)
    got = {
        name: ttnn.to_torch(
            ttnn.matmul(a, w_dev, dtype=ttnn.float32, compute_kernel_config=_fidelity(ttnn, name))
        )[0, 0].item()
        for name in ("LoFi", "HiFi2", "HiFi3", "HiFi4")
    }
    assert got["LoFi"] == 1.0
    assert got["HiFi2"] == 1 + 2**-5
    assert got["HiFi3"] == got["HiFi4"] - 2**-7 * 2**-5  # only low A x low B is missing
    assert got["HiFi4"] == (1 + 2**-7) * (1 + 2**-5)
    # Without a config, ttnn's default fidelity (LoFi) applies.
    assert ttnn.to_torch(ttnn.matmul(a, w_dev, dtype=ttnn.float32))[0, 0].item() == got["LoFi"]


def test_lower_fidelity_loses_more(ttnn, device):
    torch.manual_seed(5)
    x, w = torch.randn(64, 256), torch.randn(256, 64) / 16
    exact = x.bfloat16().float() @ w.bfloat16().float()
    errors = []
    for name in ("HiFi4", "HiFi3", "HiFi2", "LoFi"):
        out = ttnn.matmul(
            _dev(ttnn, device, x),
            _dev(ttnn, device, w),
            dtype=ttnn.float32,
            compute_kernel_config=_fidelity(ttnn, name),
        )
        errors.append(float((ttnn.to_torch(out) - exact).abs().mean()))
    assert errors[0] < 1e-6 < errors[1] < errors[2] < errors[3]


def test_approximate_exp_is_the_bit_shift_form(ttnn):
    from ttnn_emulator import _numerics

    x = torch.linspace(-20, 20, 40001)
    ratio = _numerics.approximate_exp(x) / torch.exp(x)
    assert float(ratio.min()) >= 1.0 - 1e-6 and float(ratio.max()) == pytest.approx(1.0615, abs=1e-3)
    powers = torch.arange(-10, 11, dtype=torch.float32) * math.log(2.0)
    assert torch.allclose(_numerics.approximate_exp(powers), torch.exp(powers), rtol=1e-5)


def test_approximate_exp_is_ldexp_of_the_fraction_bit_for_bit(ttnn):
    """The in-place form (integer add into the exponent bits) against ldexp written out, on the
    whole float32 range, the underflow edge and the special values; the input is left as it was."""
    from ttnn_emulator import _numerics

    inf = math.inf
    special = torch.tensor([0.0, -0.0, inf, -inf, math.nan, 88.72, 88.73, -87.33, -87.34, 3.4e38, -3.4e38])
    wide, tiny = torch.randn(100_000) * 60, torch.randn(1000) * 1e-20
    x = torch.cat([torch.linspace(-200, 200, 400_001), wide, tiny, special])
    x = torch.cat([x, torch.nextafter(x, torch.tensor(inf)), torch.nextafter(x, torch.tensor(-inf))])
    kept = x.clone()
    scaled = x * (1.0 / math.log(2.0))
    whole = torch.floor(scaled)
    written_out = torch.ldexp(1.0 + (scaled - whole), whole.clamp(-150, 128).to(torch.int32))
    want = torch.where(scaled < -126, torch.zeros_like(written_out), written_out)
    got = _numerics.approximate_exp(x)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num().view(torch.int32), want.nan_to_num().view(torch.int32))
    assert torch.equal(x.nan_to_num(), kept.nan_to_num())


def test_sdpa_approximate_exp_and_fidelity_change_the_result_a_little(ttnn, device):
    torch.manual_seed(6)
    q, k, v = (_dev(ttnn, device, torch.randn(1, 2, 128, 64)) for _ in range(3))
    ref = [ttnn.to_torch(t).float() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*ref)

    def run(approx: bool, fidelity: str) -> torch.Tensor:
        config = ttnn.SDPAProgramConfig(
            compute_with_storage_grid_size=(8, 8), q_chunk_size=64, k_chunk_size=64, exp_approx_mode=approx
        )
        out = ttnn.transformer.scaled_dot_product_attention(
            q, k, v, is_causal=False, program_config=config, compute_kernel_config=_fidelity(ttnn, fidelity)
        )
        return ttnn.to_torch(out).float()

    exact, approx, lofi = run(False, "HiFi4"), run(True, "HiFi4"), run(False, "LoFi")
    assert _pcc(exact, want) > 0.9999
    assert not torch.equal(approx, exact) and 0.99 < _pcc(approx, want) < _pcc(exact, want)
    assert 0.99 < _pcc(lofi, want) < _pcc(exact, want)


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


def test_sin_and_log1p_round_to_their_dtype_and_refuse_integers(ttnn, device):
    x = torch.linspace(-8, 8, 64 * 32).reshape(1, 64, 32)
    sine = ttnn.to_torch(ttnn.sin(_dev(ttnn, device, x))).float()
    assert torch.equal(sine, x.bfloat16().float().sin().bfloat16().float())
    grown = ttnn.to_torch(ttnn.log1p(_dev(ttnn, device, x.abs(), dtype=ttnn.float32)))
    assert torch.equal(grown, x.abs().log1p())
    assert bool(ttnn.to_torch(ttnn.log1p(_dev(ttnn, device, x))).float()[0, 0, 0].isnan())  # below -1
    with pytest.raises(ttnn.EmulatorError, match="not one of bfloat16"):
        ttnn.sin(_dev(ttnn, device, torch.ones(1, 32, 32, dtype=torch.int32), dtype=ttnn.int32))


def test_repeat_copies_and_by_ones_returns_its_input(ttnn, device):
    x = _dev(ttnn, device, torch.randn(1, 32, 64))
    twice = ttnn.repeat(x, (2, 1, 1))
    assert tuple(twice.shape) == (2, 32, 64)
    assert torch.equal(ttnn.to_torch(twice)[1], ttnn.to_torch(x)[0])
    same = ttnn.repeat(x, (1, 1, 1))
    assert same is x  # as ttnn's RepeatOperation: deallocating "the copy" frees the input
    with pytest.raises(ttnn.EmulatorError, match="rank"):
        ttnn.repeat(x, (2, 1))


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


def test_uint8_pixels_are_typecast_before_the_device_tilizes_or_copies_them(ttnn, device):
    """The real 0.81.1 library on a mock p150a refuses to tilize or reshape-copy uint8 (only
    bfloat16, float32, uint32, int32 there); its ROW_MAJOR typecast takes uint8 and keeps the
    layout. The emulator refuses the same calls and casts 0..255 to bfloat16 exactly."""
    pixels = torch.arange(256, dtype=torch.uint8).repeat(2, 3).reshape(1, 6, 256)
    raw = ttnn.from_torch(pixels, dtype=ttnn.uint8, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    with pytest.raises(ttnn.EmulatorError, match="tilizes"):
        ttnn.to_layout(raw, ttnn.TILE_LAYOUT)
    with pytest.raises(ttnn.EmulatorError, match="ROW_MAJOR copy"):
        ttnn.reshape(raw, (1, 3, 512))
    view = ttnn.reshape(raw, (1, 1, 6, 256))  # last dim kept: a view, no device copy
    cast = ttnn.typecast(view, ttnn.bfloat16)
    assert (cast.dtype, cast.layout) == (ttnn.bfloat16, ttnn.ROW_MAJOR_LAYOUT)
    assert torch.equal(ttnn.to_torch(cast).float(), pixels.reshape(1, 1, 6, 256).float())
    assert ttnn.to_torch(raw).dtype == torch.uint8
    with pytest.raises(ttnn.EmulatorError, match="bfloat8_b needs TILE"):
        ttnn.typecast(raw, ttnn.bfloat8_b)
    with pytest.raises(ttnn.EmulatorError, match="not emulated"):
        ttnn.typecast(cast, ttnn.uint8)
    with pytest.raises(ValueError, match=r"outside \[0, 255\]"):
        ttnn.from_torch(torch.tensor([256]), dtype=ttnn.uint8)


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


def test_open_device_has_only_command_queue_0(ttnn, device):
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


# strictness: each rule refuses a deliberately wrong call -----------------------------------------
def _l1_sharded(ttnn, cores_x: int, shard: tuple[int, int]):
    grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(cores_x - 1, 0))})
    spec = ttnn.ShardSpec(grid, shard, ttnn.ShardOrientation.ROW_MAJOR)
    return ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, spec)


def test_l1_buffers_must_fit_the_bank_of_each_core(ttnn, device):
    cores = 11 * 10

    # Interleaved bfloat16 tiles (2 KiB) go round-robin over the cores' banks: 697 tiles per core
    # is 1,427,456 B, just inside the 1,428,352 B bank; one more tile per core is not.
    def l1(values):
        return ttnn.from_torch(
            values,
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=device,
            memory_config=ttnn.L1_MEMORY_CONFIG,
        )

    big = l1(torch.zeros(1, 1, 32 * 697, 32 * cores))
    assert device.l1_used_per_core() == 697 * 2048
    with pytest.raises(
        ttnn.EmulatorError, match=r"needs 2,048 B per core in L1; 1,427,456 B of the 1,428,352 B"
    ):
        l1(torch.zeros(32, 32))
    small = _dev(ttnn, device, torch.zeros(32, 32))  # DRAM is not L1: this fits
    with pytest.raises(ttnn.EmulatorError, match="Out of Memory"):
        ttnn.add(small, 1.0, memory_config=ttnn.L1_MEMORY_CONFIG)  # an op's L1 output is a buffer too
    ttnn.deallocate(big)
    assert device.l1_used_per_core() == 0
    kept = l1(torch.zeros(32, 32))
    view = ttnn.reshape(kept, (1, 32, 32))  # a view takes no second buffer
    assert device.l1_used_per_core() == 2048 and view.is_allocated()


def test_a_shard_larger_than_the_bank_fails_with_the_figure(ttnn, device):
    # 2 MiB per core, which the real library refuses too (docs/design/facts.md, Mock p150a).
    x = torch.zeros(1, 1, 8 * 1024, 1024)
    with pytest.raises(ttnn.EmulatorError, match=r"needs 2,097,152 B per core in L1.*1,428,352 B bank"):
        ttnn.from_torch(
            x,
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=device,
            memory_config=_l1_sharded(ttnn, 8, (1024, 1024)),
        )
    half = ttnn.from_torch(
        x[:, :, : 4 * 1024],
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=device,
        memory_config=_l1_sharded(ttnn, 8, (512, 1024)),
    )  # 1 MiB per core fits
    assert device.l1_used_per_core() == 512 * 1024 * 2 and half.is_allocated()


def test_reshape_copies_unless_it_can_be_a_view(ttnn, device):
    source = _dev(ttnn, device, torch.randn(1, 64, 96))
    assert device.reshape_copies == 0
    view = ttnn.reshape(source, (2, 32, 96))  # last dim kept, rows 64 -> 32: whole tiles
    assert view._storage is source._storage and device.reshape_copies == 0
    copy = ttnn.reshape(source, (1, 96, 64))  # last dim changes: a copy
    odd = ttnn.reshape(source, (4, 16, 96))  # rows of 16 are not whole tiles: a copy
    assert device.reshape_copies == 2
    assert copy._storage is not source._storage and odd._storage is not source._storage
    ttnn.deallocate(source)
    assert copy.is_allocated() and not view.is_allocated()
    assert torch.equal(ttnn.to_torch(odd).float().reshape(-1), ttnn.to_torch(copy).float().reshape(-1))
    rows = ttnn.to_layout(_dev(ttnn, device, torch.randn(1, 6, 4, 8)), ttnn.ROW_MAJOR_LAYOUT)
    ttnn.reshape(rows, (1, 24, 8))  # ROW_MAJOR with the last dim kept: a view
    assert device.reshape_copies == 2


def test_a_reshape_copy_after_a_capture_is_overwritten_by_the_replay(ttnn, device):
    x = _dev(ttnn, device, torch.randn(32, 32))
    ttnn.add(x, 1.0)
    ttnn.reshape(x, (16, 64))  # compiled before the capture
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    ttnn.add(x, 1.0)
    ttnn.end_trace_capture(device, trace, cq_id=0)
    late = ttnn.reshape(x, (16, 64))  # a cached program, but an implicit allocation after the capture
    ttnn.execute_trace(device, trace, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="overwritten by a replay"):
        ttnn.to_torch(late)
    ttnn.release_trace(device, trace)


def _qkv(ttnn, device, sq=64, sk=64, memory_config=None):
    make = lambda s: ttnn.from_torch(  # noqa: E731
        torch.randn(1, 2, s, 32),
        dtype=ttnn.bfloat16,
        layout=ttnn.TILE_LAYOUT,
        device=device,
        memory_config=memory_config,
    )
    return make(sq), make(sk), make(sk)


@pytest.mark.parametrize(
    "case, match",
    [
        ("sharded operand", "interleaved, not sharded"),
        ("mask in L1", "mask must be in DRAM"),
        ("mask row major", "TILE"),
        ("mask and causal", "exclusive"),
        ("causal Sq != Sk", "Sq == Sk"),
        ("Sk % k_chunk", "dividing Sk = 96"),
        ("Sq % q_chunk", "dividing Sq = 64"),
    ],
)
def test_sdpa_refuses_what_the_kernel_refuses(ttnn, device, case, match):
    sdpa = ttnn.transformer.scaled_dot_product_attention
    q, k, v = _qkv(ttnn, device)
    chunks = ttnn.SDPAProgramConfig(compute_with_storage_grid_size=(8, 8), q_chunk_size=32, k_chunk_size=32)
    mask = torch.zeros(1, 1, 64, 64)
    kwargs: dict = dict(is_causal=False, program_config=chunks)
    if case == "sharded operand":
        q, k, v = _qkv(ttnn, device, memory_config=_l1_sharded(ttnn, 4, (32, 32)))
    elif case == "mask in L1":
        kwargs["attn_mask"] = ttnn.from_torch(
            mask,
            dtype=ttnn.bfloat16,
            layout=ttnn.TILE_LAYOUT,
            device=device,
            memory_config=ttnn.L1_MEMORY_CONFIG,
        )
    elif case == "mask row major":
        kwargs["attn_mask"] = _dev(ttnn, device, mask, layout=ttnn.ROW_MAJOR_LAYOUT)
    elif case == "mask and causal":
        kwargs.update(attn_mask=_dev(ttnn, device, mask), is_causal=True)
    elif case == "causal Sq != Sk":
        q, k, v = _qkv(ttnn, device, sq=64, sk=96)
        kwargs["is_causal"] = True
    elif case == "Sk % k_chunk":
        q, k, v = _qkv(ttnn, device, sq=64, sk=96)
        kwargs["program_config"] = ttnn.SDPAProgramConfig(
            compute_with_storage_grid_size=(8, 8), q_chunk_size=32, k_chunk_size=64
        )
    elif case == "Sq % q_chunk":
        kwargs["program_config"] = ttnn.SDPAProgramConfig(
            compute_with_storage_grid_size=(8, 8), q_chunk_size=96, k_chunk_size=32
        )
    with pytest.raises(ttnn.EmulatorError, match=match):
        sdpa(q, k, v, **kwargs)


def test_sdpa_accepts_a_dram_mask_that_broadcasts(ttnn, device):
    q, k, v = _qkv(ttnn, device)
    bias = torch.randn(1, 1, 64, 64)
    out = ttnn.transformer.scaled_dot_product_attention(
        q, k, v, attn_mask=_dev(ttnn, device, bias), is_causal=False
    )
    ref = [ttnn.to_torch(t).float() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*ref, attn_mask=bias.bfloat16().float())
    assert _pcc(ttnn.to_torch(out), want) > 0.999


def test_rotary_embedding_is_rotate_half_with_the_kernels_rounding(ttnn, device):
    x = torch.randn(2, 3, 64, 128)
    angles = torch.randn(1, 1, 96, 128)  # more table rows than the sequence: the first 64 are used
    heads, cos, sin = (_dev(ttnn, device, t) for t in (x, angles.cos(), angles.sin()))
    out = ttnn.experimental.rotary_embedding(heads, cos, sin)
    xb, c, s = (ttnn.to_torch(t).float() for t in (heads, cos, sin))
    c, s = c[..., :64, :], s[..., :64, :]
    turned = torch.cat((-xb[..., 64:], xb[..., :64]), dim=-1)
    want = ((xb * c).bfloat16().float() + (turned * s).bfloat16().float()).bfloat16().float()
    assert torch.equal(ttnn.to_torch(out).float(), want)
    assert list(out.shape) == [2, 3, 64, 128]


def test_rotary_embedding_pads_a_ragged_sequence_to_whole_tiles(ttnn, device):
    table = _dev(ttnn, device, torch.ones(1, 1, 64, 64))
    out = ttnn.experimental.rotary_embedding(_dev(ttnn, device, torch.ones(1, 1, 40, 64)), table, table)
    assert list(out.shape) == [1, 1, 64, 64]


@pytest.mark.parametrize(
    "case, match",
    [
        ("head dim 32", "multiple of 64"),
        ("table batch", "must be \\(1, 1, >= 64, 64\\)"),
        ("table too short", ">= 64"),
        ("table width", "must be \\(1, 1"),
        ("dtypes differ", "dtypes must match"),
        ("shapes differ", "dims must match"),
        ("row major", "TILE"),
        ("width sharded out", "WIDTH_SHARDED"),
        ("decode mode", "token_index"),
    ],
)
def test_rotary_embedding_refuses_what_the_op_refuses(ttnn, device, case, match):
    rope = ttnn.experimental.rotary_embedding
    x = torch.randn(2, 4, 64, 64)
    table = torch.randn(1, 1, 64, 64)
    args = [x, table, table]
    dtypes = [ttnn.bfloat16] * 3
    layout = ttnn.TILE_LAYOUT
    kwargs: dict = {}
    if case == "head dim 32":
        args = [torch.randn(2, 4, 64, 32), torch.randn(1, 1, 64, 32), torch.randn(1, 1, 64, 32)]
    elif case == "table batch":
        args[1] = args[2] = torch.randn(2, 1, 64, 64)
    elif case == "table too short":
        args[1] = args[2] = torch.randn(1, 1, 32, 64)
    elif case == "table width":
        args[1] = args[2] = torch.randn(1, 1, 64, 128)
    elif case == "dtypes differ":
        dtypes[2] = ttnn.bfloat8_b
    elif case == "shapes differ":
        args[2] = torch.randn(1, 1, 96, 64)
    elif case == "row major":
        layout = ttnn.ROW_MAJOR_LAYOUT
    elif case == "width sharded out":
        kwargs["memory_config"] = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.WIDTH_SHARDED, ttnn.BufferType.L1)
    elif case == "decode mode":
        kwargs["token_index"] = 0
    tensors = [_dev(ttnn, device, t, dtype=d, layout=layout) for t, d in zip(args, dtypes, strict=True)]
    with pytest.raises(ttnn.EmulatorError, match=match):
        rope(*tensors, **kwargs)


def test_several_traces_per_device_and_what_their_replays_clobber(ttnn, device):
    w = _dev(ttnn, device, torch.randn(32, 32))
    x = ttnn.allocate_tensor_on_device(ttnn.Shape([32, 32]), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    ttnn.copy_host_to_device_tensor(
        ttnn.from_torch(torch.randn(32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT), x
    )
    _path(ttnn, x, w)
    ttnn.mul(x, 2.0)  # compile both paths before the first capture
    first = ttnn.begin_trace_capture(device, cq_id=0)
    out_first = _path(ttnn, x, w)
    ttnn.end_trace_capture(device, first, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="inside a trace capture"):
        nested = ttnn.begin_trace_capture(device, cq_id=0)
        ttnn.synchronize_device(device)
    ttnn.end_trace_capture(device, nested, cq_id=0)
    ttnn.release_trace(device, nested)
    second = ttnn.begin_trace_capture(device, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="already in progress"):
        ttnn.begin_trace_capture(device, cq_id=0)
    out_second = ttnn.mul(x, 2.0)
    ttnn.end_trace_capture(device, second, cq_id=0)
    ttnn.execute_trace(device, second, cq_id=0)
    ttnn.execute_trace(device, first, cq_id=0)
    assert torch.equal(ttnn.to_torch(out_first), ttnn.to_torch(_path(ttnn, x, w)))
    # The second trace's buffers were allocated after the first was captured: its replay may reuse them.
    with pytest.raises(ttnn.EmulatorError, match="overwritten by a replay"):
        ttnn.to_torch(out_second)
    ttnn.execute_trace(device, second, cq_id=0)
    assert torch.equal(ttnn.to_torch(out_second), ttnn.to_torch(x).float() * 2)
    ttnn.release_trace(device, first)
    with pytest.raises(ttnn.EmulatorError, match="release_trace first"):
        ttnn.close_device(device)
    ttnn.release_trace(device, second)
    with pytest.raises(ttnn.EmulatorError, match="released"):
        ttnn.execute_trace(device, first, cq_id=0)


def test_a_program_compiled_after_a_capture_breaks_the_next_replay(ttnn, device):
    x = _dev(ttnn, device, torch.randn(32, 32))
    ttnn.add(x, 1.0)
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    ttnn.add(x, 1.0)
    ttnn.end_trace_capture(device, trace, cq_id=0)
    ttnn.execute_trace(device, trace, cq_id=0)
    ttnn.mul(x, 3.0)  # a new program: its binary and cache entries are allocated after the capture
    with pytest.raises(ttnn.EmulatorError, match="compiled after this trace was captured"):
        ttnn.execute_trace(device, trace, cq_id=0)
    ttnn.release_trace(device, trace)


@pytest.mark.parametrize("call", ["synchronize", "record", "wait", "event_synchronize"])
def test_no_synchronize_or_event_inside_a_capture(ttnn, call):
    device = ttnn.open_mesh_device(ttnn.MeshShape(1, 1), trace_region_size=1 << 20, num_command_queues=2)
    event = ttnn.record_event(device, 1)
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    with pytest.raises(ttnn.EmulatorError, match="inside a trace capture"):
        if call == "synchronize":
            ttnn.synchronize_device(device)
        elif call == "record":
            ttnn.record_event(device, 0)
        elif call == "wait":
            ttnn.wait_for_event(0, event)
        else:
            ttnn.event_synchronize(event)
    ttnn.end_trace_capture(device, trace, cq_id=0)
    ttnn.release_trace(device, trace)


def _two_queue_frame(ttnn, device, buffer, trace, pixels, events: bool, last_op_event):
    """The two-queue pattern: queue 1 writes the next input, queue 0 replays on it."""
    host = ttnn.from_torch(pixels, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    if events and last_op_event is not None:
        ttnn.wait_for_event(1, last_op_event)  # the previous replay has read the input
    ttnn.copy_host_to_device_tensor(host, buffer, cq_id=1)
    if events:
        ttnn.wait_for_event(0, ttnn.record_event(device, 1))
    ttnn.execute_trace(device, trace, cq_id=0, blocking=False)
    return ttnn.record_event(device, 0) if events else None


@pytest.mark.parametrize("events", [True, False])
def test_two_command_queues_need_events_between_them(ttnn, events):
    torch.manual_seed(8)  # one draw whatever ran before: bfloat16's PCC depends on it (0.99989 here)
    device = ttnn.open_mesh_device(ttnn.MeshShape(1, 1), trace_region_size=1 << 20, num_command_queues=2)
    w = _dev(ttnn, device, torch.randn(32, 32))
    buffer = ttnn.allocate_tensor_on_device(ttnn.Shape([32, 32]), ttnn.bfloat16, ttnn.TILE_LAYOUT, device)
    ttnn.copy_host_to_device_tensor(
        ttnn.from_torch(torch.zeros(32, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT), buffer, cq_id=0
    )
    _path(ttnn, buffer, w)
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    out = _path(ttnn, buffer, w)
    ttnn.end_trace_capture(device, trace, cq_id=0)
    ttnn.synchronize_device(device)
    frames = [torch.randn(32, 32) for _ in range(3)]
    if not events:
        with pytest.raises(ttnn.EmulatorError, match="race on"):
            _two_queue_frame(ttnn, device, buffer, trace, frames[0], False, None)
        ttnn.release_trace(device, trace)
        return
    op_event = None
    for pixels in frames:
        op_event = _two_queue_frame(ttnn, device, buffer, trace, pixels, True, op_event)
        got = ttnn.to_torch(out).float()
        want = pixels.bfloat16().float() @ ttnn.to_torch(w).float() + 1.0
        print(f"two queues with events: PCC {_pcc(got, want):.6f} against this frame's product")
        assert _pcc(got, want) > 0.999  # another frame's input (a race) gives about 0
    # Skipping the wait for the previous replay is a race too (the input may still be read).
    host = ttnn.from_torch(frames[0], dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
    ttnn.execute_trace(device, trace, cq_id=0, blocking=False)
    with pytest.raises(ttnn.EmulatorError, match="race on"):
        ttnn.copy_host_to_device_tensor(host, buffer, cq_id=1)
    ttnn.release_trace(device, trace)


def test_core_range_sets_are_hashable_however_they_are_built(ttnn):
    core_range = ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(3, 1))
    from_set, from_list = ttnn.CoreRangeSet({core_range}), ttnn.CoreRangeSet([core_range])
    assert from_set == from_list and hash(from_set) == hash(from_list)
    assert from_set.num_cores() == 8
    spec = ttnn.ShardSpec(from_set, [32, 64], ttnn.ShardOrientation.ROW_MAJOR)
    config = ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, spec)
    assert {config: 1}[config] == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda ttnn, t: ttnn.linear(t, t, activaton="gelu"),
        lambda ttnn, t: ttnn.matmul(t, t, bias=t),
        lambda ttnn, t: ttnn.add(t, t, memory_configs=None),
        lambda ttnn, t: ttnn.layer_norm(t, eps=1e-6),
        lambda ttnn, t: ttnn.transformer.scaled_dot_product_attention(t, t, t, causal=False),
        lambda ttnn, t: ttnn.reshape(t, (32, 32), view=True),
        lambda ttnn, t: ttnn.experimental.rotary_embedding(t, t, t, memory_configs=None),
    ],
)
def test_misspelled_keywords_are_refused(ttnn, device, call):
    with pytest.raises(TypeError, match="unexpected keyword"):
        call(ttnn, _dev(ttnn, device, torch.randn(32, 32)))


def test_clone_copies_into_a_new_buffer(ttnn, device):
    x = ttnn.from_torch(torch.randn(1, 64, 32), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=device)
    copy = ttnn.clone(x)
    ttnn.deallocate(x)
    assert copy.is_allocated() and tuple(copy.shape) == (1, 64, 32)
    with pytest.raises(ttnn.EmulatorError, match="bfloat8_b needs TILE"):
        ttnn.clone(ttnn.to_layout(copy, ttnn.ROW_MAJOR_LAYOUT), dtype=ttnn.bfloat8_b)
