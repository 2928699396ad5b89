"""Conversions for the depth path: depth Image and CameraInfo in, Detection3DArray and PointCloud2 out.

Pure functions over message types, like ``messages``: nothing here creates a node. Inputs are
checked and refused with the reason (``InputError``) and handed on as plain data
(``depth_pairing.DepthFrame``, ``CameraInfoData``); the arithmetic lives in ``depth``.

Depth in: sensor_msgs/Image ``16UC1`` or ``mono16`` (millimetres) or ``32FC1`` (metres),
registered to the colour image (same frame_id), either byte order, padded rows allowed.
CameraInfo in: the colour camera's, for the colour image's pixel grid (or the depth's when that
is an integer scale of it): P[:3, :3] when P is set (rectified images), K otherwise; no binning,
no region of interest.

Out: one vision_msgs/Detection3D per 2D detection with enough depth (same id and hypotheses),
and a PointCloud2 of x, y, z (float32, metres) plus ``instance`` (uint32, the detection's id:
the track id while tracking, as Detection3D.id).
"""

from __future__ import annotations

import numpy as np
from sensor_msgs.msg import CameraInfo, Image, PointCloud2, PointField
from std_msgs.msg import Header
from vision_msgs.msg import (
    BoundingBox3D,
    Detection2DArray,
    Detection3D,
    Detection3DArray,
    ObjectHypothesis,
    ObjectHypothesisWithPose,
)

from tt_sam3_ros.core import depth
from tt_sam3_ros.core.depth_pairing import CameraInfoData, DepthFrame
from tt_sam3_ros.core.errors import InputError, quoted
from tt_sam3_ros.ros import messages

#: Depth encodings accepted, with their element type (little-endian) and unit. mono16 is read
#: as 16UC1 millimetres, as depth_image_proc does (some drivers label their depth so).
DEPTH_ENCODINGS: dict[str, tuple[np.dtype, str]] = {
    "16uc1": (np.dtype("<u2"), "millimetres"),
    "mono16": (np.dtype("<u2"), "millimetres"),
    "32fc1": (np.dtype("<f4"), "metres"),
}
#: Each accepted encoding as sensor_msgs/image_encodings spells it.
_ENCODING_NAMES = {"16uc1": "16UC1", "mono16": "mono16", "32fc1": "32FC1"}

#: PointCloud2 fields in the order of ``depth.POINT_DTYPE``.
POINT_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("x", 0, PointField.FLOAT32),
    ("y", 4, PointField.FLOAT32),
    ("z", 8, PointField.FLOAT32),
    ("instance", 12, PointField.UINT32),
)


def depth_to_array(msg: Image) -> np.ndarray:
    """A 16UC1 / mono16 or 32FC1 sensor_msgs/Image as a 2-D uint16 (mm) or float32 (m) array, native order.

    Little-endian data comes back as a read-only view over the message's buffer (strided when
    rows are padded); big-endian data is byte-swapped into a new array.

    Raises:
        InputError: another encoding, zero width or height, a step shorter than a row, or a
            buffer shorter than ``step * height``.
    """
    encoding = msg.encoding.strip().lower()
    if encoding not in DEPTH_ENCODINGS:
        accepted = ", ".join(_ENCODING_NAMES[name] for name in DEPTH_ENCODINGS)
        raise InputError(f"unsupported depth encoding {quoted(msg.encoding)}; accepted: {accepted}")
    dtype, _unit = DEPTH_ENCODINGS[encoding]
    if msg.is_bigendian:
        dtype = dtype.newbyteorder(">")
    pixels = messages.pixel_rows(msg, dtype, 1, _ENCODING_NAMES[encoding], kind="depth image")
    if msg.is_bigendian:
        return pixels.astype(dtype.newbyteorder("="))
    return pixels


def depth_frame(msg: Image) -> DepthFrame:
    """A depth Image as plain data for the depth path; an unreadable one keeps why in ``refusal``.

    Why not raise: the frame still pairs by stamp, and the colour frame it pairs with is then
    answered in 2D with the reason (counted as depth refused), as for any other bad depth.
    """
    try:
        pixels, refusal = depth_to_array(msg), ""
    except InputError as error:
        pixels, refusal = None, str(error)
    return DepthFrame(messages.stamp_ns(msg.header), msg.header.frame_id, pixels, refusal)


