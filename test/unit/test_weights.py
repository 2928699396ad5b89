"""tt_sam3_ros.weights: every source of weights loads the same model, and every failure says what to do.

Nothing here reaches the network: hub calls are either replaced by fakes that raise the
errors huggingface_hub raises, or run with HF_HUB_OFFLINE against a cache built in tmp_path.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import httpx
import huggingface_hub
import pytest
import torch
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors.torch import load_file, save_file
from transformers import Sam3Config, Sam3Model, Sam3VideoConfig

from tt_sam3_ros import weights
from tt_sam3_ros.weights import (
    SAM3_PINNED_REVISION,
    HubUnreachableError,
    WeightsError,
    convert_meta_state_dict,
    load_sam3,
    meta_source,
    resolve_weights,
    to_meta_state_dict,
)
from tt_sam3_ros.weights.tiny_model import save_tiny_sam3, tiny_sam3_config

#: Meta keys a real sam3.pt carries that transformers' image model has no use for.
META_EXTRAS = {
    "tracker.sam_mask_decoder.iou_prediction_head.layers.0.weight": torch.zeros(4, 4),
    "detector.backbone.vision_backbone.trunk.blocks.0.attn.freqs_cis": torch.zeros(
        8, 2, dtype=torch.complex64
    ),
    "detector.geometry_encoder.points_direct_project.weight": torch.zeros(32, 2),
}


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model in the transformers format, as `hf download` would lay it out."""
    return save_tiny_sam3(tmp_path_factory.mktemp("tiny_transformers"), seed=0)


@pytest.fixture(scope="module")
def meta_state(tiny_model) -> dict[str, torch.Tensor]:
    """The tiny model's weights in Meta's layout, with the extras a real sam3.pt has."""
    return {**to_meta_state_dict(tiny_model.state_dict(), tiny_sam3_config()), **META_EXTRAS}


def write_meta_folder(folder: Path, state: dict[str, torch.Tensor], with_config: bool = True) -> Path:
    """sam3.pt the way Meta saves it ({"model": state_dict}), with the tiny config beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"model": state}, folder / "sam3.pt")
    if with_config:
        tiny_sam3_config().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def fixed_inputs(tokenizer) -> dict[str, torch.Tensor]:
    """One seeded image and one prompt, enough to exercise every head."""
    text = tokenizer(["a red car"], padding="max_length", max_length=32, return_tensors="pt")
    pixels = torch.randn(1, 3, 1008, 1008, generator=torch.Generator().manual_seed(7))
    return {"pixel_values": pixels, "input_ids": text.input_ids, "attention_mask": text.attention_mask}


def run(model: Sam3Model, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's tensor outputs on ``inputs``."""
    with torch.no_grad():
        outputs = model(**inputs)
    return {name: value for name, value in outputs.items() if isinstance(value, torch.Tensor)}


@pytest.fixture(scope="module")
def reference_outputs(tiny_model, fixed_inputs) -> dict[str, torch.Tensor]:
    """build_tiny_sam3(0) on the fixed input: what every loading path must reproduce bit for bit."""
    return run(tiny_model, fixed_inputs)


def assert_same_parameters(model: Sam3Model, reference: Sam3Model) -> None:
    expected, loaded = reference.state_dict(), model.state_dict()
    assert loaded.keys() == expected.keys()
    different = [key for key in expected if not torch.equal(loaded[key], expected[key])]
    assert different == []


