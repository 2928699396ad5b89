"""Every rclpy, rcl_interfaces, launch and launch_ros name the node, its process and its launch
file use is one checked against ROS 2 Humble, and the names Humble lacks are used only where
the node falls back on what Humble has.

PyPI has no Humble rclpy, so Humble cannot run here: HUMBLE records, for each name in use,
whether Humble's sources have it, and for those it lacks, the fallback and the functions that
may touch the name (feature detection and the Iron-and-later path). test/support/ros_names.py
reads the uses with ``ast``; a new use nobody checked fails here until it has its entry.
test_node_humble.py runs the fallbacks on a real node.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable
from pathlib import Path

import pytest

pytest.importorskip("rclpy")  # which methods override rclpy's, and the untyped check's vocabulary

import ros_names  # test/support
from ros_names import UNTYPED, Use

REPOSITORY = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Lacks:
    """A name Humble does not have: what the code does there, and the only functions
    (``path::Class.method``) that may use the name, behind a feature check."""

    fallback: str
    only_in: tuple[str, ...]


HAS = "in Humble"
_NODE = "tt_sam3_ros/ros/node.py"
_PARAMETERS = "tt_sam3_ros/ros/parameter_handling.py"
_CAMERAS = "tt_sam3_ros/ros/cameras.py"

# Read from the humble branches of ros2/rclpy (rclpy 3.3), ros2/launch, ros2/launch_ros and
# ros2/rcl_interfaces: each name below is defined there (a keyword: the callable takes it), or
# is a Lacks. A name reached through its import path, as the code reaches it.
HUMBLE: dict[str, str | Lacks] = {
    # ---- rclpy: the process (ros/main.py, ros/publish_images.py)
    "rclpy": HAS,
    "rclpy.init": HAS,
    "rclpy.init(args=)": HAS,
    "rclpy.init(signal_handler_options=)": HAS,
    "rclpy.ok": HAS,
    "rclpy.spin_once": HAS,
    "rclpy.spin_once(timeout_sec=)": HAS,
    "rclpy.try_shutdown": HAS,
    "rclpy.signals.SignalHandlerOptions": HAS,
    "rclpy.signals.SignalHandlerOptions.NO": HAS,
    "rclpy.logging": HAS,
    "rclpy.logging.get_logger": HAS,
    "rclpy.exceptions": HAS,
    "rclpy.exceptions.InvalidParameterTypeException": HAS,
    "rclpy.exceptions.InvalidParameterValueException": HAS,
    "rclpy.exceptions.ParameterUninitializedException": HAS,
    "rclpy._rclpy_pybind11.InvalidHandle": HAS,
    "rclpy.executors.ExternalShutdownException": HAS,
    "rclpy.executors.MultiThreadedExecutor": HAS,
    "rclpy.executors.MultiThreadedExecutor(num_threads=)": HAS,
    "rclpy.executors.MultiThreadedExecutor.add_node": HAS,
    "rclpy.executors.MultiThreadedExecutor.spin_once": HAS,
    "rclpy.executors.MultiThreadedExecutor.spin_once(timeout_sec=)": HAS,
    "rclpy.executors.MultiThreadedExecutor.shutdown": HAS,
    "rclpy.impl.rcutils_logger.RcutilsLogger.debug": HAS,
    "rclpy.impl.rcutils_logger.RcutilsLogger.info": HAS,
    "rclpy.impl.rcutils_logger.RcutilsLogger.info(throttle_duration_sec=)": HAS,
    "rclpy.impl.rcutils_logger.RcutilsLogger.warning": HAS,
    "rclpy.impl.rcutils_logger.RcutilsLogger.warning(throttle_duration_sec=)": HAS,
    "rclpy.impl.rcutils_logger.RcutilsLogger.error": HAS,
    "rclpy.impl.rcutils_logger.RcutilsLogger.fatal": HAS,
    # ---- rclpy: the node (ros/node.py)
    "rclpy.lifecycle.LifecycleNode": HAS,
    "rclpy.lifecycle.LifecycleNode.__init__": HAS,
    "rclpy.lifecycle.LifecycleNode.declare_parameter": HAS,
    "rclpy.lifecycle.LifecycleNode.get_parameter": HAS,
    "rclpy.lifecycle.LifecycleNode.add_on_set_parameters_callback": HAS,
    "rclpy.lifecycle.LifecycleNode.add_pre_set_parameters_callback": Lacks(
        "Iron's. Sam3Node.set_parameters_atomically (what Humble's parameter services call) and "
        "set_parameters coerce before rclpy's descriptor checks",
        (
            f"{_PARAMETERS}::_has_parameter_hooks",
            f"{_PARAMETERS}::ParameterHandling._register_parameter_callbacks",
        ),
    ),
    "rclpy.lifecycle.LifecycleNode.add_post_set_parameters_callback": Lacks(
        "Iron's. Sam3Node.set_parameters_atomically applies the change once rclpy stored it",
        (
            f"{_PARAMETERS}::_has_parameter_hooks",
            f"{_PARAMETERS}::ParameterHandling._register_parameter_callbacks",
        ),
    ),
    # Overridden: on Humble they carry the coercion and the applying (above).
    "rclpy.lifecycle.LifecycleNode.set_parameters": HAS,
    "rclpy.lifecycle.LifecycleNode.set_parameters_atomically": HAS,
    "rclpy.lifecycle.LifecycleNode.create_publisher": HAS,
    "rclpy.lifecycle.LifecycleNode.create_lifecycle_publisher": HAS,
    "rclpy.lifecycle.LifecycleNode.destroy_lifecycle_publisher": HAS,
    "rclpy.lifecycle.LifecycleNode.create_subscription": HAS,
    "rclpy.lifecycle.LifecycleNode.destroy_subscription": HAS,
    "rclpy.lifecycle.LifecycleNode.count_publishers": HAS,
    "rclpy.lifecycle.LifecycleNode.create_timer": HAS,
    "rclpy.lifecycle.LifecycleNode.create_service": HAS,
    # The image inputs' raw subscriptions deserialise the frame the worker takes.
    "rclpy.serialization.deserialize_message": HAS,
    # Humble's lifecycle services are in it too (its LifecycleNodeMixin extends Node's list).
    "rclpy.lifecycle.LifecycleNode.services": HAS,
    "rclpy.lifecycle.LifecycleNode.get_clock": HAS,
    "rclpy.lifecycle.LifecycleNode.get_logger": HAS,
    "rclpy.lifecycle.LifecycleNode.get_name": HAS,
    "rclpy.lifecycle.LifecycleNode.get_fully_qualified_name": HAS,
    "rclpy.lifecycle.LifecycleNode.context": HAS,
    "rclpy.lifecycle.LifecycleNode.destroy_node": HAS,
    "rclpy.lifecycle.LifecycleNode.on_configure": HAS,
    "rclpy.lifecycle.LifecycleNode.on_activate": HAS,
    "rclpy.lifecycle.LifecycleNode.on_deactivate": HAS,
    "rclpy.lifecycle.LifecycleNode.on_cleanup": HAS,
    "rclpy.lifecycle.LifecycleNode.on_shutdown": HAS,
    "rclpy.lifecycle.LifecycleNode.on_error": HAS,
    "rclpy.lifecycle.LifecycleNode.trigger_configure": HAS,
    "rclpy.lifecycle.LifecycleNode.trigger_activate": HAS,
    "rclpy.lifecycle.LifecycleNode.trigger_deactivate": HAS,
    "rclpy.lifecycle.LifecycleNode.trigger_shutdown": HAS,
    "rclpy.lifecycle.LifecycleNode.trigger_cleanup": HAS,
    # Private: the change_state service, moved to a callback group of its own. Humble's
    # executor reads each entity's callback_group when it waits, as later ones do.
    "rclpy.lifecycle.LifecycleNode._service_change_state": HAS,
    "rclpy.service.Service.callback_group": HAS,
    # Wrapped in the transition lock; Humble's executor calls ``srv.callback`` as later ones do.
    "rclpy.service.Service.callback": HAS,
    "rclpy.lifecycle.LifecyclePublisher": HAS,
    "rclpy.lifecycle.LifecyclePublisher.publish": HAS,
    "rclpy.lifecycle.LifecyclePublisher.get_subscription_count": HAS,
    "rclpy.lifecycle.LifecycleState": HAS,
    "rclpy.lifecycle.LifecycleState.label": HAS,
    "rclpy.lifecycle.TransitionCallbackReturn": HAS,
    "rclpy.lifecycle.TransitionCallbackReturn.SUCCESS": HAS,
    "rclpy.lifecycle.TransitionCallbackReturn.FAILURE": HAS,
    "rclpy.lifecycle.TransitionCallbackReturn.ERROR": HAS,
    "rclpy.callback_groups.MutuallyExclusiveCallbackGroup": HAS,
    "rclpy.callback_groups.MutuallyExclusiveCallbackGroup.add_entity": HAS,
    "rclpy.context.Context.ok": HAS,
    "rclpy.clock.Clock.now": HAS,
    "rclpy.time.Time.nanoseconds": HAS,
    "rclpy.time.Time.to_msg": HAS,
    "rclpy.publisher.Publisher.publish": HAS,
    "rclpy.publisher.Publisher.get_subscription_count": HAS,
    "rclpy.publisher.Publisher.topic_name": HAS,
    "rclpy.subscription.Subscription": HAS,
    "rclpy.subscription.Subscription.topic_name": HAS,
    "rclpy.subscription.Subscription.get_publisher_count": Lacks(
        "Iron's. CameraTopics._publisher_count asks the graph: Node.count_publishers(topic_name)",
        (f"{_CAMERAS}::CameraTopics._publisher_count",),
    ),
    "rclpy.node.Node": HAS,
    "rclpy.node.Node.__init__": HAS,
    "rclpy.node.Node.create_publisher": HAS,
    "rclpy.node.Node.create_timer": HAS,
    "rclpy.node.Node.get_clock": HAS,
    "rclpy.node.Node.get_logger": HAS,
    "rclpy.node.Node.destroy_node": HAS,
    "rclpy.qos.QoSProfile": HAS,
    "rclpy.qos.QoSProfile(depth=)": HAS,
    "rclpy.qos.QoSProfile(reliability=)": HAS,
    "rclpy.qos.QoSProfile(durability=)": HAS,
    "rclpy.qos.ReliabilityPolicy": HAS,
    "rclpy.qos.ReliabilityPolicy.RELIABLE": HAS,
    "rclpy.qos.ReliabilityPolicy.BEST_EFFORT": HAS,
    "rclpy.qos.DurabilityPolicy": HAS,
    "rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL": HAS,
    # ---- rclpy: parameters (ros/node.py, ros/parameters.py)
    "rclpy.parameter.Parameter": HAS,
    "rclpy.parameter.Parameter.name": HAS,
    "rclpy.parameter.Parameter.type_": HAS,
    "rclpy.parameter.Parameter.value": HAS,
    "rclpy.parameter.Parameter.Type": HAS,
    "rclpy.parameter.Parameter.Type.from_parameter_value": HAS,
    "rclpy.parameter.Parameter.Type.NOT_SET": HAS,
    "rclpy.parameter.Parameter.Type.BOOL": HAS,
    "rclpy.parameter.Parameter.Type.INTEGER": HAS,
    "rclpy.parameter.Parameter.Type.DOUBLE": HAS,
    "rclpy.parameter.Parameter.Type.STRING": HAS,
    "rclpy.parameter.Parameter.Type.BYTE_ARRAY": HAS,
    "rclpy.parameter.Parameter.Type.BOOL_ARRAY": HAS,
    "rclpy.parameter.Parameter.Type.INTEGER_ARRAY": HAS,
    "rclpy.parameter.Parameter.Type.DOUBLE_ARRAY": HAS,
    "rclpy.parameter.Parameter.Type.STRING_ARRAY": HAS,
    # ---- rcl_interfaces (its .msg files)
    "rcl_interfaces.msg.SetParametersResult": HAS,
    "rcl_interfaces.msg.SetParametersResult(successful=)": HAS,
    "rcl_interfaces.msg.SetParametersResult(reason=)": HAS,
    "rcl_interfaces.msg.SetParametersResult.successful": HAS,
    "rcl_interfaces.msg.SetParametersResult.reason": HAS,
    "rcl_interfaces.msg.ParameterDescriptor": HAS,
    "rcl_interfaces.msg.ParameterDescriptor(description=)": HAS,
    "rcl_interfaces.msg.ParameterDescriptor(additional_constraints=)": HAS,
    "rcl_interfaces.msg.ParameterDescriptor(read_only=)": HAS,
    "rcl_interfaces.msg.ParameterDescriptor(floating_point_range=)": HAS,
    "rcl_interfaces.msg.ParameterDescriptor(integer_range=)": HAS,
    # Set on a copy of each descriptor, so a wrong type reaches the node's own check.
    "rcl_interfaces.msg.ParameterDescriptor.dynamic_typing": HAS,
    "rcl_interfaces.msg.FloatingPointRange": HAS,
    "rcl_interfaces.msg.FloatingPointRange(from_value=)": HAS,
    "rcl_interfaces.msg.FloatingPointRange(to_value=)": HAS,
    "rcl_interfaces.msg.FloatingPointRange(step=)": HAS,
    "rcl_interfaces.msg.IntegerRange": HAS,
    "rcl_interfaces.msg.IntegerRange(from_value=)": HAS,
    "rcl_interfaces.msg.IntegerRange(to_value=)": HAS,
    "rcl_interfaces.msg.IntegerRange(step=)": HAS,
    # ---- launch and launch_ros (launch/sam3.launch.py)
    "launch.LaunchContext": HAS,
    "launch.LaunchContext.launch_configurations": HAS,
    "launch.LaunchDescription": HAS,
    "launch.actions.DeclareLaunchArgument": HAS,
    "launch.actions.DeclareLaunchArgument(default_value=)": HAS,
    "launch.actions.DeclareLaunchArgument(description=)": HAS,
    # Humble refuses a default outside the choices at construction: engine's '' is one.
    "launch.actions.DeclareLaunchArgument(choices=)": HAS,
    "launch.actions.OpaqueFunction": HAS,
    "launch.actions.OpaqueFunction(function=)": HAS,
    "launch.conditions.IfCondition": HAS,
    "launch.substitutions.LaunchConfiguration": HAS,
    "launch.substitutions.PathJoinSubstitution": HAS,
    "launch_ros.substitutions.FindPackageShare": HAS,
    "launch_ros.actions.LifecycleNode": HAS,
    # Humble's LifecycleNode requires name and namespace (keyword-only): both are given.
    "launch_ros.actions.LifecycleNode(name=)": HAS,
    "launch_ros.actions.LifecycleNode(namespace=)": HAS,
    "launch_ros.actions.LifecycleNode(package=)": HAS,
    "launch_ros.actions.LifecycleNode(executable=)": HAS,
    "launch_ros.actions.LifecycleNode(parameters=)": HAS,
    "launch_ros.actions.LifecycleNode(remappings=)": HAS,
    "launch_ros.actions.LifecycleNode(output=)": HAS,
    # Node passes its other keywords to launch.actions.ExecuteProcess, which has had both since Dashing.
    "launch_ros.actions.LifecycleNode(sigterm_timeout=)": HAS,
    "launch_ros.actions.LifecycleNode(sigkill_timeout=)": HAS,
    "launch_ros.actions.Node": HAS,
    "launch_ros.actions.Node(package=)": HAS,
    "launch_ros.actions.Node(executable=)": HAS,
    "launch_ros.actions.Node(name=)": HAS,
    "launch_ros.actions.Node(arguments=)": HAS,
    "launch_ros.actions.Node(condition=)": HAS,
    "launch_ros.actions.Node(output=)": HAS,
}

#: What the reader needs to follow objects (the same on every distribution): a callable -> the
#: type it returns ("[]": a list of them); "<attribute>." -> the type of an attribute.
RESULTS = {
    "rclpy.logging.get_logger": "rclpy.impl.rcutils_logger.RcutilsLogger",
    "rclpy.node.Node.get_logger": "rclpy.impl.rcutils_logger.RcutilsLogger",
    "rclpy.node.Node.get_clock": "rclpy.clock.Clock",
    "rclpy.node.Node.create_publisher": "rclpy.publisher.Publisher",
    "rclpy.node.Node.create_subscription": "rclpy.subscription.Subscription",
    "rclpy.lifecycle.LifecycleNode.get_logger": "rclpy.impl.rcutils_logger.RcutilsLogger",
    "rclpy.lifecycle.LifecycleNode.get_clock": "rclpy.clock.Clock",
    "rclpy.lifecycle.LifecycleNode.get_parameter": "rclpy.parameter.Parameter",
    "rclpy.lifecycle.LifecycleNode.set_parameters": "rcl_interfaces.msg.SetParametersResult[]",
    "rclpy.lifecycle.LifecycleNode.set_parameters_atomically": "rcl_interfaces.msg.SetParametersResult",
    "rclpy.lifecycle.LifecycleNode.create_publisher": "rclpy.publisher.Publisher",
    "rclpy.lifecycle.LifecycleNode.create_lifecycle_publisher": "rclpy.lifecycle.LifecyclePublisher",
    "rclpy.lifecycle.LifecycleNode.create_subscription": "rclpy.subscription.Subscription",
    "rclpy.lifecycle.LifecycleNode.context.": "rclpy.context.Context",
    "rclpy.lifecycle.LifecycleNode._service_change_state.": "rclpy.service.Service",
    "rclpy.executors.MultiThreadedExecutor": "rclpy.executors.MultiThreadedExecutor",
    "rclpy.callback_groups.MutuallyExclusiveCallbackGroup": (
        "rclpy.callback_groups.MutuallyExclusiveCallbackGroup"
    ),
    "rclpy.clock.Clock.now": "rclpy.time.Time",
    "rclpy.parameter.Parameter": "rclpy.parameter.Parameter",
    "rclpy.qos.QoSProfile": "rclpy.qos.QoSProfile",
}


def _node_mixins() -> set[str]:
    """The names of Sam3Node's own bases (tt_sam3_ros/ros/node.py), rclpy's aside."""
    tree = ast.parse((REPOSITORY / _NODE).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Sam3Node")
    return {base.id for base in node.bases if isinstance(base, ast.Name)} - {"LifecycleNode"}


def _defines(path: Path, classes: set[str]) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name in classes for n in ast.parse(path.read_text()).body)


def product_sources() -> dict[str, str]:
    """The package's modules that import ROS, those that define the node's mixins (their ``self``
    is the node, whether or not they import ROS themselves), and the launch files: path -> text."""
    package = sorted((REPOSITORY / "tt_sam3_ros").rglob("*.py"))
    mixins = _node_mixins()
    paths = [
        *(p for p in package if ros_names.imports_ros(p.read_text()) or _defines(p, mixins)),
        *(REPOSITORY / "launch").glob("*.py"),
    ]
    return {path.relative_to(REPOSITORY).as_posix(): path.read_text(encoding="utf-8") for path in paths}


def read(sources: dict[str, str]) -> list[Use]:
    return ros_names.read_uses(sources, RESULTS, ros_names.has_attribute, VOCABULARY)


VOCABULARY = ros_names.untyped_vocabulary()


@pytest.fixture(scope="module")
def uses() -> list[Use]:
    return read(product_sources())


# ------------------------------------------------------------------ the checks


def _attribute(name: str) -> str:
    return "" if name.endswith("=)") else name.rpartition(".")[2]


def _entries(use: Use, table: dict[str, str | Lacks]) -> list[str | Lacks]:
    """The table's entries for ``use``: its own, or for an untyped ``?.<attribute>``, those of
    every name ending in that attribute."""
    if not use.name.startswith(f"{UNTYPED}."):
        return [table[use.name]] if use.name in table else []
    attribute = use.name.removeprefix(f"{UNTYPED}.")
    return [entry for key, entry in table.items() if _attribute(key) == attribute]


def unchecked(uses: Iterable[Use], table: dict[str, str | Lacks]) -> list[str]:
    """Uses of names nobody checked against Humble (an untyped one: on no owner)."""
    return sorted({str(use) for use in uses if not _entries(use, table)})


def outside_fallbacks(uses: Iterable[Use], table: dict[str, str | Lacks]) -> list[str]:
    """Uses of a name Humble lacks outside the functions its entry allows."""
    found = []
    for use in uses:
        entries = _entries(use, table)
        if entries and not any(e == HAS or (isinstance(e, Lacks) and use.site in e.only_in) for e in entries):
            found.append(str(use))
    return sorted(found)


def unused(uses: Iterable[Use], table: dict[str, str | Lacks]) -> list[str]:
    """Table names nothing uses any more, and allowances no use needs."""
    uses = list(uses)
    named = {use.name for use in uses}
    untyped = {use.name.removeprefix(f"{UNTYPED}.") for use in uses if use.name.startswith(f"{UNTYPED}.")}
    found = [key for key in table if key not in named and _attribute(key) not in untyped]
    for key, entry in table.items():
        if isinstance(entry, Lacks):
            sites = {use.site for use in uses if use.name == key}
            found += [f"{key}: {site}" for site in entry.only_in if site not in sites]
    return found


def _lines(found: list[str]) -> str:
    return "\n".join(found)


def test_every_ros_name_in_use_was_checked_against_humble(uses: list[Use]) -> None:
    found = unchecked(uses, HUMBLE)
    assert not found, (
        "check these on the humble branches of ros2/rclpy, ros2/launch, ros2/launch_ros or "
        "ros2/rcl_interfaces and record them in HUMBLE (a Lacks, with its fallback, where Humble has "
        f"none):\n{_lines(found)}"
    )


def test_a_name_humble_lacks_is_used_only_behind_its_fallback(uses: list[Use]) -> None:
    found = outside_fallbacks(uses, HUMBLE)
    assert not found, f"Humble lacks these; use them only behind a feature check:\n{_lines(found)}"


def test_the_table_names_only_what_is_in_use(uses: list[Use]) -> None:
    found = unused(uses, HUMBLE)
    assert not found, f"no longer used; remove from HUMBLE:\n{_lines(found)}"


def test_the_reader_finds_the_node_api_a_sample_module_uses() -> None:
    """What the checks above would be told of a new module: every kind of use is read."""
    sample = """
