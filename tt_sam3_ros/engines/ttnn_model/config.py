"""Shapes of the image path, read once from the Hugging Face config.

The device code works in *window order*: tokens sorted window by window (windows row-major,
tokens row-major inside each window) instead of image rows. Windowed attention then needs no
partition or un-partition per block, only a reshape, and global attention is unchanged
because attention does not care about token order as long as the position terms (RoPE
tables, absolute position embedding) are sorted the same way. The image goes back to row
order once, before the neck. This needs the token grid to be a whole number of windows
(72 = 3 x 24 for SAM 3); other grids are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TILE = 32


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class ImagePathConfig:
    """Dimensions of Sam3VisionModel as the device code needs them.

    Attributes:
        image_side: input side in pixels (1008).
        patch: patch side in pixels (14).
        grid: tokens per image side (72).
        window: window side in tokens (24).
        hidden: ViT width C (1024).
        heads: attention heads H (16).
        head_dim: D = C / H (64).
        head_dim_padded: D rounded up to two tiles (64 for SAM 3's 64 and for the tiny test
            model's 16): the fused rotary op swaps the two halves of a head a whole tile at a
            time, so each half is zero-padded to a tile multiple (weights.py).
        intermediate: MLP width (4096).
        layers: number of blocks (32).
        global_layers: indexes of the blocks with global attention (7, 15, 23, 31).
        eps: LayerNorm epsilon.
        fpn_dim: neck output width (256).
        scale_factors: neck scales (4, 2, 1, 0.5).
    """

    image_side: int
    patch: int
    grid: int
    window: int
    hidden: int
    heads: int
    head_dim: int
    head_dim_padded: int
    intermediate: int
    layers: int
    global_layers: tuple[int, ...]
    eps: float
    fpn_dim: int
    scale_factors: tuple[float, ...]

    @classmethod
    def from_hf(cls, vision_config) -> ImagePathConfig:
        backbone = vision_config.backbone_config
        grid = backbone.image_size // backbone.patch_size
        if grid % backbone.window_size:
            raise ValueError(
                f"token grid {grid} is not a whole number of {backbone.window_size}-token windows"
            )
        if backbone.hidden_act != "gelu":
            raise ValueError(f"the device MLP implements gelu, the model uses {backbone.hidden_act}")
        head_dim = backbone.hidden_size // backbone.num_attention_heads
        return cls(
            image_side=backbone.image_size,
            patch=backbone.patch_size,
            grid=grid,
            window=backbone.window_size,
            hidden=backbone.hidden_size,
            heads=backbone.num_attention_heads,
            head_dim=head_dim,
            head_dim_padded=round_up(head_dim, 2 * TILE),
            intermediate=backbone.intermediate_size,
            layers=backbone.num_hidden_layers,
            global_layers=tuple(backbone.global_attn_indexes),
            eps=backbone.layer_norm_eps,
            fpn_dim=vision_config.fpn_hidden_size,
            scale_factors=tuple(float(s) for s in vision_config.scale_factors),
        )

    @property
    def tokens(self) -> int:
        return self.grid * self.grid

    @property
    def windows_per_side(self) -> int:
        return self.grid // self.window

    @property
    def window_tokens(self) -> int:
        return self.window * self.window

    @property
    def patch_features(self) -> int:
        """Values per patch: 3 channels x patch x patch (588)."""
        return 3 * self.patch * self.patch

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """The uploaded uint8 image: (1, S, 3*S), each row the RGB triples of one pixel row."""
        return (1, self.image_side, 3 * self.image_side)

    def is_global(self, layer: int) -> bool:
        return layer in self.global_layers


def window_order(config: ImagePathConfig) -> torch.Tensor:
    """Row-order token index at each window-order position: long (tokens,).

    ``row_ordered[window_order(c)]`` sorts a (tokens, ...) tensor into window order.
    """
    n, w = config.windows_per_side, config.window
    index = torch.arange(config.tokens).reshape(n, w, n, w)  # (window row, row in window, window col, col)
    return index.permute(0, 2, 1, 3).reshape(-1)


@dataclass(frozen=True)
class DeviceSettings:
    """Program choices made once per device, from its compute grid.

    Attributes:
        grid: (x, y) compute grid the ops may use, as the opened device reports it (11x10 on a
            p150a with worker dispatch; 12 or 13 columns with less harvesting).
        memory: where activations live by default (DRAM interleaved), among them the ViT's
            output to the neck.
        l1: L1 interleaved, for the ViT's activations (its residual stream included) whose
            per-core share fits beside the circular buffers of the ops that run while they live
            (vit.py names them; the real library's allocator on a mock p150a is what says they
            fit, tools/ttnn_mock).
        matmul_kernel: HiFi2 with fp32 accumulation for bfloat8_b x bfloat16 matmuls.
        vit_mlp_kernel: the ViT MLP's two linears (fc1, fc2: 70 % of the blocks' linear FLOPs):
            LoFi (with fp32 accumulation), as tt-metal's Blackhole ViT runs its matmuls. On the
            emulator's numerics the full-size image path's FPN maps keep PCC 0.9971-0.9980
            against transformers (test_ttnn_image_path_full_size; gate 0.995); LoFi for the qkv
            and output projections as well gave 0.99499, below the gate. On full-size single
            blocks (benchmarks/blackhole/fidelity_bench.py, the engine's row) the block's output PCC is
            0.99938 windowed, 0.99974 global (MLP at HiFi2: 0.99949, 0.99987).
        exact_kernel: HiFi4 for the small ops that must not lose bits (RoPE, norms).
        prompt_attention_kernel: HiFi4 for the prompt path's fused attentions that are
            memory-bound in the cost model (cross-attentions, the decoder's), where a lower
            fidelity buys no modelled time.
        fusion_attention_kernel: HiFi2 for the fusion encoder's 5184-token self-attention, the
            one prompt attention the cost model finds compute-bound (with the chunks below): on a
            full-size fusion-encoder layer on the emulator's fidelity model it keeps the PCC
            against transformers at 0.99995 (HiFi4: 0.99995) and moves the rms error from 0.0134
            to 0.0137 for less modelled time (benchmarks/blackhole/fidelity_bench.py; LoFi: PCC 0.99988,
            rms 0.0211: half as much error again, and no modelled time saved over HiFi2).
        fusion_mlp_hidden: bfloat8_b for the fusion encoder's (B, 5184, 2048) MLP hidden layer
            (the relu's output, written by fc1 and read by fc2 through DRAM: the layer's largest
            tensor): on the same full-size layer and measurement it keeps the PCC at 0.99995 and
            moves the rms error from 0.01369 to 0.01387, for less DRAM traffic. None: bfloat16.
        box_bias_hidden: bfloat8_b for the hidden layer of the decoder's box-bias MLP (B, 224 x
            192, 512), its largest tensor, written and read through DRAM in every layer: on the
            full-size box bias from random boxes against transformers' _get_rpb_matrix (the
            emulator, test_decoder_stack's case) the PCC goes from 0.99991 to 0.99990, the rms
            error stays 0.0478 (bias std 3.32), the largest error from 0.269 to 0.290, and the
            prompt trace's modelled time per extra prompt drops (docs/figures/blackhole.md has
            the model's figures). None: bfloat16.
        prompt_exp_approx: exact exp in the prompt path's attentions: the approximate one raises
            the rms error of the same layer from 0.0137 to 0.0183 (PCC 0.99991), for SFPU time
            the cost model does not price.
        prompt_attention_chunks: the largest (q, k) chunks the prompt path's fused attention may
            use (attention.py takes, per sequence, the largest tile multiple at most this that
            divides it). The kernel reads all of K and V once per q chunk, so the q chunk sets
            the DRAM traffic of the fusion encoder's 5184-token self-attention: 864 (6 passes;
            64 makes 81) is the
            largest q chunk dividing 5184 that the real library accepts (1728 is refused at
            every k chunk), and 864 x 192 the largest pair beside it (circular buffers
            1,380,352 B per core at 16 prompts; 864 x 288 is refused), on a mock p150a. 224 as
            the k limit gives the image keys 192 and the decoder's 224 queries one chunk.
        vit_attention_chunks: (q, k) chunk sizes of the ViT's fused attention, dividing 576 (a
            window) and 5184 (the image). 288 x 288: with q, k and v in L1 (vit.py) the
            attention moves no DRAM bytes, so in the cost model its time is its FLOPs whatever the
            chunks, and 288 gives 2.62 query chunks per core on 110 cores (576: 1.31, a second
            round on a third of the cores); its circular buffers (778 KiB per core) fit beside q,
            k, v and the output in L1, where 576 x 192 (1,144 KiB) clashes with them on the
            real library (benchmarks/blackhole/blackhole_bench.py, tools/ttnn_mock/sdpa_chunks.py).
        vit_attention_kernel: HiFi2: on full-size blocks on the emulator's fidelity model it costs
            0.00003 PCC against HiFi4 (benchmarks/blackhole/fidelity_bench.py), and the attention is
            compute-bound in the cost model.
        vit_exp_approx: the SFPU's approximate exp: a further 0.00015 PCC on a windowed block,
            0.00004 on a global one, in the same measurement (its speed is SFPU work, which the
            cost model does not price).
    """

    grid: tuple[int, int]
    memory: object
    matmul_kernel: object
    exact_kernel: object
    vit_mlp_kernel: object
    vit_attention_kernel: object
    l1: object
    prompt_attention_kernel: object
    fusion_attention_kernel: object
    fusion_mlp_hidden: object = None
    box_bias_hidden: object = None
    prompt_exp_approx: bool = False
    prompt_attention_chunks: tuple[int, int] = (864, 224)
    vit_attention_chunks: tuple[int, int] = (288, 288)
    vit_exp_approx: bool = True


def compute_kernel(ttnn, fidelity: str, approx: bool = False, packer_l1_acc: bool = True) -> object:
    """A compute config with fp32 accumulation at `fidelity` ("LoFi", "HiFi2", "HiFi4")."""
    return ttnn.WormholeComputeKernelConfig(
        math_fidelity=getattr(ttnn.MathFidelity, fidelity),
        math_approx_mode=approx,
        fp32_dest_acc_en=True,
        packer_l1_acc=packer_l1_acc,
    )


def device_settings(ttnn, device) -> DeviceSettings:
    """DeviceSettings for an open device."""
    grid = device.compute_with_storage_grid_size()
    return DeviceSettings(
        grid=(grid.x, grid.y),
        memory=ttnn.DRAM_MEMORY_CONFIG,
        matmul_kernel=compute_kernel(ttnn, "HiFi2"),
        vit_mlp_kernel=compute_kernel(ttnn, "LoFi"),
        exact_kernel=compute_kernel(ttnn, "HiFi4", packer_l1_acc=False),
        vit_attention_kernel=compute_kernel(ttnn, "HiFi2", packer_l1_acc=False),
        l1=ttnn.L1_MEMORY_CONFIG,
        prompt_attention_kernel=compute_kernel(ttnn, "HiFi4", packer_l1_acc=False),
        fusion_attention_kernel=compute_kernel(ttnn, "HiFi2", packer_l1_acc=False),
        fusion_mlp_hidden=ttnn.bfloat8_b,
        box_bias_hidden=ttnn.bfloat8_b,
    )
