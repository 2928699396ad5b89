"""Run the warm-up checks' fallback forms with the real ttnn 0.81.1 library on a mock p150a.

The forms (ttnn_model/stage_checks.py picks them when a stage fails its check on a chip): the
3x3 convs' taps form (layers.conv3x3_taps: pad, nine slices, concat, one matmul) at each neck
level's size and the pixel decoder's; the composite GroupNorm (segmentation_head.
group_norm_composite) at both pixel-decoder stages; ttnn.topk on the row padded to a power of
two (selection.top_queries with `widen`); and host top-k's stand-in kept rows (a clone of a
uint16 constant, then the one-hot selection as the prompt trace builds it). Each runs once,
eagerly, on zero-valued device tensors of the real shapes, for 1 prompt and for `--batch`
prompts where the prompt trace batches them; the real library validates every call and sizes
its programs against the real allocator (nothing computes on the mock: the emulator checks the
numbers). Then a taps weight of the wrong height, which the library must refuse.

Two halves, as prompt_layers.py has: ``write_manifest`` runs where torch is (the sizes, from
transformers' config and the engine's own rules), ``main`` in .venv-ttnn (no torch).

Usage: .venv-ttnn/bin/python tools/ttnn_mock/fallback_forms.py MANIFEST.json --harvest 3 --json OUT.json
       [--batch 4]
Exit 0 when every form was accepted and the wrong call refused; 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

from ttnn_mock import common  # noqa: E402 - after the path set-up above

#: Sizes of the check: SAM 3 itself and the tiny test model.
SIZES = ("full", "tiny")
#: Kept queries: the node's default max_instances.
MAX_INSTANCES = 50


def write_manifest(size: str, path: Path) -> Path:
    """Torch side: the shapes the fallback forms run at, as JSON."""
    from transformers import Sam3Config
    from transformers.models.sam3 import modeling_sam3 as sam3

    from tt_sam3_ros.engines.ttnn_model import prompt_weights, selection
    from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig
    from tt_sam3_ros.engines.ttnn_model.decoder import DecoderStackConfig
    from tt_sam3_ros.engines.ttnn_model.neck import level_sides
    from tt_sam3_ros.engines.ttnn_model.segmentation_head import PixelDecoderConfig
    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    config = Sam3Config() if size == "full" else tiny_sam3_config()
    image = ImagePathConfig.from_hf(config.vision_config)
    decoder = sam3.Sam3DetrDecoder(config.detr_decoder_config)
    stack = DecoderStackConfig.from_decoder(decoder, image.grid, image.grid)
    head = sam3.Sam3MaskDecoder(config.mask_decoder_config)
    pixel = PixelDecoderConfig.from_module(
        head.pixel_decoder, image.grid, prompt_weights.PIXEL_DECODER_STAGES
    )
    manifest = {
        "size": size,
        "fpn_dim": image.fpn_dim,
        "neck_sides": level_sides(image),
        "pixel_decoder": vars(pixel),
        "rows": stack.rows,
        "queries": stack.queries,
        "kept": selection.kept_count(MAX_INSTANCES, stack.queries),
        "padded_width": selection.padded_width(stack.rows),
    }
    path.write_text(json.dumps(manifest))
    return path


def run(manifest: dict[str, Any], report: dict[str, Any], batch: int) -> None:
    """Every form once per batch size on one mock device; one entry per form in report["forms"]."""
    import numpy as np
    import ttnn

    m = common.import_modules()
    from tt_sam3_ros.engines.ttnn_model import layers

    with common.mock_device(ttnn, m, report) as (device, settings, zeros):

        def integers(shape: tuple[int, ...]) -> Any:
            host = ttnn.Tensor(np.zeros(shape, np.int32), ttnn.uint16, None, ttnn.TILE_LAYOUT)
            return host.to(device, ttnn.DRAM_MEMORY_CONFIG)

        pixel = m.segmentation_head.PixelDecoderConfig(**manifest["pixel_decoder"])
        c_neck, c = manifest["fpn_dim"], pixel.channels
        rows, k, width = manifest["rows"], manifest["kept"], manifest["padded_width"]
        pixel_sides = [pixel.side * 2 ** (stage + 1) for stage in range(pixel.stages)]
        batches = sorted({1, batch})

        def taps(channels: int, side: int, b: int, height: int | None = None) -> Any:
            weight = (zeros((height or 9 * channels, channels), ttnn.bfloat8_b), zeros((1, channels)))
            return layers.conv3x3_taps(
                ttnn, zeros((1, 1, b * side * side, channels)), weight, channels, b, side, settings
            )

        def composite(side: int, b: int) -> Any:
            return m.segmentation_head.group_norm_composite(
                ttnn,
                zeros((b, 1, side * side, c)),
                zeros((c, c)),
                zeros((1, c)),
                zeros((1, c)),
                pixel.eps,
                settings,
            )

        def padded_topk(b: int) -> Any:
            values, indices, flags = m.selection.top_queries(
                ttnn, zeros((b, rows, 1)), zeros((1, 1, width)), k, 0.0, settings, widen=zeros((rows, width))
            )
            report["padded_topk_indices_dtype"] = str(indices.dtype)
            for tensor in (values, flags):
                ttnn.deallocate(tensor)
            return m.selection.selection_matrix(ttnn, indices, zeros((1, 1, rows)), settings)

        def host_topk_rows(b: int) -> Any:
            indices = ttnn.clone(integers((b, 1, k)), memory_config=settings.memory)
            return m.selection.selection_matrix(ttnn, indices, zeros((1, 1, rows)), settings)

        steps = {
            f"conv_taps.neck.{side}": (lambda side=side: taps(c_neck, side, 1))
            for side in manifest["neck_sides"]
        }
        for b in batches:
            for side in pixel_sides:
                steps[f"conv_taps.pixel_decoder.{side}.b{b}"] = lambda side=side, b=b: taps(c, side, b)
                steps[f"group_norm_composite.{side}.b{b}"] = lambda side=side, b=b: composite(side, b)
            steps[f"padded_topk.b{b}"] = lambda b=b: padded_topk(b)
            steps[f"host_topk_rows.b{b}"] = lambda b=b: host_topk_rows(b)
        common.run_steps(ttnn, steps, report["forms"])
        try:
            taps(c_neck, manifest["neck_sides"][-1], 1, height=9 * c_neck + 32)
            report["refused"] = ""
        except Exception as error:
            report["refused"] = f"{type(error).__name__}: {error}"[:500]


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__, batch_default=4, batch_help="prompts in the batched forms")
    args, manifest, report = common.start(parser, argv, "forms")

    def check() -> bool:
        run(manifest, report, args.batch)
        forms = report["forms"].values()
        return bool(report["forms"]) and all(f["ok"] for f in forms) and bool(report["refused"])

    common.run_on_mock("ttnn-mock-fallbacks-", args.harvest, report, check)
    return common.finish(args, report, f"fallback forms {manifest['size']}")


if __name__ == "__main__":
    sys.exit(main())