from rclpy.node import Node
from rclpy.qos import QoSProfile


class Probe(Node):
    def __init__(self) -> None:
        super().__init__("probe")
        self._subscription = self.create_subscription(str, "in", print, QoSProfile(depth=1))

    def destroy_node(self) -> None:
        super().destroy_node()

    def tick(self, untyped) -> None:
        self.get_logger().info("tick", throttle_duration_sec=1.0)
        if self._subscription.get_publisher_count() > 0:
            self.wait_for_node("other")
        untyped.get_subscription_count()
"""
    names = {use.name for use in read({"sample/probe.py": sample})}
    assert {
        "rclpy.node.Node",
        "rclpy.node.Node.__init__",
        "rclpy.node.Node.create_subscription",
        "rclpy.qos.QoSProfile(depth=)",
        "rclpy.node.Node.destroy_node",  # the override, and its super() call
        "rclpy.impl.rcutils_logger.RcutilsLogger.info(throttle_duration_sec=)",
        "rclpy.subscription.Subscription.get_publisher_count",
        "rclpy.node.Node.wait_for_node",
        f"{UNTYPED}.get_subscription_count",
    } <= names


def test_a_new_use_fails_the_checks() -> None:
    """An unchecked name, a name Humble lacks used outside its fallback, and an entry gone from
    the table each fail the checks the product code is held to."""
    sample = """
from rclpy.lifecycle import LifecycleNode


class Probe(LifecycleNode):
    def tick(self, subscription) -> None:
        self.wait_for_node("other")
        self.get_logger().info("tick", once=True)
        subscription.get_publisher_count()
"""
    sample_uses = read({"sample/probe.py": sample})
    assert unchecked(sample_uses, HUMBLE) == [
        "rclpy.impl.rcutils_logger.RcutilsLogger.info(once=) (sample/probe.py:8, Probe.tick)",
        "rclpy.lifecycle.LifecycleNode.wait_for_node (sample/probe.py:7, Probe.tick)",
    ]
    assert outside_fallbacks(sample_uses, HUMBLE) == [
        f"{UNTYPED}.get_publisher_count (sample/probe.py:9, Probe.tick)"
    ]
    product_uses = read(product_sources())
    for name in ("rclpy.lifecycle.LifecycleNode.count_publishers", "rclpy.qos.QoSProfile(durability=)"):
        without = {key: entry for key, entry in HUMBLE.items() if key != name}
        assert any(line.startswith(f"{name} (") for line in unchecked(product_uses, without)), name