def assert_same_outputs(outputs: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    assert outputs.keys() == reference.keys()
    for name, value in reference.items():
        assert torch.equal(outputs[name], value), name


# --------------------------------------------------------------------------- import is cheap


def test_import_pulls_in_neither_torch_nor_the_hub() -> None:
    code = (
        "import sys, tt_sam3_ros.weights\n"
        "heavy = [m for m in ('torch', 'transformers', 'huggingface_hub') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


def test_import_downloads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the hub was called at import")

    for name in ("snapshot_download", "hf_hub_download", "try_to_load_from_cache"):
        monkeypatch.setattr(huggingface_hub, name, no_network)
    monkeypatch.delitem(sys.modules, "tt_sam3_ros.weights")
    import tt_sam3_ros.weights as reimported

    assert reimported.DEFAULT_MODEL_ID == "facebook/sam3"


# ---------------------------------------------------------------------------------- the tiny


def test_tiny_random_is_the_seeded_tiny_model(tiny_model) -> None:
    assert resolve_weights("tiny-random").kind == "tiny"
    loaded = load_sam3("tiny-random")
    assert loaded.is_random and "RANDOM" in loaded.source
    assert not loaded.model.training
    assert_same_parameters(loaded.model, tiny_model)
    assert len(loaded.tokenizer) == 49408


def test_dtype_by_name() -> None:
    loaded = load_sam3("tiny-random", dtype="bfloat16")
    assert {parameter.dtype for parameter in loaded.model.parameters()} == {torch.bfloat16}


# ------------------------------------------------------------------- transformers-format folder


def test_transformers_folder_round_trip(
    tiny_folder, tiny_model, tokenizer, fixed_inputs, reference_outputs
) -> None:
    resolved = resolve_weights(weights_dir=tiny_folder)
    assert (resolved.kind, resolved.path) == ("transformers", tiny_folder)

    loaded = load_sam3(weights_dir=tiny_folder)

    assert not loaded.is_random and not loaded.model.training
    assert_same_parameters(loaded.model, tiny_model)
    assert_same_outputs(run(loaded.model, fixed_inputs), reference_outputs)
    prompt = ["a person on a bike"]
    assert loaded.tokenizer(prompt).input_ids == tokenizer(prompt).input_ids


def test_hub_layout_video_config_detector_prefix_and_tracker_weights(tmp_path, tiny_model) -> None:
    """The hub's layout: a sam3_video config.json nesting the image model's config, and weights
    under detector_model.* beside the tracker's; Sam3Model takes its part and ignores the rest."""
    folder = save_tiny_sam3(tmp_path / "hub_layout")
    Sam3VideoConfig(detector_config=tiny_sam3_config().to_dict()).save_pretrained(folder)
    state = {f"detector_model.{key}": value for key, value in load_file(folder / "model.safetensors").items()}
    state["tracker_model.memory_encoder.projection.weight"] = torch.zeros(2, 2)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})

    assert json.loads((folder / "config.json").read_text())["model_type"] == "sam3_video"
    assert_same_parameters(load_sam3(weights_dir=folder).model, tiny_model)


def test_model_id_may_be_a_local_path(tiny_folder) -> None:
    assert resolve_weights(str(tiny_folder)).path == tiny_folder


def test_transformers_folder_without_a_tokenizer_gets_the_clip_one(tmp_path, tiny_folder, tokenizer) -> None:
    folder = tmp_path / "no_tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((tiny_folder / name).read_bytes())
    loaded = load_sam3(weights_dir=folder)
    assert loaded.tokenizer(["car"]).input_ids == tokenizer(["car"]).input_ids


# ------------------------------------------------------------------------- Meta's sam3.pt


def test_meta_checkpoint_round_trip(
    tmp_path, meta_state, tiny_model, fixed_inputs, reference_outputs
) -> None:
    folder = write_meta_folder(tmp_path / "meta", meta_state)
    resolved = resolve_weights(weights_dir=folder)
    assert (resolved.kind, resolved.path) == ("meta", folder / "sam3.pt")

    loaded = load_sam3(weights_dir=folder)

    assert not loaded.is_random and "sam3.pt" in loaded.source
    assert not loaded.model.training
    assert_same_parameters(loaded.model, tiny_model)
    assert_same_outputs(run(loaded.model, fixed_inputs), reference_outputs)


def test_meta_checkpoint_beside_a_video_config(tmp_path, meta_state, tiny_model) -> None:
    folder = write_meta_folder(tmp_path / "meta_video", meta_state, with_config=False)
    Sam3VideoConfig(detector_config=tiny_sam3_config().to_dict()).save_pretrained(folder)
    assert_same_parameters(load_sam3(weights_dir=folder).model, tiny_model)


