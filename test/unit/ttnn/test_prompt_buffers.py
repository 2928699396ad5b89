"""prompt_buffers.PromptBuffers on the emulator, next to an image trace on the same two-queue device.

The prompt path is a stand-in made of the real fusion-encoder layer (fusion_encoder.py, with a
randomised transformers layer's weights, a random position encoding folded into them): it reads
the image trace's output buffer, and the prompt features and cross-attention mask from PromptBuffers. Every
expected value is the same layer run eagerly on fresh tensors before any capture, on exactly the
prompts (no padding), so a wrong bucket, a stale buffer or a clobbered one shows.
"""

from __future__ import annotations

import pytest
import torch
from compare import pcc
from hypothesis import given
from hypothesis import strategies as st

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.engines.ttnn_model.prompt_buffers import PromptBuffers, bucket_of, power_of_two_buckets
from tt_sam3_ros.engines.ttnn_model.trace import TracedPath

HIDDEN, HEADS, INTERMEDIATE, SIDE = 32, 2, 64, 8
IMAGE_TOKENS = SIDE * SIDE
TOKENS = 32  # prompt tokens padded to a tile
MAX_PROMPTS = 4


def prompts(seed: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` prompts of 20 tokens of which 20 - 5 p are real (different lengths in one set)."""
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(count, 20, HIDDEN, generator=generator)
    valid = torch.zeros(count, 20, dtype=torch.bool)
    for row in range(count):
        valid[row, : 20 - 5 * (row % 3)] = True
    return features, valid


class Scene:
    """A two-queue device holding an image trace's weights and the prompt stand-in's."""

    def __init__(self, ttnn) -> None:
        from transformers.models.sam3.configuration_sam3 import Sam3DETREncoderConfig
        from transformers.models.sam3.modeling_sam3 import Sam3DetrEncoderLayer

        from tt_sam3_ros.engines.ttnn_model.config import device_settings
        from tt_sam3_ros.engines.ttnn_model.prompt_config import PromptLayerConfig
        from tt_sam3_ros.engines.ttnn_model.prompt_weights import prepare_fusion_encoder_layer
        from tt_sam3_ros.engines.ttnn_model.weights import upload

        self.ttnn = ttnn
        self.device = ttnn.open_mesh_device(
            ttnn.MeshShape(1, 1), trace_region_size=1 << 20, num_command_queues=2
        )
        self.settings = device_settings(ttnn, self.device)
        config = Sam3DETREncoderConfig(
            hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=INTERMEDIATE
        )
        torch.manual_seed(3)
        layer = Sam3DetrEncoderLayer(config).eval()
        self.layer_config = PromptLayerConfig.from_layer(layer)
        generator = torch.Generator().manual_seed(4)
        self.image_weight = self.tensor(torch.randn(HIDDEN, HIDDEN, generator=generator) / HIDDEN**0.5)
        position = torch.randn(1, IMAGE_TOKENS, HIDDEN, generator=generator)
        host = prepare_fusion_encoder_layer(layer, position)
        self.layer_weights = upload(ttnn, self.device, host, ttnn.bfloat8_b, ttnn.bfloat16)
        self.zeros = {b: self.tensor(torch.zeros(b, IMAGE_TOKENS, HIDDEN)) for b in (1, 2, 3, 4)}
        self.frames = [torch.randn(1, IMAGE_TOKENS, HIDDEN, generator=generator) for _ in range(2)]

    def tensor(self, values: torch.Tensor):
        ttnn = self.ttnn
        return ttnn.from_torch(values, dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT, device=self.device)

    def host_frame(self, index: int):
        return self.ttnn.from_torch(
            self.frames[index], dtype=self.ttnn.bfloat16, layout=self.ttnn.ROW_MAJOR_LAYOUT
        )

    def image_forward(self, x):
        ttnn = self.ttnn
        tiles = ttnn.to_layout(x, ttnn.TILE_LAYOUT)
        out = ttnn.matmul(tiles, self.image_weight)
        ttnn.deallocate(tiles)
        return [out]

    def prompt_forward(self, bucket, features, masks, image_tokens):
        """The stand-in prompt path: the image tokens for each prompt, one fusion-encoder layer."""
        from tt_sam3_ros.engines.ttnn_model.fusion_encoder import fusion_encoder_layer

        vision = self.ttnn.add(self.zeros[bucket], image_tokens)
        out = fusion_encoder_layer(
            self.ttnn,
            vision,
            features,
            masks["image"],
            self.layer_weights,
            self.layer_config,
            self.settings,
        )
        return [out]

    def expected(self, frame: int, prompt_set: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The stand-in run eagerly on fresh tensors holding exactly these prompts (no padding)."""
        from tt_sam3_ros.engines.ttnn_model.attention import key_padding_mask

        ttnn = self.ttnn
        features, valid = prompt_set
        count = features.shape[0]
        image = ttnn.to_device(self.host_frame(frame), self.device, ttnn.DRAM_MEMORY_CONFIG)
        (tokens,) = self.image_forward(image)
        padded = torch.nn.functional.pad(features, (0, 0, 0, TOKENS - features.shape[1]))
        mask = key_padding_mask(IMAGE_TOKENS, valid, TOKENS)
        (out,) = self.prompt_forward(count, self.tensor(padded), {"image": self.tensor(mask)}, tokens)
        return ttnn.to_torch(out).float()

    def buffers(self) -> PromptBuffers:
        return PromptBuffers(
            self.ttnn,
            self.device,
            self.prompt_forward,
            tokens=TOKENS,
            hidden=HIDDEN,
            mask_rows={"image": IMAGE_TOKENS},
            max_prompts=MAX_PROMPTS,
        )


def _close_enough(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and pcc(got, want) > 0.9999


def test_prompt_changes_reuse_the_bucket_and_a_bigger_set_captures_once_more(ttnn):
    scene = Scene(ttnn)
    one_a, one_b, three = prompts(10, 1), prompts(11, 1), prompts(12, 3)
    want = {
        (frame, name): scene.expected(frame, p)
        for frame in (0, 1)
        for name, p in (("a", one_a), ("b", one_b), ("three", three))
    }
    # Order the engine must keep: every persistent buffer, then every compile, then captures.
    buffers = scene.buffers()
    image = TracedPath(ttnn, scene.device, scene.image_forward, command_queues=2)
    (eager_tokens,) = image.forward(
        ttnn.to_device(scene.host_frame(0), scene.device, ttnn.DRAM_MEMORY_CONFIG)
    )
    buffers.compile(eager_tokens)
    ttnn.deallocate(eager_tokens)
    image.capture(scene.host_frame(0))
    (tokens,) = image.outputs

    def frame(index: int, name: str, count: int) -> None:
        image.run(scene.host_frame(index))
        got = ttnn.to_torch(buffers.run(tokens)[0]).float()[:count]
        assert _close_enough(got, want[(index, name)]), (index, name, pcc(got, want[(index, name)]))

    assert buffers.set_prompts(*one_a)
    frame(0, "a", 1)
    frame(1, "a", 1)  # a new image, the same prompts: no upload, no capture
    assert (buffers.captures, buffers.uploads) == (1, 1)
    captured = buffers.traces[1].trace_id
    assert not buffers.set_prompts(*one_a)  # the same prompts again: nothing uploaded
    assert buffers.set_prompts(*one_b)  # new prompts in the same bucket: uploaded, not re-captured
    frame(1, "b", 1)
    assert (buffers.captures, buffers.uploads) == (1, 2) and buffers.traces[1].trace_id is captured
    old = ttnn.to_torch(buffers.run(tokens)[0]).float()
    assert pcc(old, want[(1, "a")]) < 0.999  # the old prompts' output is not served again

    assert buffers.set_prompts(*three)  # three prompts: bucket 4, captured once
    frame(1, "three", 3)
    frame(0, "three", 3)
    assert buffers.bucket == 4 and buffers.captures == 2
    # Back to the 1-prompt set: bucket 1's buffers still hold it (no upload) and its trace was
    # not disturbed by bucket 4's or the image's replays.
    assert not buffers.set_prompts(*one_b)
    frame(0, "b", 1)
    assert (buffers.captures, buffers.uploads) == (2, 3) and buffers.traces[1].trace_id is captured
    assert len(scene.device._traces) == 3  # image, prompt x1, prompt x4
    buffers.release()
    image.release()
    ttnn.close_device(scene.device)


def test_prompt_buffers_made_after_the_image_capture_are_clobbered(ttnn):
    """The negative control of the order above: buffers allocated after the image trace was
    captured are overwritten by its replays, and the emulator refuses to read them."""
    scene = Scene(ttnn)
    image = TracedPath(ttnn, scene.device, scene.image_forward, command_queues=2)
    image.capture(scene.host_frame(0))
    (tokens,) = image.outputs
    buffers = scene.buffers()
    buffers.set_prompts(*prompts(10, 1))
    image.run(scene.host_frame(1))
    with pytest.raises(ttnn.EmulatorError, match="overwritten by a replay"):
        buffers.run(tokens)
    image.release()


def test_a_prompt_path_not_compiled_before_the_image_capture_breaks_the_image_trace(ttnn):
    """The negative control of compile(): a bucket compiled (by its first capture) after the image
    trace was captured may put its binaries where the image replays write."""
    scene = Scene(ttnn)
    buffers = scene.buffers()
    image = TracedPath(ttnn, scene.device, scene.image_forward, command_queues=2)
    image.capture(scene.host_frame(0))
    (tokens,) = image.outputs
    buffers.set_prompts(*prompts(10, 1))
    image.run(scene.host_frame(1))
    buffers.run(tokens)  # the prompt x1 trace compiles its programs here, after the image capture
    with pytest.raises(ttnn.EmulatorError, match="compiled after this trace was captured"):
        image.run(scene.host_frame(0))
    buffers.release()
    image.release()


def test_prompt_sets_that_do_not_fit_are_refused(ttnn):
    scene = Scene(ttnn)
    buffers = scene.buffers()
    features, valid = prompts(1, MAX_PROMPTS + 1)
    with pytest.raises(InputError, match="at most 4"):
        buffers.set_prompts(features, valid)
    with pytest.raises(InputError, match="at most 32 tokens"):
        buffers.set_prompts(torch.zeros(1, TOKENS + 1, HIDDEN), torch.ones(1, TOKENS + 1, dtype=torch.bool))
    with pytest.raises(InputError, match="at least one"):
        buffers.set_prompts(torch.zeros(0, 4, HIDDEN), torch.ones(0, 4, dtype=torch.bool))
    buffers.release()


@given(st.integers(1, 64), st.data())
def test_a_prompt_count_gets_the_smallest_bucket_that_holds_it(max_prompts, data):
    buckets = power_of_two_buckets(max_prompts)
    count = data.draw(st.integers(1, max_prompts))
    size = bucket_of(count, buckets)
    assert count <= size <= min(2 * count, max_prompts) or size == max_prompts
    assert all(b < count for b in buckets if b < size)
    assert buckets[-1] == max_prompts and len(buckets) == len(set(buckets))