def camera_info_data(msg: CameraInfo) -> CameraInfoData:
    """The fields of a CameraInfo the depth path reads, as plain data."""
    roi = msg.roi
    return CameraInfoData(
        frame_id=msg.header.frame_id,
        height=int(msg.height),
        width=int(msg.width),
        k=tuple(float(v) for v in msg.k),
        p=tuple(float(v) for v in msg.p),
        binning=(int(msg.binning_x), int(msg.binning_y)),
        roi=(int(roi.x_offset), int(roi.y_offset), int(roi.height), int(roi.width)),
    )


def detections_3d(
    detections: Detection2DArray, geometries: list[depth.InstanceGeometry], header: Header
) -> Detection3DArray:
    """One Detection3D per measured instance, with the id and hypotheses of its Detection2D.

    Instance k is ``detections.detections[k - 1]`` (the mask value is the 2D detection's index
    + 1). ``bbox`` is the instance's box (``bbox.center.position +- bbox.size / 2`` holds at
    least 98 % of its points on every axis), the orientation the identity (axes of the optical
    frame); each of ``results`` repeats a 2D hypothesis (class id and score) with the object's
    robust centroid (the per-axis median of its points) as its pose. All in metres, stamped
    ``header``; every message is built fresh (nothing shared with the 2D detections).
    """
    msg = Detection3DArray()
    msg.header = header
    for geometry in geometries:
        source = detections.detections[geometry.instance_id - 1]
        detection = Detection3D()
        detection.header = header
        detection.id = source.id
        detection.results = [_hypothesis_at(result.hypothesis, geometry.median) for result in source.results]
        detection.bbox = BoundingBox3D()
        position = detection.bbox.center.position
        position.x, position.y, position.z = geometry.centre
        detection.bbox.size.x, detection.bbox.size.y, detection.bbox.size.z = geometry.size
        msg.detections.append(detection)
    return msg


def _hypothesis_at(
    hypothesis: ObjectHypothesis, position: tuple[float, float, float]
) -> ObjectHypothesisWithPose:
    """A new hypothesis: ``hypothesis``'s class id and score, posed at ``position`` (no rotation)."""
    result = ObjectHypothesisWithPose()
    result.hypothesis = ObjectHypothesis(class_id=hypothesis.class_id, score=hypothesis.score)
    point = result.pose.pose.position
    point.x, point.y, point.z = position
    return result


def cloud_to_message(cloud: np.ndarray, header: Header) -> PointCloud2:
    """An unordered (height 1), dense, little-endian PointCloud2 over ``depth.POINT_DTYPE`` points."""
    if cloud.dtype != depth.POINT_DTYPE:
        raise InputError(f"expected points of {depth.POINT_DTYPE}, got {cloud.dtype}")
    msg = PointCloud2()
    msg.header = header
    msg.height, msg.width = 1, int(cloud.size)
    msg.fields = [
        PointField(name=name, offset=offset, datatype=kind, count=1) for name, offset, kind in POINT_FIELDS
    ]
    msg.is_bigendian = False
    msg.point_step = depth.POINT_DTYPE.itemsize
    msg.row_step = msg.point_step * msg.width
    msg.is_dense = True
    msg.data = np.ascontiguousarray(cloud).tobytes()
    return msg


def cloud_from_message(msg: PointCloud2) -> np.ndarray:
    """``depth.POINT_DTYPE`` points from a PointCloud2 laid out as ``cloud_to_message`` writes it.

    What a consumer does to recover each instance's points (``points[points["instance"] == k]``).

    Raises:
        InputError: other fields, byte order or point size.
    """
    fields = tuple((field.name, int(field.offset), int(field.datatype)) for field in msg.fields)
    if fields != POINT_FIELDS or msg.is_bigendian or msg.point_step != depth.POINT_DTYPE.itemsize:
        raise InputError(
            "point cloud is not x, y, z float32 + instance uint32, little-endian, 16-byte points"
        )
    count = int(msg.width) * int(msg.height)
    buffer = np.frombuffer(msg.data, dtype=np.uint8)
    if buffer.size < count * depth.POINT_DTYPE.itemsize:
        raise InputError(f"truncated point cloud: {buffer.size} bytes for {count} points")
    return buffer[: count * depth.POINT_DTYPE.itemsize].view(depth.POINT_DTYPE)