def test_meta_checkpoint_by_file_path_and_unwrapped(tmp_path, meta_state, tiny_model) -> None:
    """A bare state dict (no {"model": ...} wrapper) under another name, passed as a file."""
    folder = tmp_path / "renamed"
    folder.mkdir()
    torch.save(meta_state, folder / "sam3_image.pth")
    tiny_sam3_config().save_pretrained(folder)

    assert resolve_weights(weights_dir=folder).path == folder / "sam3_image.pth"
    assert_same_parameters(load_sam3(weights_dir=folder / "sam3_image.pth").model, tiny_model)


def test_meta_state_dict_saved_as_safetensors(tmp_path, meta_state, tiny_model) -> None:
    folder = tmp_path / "meta_safetensors"
    folder.mkdir()
    real = {key: value for key, value in meta_state.items() if not value.is_complex()}
    save_file({key: value.contiguous() for key, value in real.items()}, folder / "sam3.safetensors")
    tiny_sam3_config().save_pretrained(folder)

    assert resolve_weights(weights_dir=folder / "sam3.safetensors").kind == "meta"
    assert_same_parameters(load_sam3(weights_dir=folder / "sam3.safetensors").model, tiny_model)


def test_meta_layout_facts() -> None:
    """Spot checks of the mapping against transformers' convert_sam3_to_hf.py."""
    config = Sam3Config()
    qkv = meta_source("vision_encoder.backbone.layers.31.attention.k_proj.bias", config)
    assert (qkv.keys, qkv.part) == (("backbone.vision_backbone.trunk.blocks.31.attn.qkv.bias",), 1)
    in_proj = meta_source("detr_decoder.layers.5.text_cross_attn.v_proj.weight", config)
    assert (in_proj.keys, in_proj.part) == (("transformer.decoder.layers.5.ca_text.in_proj_weight",), 2)
    out = meta_source("detr_encoder.layers.0.cross_attn.o_proj.weight", config)
    assert out.keys == (
        "transformer.encoder.layers.0.cross_attn_image.out_proj.weight",
        "transformer.encoder.layers.0.cross_attn.out_proj.weight",
    )
    assert meta_source("vision_encoder.neck.fpn_layers.0.scale_layers.2.weight", config).keys == (
        "backbone.vision_backbone.convs.0.dconv_2x2_1.weight",
    )
    assert meta_source("vision_encoder.neck.fpn_layers.1.scale_layers.0.bias", config).keys == (
        "backbone.vision_backbone.convs.1.dconv_2x2.bias",
    )
    assert meta_source("detr_decoder.box_head.layer3.weight", config).keys == (
        "transformer.decoder.bbox_embed.layers.2.weight",
    )
    renamed = {
        "detr_decoder.ref_point_head.layer1.bias": "transformer.decoder.ref_point_head.layers.0.bias",
        "detr_decoder.presence_head.layer2.weight": "transformer.decoder.presence_token_head.layers.1.weight",
        "detr_decoder.box_rpb_embed_y.layer2.bias": "transformer.decoder.boxRPB_embed_y.layers.1.bias",
        "detr_decoder.layers.3.text_cross_attn_layer_norm.weight": (
            "transformer.decoder.layers.3.catext_norm.weight"
        ),
        "detr_decoder.layers.3.vision_cross_attn_layer_norm.bias": "transformer.decoder.layers.3.norm1.bias",
        "detr_decoder.layers.3.self_attn_layer_norm.bias": "transformer.decoder.layers.3.norm2.bias",
        "geometry_encoder.layers.2.cross_attn.o_proj.bias": (
            "geometry_encoder.encode.2.cross_attn_image.out_proj.bias"
        ),
        "geometry_encoder.prompt_layer_norm.weight": "geometry_encoder.norm.weight",
        "text_encoder.text_model.encoder.layers.23.mlp.fc1.weight": (
            "backbone.language_backbone.encoder.transformer.resblocks.23.mlp.c_fc.weight"
        ),
        "dot_product_scoring.query_proj.weight": "dot_prod_scoring.hs_proj.weight",
        "mask_decoder.mask_embedder.layers.2.bias": (
            "segmentation_head.mask_predictor.mask_embed.layers.2.bias"
        ),
        "vision_encoder.backbone.layers.7.attention.o_proj.weight": (
            "backbone.vision_backbone.trunk.blocks.7.attn.proj.weight"
        ),
    }
    for hf_key, meta_key in renamed.items():
        assert meta_source(hf_key, config).keys[0] == meta_key, hf_key
    assert meta_source("text_encoder.text_projection.weight", config).transform == "transpose"
    assert meta_source("text_projection.bias", config).keys == ("backbone.language_backbone.resizer.bias",)


