"""Run the prompt path's TT-NN modules with the real ttnn 0.81.1 library on a mock p150a.

The modules (ttnn_model/geometry_encoder.py, fusion_encoder.py, decoder.py, scoring.py,
segmentation_head.py) are not wired into the engine yet, so this runner calls each one as the engine
will: the geometry encoder's class token (once per image: batch 1 whatever --batch says), one
fusion-encoder layer, one decoder layer, the whole decoder stack with its glue (query positions,
box bias, refinement, presence), the scoring, the segmentation head's pieces (its pixel decoder
from 72 x 72 to 288 x 288 included) and the on-device selection (top-k of the scores, the kept
rows gathered, their mask logits only), on zero-valued device tensors of the real shapes
(nothing computes on the mock; numerics are the emulator's job). The decoder stack's stages also
run once under a NO_DISPATCH graph capture, for their per-core peak L1 (the report's "peaks").
The real library then validates every call (shapes, layouts, dtypes, SDPA chunks and masks),
picks its program factories and sizes their circular buffers against the real allocator.
Then the composed path the engine replays: ChipPromptPath.compile itself (every bucket's
_forward, 1 and 4 prompts, each with both mask reads after it: the kept rows' and the fallback's
_mask_rows) on the engine's PromptBuffers and device buffers shaped like the image trace's outputs
(four FPN maps and the class tile); then, for each bucket, the same forward and both mask reads
again with one NO_DISPATCH graph capture per stage (the report's "stage_peaks": between modules,
fusion encoder, decoder, scoring, on-device selection, segmentation head, mask read;
StageCaptures); and a class tile of the wrong height that the library must refuse (so the check
can fail).

Two halves, as tools/ttnn_mock/image_path.py has: ``write_manifest`` runs where torch is (the
weights' names, roles and shapes from prompt_weights' own preparation of transformers' modules),
``main`` runs in .venv-ttnn (CPython 3.12, no torch) and writes a JSON report, one entry per module.

Usage: .venv-ttnn/bin/python tools/ttnn_mock/prompt_layers.py MANIFEST.json --harvest 3 --json OUT.json
       [--batch 4] [--no-composed]
Exit 0 when every module was accepted; 1 otherwise (the error of each failing one in the JSON).
"""

from __future__ import annotations

import itertools
import json
import sys
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools")]

from ttnn_mock import common, oplog  # noqa: E402 - after the path set-up above

#: Kept instances in the selection check: the node's default max_instances (config/sam3.yaml).
MAX_INSTANCES = 50
#: Sizes of the check: SAM 3 itself and the tiny test model.
SIZES = ("full", "tiny")
#: The image-token grid (72 x 72) at both sizes: the input stays 1008 x 1008.
GRID_SIDE = 72
#: Prompt buckets the composed prompt path (ChipPromptPath) is compiled for here.
COMPOSED_BUCKETS = (1, 4)
#: Modules whose per-core peaks (one NO_DISPATCH graph capture each) the report carries.
PEAK_STAGES = ("query_position", "box_bias", "decoder_stack", "pixel_decoder", "kept_mask_logits")
#: The composed prompt path's stages, in trace order, as its per-stage peaks name them: oplog's
#: stage of each op (read off the engine's call stack), the ops ChipPromptPath issues itself
#: between modules (prompt tokens, the class-token placement, the vision tokens per prompt, the
#: keyed tokens, the pooling weights), and the mask read that follows the replay.
BETWEEN_MODULES = "between modules"
MASK_READ = "mask read"
PROMPT_STAGES = (
    BETWEEN_MODULES,
    "fusion_encoder",
    "decoder",
    "scoring",
    "selection",
    "segmentation_head",
    MASK_READ,
)
#: The per-core peak fields of a graph capture (extract_resource_usage_per_core), total last.
PEAK_FIELDS = ("peak_l1", "peak_cb", "peak_dataflow_buffer", "peak_scratchpad", "peak_total")


