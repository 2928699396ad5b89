"""The node's parameter table, its config file and its frame hand-off, without a ROS graph."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.parameter import Parameter

from tt_sam3_ros.core.settings import invalid_values, settings_from
from tt_sam3_ros.ros.parameters import PARAMETERS, READ_AT_ACTIVATE, READ_AT_CONFIGURE
from tt_sam3_ros.runtime.worker import Frame, FrameSlot

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
        unset_when_empty = name in ("prompts", "cameras", "devices")
        assert (values[name] or None if unset_when_empty else values[name]) == default, name


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
        ({"prompts": ["car", "person"], "max_prompts": 1}, "max_prompts, read at configure"),
        ({"max_prompts": 0}, "max_prompts must be an integer in 1..16, got '0'"),
        ({"max_prompts": 17}, "max_prompts must be an integer in 1..16, got '17'"),
        ({"prompts": []}, "must not be empty"),
        ({"prompts": ["car", "person", "car"]}, "prompt 2 'car' repeats prompt 0 'car'"),
        ({"threshold": 1.5}, "threshold must be in [0, 1]"),
        ({"engine": "gpu"}, "engine must be one of auto, torch, ttnn"),
        ({"ttnn_weight_dtype": "int8"}, "ttnn_weight_dtype must be one of bfloat8_b, bfloat16, float32"),
        ({"ttnn_param_dtype": "bf16"}, "ttnn_param_dtype must be one of bfloat8_b, bfloat16, float32"),
        ({"ttnn_prompt_path": "gpu"}, "ttnn_prompt_path must be one of auto, host, chip"),
        ({"ttnn_prompt_path": "auto"}, ""),
        ({"transport": "theora"}, "transport must be one of raw, compressed"),
        ({"qos_reliability": "RELIABLE"}, "qos_reliability must be one of best_effort, reliable"),
        ({"depth_min_m": 2.0, "depth_max_m": 1.0}, "depth_max_m must be finite and above depth_min_m"),
        ({"depth_max_m": 0.0}, "depth_max_m must be finite and above depth_min_m (0.1)"),
        ({"tracking": False, "track_max_age_s": 5.0, "track_min_iou": 1.0}, ""),
        ({"track_max_age_s": 0.0}, "track_max_age_s must be a finite number of seconds above 0"),
        ({"track_min_iou": 0.0}, "track_min_iou must be in (0, 1]"),
        ({"track_max_age_frames": 10}, ""),
        ({"track_max_age_frames": 0}, "track_max_age_frames must be a whole number of frames >= 1, got 0"),
        ({"devices": ["0", "1"]}, ""),
        ({"devices": ["all"], "engine": "ttnn"}, ""),
        ({"devices": ["all", "0"]}, "devices: 'all' stands alone"),
        ({"devices": ["1", "01"]}, "devices: chip 1 is named twice"),
        ({"devices": ["0", "gpu"]}, "devices: 'gpu' is not a chip id (0, 1, ...) nor 'all'"),
        ({"devices": [str(k) for k in range(33)]}, "devices: at most 32 chips, got 33"),
        ({"devices": ["0", "1"], "engine": "torch"}, "devices names Tenstorrent chips, which the ttnn"),
        ({"devices": ["0", "1"], "device": "0"}, "set devices or device, not both"),
        ({"tracker": "sam3", "device": "0"}, "tracker 'sam3' runs in PyTorch: device must be cpu, cuda or"),
        ({"tracker": "sam3", "device": "gpu"}, "got 'gpu'"),
        ({"tracker": "sam3", "dtype": "bfloat16"}, "tracker 'sam3' runs in float32: dtype must be float32"),
        ({"tracker": "sam3", "device": "cuda:1", "dtype": "float32"}, ""),
        ({"tracker": "association", "device": "0"}, ""),
    ],
)
def test_parameter_combinations_are_checked_together(changes: dict[str, object], reason: str) -> None:
    values = {**_defaults(), **changes}
    found = invalid_values(values, prompts_required="prompts" in changes)
    assert (reason in found) if reason else found == ""


@given(
    max_prompts=st.one_of(st.integers(-3, 40), st.booleans(), st.floats(allow_nan=True), st.text(max_size=8)),
    count=st.integers(0, 20),
)
def test_any_max_prompts_and_prompt_count_is_accepted_within_the_bounds_or_refused_on_one_line(
    max_prompts: object, count: int
) -> None:
    """Untrusted values (a params file, ``ros2 param set``): in range and at most that many prompts
    pass; anything else is refused with a one-line reason naming max_prompts, never an exception."""
    values = {**_defaults(), "max_prompts": max_prompts, "prompts": [f"thing {k}" for k in range(count)]}
    reason = invalid_values(values, prompts_required=True)
    in_range = type(max_prompts) is int and 1 <= max_prompts <= 16
    assert (reason == "") == (in_range and 1 <= count <= max_prompts), reason
    assert "\n" not in reason
    if not in_range:
        assert reason.startswith("max_prompts must be an integer in 1..16"), reason
    elif count > max_prompts:
        assert f"{count} given, at most {max_prompts} allowed (max_prompts, read at configure" in reason


@given(devices=st.lists(st.text(max_size=6), max_size=40))
def test_any_devices_list_is_accepted_as_distinct_chip_ids_or_refused_on_one_line(devices: list[str]) -> None:
    """Untrusted values: distinct chip ids (or 'all' alone) pass; anything else is refused with a
    one-line reason naming devices, never an exception."""
    reason = invalid_values({**_defaults(), "devices": devices})
    ids = [d.strip() for d in devices]
    chips = all(i.isascii() and i.isdigit() for i in ids) and len({int(i) for i in ids}) == len(ids)
    assert (reason == "") == (len(ids) <= 32 and (chips or ids == ["all"])), reason
    assert "\n" not in reason
    if reason:
        assert reason.startswith("devices: "), reason


@pytest.mark.parametrize(
    ("written", "meant"), [("all", ["all"]), ([0, 1], ["0", "1"]), (["2", "3"], ["2", "3"])]
)
def test_devices_may_be_written_as_integers_or_as_all(written: object, meant: list[str]) -> None:
    """``-p devices:=all`` and ``-p devices:="[0, 1]"`` are what a user types; both mean a list."""
    import rclpy

    from tt_sam3_ros.ros.node import Sam3Node

    context = rclpy.context.Context()
    rclpy.init(context=context)
    try:
        overrides = [Parameter("autostart", value=False), Parameter("devices", value=written)]
        node = Sam3Node(context=context, parameter_overrides=overrides)
        assert node.get_parameter("devices").value == meant
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)


def test_devices_is_read_at_configure_because_it_opens_the_chips(sam3_node) -> None:
    assert "devices" in READ_AT_CONFIGURE
    (result,) = sam3_node.set_parameters([Parameter("devices", value=[0, 1])])
    assert result.successful, result.reason
    assert sam3_node.get_parameter("devices").value == ["0", "1"]
    (refused,) = sam3_node.set_parameters([Parameter("devices", value=[1.5])])
    assert not refused.successful and "devices must be a list of strings, e.g. [0, 1]" in refused.reason


def test_a_depth_change_while_activating_cannot_split_the_3d_topics_from_the_depth_inputs(
    sam3_node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Activate reads READ_AT_ACTIVATE once: the 3D publishers and the depth subscriptions come
    from the same copy even when ``depth`` changes between the two (here on every read)."""
    node = sam3_node
    node._cameras = node._make_cameras(("front",))
    real = node.get_parameter
    flips = iter([True, False] * 10)

    def changing(name: str) -> Parameter:
        if name == "depth":
            return Parameter("depth", value=next(flips))
        return real(name)

    monkeypatch.setattr(node, "get_parameter", changing)
    values = node._activation_values()
    node._create_3d_publishers(bool(values["depth"]))
    node._subscribe(values)
    camera = node._cameras["front"]
    topics = {subscription.topic_name for subscription in camera.subscriptions}
    assert camera.detections_3d_pub is not None and camera.points_pub is not None
    assert {"front/depth", "front/camera_info"} <= {topic.lstrip("/") for topic in topics}, topics
    node._unsubscribe()
    node._create_3d_publishers(False)