def test_mapping_covers_the_full_size_model_both_ways() -> None:
    """Every parameter of the released architecture maps, to a distinct Meta tensor, and back."""
    config = Sam3Config()
    with torch.device("meta"):
        hf_state = Sam3Model(config).state_dict()
    assert sum(value.numel() for value in hf_state.values()) > 840_000_000

    meta = to_meta_state_dict(hf_state, config)
    sources = [meta_source(key, config) for key in hf_state]
    fused = [(where.keys[0], where.part) for where in sources if where.part is not None]
    plain = [where.keys[0] for where in sources if where.part is None]
    assert len(set(fused)) == len(fused) and len(set(plain)) == len(plain)
    assert len(meta) == len(plain) + len(fused) // 3
    assert meta["detector.backbone.vision_backbone.trunk.pos_embed"].shape == (1, 577, 1024)
    assert meta["detector.backbone.language_backbone.encoder.text_projection"].shape == (1024, 512)

    back = convert_meta_state_dict(meta, config)

    assert back.keys() == hf_state.keys()
    assert all(back[key].shape == hf_state[key].shape for key in hf_state)


def test_tiny_mapping_is_exact_both_ways(tiny_model) -> None:
    config = tiny_sam3_config()
    state = tiny_model.state_dict()
    back = convert_meta_state_dict(to_meta_state_dict(state, config), config)
    assert back.keys() == state.keys()
    assert all(torch.equal(back[key], state[key]) for key in state)


def test_unknown_transformers_key_has_no_meta_counterpart() -> None:
    with pytest.raises(KeyError, match="no Meta counterpart"):
        to_meta_state_dict({"detr_decoder.new_head.weight": torch.zeros(1)}, tiny_sam3_config())


# ------------------------------------------------------- Meta's constants, whatever the config says

#: The LayerNorm/GroupNorm epsilon of every norm in Meta's SAM 3 image model (sam3/model: vitdet.py
#: builds the ViT's with eps=1e-5, every other module uses torch's default, also 1e-5).
META_EPS = 1e-5


def with_transformers_defaults(config: Sam3Config) -> Sam3Config:
    """``config`` with the values transformers' classes default to where Meta's code differs:
    Sam3ViTConfig's layer_norm_eps 1e-6, and CLIPTextConfig's quick_gelu for a text_config
    that does not name its activation."""
    config = copy.deepcopy(config)
    config.vision_config.backbone_config.layer_norm_eps = 1e-6
    config.text_config.hidden_act = "quick_gelu"
    return config


def with_metas_constants(config: Sam3Config) -> Sam3Config:
    """``config`` with Meta's values spelled out here, independently of the code under test."""
    config = copy.deepcopy(config)
    config.vision_config.backbone_config.layer_norm_eps = META_EPS
    config.text_config.layer_norm_eps = META_EPS
    config.text_config.hidden_act = "gelu"
    return config


def norms_not_at_metas_eps(model: Sam3Model) -> list[str]:
    return [
        f"{name} eps={module.eps}"
        for name, module in model.named_modules()
        if isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm)) and module.eps != META_EPS
    ]


def model_with(config: Sam3Config, state: dict[str, torch.Tensor]) -> Sam3Model:
    model = Sam3Model(config).eval()
    model.load_state_dict(state)
    return model