def write_manifest(size: str, path: Path) -> Path:
    """Torch side: the prepared weights' shapes and roles, and the layer dimensions, as JSON."""
    import torch
    from transformers import Sam3Config
    from transformers.models.sam3 import modeling_sam3 as sam3

    from tt_sam3_ros.engines.ttnn_model import prompt_weights
    from tt_sam3_ros.engines.ttnn_model.decoder import DecoderStackConfig
    from tt_sam3_ros.engines.ttnn_model.segmentation_head import PixelDecoderConfig
    from tt_sam3_ros.weights.tiny_model import tiny_sam3_config

    config = Sam3Config() if size == "full" else tiny_sam3_config()
    decoder = sam3.Sam3DetrDecoder(config.detr_decoder_config)
    encoder_layer = sam3.Sam3DetrEncoderLayer(config.detr_encoder_config)
    scoring = sam3.Sam3DotProductScoring(config)
    head = sam3.Sam3MaskDecoder(config.mask_decoder_config)
    geometry = sam3.Sam3GeometryEncoder(config.geometry_encoder_config)
    fusion = sam3.Sam3DetrEncoder(config.detr_encoder_config)
    hidden = config.geometry_encoder_config.hidden_size
    position = torch.zeros(1, GRID_SIDE * GRID_SIDE, config.detr_encoder_config.hidden_size)
    groups = {
        "geometry": prompt_weights.prepare_geometry_encoder(geometry, torch.zeros(1, hidden, 72, 72)),
        "encoder": prompt_weights.prepare_fusion_encoder_layer(encoder_layer, position),
        "fusion": prompt_weights.prepare_fusion_encoder(fusion, position),
        "decoder": prompt_weights.prepare_decoder_layer(decoder.layers[0]),
        "scoring": prompt_weights.prepare_scoring(scoring, decoder),
        "head": prompt_weights.prepare_segmentation_head(head),
        "decoder_stack": prompt_weights.prepare_decoder(
            decoder, DecoderStackConfig.from_decoder(decoder, GRID_SIDE, GRID_SIDE)
        ),
    }
    attention = encoder_layer.self_attn
    manifest = {
        "size": size,
        "hidden": attention.hidden_size,
        "heads": attention.num_attention_heads,
        "intermediate": encoder_layer.mlp.fc1.out_features,
        "eps": encoder_layer.layer_norm1.eps,
        "queries": config.detr_decoder_config.num_queries,
        "scale": float(scoring.scale),
        "geometry": {
            "layers": len(geometry.layers),
            "intermediate": geometry.layers[0].mlp.fc1.out_features,
            "eps": geometry.output_layer_norm.eps,
        },
        "pixel_decoder": vars(
            PixelDecoderConfig.from_module(head.pixel_decoder, 72, prompt_weights.PIXEL_DECODER_STAGES)
        ),
        "decoder_layers": len(decoder.layers),
        "fusion_layers": len(fusion.layers),
        "head_eps": head.prompt_cross_attn_norm.eps,
        "head_attention": [head.prompt_cross_attn.hidden_size, head.prompt_cross_attn.num_attention_heads],
        "decoder_eps": decoder.output_layer_norm.eps,
        "weights": {
            group: {name: [list(w.values.shape), w.kind] for name, w in host.items()}
            for group, host in groups.items()
        },
    }
    path.write_text(json.dumps(manifest))
    return path


