"""The decoder's scoring in TT-NN ops: transformers' Sam3DotProductScoring, the presence head, and
the detection score sigmoid(logit) * sigmoid(presence logit) that the threshold and top-k read.

Rows follow decoder.py: the presence token at row 0, the queries at rows 1..200, padding up to
224. The per-query heads run on every row (a few small matmuls) so no op slices rows on the
device; the presence logit of row 0 reaches every row through a matmul with a constant 0/1
``presence_selector`` (exact: each output row sums one value times 1), and the caller keeps
rows 1..200.

Shapes (bfloat16, TILE, DRAM interleaved; B = prompts in the batch):
    hidden   (B, Q, C)    the last decoder layer's output (before its output norm).
    text     (B, T, C)    the prompt tokens as the decoder saw them (fusion encoder's prompt).
    pool     (B, 1, T)    text_pooling_row: the masked mean over the real prompt tokens.
    selector (B, Q, Q)    presence_selector.
    returns  (B, Q, 1)    logits, presence logits, scores.
Weights: prompt_weights.prepare_scoring, uploaded with weights.upload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_sam3_ros.engines.ttnn_model.config import DeviceSettings
from tt_sam3_ros.engines.ttnn_model.layers import decoder_mlp, linear


@dataclass(frozen=True)
class ScoringConfig:
    """Constants of the scoring, read from transformers' modules.

    Attributes:
        eps: the LayerNorms' epsilon (torch's default: the modules are nn.LayerNorm(C)).
        scale: the dot product's 1/sqrt(C).
        logit_clamp: |logit| limit (12).
        presence_clamp: |presence logit| limit (10).
    """

    eps: float
    scale: float
    logit_clamp: float
    presence_clamp: float

    @classmethod
    def from_modules(cls, scoring: Any, decoder: Any) -> ScoringConfig:
        return cls(
            eps=decoder.output_layer_norm.eps,
            scale=float(scoring.scale),
            logit_clamp=float(scoring.clamp_max_val),
            presence_clamp=float(decoder.clamp_presence_logit_max_val),
        )


def text_pooling_row(valid: torch.Tensor, padded: int) -> torch.Tensor:
    """Host side: (B, k) bool real-token mask -> (B, 1, padded) weights of the masked mean
    (1 / count on real tokens, 0 on padding; count at least 1, as transformers clamps it)."""
    weights = torch.zeros(valid.shape[0], 1, padded)
    count = valid.float().sum(dim=1, keepdim=True).clamp(min=1.0)
    weights[:, 0, : valid.shape[1]] = valid.float() / count
    return weights


def presence_selector(rows: int, batch: int = 1) -> torch.Tensor:
    """Host side: (batch, rows, rows) with ones in column 0: S @ x copies row 0 of x to every row
    (one matrix per prompt: the batch is not broadcast on the first matmul operand)."""
    selector = torch.zeros(batch, rows, rows)
    selector[:, :, 0] = 1.0
    return selector


def _norm(
    ttnn: Any, x: Any, w: dict[str, Any], name: str, eps: float, settings: DeviceSettings, residual=None
) -> Any:
    return ttnn.layer_norm(
        x,
        epsilon=eps,
        weight=w[f"{name}.weight"],
        bias=w[f"{name}.bias"],
        residual_input_tensor=residual,
        memory_config=settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )


def query_logits(
    ttnn: Any,
    hidden: Any,
    text: Any,
    pool: Any,
    w: dict[str, Any],
    config: ScoringConfig,
    settings: DeviceSettings,
) -> Any:
    """Sam3DotProductScoring on the output-normed rows: (B, Q, 1) logits, clamped."""
    queries = _norm(ttnn, hidden, w, "output_norm", config.eps, settings)
    expanded = decoder_mlp(ttnn, text, w, "text_mlp", 2, settings)
    text_normed = _norm(ttnn, text, w, "text_norm", config.eps, settings, residual=expanded)
    ttnn.deallocate(expanded)
    pooled = ttnn.matmul(
        pool, text_normed, memory_config=settings.memory, compute_kernel_config=settings.exact_kernel
    )
    ttnn.deallocate(text_normed)
    text_vector = linear(ttnn, pooled, w, "text_proj", settings)
    ttnn.deallocate(pooled)
    query_vectors = linear(ttnn, queries, w, "query_proj", settings)
    ttnn.deallocate(queries)
    products = ttnn.matmul(
        query_vectors,
        text_vector,
        transpose_b=True,
        memory_config=settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )
    ttnn.deallocate(query_vectors)
    ttnn.deallocate(text_vector)
    scaled = ttnn.mul(products, config.scale, memory_config=settings.memory)
    ttnn.deallocate(products)
    out = ttnn.clamp(scaled, -config.logit_clamp, config.logit_clamp, memory_config=settings.memory)
    ttnn.deallocate(scaled)
    return out


def presence_logits(
    ttnn: Any, hidden: Any, w: dict[str, Any], config: ScoringConfig, settings: DeviceSettings
) -> Any:
    """The presence head on every row, clamped: (B, Q, 1); row 0 is the presence token's."""
    normed = _norm(ttnn, hidden, w, "presence_norm", config.eps, settings)
    raw = decoder_mlp(ttnn, normed, w, "presence_head", 3, settings)
    ttnn.deallocate(normed)
    out = ttnn.clamp(raw, -config.presence_clamp, config.presence_clamp, memory_config=settings.memory)
    ttnn.deallocate(raw)
    return out


def detection_scores(ttnn: Any, logits: Any, presence: Any, selector: Any, settings: DeviceSettings) -> Any:
    """sigmoid(logit) * sigmoid(row 0's presence logit) on every row: (B, Q, 1); leaves inputs."""
    present = ttnn.sigmoid(presence, memory_config=settings.memory)
    spread = ttnn.matmul(
        selector, present, memory_config=settings.memory, compute_kernel_config=settings.exact_kernel
    )
    ttnn.deallocate(present)
    likely = ttnn.sigmoid(logits, memory_config=settings.memory)
    out = ttnn.mul(likely, spread, memory_config=settings.memory)
    ttnn.deallocate(likely)
    ttnn.deallocate(spread)
    return out
