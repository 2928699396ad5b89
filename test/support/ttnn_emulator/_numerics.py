"""Number formats of the device, reproduced on torch tensors.

bfloat8_b is Tenstorrent's block float: every 16 consecutive values of a tile row (one row of
a 16x16 face) share an 8-bit exponent, and each keeps a sign and 7 magnitude bits (the hidden
one made explicit). Packing (tt-metal's host conversion) takes the largest exponent of the
block, shifts each mantissa right by its distance to it, rounds to nearest with ties to even,
saturates at 127 instead of carrying into the exponent, and drops the sign of values that
round to zero. `quantize_bfloat8_b` does exactly that, so its result equals what the real
wheel decodes from its own packing bit for bit (tools/ttnn_conformance.py checks it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812

from ._types import DataType

#: Values that share one exponent in bfloat8_b: a row of a 16x16 face.
BFP_BLOCK = 16
_MANTISSA_SHIFT = 17  # 24-bit float significand -> 7 bits
_TIE = 1 << (_MANTISSA_SHIFT - 1)
_SIGN_BIT = -(1 << 31)  # 0x80000000 as an int32


def quantize_bfloat8_b(values: torch.Tensor) -> torch.Tensor:
    """Round float values to what bfloat8_b can hold; float32, same shape.

    Blocks run along the last dimension, 16 at a time from index 0, which is how tile rows
    split into face rows; a last dimension that is not a multiple of 16 is zero padded, as
    the tile padding would be (zeros never raise a block's exponent).
    """
    x = values.detach().to(torch.float32).contiguous()
    if x.numel() == 0:
        return x.clone()
    shape = x.shape
    width = shape[-1] if x.dim() else 1
    rows = x.reshape(-1, width)
    pad = (-width) % BFP_BLOCK
    if pad:
        rows = F.pad(rows, (0, pad))
    # int32 throughout (the weights of the full-size model are 300 M values): sign, exponent and
    # significand by masks and shifts, the largest exponent of each block of 16, the shift to it.
    bits = rows.contiguous().view(torch.int32).reshape(-1, BFP_BLOCK)
    magnitude_bits = bits & 0x7FFFFFFF
    exponent = magnitude_bits >> 23
    shared = exponent.amax(dim=1, keepdim=True)
    shift = exponent.neg_().add_(shared).clamp_(max=31)  # past 23 every bit is gone anyway
    significand = (magnitude_bits & 0x7FFFFF).bitwise_or_(0x800000).bitwise_right_shift_(shift)
    # Round to nearest, ties to even: add just under a half plus the kept lowest bit, then cut.
    lowest = significand.bitwise_right_shift(_MANTISSA_SHIFT).bitwise_and_(1)
    mantissa = significand.add_(lowest).add_(_TIE - 1).bitwise_right_shift_(_MANTISSA_SHIFT).clamp_(max=127)
    mantissa.masked_fill_(magnitude_bits == 0, 0)
    # value = mantissa * 2^(shared - 127 - 6): a 7-bit integer times a power of two (2^-133 is
    # a float32 subnormal), exact in float32; a product past the largest float32 is inf.
    scale = torch.exp2(shared.to(torch.float64) - 133.0).to(torch.float32)
    decoded = mantissa.to(torch.float32).mul_(scale)
    sign = (bits & _SIGN_BIT).masked_fill_(mantissa == 0, 0)  # a value rounded to zero is +0
    decoded.view(torch.int32).bitwise_or_(sign)
    decoded = decoded.reshape(rows.shape)[:, :width]
    return decoded.reshape(shape)


#: The integer dtypes and the values they hold.
INTEGER_RANGES = {
    DataType.UINT8: (0, 255),
    DataType.UINT16: (0, 2**16 - 1),
    DataType.UINT32: (0, 2**32 - 1),
    DataType.INT32: (-(2**31), 2**31 - 1),
}


def quantize(values: torch.Tensor, dtype: DataType) -> torch.Tensor:
    """Values as the device would store them in `dtype` (floats returned as float32)."""
    if dtype == DataType.FLOAT32:
        return values.detach().to(torch.float32)
    if dtype == DataType.BFLOAT16:
        return values.detach().to(torch.bfloat16).to(torch.float32)
    if dtype == DataType.BFLOAT8_B:
        return quantize_bfloat8_b(values)
    if dtype in INTEGER_RANGES:
        if values.is_floating_point():
            values = torch.round(values)
        out = values.detach().to(torch.int64)
        low, high = INTEGER_RANGES[dtype]
        # a shape-only (meta) tensor, as benchmarks/blackhole/prompt_trace.py logs with, has no values
        # to check
        if out.numel() and not out.is_meta and bool(((out < low) | (out > high)).any()):
            raise ValueError(f"{dtype.name.lower()} tensor given values outside [{low}, {high}]")
        return out
    raise TypeError(f"unsupported dtype {dtype}")


def to_torch_dtype(dtype: DataType) -> torch.dtype:
    """The torch dtype ttnn.to_torch returns for a device dtype."""
    return {
        DataType.FLOAT32: torch.float32,
        DataType.BFLOAT16: torch.bfloat16,
        DataType.BFLOAT8_B: torch.float32,
        DataType.UINT8: torch.uint8,
        DataType.UINT16: torch.int32,
        DataType.UINT32: torch.int32,
        DataType.INT32: torch.int32,
    }[dtype]


# compute numerics --------------------------------------------------------------------------------
# The matrix engine multiplies, per fidelity phase, 7 significand bits (hidden bit + 6) of SrcB by
# 5 (hidden + 4) of SrcA; a matmul's activation (in0) goes to SrcB, its weights (in1) to SrcA, and
# a bfloat16 significand has 8 bits, so SrcA splits 5 + 3 and SrcB 7 + 1. The phases a fidelity
# runs (tt-metal tech_reports/matrix_engine) decide which partial products are kept:
# LoFi: high A x high B; HiFi2: + low A x high B (A whole, B keeps 7 bits); HiFi3: + high A x
# low B; HiFi4: + low A x low B (exact). The dropped bits are truncated, never rounded.
SRC_B_BITS = 7
SRC_A_HIGH_BITS = 5


def truncate_significand(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Float32 values with only the top `bits` of their 24-bit significand (hidden bit included)
    kept, the rest cut toward zero: what a source register holds of each operand."""
    x = values.detach().to(torch.float32).contiguous()
    mask = -(1 << (24 - bits))  # ...1110000 in two's complement: clears the low bits
    return (x.view(torch.int32) & mask).view(torch.float32)


#: Host-kernel jitter (off unless TTNN_EMULATOR_JITTER_ULPS is set): every product below is scaled
#: by 1 + u * ulps * 2^-24 with u uniform in [-1, 1], seeded by TTNN_EMULATOR_JITTER_SEED. float32
#: matmuls and convolutions sum in another order on another CPU's kernels (MKL and oneDNN pick
#: theirs by CPU), a few ulps apart; run a gate under jitter to see whether it holds on any host.
JITTER_ULPS = float(os.environ.get("TTNN_EMULATOR_JITTER_ULPS", "0") or 0)
_JITTER = torch.Generator().manual_seed(int(os.environ.get("TTNN_EMULATOR_JITTER_SEED", "0") or 0))


def _jittered(values: torch.Tensor) -> torch.Tensor:
    if not JITTER_ULPS:
        return values
    noise = torch.rand(values.shape, generator=_JITTER, dtype=torch.float32).mul_(2.0).sub_(1.0)
    return values * noise.mul_(JITTER_ULPS * 2.0**-24).add_(1.0)


def fidelity_product(
    activation: torch.Tensor,
    weight: torch.Tensor,
    fidelity: str,
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """product(activation, weight) (a matmul or a convolution) at a math fidelity
    ("LoFi", "HiFi2", "HiFi3", "HiFi4"), keeping the operand bits the matrix engine keeps."""
    return _jittered(_fidelity_product(activation, weight, fidelity, product))


def _fidelity_product(
    activation: torch.Tensor,
    weight: torch.Tensor,
    fidelity: str,
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    if fidelity == "HiFi4":
        return product(activation, weight)
    b_high = truncate_significand(activation, SRC_B_BITS)
    if fidelity == "HiFi2":
        return product(b_high, weight)
    a_high = truncate_significand(weight, SRC_A_HIGH_BITS)
    if fidelity == "LoFi":
        return product(b_high, a_high)
    if fidelity == "HiFi3":
        return product(b_high, weight) + product(activation - b_high, a_high)
    raise ValueError(f"unknown math fidelity {fidelity!r}")


def approximate_exp(values: torch.Tensor) -> torch.Tensor:
    """exp(x) as the SFPU's approximate mode forms it: 2^(x/ln2) with the integer part put in the
    exponent and the fraction f taken as the mantissa, 2^f ~ 1 + f (at most 6.1 % high, exact at
    whole powers of two); underflows to 0 below about -88, as float32 does."""
    return approximate_exp_(values.to(torch.float32, copy=True))


def approximate_exp_(values: torch.Tensor) -> torch.Tensor:
    """approximate_exp in place on a float32 tensor (which it returns): the attention's scores are
    the largest tensors the emulator makes, and each temporary of their size costs a pass over
    memory. The whole part goes into the exponent bits by an integer add, which is what ldexp
    does for the results kept (2^-126 and up, all normal); 2^128 and up is inf, NaN and +inf give
    NaN (inf - inf in the fraction), -inf and anything below 2^-126 give 0."""
    values.mul_(1.0 / math.log(2.0))
    whole = torch.floor(values)
    underflow = whole < -126
    overflow = whole > 127
    values.sub_(whole).add_(1.0)  # 1 + f, in [1, 2]
    undefined = values.isnan()  # from NaN or an infinity
    exponent = whole.clamp_(-126, 127).to(torch.int32).bitwise_left_shift_(23)
    values.view(torch.int32).add_(exponent)
    values.masked_fill_(overflow, math.inf).masked_fill_(undefined, math.nan)
    return values.masked_fill_(underflow, 0.0)


def approximate_gelu(values: torch.Tensor) -> torch.Tensor:
    """The fused (approximate) GELU, modelled by the tanh form: the chip's approximate mode
    evaluates its own fit, which a device run compares; both stay within ~1e-3 of erf GELU."""
    return F.gelu(values, approximate="tanh")