def run(
    manifest: dict[str, Any],
    report: dict[str, Any],
    batch: int = 1,
    modules_only: bool = False,
    composed: bool = True,
) -> None:
    """Every module once, eagerly, on one mock device, for `batch` prompts (the image's position
    encoding and the queries' self-attention mask shared, as broadcasts); one entry per module.
    Then, unless `modules_only` (prompt_batch_cost.py prices each module's ops once), the per-core
    peaks, and the composed path unless not `composed` (it compiles every bucket whatever `batch`
    is, so one run per size and grid is enough)."""
    import numpy as np
    import ttnn

    m = common.import_modules()
    with common.mock_device(ttnn, m, report) as (device, settings, zeros):
        grid = device.compute_with_storage_grid_size()

        def weight(shape: list[int], kind: str) -> Any:
            """A zero weight placed as weights.upload places its kind."""
            if kind == "conv":  # a host tensor: ttnn.conv2d prepares it
                return ttnn.Tensor(np.zeros(shape, np.float32), ttnn.float32, None, ttnn.ROW_MAJOR_LAYOUT)
            if kind == "row_major":
                host = ttnn.Tensor(np.zeros(shape, np.float32), ttnn.bfloat16, None, ttnn.ROW_MAJOR_LAYOUT)
                return host.to(device, ttnn.DRAM_MEMORY_CONFIG)
            return zeros(
                tuple(shape), {"matmul": ttnn.bfloat8_b, "float32": ttnn.float32}.get(kind, ttnn.bfloat16)
            )

        def weights(group: str) -> dict[str, Any]:
            return {name: weight(shape, kind) for name, (shape, kind) in manifest["weights"][group].items()}

        c, heads, eps = manifest["hidden"], manifest["heads"], manifest["eps"]
        shape = m.attention.AttentionShape.of(c, heads)
        layer = m.prompt_config.PromptLayerConfig(c, manifest["intermediate"], shape, eps)
        s, t, pixels = 72 * 72, m.prompt_config.padded_length(33), 288 * 288
        q = m.prompt_config.padded_length(1 + manifest["queries"])
        scoring_config = m.scoring.ScoringConfig(eps, manifest["scale"], 12.0, 10.0)
        b = batch
        inputs = m.decoder.DecoderInputs(
            query_pos=zeros((b, q, c)),
            self_mask=zeros((1, 1, q, q)),
            text=zeros((b, t, c)),
            text_mask=zeros((b, 1, q, t)),
            vision=zeros((b, s, c)),
            vision_keyed=zeros((b, s, c)),
            box_bias=zeros((b, heads, q, s)),
        )
        geometry_w, encoder_w, decoder_w, scoring_w, head_w, stack_w = (
            weights(g) for g in ("geometry", "encoder", "decoder", "scoring", "head", "decoder_stack")
        )
        g = manifest["geometry"]
        geometry = m.geometry_encoder.GeometryConfig(c, g["intermediate"], shape, g["layers"], g["eps"])
        pixel = m.segmentation_head.PixelDecoderConfig(**manifest["pixel_decoder"])
        # The mask's core count is the library's own (compute_num_virtual_cols), not a copy of it.
        real_columns = ttnn._ttnn.operations.normalization._compute_num_virtual_cols(
            grid.x, pixel.groups, pixel.channels
        )
        ours = m.segmentation_head.group_norm_core_columns(grid.x, pixel.groups, pixel.channels)
        report["group_norm_columns"] = {"ours": ours, "library": int(real_columns)}
        grids = {}
        for side in (pixel.side * 2**i for i in range(1, pixel.stages + 1)):
            library = ttnn._ttnn.operations.normalization._find_expected_dram_grid(
                grid.x, grid.y, pixel.channels, pixel.groups, batch * side * side, batch
            )
            chosen = m.segmentation_head.group_norm_program(
                (grid.x, grid.y), pixel.channels, pixel.groups, side * side, batch
            )
            grids[side] = {"ours": list(chosen[0]), "library": [library.x, library.y], "blocks": chosen[1]}
        report["group_norm_grids"] = grids
        report["pixel_channels"] = pixel.channels
        head_w.update(m.segmentation_head.pixel_decoder_constants(ttnn, device, pixel))
        fine = [pixel.side * 2**i for i in range(pixel.stages, 0, -1)]  # 288, 144
        stack_config = m.decoder.DecoderStackConfig(
            layer,
            manifest["decoder_layers"],
            manifest["queries"],
            GRID_SIDE,
            GRID_SIDE,
            manifest["decoder_eps"],
        )
        stack_inputs = m.decoder.DecoderStackInputs(
            text=inputs.text,
            text_mask=inputs.text_mask,
            vision=inputs.vision,
            vision_keyed=inputs.vision_keyed,
        )
        stages = {
            "query_position": lambda: m.decoder.query_position(
                ttnn, zeros((b, q, 32), ttnn.float32), stack_w, settings
            ),
            "box_bias": lambda: m.decoder.box_bias(
                ttnn, zeros((b, q, 32), ttnn.float32), stack_w, stack_config, settings
            ),
            "decoder_stack": lambda: m.decoder.decoder_stack(
                ttnn, stack_inputs, stack_w, stack_config, settings, scoring_config
            ).boxes[-1],
        }

        def kept_mask_logits() -> Any:
            """Top-k of the scores, the kept queries and boxes gathered, their mask logits only."""
            sel = m.selection
            k = sel.kept_count(MAX_INSTANCES, manifest["queries"])
            values, indices, kept = sel.top_queries(
                ttnn, zeros((b, q, 1)), zeros((1, 1, q)), k, 0.5, settings
            )
            one_hot = sel.selection_matrix(ttnn, indices, zeros((1, 1, q)), settings)
            boxes = sel.gather_rows(ttnn, one_hot, zeros((b, q, 4)), settings)
            queries = sel.gather_rows(ttnn, one_hot, zeros((b, q, c)), settings)
            embeddings = m.segmentation_head.mask_embeddings(ttnn, queries, head_w, settings)
            logits = m.segmentation_head.mask_logits(
                ttnn, embeddings, zeros((b, pixels, c)), head_w, settings
            )
            report["selection_shapes"] = {
                "k": k,
                "values": list(values.shape),
                "indices": list(indices.shape),
                "indices_dtype": str(indices.dtype),
                "kept": list(kept.shape),
                "boxes": list(boxes.shape),
            }
            return logits

        steps = {
            "geometry_class_token": lambda: m.geometry_encoder.class_token(
                ttnn, zeros((1, 1, s, c)), geometry_w, geometry, settings
            ),
            "fusion_encoder_layer": lambda: m.fusion_encoder.fusion_encoder_layer(
                ttnn,
                zeros((b, s, c)),
                zeros((b, t, c)),
                zeros((b, 1, s, t)),
                encoder_w,
                layer,
                settings,
            ),
            "decoder_layer": lambda: m.decoder.decoder_layer(
                ttnn, zeros((b, q, c)), inputs, decoder_w, layer, settings
            ),
            "query_logits": lambda: m.scoring.query_logits(
                ttnn,
                zeros((b, q, c)),
                zeros((b, t, c)),
                zeros((b, 1, t)),
                scoring_w,
                scoring_config,
                settings,
            ),
            "presence_logits": lambda: m.scoring.presence_logits(
                ttnn, zeros((b, q, c)), scoring_w, scoring_config, settings
            ),
            "detection_scores": lambda: m.scoring.detection_scores(
                ttnn, zeros((b, q, 1)), zeros((b, q, 1)), zeros((b, q, q)), settings
            ),
            "head_prompt_attention": lambda: m.segmentation_head.prompt_cross_attention(
                ttnn, zeros((b, s, c)), zeros((b, t, c)), zeros((b, 1, s, t)), head_w, shape, eps, settings
            ),
            "pixel_decoder": lambda: m.segmentation_head.pixel_decoder(
                ttnn,
                device,
                zeros((b, s, c)),
                [zeros((1, 1, side * side, c)) for side in fine],
                head_w,
                pixel,
                settings,
                {},
                ttnn.bfloat8_b,
            ),
            "mask_logits": lambda: m.segmentation_head.mask_logits(
                ttnn,
                m.segmentation_head.mask_embeddings(ttnn, zeros((b, q, c)), head_w, settings),
                zeros((b, pixels, c)),
                head_w,
                settings,
            ),
            **stages,
            "kept_mask_logits": kept_mask_logits,
        }
        common.run_steps(ttnn, steps, report["modules"])
        if modules_only:
            return
        report["peaks"] = {name: _per_core_peaks(ttnn, steps[name]) for name in PEAK_STAGES}
        if not composed:
            return
        parts = types.SimpleNamespace(
            layer=layer, stack=stack_config, scoring=scoring_config, pixel=pixel, head=head_w
        )
        path, image_state = _chip_prompt_path(ttnn, device, m, manifest, settings, zeros, weights, parts)
        _run_composed(ttnn, m, path, image_state, zeros, report)


