"""The node's parameter table, its config file and its frame hand-off, without a ROS graph."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.parameter import Parameter

from tt_sam3_ros.node_parameters import (
    PARAMETERS,
    READ_AT_ACTIVATE,
    READ_AT_CONFIGURE,
    invalid_values,
    settings_from,
)
from tt_sam3_ros.worker import Frame, FrameSlot

CONFIG = Path(__file__).resolve().parents[2] / "config" / "sam3.yaml"


def _defaults() -> dict[str, object]:
    return {
        name: (None if isinstance(default, Parameter.Type) else default)
        for name, (default, _) in PARAMETERS.items()
    }


def test_config_file_lists_every_parameter_at_its_default() -> None:
    document = yaml.safe_load(CONFIG.read_text())
    values = document["/**"]["ros__parameters"]
    assert set(values) == set(PARAMETERS)
    for name, default in _defaults().items():
        # An empty list in a params file leaves a parameter unset, like prompts' default.
        assert (values[name] or None if name == "prompts" else values[name]) == default, name


def test_every_parameter_says_what_it_does_and_its_range() -> None:
    for name, (default, descriptor) in PARAMETERS.items():
        assert isinstance(descriptor, ParameterDescriptor)
        assert len(descriptor.description) > 20, name
        if isinstance(default, int) and not isinstance(default, bool | Parameter.Type):
            assert descriptor.integer_range, f"{name} has no integer range"
        if isinstance(default, float):
            assert descriptor.floating_point_range, f"{name} has no range"
    assert PARAMETERS["prompts"][0] == Parameter.Type.STRING_ARRAY  # never inferred from a default
    assert PARAMETERS["autostart"][1].read_only
    assert set(READ_AT_CONFIGURE) | set(READ_AT_ACTIVATE) < set(PARAMETERS)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, ""),
        ({"prompts": ["car", "person"]}, ""),
        ({"prompts": ["car", "person"], "max_prompts": 1}, "too many prompts: 2 given, at most 1"),
        ({"prompts": []}, "must not be empty"),
        ({"threshold": 1.0}, "threshold must be in [0, 1)"),
        ({"engine": "gpu"}, "engine must be one of auto, torch, ttnn"),
        ({"transport": "theora"}, "transport must be one of raw, compressed"),
        ({"qos_reliability": "RELIABLE"}, "qos_reliability must be one of best_effort, reliable"),
        ({"depth_min_m": 2.0, "depth_max_m": 1.0}, "depth_max_m must be finite and above depth_min_m"),
        ({"depth_max_m": 0.0}, "depth_max_m must be finite and above depth_min_m (0.1)"),
    ],
)
def test_parameter_combinations_are_checked_together(changes: dict[str, object], reason: str) -> None:
    values = {**_defaults(), **changes}
    found = invalid_values(values, prompts_required="prompts" in changes)
    assert (reason in found) if reason else found == ""


def test_frame_slot_keeps_only_the_newest_frame() -> None:
    slot = FrameSlot()
    first, second = Frame(msg=None, received_s=1.0), Frame(msg=None, received_s=2.0)
    assert slot.put(first) is False
    assert slot.put(second) is True  # first is dropped, and the caller is told
    assert slot.take() is second
    assert slot.clear() is False


def test_frame_slot_wakes_a_waiting_worker_and_closes() -> None:
    slot = FrameSlot()
    taken: list[object] = []
    worker = threading.Thread(target=lambda: taken.extend([slot.take(), slot.take()]))
    worker.start()
    frame = Frame(msg=None, received_s=0.0)
    slot.put(frame)
    slot.close()
    worker.join(timeout=5.0)
    assert not worker.is_alive()
    assert taken[-1] is None and taken.count(frame) <= 1


def test_depth_parameters_reach_the_worker_settings() -> None:
    values = {
        **_defaults(),
        "depth_min_m": 0.3,
        "depth_max_m": 4.0,
        "depth_min_points": 7,
        "depth_max_skew_s": 0.05,
        "points_stride": 2,
    }
    settings = settings_from(values).depth
    assert (settings.limits.min_m, settings.limits.max_m, settings.limits.min_points) == (0.3, 4.0, 7)
    assert (settings.max_skew_s, settings.points_stride) == (0.05, 2)
    assert "depth" in READ_AT_ACTIVATE and PARAMETERS["depth"][0] is False  # off by default
