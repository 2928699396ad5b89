"""tt_sam3_ros: Meta's SAM 3 text-prompted instance segmentation for ROS 2.

The core library (segmenter, pre/post-processing, weights, engines) imports no ROS;
``tt_sam3_ros.node`` is the thin ROS 2 adapter on top of it.
"""

__version__ = "0.1.0"
