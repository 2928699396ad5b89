"""The emulator's pixel-decoder and selection ops against torch, and the refusals the real library
showed on a mock p150a (tools/ttnn_mock; each refused case below was refused there too)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812


@pytest.fixture
def device(ttnn):
    return ttnn.open_device(device_id=0, l1_small_size=32768, trace_region_size=1 << 20)


def _dev(ttnn, device, x, layout=None, dtype=None):
    return ttnn.from_torch(x, dtype=dtype or ttnn.bfloat16, layout=layout or ttnn.TILE_LAYOUT, device=device)


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).float()


# upsample -----------------------------------------------------------------------------------
def test_upsample_is_nearest_on_nhwc_and_returns_row_major(ttnn, device):
    x = _bf16(torch.randn(2, 3, 5, 32))
    out = ttnn.upsample(_dev(ttnn, device, x, ttnn.ROW_MAJOR_LAYOUT), 2)
    want = F.interpolate(x.permute(0, 3, 1, 2), scale_factor=2, mode="nearest").permute(0, 2, 3, 1)
    assert out.layout == ttnn.ROW_MAJOR_LAYOUT and tuple(out.shape) == (2, 6, 10, 32)
    assert torch.equal(ttnn.to_torch(out).float(), want)


@pytest.mark.parametrize(
    ("shape", "layout"),
    [((1, 72, 72, 32), "TILE"), ((1, 72 * 72, 32), "ROW_MAJOR")],
    ids=["tile-with-padded-rows", "rank-3"],
)
def test_upsample_refuses_what_the_library_refuses(ttnn, device, shape, layout):
    x = _dev(ttnn, device, torch.zeros(shape), getattr(ttnn, f"{layout}_LAYOUT"))
    with pytest.raises(ttnn.EmulatorError):
        ttnn.upsample(x, 2)


# group_norm ---------------------------------------------------------------------------------
def _group_norm_inputs(ttnn, device, channels: int, groups: int, batch: int = 2, pixels: int = 64):
    x = _bf16(torch.randn(batch, 1, pixels, channels) * 3 + 1)
    w, b = _bf16(torch.randn(channels)), _bf16(torch.randn(channels))
    columns = ttnn._ops.group_norm_virtual_columns(
        device.compute_with_storage_grid_size().x, groups, channels
    )
    mask = ttnn.to_device(ttnn.create_group_norm_input_mask(channels, groups, columns), device)
    rows = [
        ttnn.from_torch(
            v.reshape(1, 1, -1, 32), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT, device=device
        )
        for v in (w, b)
    ]
    return x, w, b, mask, rows


@pytest.mark.parametrize(("channels", "groups"), [(256, 8), (32, 8)])
def test_group_norm_normalises_each_sample_per_group(ttnn, device, channels, groups):
    x, w, b, mask, (weight, bias) = _group_norm_inputs(ttnn, device, channels, groups)
    out = ttnn.group_norm(
        _dev(ttnn, device, x),
        num_groups=groups,
        epsilon=1e-5,
        input_mask=mask,
        weight=weight,
        bias=bias,
        inplace=False,
    )
    nchw = x.reshape(2, -1, channels).transpose(1, 2)
    want = F.group_norm(nchw, groups, w, b, 1e-5).transpose(1, 2).reshape(x.shape)
    assert (ttnn.to_torch(out).float() - want).abs().max() < 0.05


def test_group_norm_refuses_what_the_library_refuses(ttnn, device):
    x, _, _, mask, (weight, bias) = _group_norm_inputs(ttnn, device, 256, 8)
    tiles = _dev(ttnn, device, x)
    ok = dict(num_groups=8, input_mask=mask, weight=weight, bias=bias, inplace=False)
    cases = {
        "inplace left at its default": {k: v for k, v in ok.items() if k != "inplace"},
        "num_out_blocks with the grid left to the op": dict(ok, num_out_blocks=2),
        "a grid whose 10 virtual rows do not divide 4 tile rows": dict(
            ok, core_grid=ttnn.CoreGrid(y=10, x=8)
        ),
        "TILE weight": dict(
            ok, weight=_dev(ttnn, device, torch.zeros(1, 256)), bias=_dev(ttnn, device, torch.zeros(1, 256))
        ),
    }
    for name, kwargs in cases.items():
        with pytest.raises(ttnn.EmulatorError):
            ttnn.group_norm(tiles, **kwargs)
        print(f"refused: {name}")
    with pytest.raises(ttnn.EmulatorError):
        ttnn.group_norm(_dev(ttnn, device, x, ttnn.ROW_MAJOR_LAYOUT), **ok)
    with pytest.raises(ttnn.EmulatorError):
        ttnn.group_norm(_dev(ttnn, device, x.reshape(2, 8, 8, 256)), **ok)  # NHWC, not (N, 1, HW, C)
    with pytest.raises(ttnn.EmulatorError):
        ttnn.group_norm(_dev(ttnn, device, x, dtype=ttnn.bfloat8_b), **ok)


def test_group_norm_mask_must_match_the_core_split(ttnn, device):
    """A mask made for another width (32 channels in 8 groups: 4 per group) has the shape of the
    64-channel one but marks 4 of each group's 8 channels: the chip would compute wrong statistics."""
    x, _, _, _, (weight, bias) = _group_norm_inputs(ttnn, device, 64, 8)
    wrong = ttnn.to_device(ttnn.create_group_norm_input_mask(32, 8, 1), device)
    with pytest.raises(ttnn.EmulatorError, match="not the mask"):
        ttnn.group_norm(
            _dev(ttnn, device, x), num_groups=8, input_mask=wrong, weight=weight, bias=bias, inplace=False
        )


