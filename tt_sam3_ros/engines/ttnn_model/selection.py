"""On-device selection: top-k of the queries by logit or score, and the kept rows.

The decoder's rows are the presence token (row 0), the queries (rows 1..Q) and tile padding; the
ranked values are (B, rows, 1): the query logits (what the engine ranks; see prompt_path.py: the
detection score sigmoid(logit) * sigmoid(presence) has one presence per prompt, so it orders the
queries as their logits do, and ranking the bfloat16 logits the host reads back keeps exactly
the queries the host would rank first, where the bfloat16 product of two sigmoids ties
near-equal scores), or scoring.detection_scores' scores. Here, all on the chip:
- ``top_queries``: the values as one row per prompt, the presence and padding rows pushed below
  every real value by a constant additive row (``candidate_row``), ttnn.topk (k = max_instances,
  sorted, largest first) and the threshold test (value > threshold; the upstream rule on scores)
  as 0/1 flags;
- ``selection_matrix``: a (B, k, rows) one-hot matrix built from the top-k indices (typecast to
  bfloat16, exact for rows <= 256, compared with a constant 0..rows-1 row);
- ``gather_rows``: that matrix times any per-row tensor (the queries before the mask embedder, the
  boxes), exact at HiFi4 since every output is one value times 1.
So the mask-logit product runs on k rows instead of rows, and only k boxes, k scores and k
288 x 288 logit maps need to cross PCIe. Kept rows are a sorted prefix. The engine reads the k
rows' logits back and leaves the threshold to the host's post-processing (the trace has a fixed
k, so rows below the threshold are computed and read too, and the host drops them); the flags
serve a caller that thresholds scores on the chip.

Shapes (TILE, DRAM interleaved): ranked values (B, rows, 1) bfloat16; candidates and row index
(1, 1, rows) bfloat16; values, flags (B, 1, k) bfloat16; indices (B, 1, k) uint16, in decoder
rows (query number + 1); selection (B, k, rows) bfloat16.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_sam3_ros.engines.ttnn_model.config import DeviceSettings

#: Added to the value of a row that is not a query: detection scores lie in [0, 1] and query
#: logits far inside +-16384, so such a row sorts below every query and fails every threshold
#: >= 0 (a power of two, exact in bfloat16). -2 sufficed for scores, not for logits: a query
#: logit below -2 ranked under a padding row.
NOT_A_QUERY = -16384.0
#: Rows a bfloat16 index can name exactly (integers up to 2^8).
MAX_ROWS = 256
#: How the prompt path ranks its queries, in the order the warm-up check tries them
#: (stage_checks.py): ttnn.topk on the decoder's rows; ttnn.topk on the same row padded to a
#: power of two (top_queries' `widen`); no ttnn.topk, every query read back and ranked on the host.
TOPK_FORMS = ("chip", "padded", "host")
HOST_TOP_K = TOPK_FORMS[2]


def kept_count(max_instances: int, queries: int) -> int:
    """The k of the top-k: max_instances, but no more than there are queries (ttnn.topk refuses a
    k above the row count, and the rows past the queries are never candidates)."""
    if max_instances < 1:
        raise ValueError(f"max_instances must be at least 1, got {max_instances}")
    return min(max_instances, queries)


def candidate_row(rows: int, first: int, count: int) -> torch.Tensor:
    """Host side: (1, 1, rows) additive row, 0 on the query rows [first, first + count),
    NOT_A_QUERY on the others (the presence token, the tile padding)."""
    row = torch.full((1, 1, rows), NOT_A_QUERY)
    row[..., first : first + count] = 0.0
    return row


def row_index(rows: int) -> torch.Tensor:
    """Host side: (1, 1, rows) with value r at row r, the comparand of the one-hot selection."""
    if rows > MAX_ROWS:
        raise ValueError(f"{rows} rows: a bfloat16 index names rows exactly only up to {MAX_ROWS}")
    return torch.arange(rows, dtype=torch.float32).reshape(1, 1, rows)


def padded_width(rows: int) -> int:
    """The row width of top_queries' padded form: the next power of two, at least 64 (the
    engine's 224 rows go to 256)."""
    width = 64
    while width < rows:
        width *= 2
    return width


def widening_matrix(rows: int, width: int) -> torch.Tensor:
    """Host side: (rows, width) 0/1, [I | 0]: a (B, 1, rows) row times it is the same row with
    width - rows zero columns after it (exact: one value times 1)."""
    matrix = torch.zeros(rows, width)
    matrix[torch.arange(rows), torch.arange(rows)] = 1.0
    return matrix


def top_queries(
    ttnn: Any,
    scores: Any,
    candidates: Any,
    k: int,
    threshold: float,
    settings: DeviceSettings,
    widen: Any = None,
) -> tuple[Any, Any, Any]:
    """(values, indices, kept) of the k best query rows per prompt, best first; leaves inputs.

    `kept` is 1.0 where value > threshold. Equal scores may come out in either order.
    `widen` (the device copy of widening_matrix, with `candidates` as wide) is the padded form
    the warm-up check falls back to (stage_checks.py): ttnn.topk then ranks a power-of-two row,
    the extra columns NOT_A_QUERY, so the indices name the same rows."""
    row = ttnn.permute(scores, (0, 2, 1), memory_config=settings.memory)
    if widen is not None:
        narrow = row
        row = ttnn.matmul(
            narrow, widen, memory_config=settings.memory, compute_kernel_config=settings.exact_kernel
        )
        ttnn.deallocate(narrow)
    masked = ttnn.add(row, candidates, memory_config=settings.memory)
    ttnn.deallocate(row)
    values, indices = ttnn.topk(masked, k, dim=-1, largest=True, sorted=True, memory_config=settings.memory)
    ttnn.deallocate(masked)
    kept = ttnn.gt(values, threshold, memory_config=settings.memory)
    return values, indices, kept


def selection_matrix(ttnn: Any, indices: Any, rows: Any, settings: DeviceSettings) -> Any:
    """One-hot (B, k, rows): entry (b, j, r) is 1 where indices[b, 0, j] == r; leaves inputs.

    `rows` is the device copy of row_index."""
    as_values = ttnn.typecast(indices, ttnn.bfloat16, memory_config=settings.memory)
    column = ttnn.permute(as_values, (0, 2, 1), memory_config=settings.memory)
    ttnn.deallocate(as_values)
    out = ttnn.eq(column, rows, memory_config=settings.memory)
    ttnn.deallocate(column)
    return out


def gather_rows(ttnn: Any, selection: Any, values: Any, settings: DeviceSettings) -> Any:
    """selection @ values: (B, k, rows) x (B, rows, N) -> (B, k, N), the kept rows; exact."""
    return ttnn.matmul(
        selection,
        values,
        dtype=ttnn.bfloat16,
        memory_config=settings.memory,
        compute_kernel_config=settings.exact_kernel,
    )