def test_meta_checkpoint_without_a_config_runs_with_metas_constants(
    monkeypatch, tmp_path, meta_state, tiny_model, fixed_inputs
) -> None:
    """No config.json beside sam3.pt: the architecture is transformers' default Sam3Config(),
    stood in for here by the tiny architecture with transformers' default constants (the real
    one is 3.4 GB). The model must still run with Meta's epsilon and activation, in the torch
    model and in the ttnn engine's configuration alike."""
    import transformers

    from tt_sam3_ros.engines.ttnn_model.config import ImagePathConfig

    transformers_default = with_transformers_defaults(tiny_sam3_config())
    monkeypatch.setattr(transformers, "Sam3Config", lambda: copy.deepcopy(transformers_default))
    folder = write_meta_folder(tmp_path / "meta_no_config", meta_state, with_config=False)

    loaded = load_sam3(weights_dir=folder).model

    assert norms_not_at_metas_eps(loaded) == []
    assert ImagePathConfig.from_hf(loaded.config.vision_config).eps == META_EPS
    state = tiny_model.state_dict()
    expected = run(model_with(with_metas_constants(transformers_default), state), fixed_inputs)
    assert_same_outputs(run(loaded, fixed_inputs), expected)
    # The test can tell: transformers' defaults give other outputs on the same weights.
    other = run(model_with(transformers_default, state), fixed_inputs)
    assert not torch.equal(other["pred_logits"], expected["pred_logits"])


@pytest.mark.parametrize("weights_format", ["transformers", "meta"])
def test_a_config_json_with_other_constants_is_overridden_and_logged_once(
    tmp_path, meta_state, tiny_model, caplog, weights_format
) -> None:
    """The hub's config.json carries transformers' ViT epsilon (1e-6): both formats get Meta's."""
    folder = tmp_path / weights_format
    if weights_format == "meta":
        write_meta_folder(folder, meta_state, with_config=False)
    else:
        model_with(tiny_sam3_config(), tiny_model.state_dict()).save_pretrained(folder)
    with_transformers_defaults(tiny_sam3_config()).save_pretrained(folder)

    with caplog.at_level("INFO", logger="tt_sam3_ros.weights"):
        loaded = load_sam3(weights_dir=folder).model

    assert norms_not_at_metas_eps(loaded) == []
    assert loaded.config.vision_config.backbone_config.layer_norm_eps == META_EPS
    assert loaded.config.text_config.hidden_act == "gelu"
    overrides = [record.getMessage() for record in caplog.records if "Meta's" in record.getMessage()]
    assert len(overrides) == 1, overrides
    assert "1e-06" in overrides[0] and "quick_gelu" in overrides[0]


def test_weights_already_at_metas_constants_log_no_override(tmp_path, tiny_folder, caplog) -> None:
    with caplog.at_level("INFO", logger="tt_sam3_ros.weights"):
        loaded = load_sam3(weights_dir=tiny_folder).model
    assert norms_not_at_metas_eps(loaded) == []
    assert not [record for record in caplog.records if "Meta's" in record.getMessage()]


# ----------------------------------------------------------------- the tokenizer sam3.pt lacks

REPOSITORY = Path(__file__).parents[2]


def requirement_lines(name: str) -> list[str]:
    text = (REPOSITORY / "requirements" / name).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def open_clip_pins(name: str) -> list[str]:
    return [line for line in requirement_lines(name) if line.startswith("open-clip-torch")]


def test_the_clip_vocabulary_is_a_run_time_requirement() -> None:
    """Meta's sam3.pt has no tokenizer: with the README's install (core.txt) it must still load."""
    assert open_clip_pins("core.txt") == ["open-clip-torch>=3.3.0,<4"]
    assert open_clip_pins("dev.txt") == []


def test_sam3_pt_without_tokenizer_files_or_open_clip_names_the_requirement(
    monkeypatch, tmp_path, meta_state
) -> None:
    from tt_sam3_ros.weights.tiny_model import clip_vocabulary

    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object):
        return None if name == "open_clip" else real_find_spec(name, *args, **kwargs)

    folder = write_meta_folder(tmp_path / "meta_no_tokenizer", meta_state)
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    clip_vocabulary.cache_clear()
    try:
        with pytest.raises(WeightsError) as refused:
            load_sam3(weights_dir=folder)
    finally:
        clip_vocabulary.cache_clear()
    message = str(refused.value)
    assert str(folder) in message and "no tokenizer files" in message
    assert "pip install open-clip-torch==3.3.0" in message and "requirements/core.txt" in message
    assert "tiny-random" not in message


# ------------------------------------------------------------------ checkpoints that do not fit