def _chip_prompt_path(
    ttnn: Any,
    device: Any,
    m: Any,
    manifest: dict[str, Any],
    settings: Any,
    zeros: Any,
    weights: Any,
    parts: Any,
) -> tuple[Any, Any]:
    """The engine's ChipPromptPath on zero weights, with its real PromptBuffers, and the image
    state it reads: the image trace's outputs (four FPN maps at scales 4, 2, 1, 0.5, then the class
    tile) through its own image_features. Only __init__ is bypassed (it prepares the weights from
    transformers' modules, which need torch); the host helpers that need torch are replaced:
    _tensor (a host tensor up) and _read (a device tensor down: zeros of its shape, as the mock
    computes nothing)."""
    import numpy as np

    pp = m.prompt_path
    c, s = manifest["hidden"], GRID_SIDE * GRID_SIDE
    path = object.__new__(pp.ChipPromptPath)
    path.ttnn, path.device, path.settings = ttnn, device, settings
    path.fusion, path.fusion_layers = parts.layer, manifest["fusion_layers"]
    path.decoder, path.scoring, path.pixel = parts.stack, parts.scoring, parts.pixel
    path.head_shape = m.attention.AttentionShape.of(*manifest["head_attention"])
    path.head_eps = manifest["head_eps"]
    path._conv_dtype, path._conv_weights = ttnn.bfloat8_b, {}
    path.w_fusion, path.w_decoder = weights("fusion"), weights("decoder_stack")
    path.w_scoring, path.w_head = weights("scoring"), parts.head
    if not hasattr(pp.torch, "zeros"):  # the stand-in torch: _mask_rows builds its one-hot with zeros
        pp.torch = types.SimpleNamespace(zeros=lambda *shape: np.zeros(shape, np.float32))
    path._tensor = lambda values: zeros(tuple(values.shape))
    path._read = lambda tensor: np.zeros(tuple(tensor.shape), np.float32)
    rows = parts.stack.rows
    path.kept = m.selection.kept_count(pp.KEPT_QUERIES, parts.stack.queries)
    path.topk_form = m.selection.TOPK_FORMS[0]  # the first form, as before any warm-up check
    path.constants = {
        "position": zeros((1, s, c)),
        "placement": zeros((1, pp.PROMPT_TOKENS, pp.TILE)),
        "candidates": zeros((1, 1, rows)),
        "rows": zeros((1, 1, rows)),
    }
    path._image_serials = itertools.count(1)
    path.buckets = COMPOSED_BUCKETS
    path.selectors = {b: zeros((b, rows, rows)) for b in path.buckets}
    path.prompts = m.prompt_buffers.PromptBuffers(
        ttnn,
        device,
        path._forward,
        tokens=pp.PROMPT_TOKENS,
        hidden=c,
        mask_rows={"image": s, "queries": rows, "pool": 1},
        max_prompts=path.buckets[-1],
        buckets=path.buckets,
    )
    levels = [zeros((1, 1, s * 4**2 // 4**i, c)) for i in range(4)] + [zeros((1, pp.TILE, c))]
    return path, path.image_features(levels)


def _run_composed(ttnn: Any, m: Any, path: Any, image_state: Any, zeros: Any, report: dict[str, Any]) -> None:
    """The engine's ChipPromptPath.compile (every bucket's _forward, then both mask reads: the
    kept rows' and the fallback's _mask_rows), the shapes recorded; then each bucket's forward and
    mask reads again, stage by stage under NO_DISPATCH graph captures, for each stage's per-core
    peaks; and a class tile of the wrong height, which the real library must refuse."""
    pp, shapes = m.prompt_path, {}
    forward, mask_rows, kept_masks = path._forward, path._mask_rows, path._kept_mask_logits

    def recorded_forward(bucket: int, *args: Any) -> list[Any]:
        outputs = forward(bucket, *args)
        shapes[f"forward_{bucket}"] = [list(t.shape) for t in outputs]
        return outputs

    def recorded_mask_rows(masks: Any, rows: Any) -> Any:
        values = mask_rows(masks, rows)
        shapes[f"mask_rows_{masks.count}"] = list(values.shape)
        return values

    def recorded_kept_masks(masks: Any) -> Any:
        values = kept_masks(masks)
        shapes[f"kept_mask_logits_{masks.count}"] = list(values.shape)
        return values

    path._forward, path._mask_rows, path._kept_mask_logits = (
        recorded_forward,
        recorded_mask_rows,
        recorded_kept_masks,
    )
    try:
        path.compile(image_state)
        report["composed"] = {"ok": True, "shapes": shapes}
    except Exception as error:
        failure = f"{type(error).__name__}: {error}"[:3000]
        report["composed"] = {"ok": False, "shapes": shapes, "error": failure}
        return
    finally:
        path._forward, path._mask_rows, path._kept_mask_logits = forward, mask_rows, kept_masks
    inputs = path._inputs(image_state)
    report["stage_peaks"] = {str(b): _stage_peaks(ttnn, pp, path, b, inputs) for b in path.buckets}
    one = (1, path.prompts.features[1], path.prompts.masks[1])
    wrong = pp.ChipImageState(*inputs[:3], zeros((1, 2 * pp.TILE, inputs[3].shape[-1])))
    try:
        for tensor in forward(*one, *path._inputs(wrong)):
            ttnn.deallocate(tensor)
        report["refused"] = None
    except Exception as error:
        report["refused"] = f"{type(error).__name__}: {error}".split("backtrace:")[0].strip()


class StageCaptures:
    """The ttnn module wrapped (oplog.Recorder) so that each run of consecutive ops of one stage
    of the prompt path is one NO_DISPATCH graph capture; each stage keeps the largest of its
    captures' per-core figures. Buffers made before a capture (the weights, the image trace's
    outputs, an earlier stage's outputs) are not counted in it: the prompt path keeps its
    activations in DRAM between stages (settings.memory), so a stage's L1 is its own."""

    def __init__(self, ttnn: Any) -> None:
        self.graph = ttnn._ttnn.graph
        self.module = oplog.Recorder(ttnn, before_op=self._before_op)
        self.stages: dict[str, dict[str, int]] = {}
        self._phase: str | None = None
        self._key: tuple[str, int | None] | None = None

    def phase(self, name: str | None) -> None:
        """Name every following op `name` (None: by the call stack again); ends the capture."""
        self.end()
        self._phase = name

    def _before_op(self, name: str, stage: str, block: int | None) -> None:
        if self._phase is not None:
            stage = self._phase
        elif stage == "other":  # issued by ChipPromptPath itself
            stage = BETWEEN_MODULES
        if (stage, block) != self._key:
            self.end()
            self.graph.begin_graph_capture(self.graph.RunMode.NO_DISPATCH)
            self._key = (stage, block)

    def end(self) -> None:
        """End the open capture, if any, and fold its per-core peaks into its stage's."""
        if self._key is None:
            return
        usage = self.graph.extract_resource_usage_per_core(self.graph.end_graph_capture())
        row = self.stages.setdefault(self._key[0], {"captures": 0})
        row["captures"] += 1
        for field in PEAK_FIELDS:
            row[field] = max(row.get(field, 0), int(getattr(usage, field, 0)))
        self._key = None


def _stage_peaks(ttnn: Any, pp: Any, path: Any, bucket: int, inputs: tuple[Any, ...]) -> dict[str, Any]:
    """One forward of `bucket` prompts and both mask reads, as the engine runs them (its own
    _forward, _kept_mask_logits, and _mask_rows for a row of every prompt), captured stage by
    stage (the mask read's peak is the larger of the two)."""
    import numpy as np

    captures = StageCaptures(ttnn)
    path.ttnn = captures.module
    try:
        forward = path._forward(bucket, path.prompts.features[bucket], path.prompts.masks[bucket], *inputs)
        outputs = pp.PromptOutputs(*forward)
        captures.phase(MASK_READ)
        path._kept_mask_logits(pp.ChipMasks(outputs.kept_embeddings, outputs.pixels, bucket, None))
        rows = {prompt: np.array([0]) for prompt in range(bucket)}
        path._mask_rows(pp.ChipMasks(outputs.embeddings, outputs.pixels, bucket, None), rows)
        captures.end()
    except Exception as error:
        captures.end()
        return {"error": f"{type(error).__name__}: {error}".split("backtrace:")[0].strip()[:2000]}
    finally:
        path.ttnn = ttnn
    return captures.stages


def _per_core_peaks(ttnn: Any, stage: Any) -> dict[str, Any]:
    """One NO_DISPATCH graph capture of `stage`: its per-core peak L1 and circular-buffer bytes
    (buffers allocated before the capture, such as the weights, are not counted)."""
    graph = ttnn._ttnn.graph
    graph.begin_graph_capture(graph.RunMode.NO_DISPATCH)
    try:
        stage()
    except Exception as error:
        graph.end_graph_capture()
        return {"error": f"{type(error).__name__}: {error}"[:1000]}
    usage = graph.extract_resource_usage_per_core(graph.end_graph_capture())
    return {field: int(getattr(usage, field, 0)) for field in PEAK_FIELDS}


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__, batch_default=1, batch_help="prompts in one batch")
    parser.add_argument(
        "--no-composed", action="store_true", help="the modules and their peaks only, not ChipPromptPath"
    )
    args, manifest, report = common.start(parser, argv, "modules")

    def check() -> bool:
        run(manifest, report, args.batch, composed=not args.no_composed)
        return (
            bool(report["modules"])
            and all(v["ok"] for v in report["modules"].values())
            and (args.no_composed or (report["composed"]["ok"] and bool(report["refused"])))
        )

    common.run_on_mock("ttnn-mock-prompt-", args.harvest, report, check)
    return common.finish(args, report, f"prompt path {manifest['size']}")


if __name__ == "__main__":
    sys.exit(main())
