"""The node on Humble's rclpy, which lacks three things the node uses on Iron and later.

Humble cannot be installed here, so each test hides what Humble lacks from the real rclpy
(the set-parameters callbacks that run before and after a set, and a subscription's count of
its publishers) and runs a real ``Sam3Node`` in this process. The parameter tests compare the
outcome with the same change on the node with rclpy's own callbacks: coercion, refusals and
what is applied must not depend on the distribution. test_humble_api.py keeps the list of the
rclpy names the node uses and which of them Humble has.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import rclpy
from rcl_interfaces.srv import SetParameters
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.subscription import Subscription
from vision_msgs.msg import Detection2DArray

from tt_sam3_ros.ros.node import PROMPT_BOXES_QOS, Sam3Node

#: A liveness bound for discovery and service answers, far above what either takes.
LIMIT_S = 30.0

#: What Humble's rclpy (3.3) lacks of what the node calls (read from its humble branch).
HUMBLE_LACKS = (
    (Node, "add_pre_set_parameters_callback"),
    (Node, "add_post_set_parameters_callback"),
    (Subscription, "get_publisher_count"),
)


def _as_on_humble(monkeypatch: pytest.MonkeyPatch) -> None:
    for owner, name in HUMBLE_LACKS:
        monkeypatch.delattr(owner, name)


def _node(context: Any) -> Sam3Node:
    return Sam3Node(context=context, parameter_overrides=[Parameter("autostart", value=False)])


@pytest.fixture
def humble_node(context: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sam3Node]:
    """A node built on an rclpy without what Humble lacks (autostart off: no engine)."""
    _as_on_humble(monkeypatch)
    sam3 = _node(context)
    assert sam3._parameter_hooks_emulated, "the node did not take its Humble path"
    yield sam3
    sam3.destroy_node()


def _wait(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` until true or LIMIT_S passed (a liveness bound, not a timing)."""
    pause = threading.Event()
    for _ in range(int(LIMIT_S / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return condition()


def test_the_node_uses_rclpys_own_callbacks_where_rclpy_has_them(context: Any) -> None:
    sam3 = _node(context)
    try:
        assert not sam3._parameter_hooks_emulated
    finally:
        sam3.destroy_node()


def test_valid_prompts_are_applied_once_rclpy_has_stored_them(humble_node: Sam3Node) -> None:
    (result,) = humble_node.set_parameters([Parameter("prompts", value=["car", "person"])])
    assert result.successful, result.reason
    assert humble_node.get_parameter("prompts").value == ["car", "person"]
    assert humble_node._settings.prompts == ("car", "person")
    assert dict(humble_node._settings.class_ids) == {"car": 0, "person": 1}


def test_invalid_prompts_are_refused_with_the_reason_and_nothing_changes(humble_node: Sam3Node) -> None:
    humble_node.set_parameters([Parameter("prompts", value=["car"])])
    (result,) = humble_node.set_parameters([Parameter("prompts", value=["car", "person", "car"])])
    assert not result.successful
    assert "prompt 2 'car' repeats prompt 0 'car'" in result.reason, result.reason
    assert humble_node.get_parameter("prompts").value == ["car"]
    assert humble_node._settings.prompts == ("car",)


def test_an_integer_threshold_is_stored_as_the_double_it_means(humble_node: Sam3Node) -> None:
    (result,) = humble_node.set_parameters([Parameter("threshold", value=0)])
    assert result.successful, result.reason
    stored = humble_node.get_parameter("threshold")
    assert (stored.type_, stored.value) == (Parameter.Type.DOUBLE, 0.0)
    assert humble_node._settings.threshold == 0.0


def _outcome(sam3: Sam3Node, changes: list[list[Parameter]]) -> list[tuple[object, ...]]:
    """What each set (one atomic set per inner list) returned, and what rclpy then stores and
    the worker is given, after each."""
    outcomes: list[tuple[object, ...]] = []
    for change in changes:
        result = sam3.set_parameters_atomically(change)
        stored = [(p.name, p.type_, p.value) for p in sam3.get_parameters([q.name for q in change])]
        outcomes.append((result.successful, result.reason, stored, sam3._settings))
    return outcomes


#: Changes whose outcome hangs on coercion (an integer for a double, devices written as integers
#: or one word), on a descriptor's range judging the coerced value, or on the validating callback.
CHANGES = {
    "integer threshold": [[Parameter("threshold", value=0)]],
    "integer threshold out of range": [[Parameter("threshold", value=2)]],
    "integer skew out of range": [[Parameter("depth_max_skew_s", value=5)]],
    "threshold of the wrong type": [[Parameter("threshold", value="high")]],
    "devices as integers": [[Parameter("devices", value=[0, 1])]],
    "devices as one word": [[Parameter("devices", value="all")]],
    "devices of the wrong type": [[Parameter("devices", value=[1.5])]],
    "prompts, then a repeat": [
        [Parameter("prompts", value=["car", "person"])],
        [Parameter("prompts", value=["car", "car"])],
    ],
    "prompts as one string": [[Parameter("prompts", value="car")]],
    "max_instances of the wrong type": [[Parameter("max_instances", value=2.5)]],
    "prompts and an integer threshold together": [
        [Parameter("prompts", value=["person"]), Parameter("threshold", value=1)]
    ],
    "a valid and an invalid change together": [
        [Parameter("prompts", value=["person"]), Parameter("max_prompts", value=0)]
    ],
}


@pytest.mark.parametrize("changes", CHANGES.values(), ids=CHANGES.keys())
def test_a_change_ends_as_it_does_with_rclpys_own_callbacks(
    context: Any, monkeypatch: pytest.MonkeyPatch, changes: list[list[Parameter]]
) -> None:
    reference = _node(context)
    try:
        expected = _outcome(reference, changes)
    finally:
        reference.destroy_node()
    _as_on_humble(monkeypatch)
    sam3 = _node(context)
    try:
        assert sam3._parameter_hooks_emulated
        assert _outcome(sam3, changes) == expected
    finally:
        sam3.destroy_node()


def test_set_parameters_sets_and_applies_one_at_a_time(humble_node: Sam3Node) -> None:
    """As rclpy's: a refused parameter does not undo the one before it."""
    results = humble_node.set_parameters(
        [Parameter("prompts", value=["car"]), Parameter("threshold", value=3)]
    )
    assert [r.successful for r in results] == [True, False]
    assert humble_node._settings.prompts == ("car",)
    threshold = humble_node.get_parameter("threshold").value
    assert threshold != 3 and humble_node._settings.threshold == threshold


def _set_through_the_service(sam3: Sam3Node, context: Any, parameter: Parameter) -> Any:
    """What ``ros2 param set`` does: a SetParameters request to the node's service."""
    probe = rclpy.create_node("param_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    try:
        executor.add_node(sam3)
        executor.add_node(probe)
        client = probe.create_client(SetParameters, f"{sam3.get_fully_qualified_name()}/set_parameters")
        assert client.wait_for_service(timeout_sec=LIMIT_S)
        future = client.call_async(SetParameters.Request(parameters=[parameter.to_parameter_msg()]))
        executor.spin_until_future_complete(future, timeout_sec=LIMIT_S)
        assert future.done(), "no answer from the set_parameters service"
        (result,) = future.result().results
        return result
    finally:
        executor.shutdown()
        probe.destroy_node()


def test_the_parameter_service_coerces_and_applies(humble_node: Sam3Node, context: Any) -> None:
    result = _set_through_the_service(humble_node, context, Parameter("threshold", value=1))
    assert result.successful, result.reason
    stored = humble_node.get_parameter("threshold")
    assert (stored.type_, stored.value, humble_node._settings.threshold) == (Parameter.Type.DOUBLE, 1.0, 1.0)


def test_the_parameter_service_answers_a_refusal_with_its_reason(humble_node: Sam3Node, context: Any) -> None:
    result = _set_through_the_service(humble_node, context, Parameter("prompts", value=[" car "]))
    assert not result.successful
    assert "prompts rejected" in result.reason and "'car'" in result.reason, result.reason
    assert humble_node._settings.prompts == ()


def test_a_boxes_publisher_is_counted_on_the_graph(humble_node: Sam3Node, context: Any) -> None:
    """Humble's subscriptions cannot count their publishers; the node asks the graph instead."""
    camera = humble_node._cameras[""]
    camera.boxes_sub = humble_node._input(camera, Detection2DArray, "prompt_boxes", lambda _msg: None)
    assert not hasattr(camera.boxes_sub, "get_publisher_count")
    assert not humble_node._boxes_publisher(camera)
    probe = rclpy.create_node("boxes_probe", context=context)
    try:
        probe.create_publisher(Detection2DArray, camera.boxes_sub.topic_name, PROMPT_BOXES_QOS)
        assert _wait(lambda: humble_node._boxes_publisher(camera)), "the boxes publisher was never counted"
        humble_node.destroy_subscription(camera.boxes_sub)
        # As after a deactivate while the worker answers its last frame: no count, no failure.
        assert not humble_node._boxes_publisher(camera)
    finally:
        camera.boxes_sub = None
        probe.destroy_node()