def test_group_norm_without_a_mask_writes_one_so_a_trace_cannot_hold_it(ttnn, device):
    x, _, _, _, (weight, bias) = _group_norm_inputs(ttnn, device, 256, 8)
    tiles = _dev(ttnn, device, x)
    ttnn.group_norm(tiles, num_groups=8, weight=weight, bias=bias, inplace=False)  # eager: accepted
    trace = ttnn.begin_trace_capture(device, cq_id=0)
    with pytest.raises(ttnn.EmulatorError):
        ttnn.group_norm(tiles, num_groups=8, weight=weight, bias=bias, inplace=False)
    assert trace is not None


# topk and comparisons -----------------------------------------------------------------------
def test_topk_returns_sorted_values_and_uint16_indices(ttnn, device):
    x = _bf16(torch.randn(2, 1, 224))
    values, indices = ttnn.topk(_dev(ttnn, device, x), 50, dim=-1, largest=True, sorted=True)
    want_values, want_indices = torch.topk(x, 50)
    assert (
        values.dtype == ttnn.bfloat16 and indices.dtype == ttnn.uint16 and tuple(indices.shape) == (2, 1, 50)
    )
    assert torch.equal(ttnn.to_torch(values).float(), want_values)
    assert torch.equal(ttnn.to_torch(indices).long(), want_indices)


def test_topk_and_eq_refuse_what_the_library_refuses(ttnn, device):
    scores = torch.zeros(1, 1, 32)
    with pytest.raises(ttnn.EmulatorError):
        ttnn.topk(_dev(ttnn, device, scores, ttnn.ROW_MAJOR_LAYOUT), 5)
    with pytest.raises(ttnn.EmulatorError, match="k 50"):
        ttnn.topk(_dev(ttnn, device, scores), 50)
    _, indices = ttnn.topk(_dev(ttnn, device, scores), 5)
    with pytest.raises(ttnn.EmulatorError, match="not a supported pair"):
        ttnn.eq(indices, _dev(ttnn, device, torch.zeros(1, 1, 5)))


def test_eq_broadcasts_a_column_against_a_row_into_a_one_hot(ttnn, device):
    column = _dev(ttnn, device, torch.tensor([[[3.0], [0.0]]]))
    row = _dev(ttnn, device, torch.arange(5.0).reshape(1, 1, 5))
    got = ttnn.to_torch(ttnn.eq(column, row)).float()
    assert torch.equal(got, torch.tensor([[[0.0, 0, 0, 1, 0], [1, 0, 0, 0, 0]]]))
