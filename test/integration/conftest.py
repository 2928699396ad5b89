"""Fixtures for the integration tests: each gets a fresh rclpy context."""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy")

from ros_harness import ros_test_node

ros_node = pytest.fixture(ros_test_node)
