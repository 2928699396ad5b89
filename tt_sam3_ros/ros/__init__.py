"""The ROS 2 shell: the process entry, the lifecycle node, parameters, message conversions,
diagnostics and the log bridge. The only package that imports rclpy or ROS messages."""
