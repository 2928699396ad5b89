"""Shared unit-test fixtures: the tiny random SAM 3 (real architecture, seeded, offline), and an
rclpy context for the tests that run a real node in this process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_model():
    """The seeded tiny Sam3Model (fp32, eval). Tests must not modify it."""
    from tt_sam3_ros.weights.tiny_model import build_tiny_sam3

    return build_tiny_sam3(seed=0)


@pytest.fixture(scope="session")
def tokenizer():
    """The real CLIP BPE tokenizer SAM 3 uses."""
    from tt_sam3_ros.weights.tiny_model import clip_tokenizer

    return clip_tokenizer()


@pytest.fixture(scope="session")
def segmenter(tiny_model, tokenizer):
    """A Sam3Segmenter on the torch CPU engine over the tiny model."""
    from tt_sam3_ros.core.segmenter import Sam3Segmenter
    from tt_sam3_ros.engines.torch_engine import TorchEngine

    return Sam3Segmenter(TorchEngine(tiny_model, tokenizer, device="cpu", dtype="float32"))


def structured_picture() -> np.ndarray:
    """A 240x320 uint8 RGB picture with structure (gradients and a bright square)."""
    rows, cols = np.mgrid[0:240, 0:320]
    image = np.stack([rows % 256, cols % 256, (rows + cols) % 256], axis=-1).astype(np.uint8)
    image[60:140, 100:220] = (250, 30, 30)
    return image


@pytest.fixture
def rgb_image() -> np.ndarray:
    """structured_picture(), a fresh copy per test."""
    return structured_picture()


@pytest.fixture(scope="module")
def module_rgb_image() -> np.ndarray:
    """structured_picture() for module-scoped fixtures (which must not change it)."""
    return structured_picture()


@pytest.fixture
def context() -> Iterator[Any]:
    """A fresh rclpy context, initialised, shut down after the test."""
    import rclpy

    context = rclpy.context.Context()
    rclpy.init(context=context)
    yield context
    rclpy.try_shutdown(context=context)