def test_meta_checkpoint_with_a_missing_key(tmp_path, meta_state) -> None:
    state = dict(meta_state)
    del state["detector.transformer.decoder.bbox_embed.layers.2.bias"]
    folder = write_meta_folder(tmp_path / "missing", state)
    with pytest.raises(
        WeightsError, match=r"1 missing \(e\.g\. transformer\.decoder\.bbox_embed\.layers\.2\.bias\)"
    ):
        load_sam3(weights_dir=folder)


def test_meta_checkpoint_with_an_unexpected_key(tmp_path, meta_state) -> None:
    state = {**meta_state, "detector.transformer.decoder.mystery_head.weight": torch.zeros(3)}
    folder = write_meta_folder(tmp_path / "unexpected", state)
    with pytest.raises(
        WeightsError, match=r"1 unexpected \(e\.g\. transformer\.decoder\.mystery_head\.weight\)"
    ):
        load_sam3(weights_dir=folder)


def test_meta_checkpoint_of_another_size_says_so(tmp_path, meta_state) -> None:
    """The tiny checkpoint without its config.json is read as the released SAM 3: every shape differs."""
    folder = write_meta_folder(tmp_path / "no_config", meta_state, with_config=False)
    with pytest.raises(WeightsError) as caught:
        load_sam3(weights_dir=folder)
    message = str(caught.value)
    assert "with the wrong shape" in message and "needs (1, 576, 1024)" in message
    assert "config.json" in message and "facebook/sam3" in message


def test_transformers_folder_with_missing_and_unexpected_keys(tmp_path) -> None:
    folder = save_tiny_sam3(tmp_path / "edited")
    state = load_file(folder / "model.safetensors")
    del state["detr_decoder.box_head.layer3.bias"]
    state["bogus.weight"] = torch.zeros(2)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(WeightsError) as caught:
        load_sam3(weights_dir=folder)
    message = str(caught.value)
    assert "1 missing (e.g. detr_decoder.box_head.layer3.bias)" in message
    assert "1 unexpected (e.g. bogus.weight)" in message


# ------------------------------------------------------------------ folders without the files


def test_folder_that_does_not_exist(tmp_path) -> None:
    with pytest.raises(WeightsError, match=r"weights_dir .*nowhere does not exist.*config\.json.*sam3\.pt"):
        resolve_weights(weights_dir=tmp_path / "nowhere")


def test_empty_folder(tmp_path) -> None:
    with pytest.raises(WeightsError, match=r"found: nothing \(the folder is empty\)"):
        resolve_weights(weights_dir=tmp_path)


def test_folder_with_other_files_lists_them(tmp_path) -> None:
    for name in ("README.md", "notes.txt"):
        (tmp_path / name).write_text("x")
    with pytest.raises(WeightsError) as caught:
        resolve_weights(weights_dir=tmp_path)
    message = str(caught.value)
    assert "found: README.md, notes.txt" in message
    assert "config.json with model.safetensors" in message and "sam3.pt" in message
    assert f"--local-dir {tmp_path}" in message


def test_config_without_weights(tmp_path) -> None:
    tiny_sam3_config().save_pretrained(tmp_path)
    with pytest.raises(WeightsError, match=r"found: config\.json\."):
        resolve_weights(weights_dir=tmp_path)


def test_lone_transformers_weights_file_needs_its_folder(tiny_folder) -> None:
    with pytest.raises(WeightsError, match="pass the folder that holds both"):
        resolve_weights(weights_dir=tiny_folder / "model.safetensors")


def test_missing_shard(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match=r"missing weight shards .*model-00001-of-00002\.safetensors"):
        load_sam3(weights_dir=tmp_path)


# ------------------------------------------------------------------- corrupt or truncated files


def copy_tiny(source: Path, target: Path) -> Path:
    target.mkdir()
    for entry in source.iterdir():
        (target / entry.name).write_bytes(entry.read_bytes())
    return target


def test_truncated_safetensors(tmp_path, tiny_folder) -> None:
    folder = copy_tiny(tiny_folder, tmp_path / "truncated")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:-1000])
    with pytest.raises(WeightsError) as caught:
        load_sam3(weights_dir=folder)
    message = str(caught.value)
    assert "model.safetensors is corrupt or truncated" in message
    assert f"the file is {len(data) - 1000:,} bytes but its header describes {len(data):,} bytes" in message
    assert "download it again" in message


