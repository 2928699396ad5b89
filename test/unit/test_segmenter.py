"""Sam3Segmenter as a user calls it: inputs, outputs, caching, and errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.segmenter import Sam3Segmenter
from tt_sam3_ros.engines.torch_engine import TorchEngine


class CountingEngine:
    """Wraps an engine and counts calls, to check what a frame costs."""

    def __init__(self, inner: TorchEngine) -> None:
        self.inner = inner
        self.calls = {"encode_image": 0, "encode_prompts": [], "decode": 0}
        self.name = inner.name

    def describe(self):
        return self.inner.describe()

    def encode_image(self, pixels):
        self.calls["encode_image"] += 1
        return self.inner.encode_image(pixels)

    def encode_prompts(self, prompts):
        self.calls["encode_prompts"].append(list(prompts))
        return self.inner.encode_prompts(prompts)

    def decode(self, image_state, prompt_states, max_instances=None):
        self.calls["decode"] += 1
        return self.inner.decode(image_state, prompt_states, max_instances)

    def fetch_masks(self, decoded, prompt_index, query_index):
        return self.inner.fetch_masks(decoded, prompt_index, query_index)

    def warmup(self):
        self.inner.warmup()

    def close(self):
        self.inner.close()


@pytest.fixture
def counting(tiny_model, tokenizer):
    engine = CountingEngine(TorchEngine(tiny_model, tokenizer, device="cpu"))
    return engine, Sam3Segmenter(engine, text_cache_size=3)


def test_result_is_in_source_pixels(segmenter, rgb_image) -> None:
    result = segmenter(rgb_image, ["car", "person"], threshold=0.0, max_instances=30)
    assert result.image_size == (240, 320)
    assert 0 < len(result.instances) <= 30
    scores = [i.score for i in result.instances]
    assert scores == sorted(scores, reverse=True)
    for instance in result.instances:
        assert instance.prompt in ("car", "person")
        assert instance.prompt == ["car", "person"][instance.prompt_index]
        x1, y1, x2, y2 = instance.box
        assert 0 <= x1 <= x2 <= 320 and 0 <= y1 <= y2 <= 240
        assert instance.mask.shape == (240, 320)
    labels = result.instance_mask()
    assert labels.shape == (240, 320) and labels.max() <= len(result.instances)
    assert set(result.presence) == {"car", "person"}
    assert all(0.0 <= p <= 1.0 for p in result.presence.values())
    assert {"preprocess", "image_encoder", "text_encoder", "decoder", "postprocess", "total"} <= set(
        result.timing_ms
    )


def test_threshold_and_max_instances_are_honoured(segmenter, rgb_image) -> None:
    everything = segmenter(rgb_image, ["car"], threshold=0.0, max_instances=255)
    cut = sorted(i.score for i in everything.instances)[len(everything.instances) // 2]
    above = segmenter(rgb_image, ["car"], threshold=cut, max_instances=255)
    assert above.instances and all(i.score > cut for i in above.instances)
    assert len(segmenter(rgb_image, ["car"], threshold=0.0, max_instances=3).instances) == 3


def test_image_encoded_once_and_prompts_batched(counting, rgb_image) -> None:
    engine, segmenter = counting
    segmenter(rgb_image, ["car", "person", "dog"], threshold=0.5)
    assert engine.calls["encode_image"] == 1
    assert engine.calls["decode"] == 1
    assert engine.calls["encode_prompts"] == [["car", "person", "dog"]]


def test_steady_prompts_cost_no_text_encoding(counting, rgb_image) -> None:
    engine, segmenter = counting
    segmenter(rgb_image, ["car", "person"])
    segmenter(rgb_image, ["person", "car"])
    segmenter(rgb_image, ["car", "bus"])
    assert engine.calls["encode_prompts"] == [["car", "person"], ["bus"]]


def test_text_cache_is_bounded_lru(counting, rgb_image) -> None:
    engine, segmenter = counting  # cache of 3
    for prompts in (["a"], ["b"], ["c"], ["a"], ["d"], ["b"]):
        segmenter(rgb_image, prompts)
    # "b" was the least recently used when "d" arrived, so it is encoded again.
    assert engine.calls["encode_prompts"] == [["a"], ["b"], ["c"], ["d"], ["b"]]
    assert len(segmenter._text_cache) == 3


def test_cached_prompt_gives_identical_results(segmenter, rgb_image) -> None:
    first = segmenter(rgb_image, ["a red car"], threshold=0.0)
    second = segmenter(rgb_image, ["a red car"], threshold=0.0)
    assert [i.score for i in first.instances] == [i.score for i in second.instances]
    np.testing.assert_array_equal(first.instance_mask(), second.instance_mask())


def test_every_image_form_gives_the_same_result(segmenter, rgb_image, tmp_path) -> None:
    png = io.BytesIO()
    Image.fromarray(rgb_image).save(png, format="PNG")
    path = tmp_path / "frame.png"
    path.write_bytes(png.getvalue())
    rgba = np.concatenate([rgb_image, np.full((*rgb_image.shape[:2], 1), 7, np.uint8)], axis=2)
    want = segmenter(rgb_image, ["car"], threshold=0.0).instance_mask()
    for form in (png.getvalue(), path, str(path), Image.fromarray(rgb_image), rgba):
        np.testing.assert_array_equal(segmenter(form, ["car"], threshold=0.0).instance_mask(), want)


def test_grey_is_replicated(segmenter) -> None:
    grey = (np.arange(50 * 60) % 251).astype(np.uint8).reshape(50, 60)
    rgb = np.repeat(grey[:, :, None], 3, axis=2)
    np.testing.assert_array_equal(
        segmenter(grey, ["car"], threshold=0.0).instance_mask(),
        segmenter(rgb, ["car"], threshold=0.0).instance_mask(),
    )


@pytest.mark.parametrize("size", [(2, 2), (2, 3000), (4096, 3)])
def test_extreme_sizes_work(segmenter, size) -> None:
    image = np.full((*size, 3), 90, np.uint8)
    result = segmenter(image, ["car"], threshold=0.0, max_instances=5)
    assert result.instance_mask().shape == size


BAD_CALLS = [
    ({"prompts": []}, "must not be empty"),
    ({"prompts": ["  "]}, "empty or only whitespace"),
    ({"prompts": ["x" * 257]}, "at most 256"),
    ({"prompts": ["p"] * 17}, "at most 16"),
    ({"prompts": ["car", 3]}, "must be a string"),
    ({"prompts": "car"}, "list of strings"),
    ({"image": np.zeros((1, 1, 3), np.uint8)}, "at least 2"),
    ({"image": np.zeros((0, 5, 3), np.uint8)}, "at least 2"),
    ({"image": np.zeros((10, 5000, 3), np.uint8)}, "largest side allowed is 4096"),
    ({"image": np.zeros((10, 10, 3), np.float32)}, "uint8"),
    ({"image": np.zeros((10, 10, 2), np.uint8)}, "HxWx3"),
    ({"image": b"not an image at all"}, "cannot decode"),
    ({"image": [[1, 2], [3, 4]]}, "unsupported image type"),
    ({"threshold": 1.5}, "threshold"),
    ({"max_instances": 0}, "max_instances"),
    ({"max_instances": 256}, "max_instances"),
]


@pytest.mark.parametrize(("change", "message"), BAD_CALLS)
def test_bad_input_raises_clear_input_error(segmenter, rgb_image, change, message) -> None:
    """InputError (a ValueError) for every bad argument: the node and the CLI tell bad input from
    an engine fault by that type."""
    call = {"image": rgb_image, "prompts": ["car"], "threshold": 0.5, "max_instances": 10, **change}
    with pytest.raises(InputError, match=message):
        segmenter(call.pop("image"), call.pop("prompts"), **call)


def test_max_image_side_is_configurable(tiny_model, tokenizer) -> None:
    small = Sam3Segmenter(TorchEngine(tiny_model, tokenizer), max_image_side=64)
    with pytest.raises(ValueError, match="largest side allowed is 64"):
        small(np.zeros((65, 10, 3), np.uint8), ["car"])


def test_close_is_idempotent_and_stops_the_engine(tiny_model, tokenizer, rgb_image) -> None:
    segmenter = Sam3Segmenter(TorchEngine(tiny_model, tokenizer))
    segmenter.close()
    segmenter.close()
    with pytest.raises(RuntimeError, match="closed"):
        segmenter(rgb_image, ["car"])


class OrderEngine(TorchEngine):
    """The torch engine, logging each call with the id of the model image it concerns."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, int]] = []

    def encode_image(self, pixels):
        self.log.append(("encode_image", id(pixels)))
        return super().encode_image(pixels)

    def prefetch(self, pixels):
        self.log.append(("prefetch", id(pixels)))
        super().prefetch(pixels)

    def decode(self, image_state, prompt_states, max_instances=None):
        self.log.append(("decode", 0))
        return super().decode(image_state, prompt_states, max_instances)

    def fetch_masks(self, decoded, prompt_index, query_index):
        self.log.append(("fetch_masks", 0))
        return super().fetch_masks(decoded, prompt_index, query_index)


