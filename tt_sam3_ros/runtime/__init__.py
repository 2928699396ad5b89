"""What the node runs on its threads, still without ROS: frame slots and the worker, chips and
their turns, the per-frame pipeline. Imports the core and the engines, never rclpy
(test/unit/test_layout.py)."""