def test_activate_is_refused_when_no_engine_serves(sam3_node) -> None:
    """Every chip lost since configure (the engine-lost path could not run): activate fails and
    says what to do, instead of an active node that drops every frame."""
    from rclpy.lifecycle import TransitionCallbackReturn

    class NoneServing:
        serving = ()

    sam3_node._chips = NoneServing()
    try:
        assert sam3_node.on_activate(None) == TransitionCallbackReturn.FAILURE
    finally:
        sam3_node._chips = None
    assert sam3_node._state != "active"


def test_max_prompts_is_read_at_configure_because_it_sizes_the_engine() -> None:
    assert "max_prompts" in READ_AT_CONFIGURE
    assert "Read at configure" in PARAMETERS["max_prompts"][1].description


def test_frame_slot_keeps_only_the_newest_frame() -> None:
    slot = FrameSlot()
    first, second = Frame(msg=None, received_s=1.0), Frame(msg=None, received_s=2.0)
    assert slot.put(first) is False
    assert slot.put(second) is True  # first is dropped, and the caller is told
    assert slot.take() == second
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


def test_the_threshold_descriptor_and_the_check_agree_on_the_range() -> None:
    (low_high,) = PARAMETERS["threshold"][1].floating_point_range
    for value in (low_high.from_value, low_high.to_value):  # ROS ranges are closed: both ends allowed
        assert invalid_values({**_defaults(), "threshold": value}) == "", value
    for value in (low_high.from_value - 1e-9, low_high.to_value + 1e-9):
        assert "threshold must be in" in invalid_values({**_defaults(), "threshold": value}), value


