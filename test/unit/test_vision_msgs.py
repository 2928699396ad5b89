"""The vision_msgs we run against are wire-compatible with a real robot's."""

from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")
vision_msgs = pytest.importorskip("vision_msgs.msg")
topic_endpoint_info = pytest.importorskip("rclpy.topic_endpoint_info")

# Upstream vision_msgs 4.x (ros-perception/vision_msgs), as a ROS 2 Kilted robot announces it.
UPSTREAM_DETECTION2DARRAY_HASH = "RIHS01_214274120007f4a683866481336b70310268cfa107aebe9d594a6acf75bda968"
# Computed with `rosidl hash` (rosidl_generator_type_description 4.9.5, this venv) from
# upstream's own .msg files at tag 4.1.1 (commit e77fa2d); the same run gives the
# Detection2DArray hash above, and an independent ROS 2 client hard-codes this value.
UPSTREAM_DETECTION3DARRAY_HASH = "RIHS01_793f5eab9595ac1c0da07873cc859db42eae51f0ee76056db8562515d830e018"

UPSTREAM_FIELDS = {
    "Point2D": {"x": "double", "y": "double"},
    "Pose2D": {"position": "vision_msgs/Point2D", "theta": "double"},
    "BoundingBox2D": {"center": "vision_msgs/Pose2D", "size_x": "double", "size_y": "double"},
    "ObjectHypothesis": {"class_id": "string", "score": "double"},
    "ObjectHypothesisWithPose": {
        "hypothesis": "vision_msgs/ObjectHypothesis",
        "pose": "geometry_msgs/PoseWithCovariance",
    },
    "Detection2D": {
        "header": "std_msgs/Header",
        "results": "sequence<vision_msgs/ObjectHypothesisWithPose>",
        "bbox": "vision_msgs/BoundingBox2D",
        "id": "string",
    },
    "Detection2DArray": {"header": "std_msgs/Header", "detections": "sequence<vision_msgs/Detection2D>"},
    "BoundingBox3D": {"center": "geometry_msgs/Pose", "size": "geometry_msgs/Vector3"},
    "BoundingBox3DArray": {"header": "std_msgs/Header", "boxes": "sequence<vision_msgs/BoundingBox3D>"},
    "Detection3D": {
        "header": "std_msgs/Header",
        "results": "sequence<vision_msgs/ObjectHypothesisWithPose>",
        "bbox": "vision_msgs/BoundingBox3D",
        "id": "string",
    },
    "Detection3DArray": {"header": "std_msgs/Header", "detections": "sequence<vision_msgs/Detection3D>"},
    "VisionClass": {"class_id": "uint16", "class_name": "string"},
    "LabelInfo": {
        "header": "std_msgs/Header",
        "class_map": "sequence<vision_msgs/VisionClass>",
        "threshold": "float",
    },
    "VisionInfo": {
        "header": "std_msgs/Header",
        "method": "string",
        "database_location": "string",
        "database_version": "int32",
    },
}


@pytest.mark.parametrize("name", sorted(UPSTREAM_FIELDS))
def test_fields_match_upstream(name: str) -> None:
    message_type = getattr(vision_msgs, name)
    assert message_type.get_fields_and_field_types() == UPSTREAM_FIELDS[name]


@pytest.mark.skipif(
    not hasattr(topic_endpoint_info.TopicEndpointInfo, "topic_type_hash"),
    reason="this rclpy reports no type hashes (Humble's rosidl has none): the fields, checked above, "
    "are then the whole wire contract",
)
@pytest.mark.parametrize(
    ("name", "upstream_hash"),
    [
        ("Detection2DArray", UPSTREAM_DETECTION2DARRAY_HASH),
        ("Detection3DArray", UPSTREAM_DETECTION3DARRAY_HASH),
    ],
)
def test_type_hash_equals_upstream(name: str, upstream_hash: str) -> None:
    """The hash DDS discovery announces is the one a robot with upstream vision_msgs announces."""
    rclpy.init()
    try:
        node = rclpy.create_node("type_hash_probe")
        node.create_publisher(getattr(vision_msgs, name), "probe_detections", 1)
        (info,) = node.get_publishers_info_by_topic("probe_detections")
        assert str(info.topic_type_hash) == upstream_hash
        node.destroy_node()
    finally:
        rclpy.shutdown()
