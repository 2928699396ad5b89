"""The library: SAM 3 on an image or a stream, with no ROS and no threads.

Results, errors, prompts and exemplars; image pre- and post-processing and the overlay; the
segmenter; tracking (association and SAM 3's video tracker); depth (camera model, geometry,
pairing). Nothing here imports rclpy or a ROS message package (test/unit/test_layout.py).
"""