def test_safetensors_with_a_garbage_header(tmp_path, tiny_folder) -> None:
    folder = copy_tiny(tiny_folder, tmp_path / "garbage")
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[8:16] = b"\xff" * 8
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="safetensors header is not valid JSON"):
        load_sam3(weights_dir=folder)


def test_safetensors_shorter_than_a_header(tmp_path, tiny_folder) -> None:
    folder = copy_tiny(tiny_folder, tmp_path / "stub")
    (folder / "model.safetensors").write_bytes(b"\x00\x01")
    with pytest.raises(WeightsError, match="the file is 2 bytes, too short for a safetensors header"):
        load_sam3(weights_dir=folder)


def test_broken_config_json(tmp_path, tiny_folder) -> None:
    folder = copy_tiny(tiny_folder, tmp_path / "bad_config")
    (folder / "config.json").write_text('{"model_type": "sam3",')
    with pytest.raises(WeightsError, match=r"config\.json is corrupt or truncated: it is not valid JSON"):
        load_sam3(weights_dir=folder)


def test_truncated_meta_checkpoint(tmp_path, meta_state) -> None:
    folder = write_meta_folder(tmp_path / "cut", meta_state)
    data = (folder / "sam3.pt").read_bytes()
    (folder / "sam3.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError) as caught:
        load_sam3(weights_dir=folder)
    message = str(caught.value)
    assert "sam3.pt is corrupt or truncated: torch.load failed" in message
    assert f"the file is {len(data) // 2:,} bytes" in message and "3,450,062,241 bytes" in message


def test_meta_file_that_is_not_a_state_dict(tmp_path) -> None:
    torch.save([1, 2, 3], tmp_path / "sam3.pt")
    with pytest.raises(WeightsError, match="holds no state dict of tensors"):
        load_sam3(weights_dir=tmp_path)


# ------------------------------------------------------------------------- the Hugging Face hub


def hub_error(kind: type[HfHubHTTPError], status: int) -> HfHubHTTPError:
    request = httpx.Request("GET", "https://huggingface.co/api/models/facebook/sam3")
    return kind(f"{status} from the hub", response=httpx.Response(status, request=request))


def fake_hub(monkeypatch: pytest.MonkeyPatch, online_error: BaseException) -> list[dict]:
    """Nothing cached; a download raises ``online_error``. Returns the calls made."""
    calls: list[dict] = []

    def snapshot_download(repo_id: str, **kwargs: object) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        if kwargs.get("local_files_only"):
            raise LocalEntryNotFoundError("not cached")
        raise online_error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *args, **kwargs: None)
    return calls


def test_gated_repository(monkeypatch) -> None:
    calls = fake_hub(monkeypatch, hub_error(GatedRepoError, 403))
    with pytest.raises(WeightsError) as caught:
        resolve_weights()
    message = str(caught.value)
    assert "facebook/sam3 is a gated repository" in message
    assert "https://huggingface.co/facebook/sam3" in message and "accept the licence" in message
    assert "hf auth login" in message and "HF_TOKEN" in message
    assert [call.get("local_files_only", False) for call in calls] == [True, False]
    assert {call["revision"] for call in calls} == {SAM3_PINNED_REVISION}


def test_repository_not_found(monkeypatch) -> None:
    fake_hub(monkeypatch, hub_error(RepositoryNotFoundError, 404))
    with pytest.raises(WeightsError, match=r"no repository 'fb/sam3' visible to you.*'facebook/sam3'"):
        resolve_weights("fb/sam3")


def test_revision_not_found(monkeypatch) -> None:
    fake_hub(monkeypatch, hub_error(RevisionNotFoundError, 404))
    with pytest.raises(WeightsError, match=r"has no revision 'v9' on the Hugging Face hub"):
        resolve_weights(revision="v9")


def test_other_hub_failure(monkeypatch) -> None:
    fake_hub(monkeypatch, hub_error(HfHubHTTPError, 500))
    with pytest.raises(
        WeightsError, match=r"downloading facebook/sam3 from the Hugging Face hub failed \(500"
    ):
        resolve_weights()


