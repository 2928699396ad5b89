"""A ROS node that publishes on a timer until it is stopped: the integration tests' feeders.

Stopped by SIGINT (as the tests' process teardown sends it) or by ROS shutting down; it then
destroys its node and shuts rclpy down, so the feeder exits cleanly either way.
"""

from __future__ import annotations

from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

#: The feeders' QoS: reliable, so no frame a test counts on is dropped between two processes.
RELIABLE = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)


def publish_until_stopped(
    node_name: str, period_s: float, start: Callable[[Node], Callable[[], None]]
) -> None:
    """Start rclpy and a node ``node_name``; ``start(node)`` makes its publishers and returns the
    call that publishes once, which runs every ``period_s`` seconds until the node is stopped."""
    rclpy.init()
    node = rclpy.create_node(node_name)
    node.create_timer(period_s, start(node))
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