def video(rgb_image) -> list[np.ndarray]:
    """Two frames that differ (the square moves), as a video gives them."""
    return [np.roll(rgb_image, 40 * shift, axis=1) for shift in range(2)]


def test_stream_gives_each_frame_its_own_result_with_the_next_frame_prefetched(
    tiny_model, tokenizer, rgb_image
) -> None:
    engine = OrderEngine(tiny_model, tokenizer, device="cpu")
    segmenter = Sam3Segmenter(engine)
    frames = video(rgb_image)
    one_by_one = [segmenter(frame, ["car", "person"], threshold=0.0, max_instances=8) for frame in frames]
    engine.log.clear()
    streamed = list(segmenter.segment_stream(iter(frames), ["car", "person"], threshold=0.0, max_instances=8))
    assert [r.instances for r in streamed] == [r.instances for r in one_by_one]
    assert one_by_one[0].instances != one_by_one[1].instances  # the frames are told apart
    assert "prefetch" in streamed[0].timing_ms and "prefetch" not in streamed[-1].timing_ms
    # Frame N+1 is handed over after frame N's image path and before frame N's reads, and
    # the next encode_image gets that very array.
    calls = [name for name, _ in engine.log]
    assert calls == [
        "encode_image",
        "prefetch",
        "decode",
        "fetch_masks",
        "encode_image",
        "decode",
        "fetch_masks",
    ]
    assert engine.log[1][1] == engine.log[4][1]


def test_stream_checks_prompts_at_once_and_answers_frames_before_a_bad_one(segmenter, rgb_image) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        segmenter.segment_stream(iter([rgb_image]), [])
    results = segmenter.segment_stream([rgb_image, np.zeros((1, 1, 3), np.uint8), rgb_image], ["car"])
    assert next(results).image_size == (240, 320)
    with pytest.raises(ValueError, match="at least 2"):
        next(results)
    assert list(segmenter.segment_stream([], ["car"])) == []