def test_no_network_is_the_offline_message(monkeypatch) -> None:
    """huggingface_hub 1.x raises httpx's connection error when no network is reachable."""
    request = httpx.Request("GET", "https://huggingface.co/api/models/facebook/sam3")
    fake_hub(monkeypatch, httpx.ConnectError("[Errno 101] Network is unreachable", request=request))
    with pytest.raises(HubUnreachableError, match="not in the Hugging Face cache"):
        resolve_weights()


def test_offline_with_an_empty_cache(monkeypatch, tmp_path) -> None:
    """The real huggingface_hub, offline, over an empty cache: the message gives the exact command."""
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(WeightsError) as caught:
        resolve_weights(cache_dir=tmp_path / "empty_cache")
    message = str(caught.value)
    assert "not in the Hugging Face cache" in message and "HF_HUB_OFFLINE=1" in message
    command = (
        f"hf download facebook/sam3 --revision {SAM3_PINNED_REVISION} "
        '--include "*.json" --include "*.safetensors" --include "*.txt"'
    )
    assert command in message
    assert "weights_dir=" in message


def fake_cache(root: Path, revision: str) -> Path:
    """A Hugging Face hub cache holding facebook/sam3 at ``revision`` (the layout `hf download` makes)."""
    repo = root / "models--facebook--sam3"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


def test_cached_snapshot_at_the_pinned_revision_is_used_offline(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    snapshot = save_tiny_sam3(fake_cache(tmp_path / "cache", SAM3_PINNED_REVISION))

    resolved = resolve_weights(cache_dir=tmp_path / "cache")

    assert (resolved.kind, resolved.path) == ("transformers", snapshot)
    assert "Hugging Face cache" in resolved.source and SAM3_PINNED_REVISION in resolved.source


def test_cached_sam3_pt_is_used_when_the_transformers_files_are_not(
    monkeypatch, tmp_path, meta_state
) -> None:
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    snapshot = write_meta_folder(fake_cache(tmp_path / "cache", SAM3_PINNED_REVISION), meta_state)

    resolved = resolve_weights(cache_dir=tmp_path / "cache")

    assert (resolved.kind, resolved.path) == ("meta", snapshot / "sam3.pt")


def test_cache_of_another_commit_is_only_a_fallback(monkeypatch, tmp_path, caplog) -> None:
    """Offline, a plain `hf download` of a newer main is used with a warning; an explicit pin is strict."""
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    newer = "0123456789abcdef0123456789abcdef01234567"
    snapshot = save_tiny_sam3(fake_cache(tmp_path / "cache", newer))

    with caplog.at_level("WARNING", logger="tt_sam3_ros.weights"):
        resolved = resolve_weights(cache_dir=tmp_path / "cache")

    assert (resolved.kind, resolved.path) == ("transformers", snapshot)
    assert f"facebook/sam3@main (commit {newer})" in resolved.source
    assert f"facebook/sam3@{SAM3_PINNED_REVISION} is not cached" in caplog.text
    with pytest.raises(WeightsError, match="not in the Hugging Face cache"):
        resolve_weights(revision=SAM3_PINNED_REVISION, cache_dir=tmp_path / "cache")
    assert resolve_weights(revision=newer, cache_dir=tmp_path / "cache").path == snapshot


def test_explicit_weights_dir_never_consults_the_hub(monkeypatch, tiny_folder) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the hub was consulted")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", no_network)
    assert resolve_weights(weights_dir=tiny_folder).kind == "transformers"


def test_pinned_revision_is_a_full_commit_hash() -> None:
    assert len(SAM3_PINNED_REVISION) == 40 and int(SAM3_PINNED_REVISION, 16) >= 0
    assert weights.default_revision("facebook/sam3") == SAM3_PINNED_REVISION
    assert weights.default_revision("someone/sam3-finetune") is None


def test_empty_model_id() -> None:
    with pytest.raises(
        WeightsError, match=r"model_id is empty: pass a Hugging Face repository \('facebook/sam3'\)"
    ):
        resolve_weights("")


def test_malformed_model_id(monkeypatch) -> None:
    """huggingface_hub rejects the id before any request; offline mode guards the rest."""
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(WeightsError, match=r"'not a repo!!' is neither an existing local path nor a valid"):
        resolve_weights("not a repo!!")