def test_a_prompt_with_surrounding_spaces_is_refused_so_label_info_has_the_parameter_text() -> None:
    reason = invalid_values({**_defaults(), "prompts": ["car", " person "]}, prompts_required=True)
    assert "prompt 1" in reason and "'person'" in reason, reason


@pytest.fixture
def sam3_node() -> Iterator[object]:
    """A real node in this process (autostart off: no engine is built)."""
    import rclpy

    from tt_sam3_ros.ros.node import Sam3Node

    context = rclpy.context.Context()
    rclpy.init(context=context)
    node = Sam3Node(context=context, parameter_overrides=[Parameter("autostart", value=False)])
    yield node
    node.destroy_node()
    rclpy.try_shutdown(context=context)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("prompts", "car", "prompts must be a list of strings, e.g. ['car', 'person']"),
        ("prompts", [True, False], "quote such prompts"),  # what YAML makes of [y, n]
        ("prompts", [1, 2], "prompts must be a list of strings, e.g. ['car', 'person']"),
        ("threshold", "high", "threshold must be a number, e.g. 0.5"),
        ("max_instances", 2.5, "max_instances must be an integer, e.g. 50"),
        ("publish_overlay", "yes", "publish_overlay must be true or false"),
        ("engine", 3, "engine must be a string, e.g. 'auto'"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_with_the_expected_type_and_an_example(
    sam3_node, name: str, value: object, expected: str
) -> None:
    before = sam3_node.get_parameter(name).value if name != "prompts" else None
    (result,) = sam3_node.set_parameters([Parameter(name, value=value)])
    assert not result.successful
    assert expected in result.reason, result.reason
    assert "Wrong parameter type" not in result.reason
    if before is not None:
        assert sam3_node.get_parameter(name).value == before


def test_an_empty_list_of_any_type_is_refused_as_no_prompts(sam3_node) -> None:
    # ``ros2 param set /sam3 prompts "[]"`` sends an empty bool array.
    from rcl_interfaces.msg import Parameter as ParameterMsg
    from rcl_interfaces.msg import ParameterType, ParameterValue

    message = ParameterMsg(name="prompts", value=ParameterValue(type=ParameterType.PARAMETER_BOOL_ARRAY))
    empty = Parameter.from_parameter_msg(message)
    (result,) = sam3_node.set_parameters([empty])
    assert not result.successful and "prompts must not be empty" in result.reason, result.reason


def test_an_integer_threshold_is_taken_as_a_number(sam3_node) -> None:
    (result,) = sam3_node.set_parameters([Parameter("threshold", value=0)])
    assert result.successful, result.reason
    assert sam3_node._settings.threshold == 0.0


def _outside_ranges() -> list[tuple[str, object]]:
    """For every parameter whose descriptor states a range: a value just below and just above it,
    as the integer ``-p name:=5`` gives where the integer lies outside (a double parameter too)."""
    cases: list[tuple[str, object]] = []
    for name, (_default, descriptor) in PARAMETERS.items():
        for bounds in (*descriptor.floating_point_range, *descriptor.integer_range):
            low, high = bounds.from_value, bounds.to_value
            if descriptor.floating_point_range:
                cases += [(name, low - 0.5), (name, high + 0.5)]
                cases += [(name, int(value)) for value in (low - 1, high + 1) if value == int(value)]
            else:
                cases += [(name, low - 1), (name, high + 1)]
    return cases


@pytest.mark.parametrize(("name", "value"), _outside_ranges(), ids=lambda v: str(v))
def test_every_descriptor_range_holds_at_startup(name: str, value: object) -> None:
    """``-p depth_max_skew_s:=5`` (an integer for a double) is refused like ``5.0`` is."""
    import rclpy

    from tt_sam3_ros.ros.node import Sam3Node

    context = rclpy.context.Context()
    rclpy.init(context=context)
    try:
        overrides = [Parameter("autostart", value=False), Parameter(name, value=value)]
        with pytest.raises(Exception, match=f"{name} out of range|{name} must be") as refused:
            Sam3Node(context=context, parameter_overrides=overrides).destroy_node()
        assert name in str(refused.value)
    finally:
        rclpy.try_shutdown(context=context)


def test_a_refused_startup_parameter_destroys_the_half_built_node() -> None:
    """The node that refused its parameters is destroyed before the error leaves its constructor.
    The error's traceback still refers to it: left to the garbage collector, its rcl node would
    be finalised whenever a collection runs, after rclpy shut down, where Fast DDS's participant
    teardown can spin forever."""
    import rclpy
    from rclpy.exceptions import InvalidHandle

    from tt_sam3_ros.ros.node import Sam3Node

    context = rclpy.context.Context()
    rclpy.init(context=context)
    try:
        overrides = [Parameter("autostart", value=False), Parameter("threshold", value=3.0)]
        with pytest.raises(Exception, match="threshold") as refused:
            Sam3Node(context=context, parameter_overrides=overrides)
        (half_built,) = {
            frame.f_locals["self"]
            for frame, _line in traceback.walk_tb(refused.value.__traceback__)
            if isinstance(frame.f_locals.get("self"), Sam3Node)
        }
        with pytest.raises(InvalidHandle):
            half_built.get_name()
    finally:
        rclpy.try_shutdown(context=context)


def test_ttnn_options_at_their_defaults_are_not_passed_so_torch_does_not_warn() -> None:
    """Only the ttnn_* parameters the user moved from their default reach create_engine (which
    warns that the torch engine ignores them); at the default the ttnn engine's own applies."""
    from tt_sam3_ros.ros.parameters import ttnn_options

    defaults = _defaults()
    assert ttnn_options(defaults) == {
        "weight_cache": None,
        "weight_dtype": None,
        "param_dtype": None,
        "prompt_path": None,
    }
    changed = {**defaults, "ttnn_weight_dtype": "bfloat16", "ttnn_weight_cache": "/var/cache/sam3"}
    assert ttnn_options(changed) == {
        "weight_cache": "/var/cache/sam3",
        "weight_dtype": "bfloat16",
        "param_dtype": None,
        "prompt_path": None,
    }


def test_ttnn_parameter_defaults_are_the_ttnn_engines_own() -> None:
    """A default left out of ttnn_options must mean the same thing to the engine."""
    import inspect

    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    engine_defaults = {
        name: parameter.default for name, parameter in inspect.signature(TtnnEngine).parameters.items()
    }
    for option in ("weight_dtype", "param_dtype"):
        assert PARAMETERS[f"ttnn_{option}"][0] == engine_defaults[option], option
    # prompt_path: the factory's default (create_engine, which the node calls with None at the
    # default) is auto; TtnnEngine's own stays host, the part without a check.
    from tt_sam3_ros.engines import DEFAULT_TTNN_PROMPT_PATH

    assert PARAMETERS["ttnn_prompt_path"][0] == DEFAULT_TTNN_PROMPT_PATH == "auto"
    assert engine_defaults["prompt_path"] == "host"
    assert PARAMETERS["ttnn_weight_cache"][0] == "" and engine_defaults["weight_cache"] is None
