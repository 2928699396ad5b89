"""Conversions between ROS 2 messages and the arrays the segmenter works on.

Pure functions over message types: nothing here creates a node, so the unit tests
build messages by hand and check every byte. cv_bridge is deliberately not used:
the only cv_bridge on PyPI is a broken ROS 1 repack that still imports, and the
package must run where no ROS 2 cv_bridge exists (docs/design/facts.md, Conventions).

Images in: sensor_msgs/Image (rgb8, bgr8, rgba8, bgra8, mono8) and
sensor_msgs/CompressedImage (JPEG, PNG) become uint8 (height, width, 3) RGB arrays.
An rgb8 message comes back as a numpy view over the message's own buffer (no copy),
row padding included; the other encodings need one pass to reorder or widen channels.

Results out: Detection2DArray, the mono8 instance mask, LabelInfo and the rgb8 overlay,
every one stamped with the input image's header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import cv2
import numpy as np
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header
from vision_msgs.msg import (
    BoundingBox2D,
    Detection2D,
    Detection2DArray,
    LabelInfo,
    ObjectHypothesisWithPose,
    VisionClass,
)

from tt_sam3_ros.core import preprocess
from tt_sam3_ros.core.errors import InputError, quoted
from tt_sam3_ros.core.exemplars import MAX_BOXES, Exemplar
from tt_sam3_ros.core.results import SegmentationResult

#: Least score of a prompt box that marks it positive ("more like this"); lower is negative.
POSITIVE_SCORE = 0.5

#: Encodings accepted on the raw image topic, with their channel counts.
SUPPORTED_ENCODINGS: dict[str, int] = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}

#: Encodings users commonly send that this node cannot take, with why.
_REJECTED_WHY: dict[str, str] = {
    "mono16": "16-bit depth or IR images carry no colour for SAM 3",
    "16uc1": "16-bit depth images carry no colour for SAM 3",
    "32fc1": "float depth images carry no colour for SAM 3",
}


def image_to_rgb(msg: Image) -> np.ndarray:
    """Decode a sensor_msgs/Image into uint8 (height, width, 3) RGB.

    rgb8 returns a read-only view over ``msg.data`` (strided when rows are padded);
    bgr8, rgba8, bgra8 and mono8 return a new contiguous array. The message must stay
    alive as long as the view is used; the view keeps a reference to its buffer.

    Raises:
        ValueError: an unsupported encoding, zero width or height, a step shorter than
            a row, or a data buffer shorter than ``step * height``. The message says which.
    """
    encoding = msg.encoding.strip().lower()
    channels = SUPPORTED_ENCODINGS.get(encoding)
    if channels is None:
        raise InputError(_unsupported_encoding_reason(msg.encoding))
    pixels = pixel_rows(msg, np.dtype(np.uint8), channels, encoding)
    return _to_rgb(pixels, encoding)


#: OpenCV's conversion for each encoding that needs one: a single vectorised pass,
#: 0.5 ms for a padded 1080p bgr8 frame here, where numpy's strided reversal took 7 ms.
_TO_RGB_CODES: dict[str, int] = {
    "bgr8": cv2.COLOR_BGR2RGB,
    "rgba8": cv2.COLOR_RGBA2RGB,
    "bgra8": cv2.COLOR_BGRA2RGB,
    "mono8": cv2.COLOR_GRAY2RGB,
}
#: The same conversions in numpy, for the one frame size OpenCV 4.5.4 refuses (1x1).
_ONE_PIXEL_TO_RGB: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "bgr8": lambda p: p[..., ::-1],
    "rgba8": lambda p: p[..., :3],
    "bgra8": lambda p: p[..., 2::-1],
    "mono8": lambda p: np.repeat(p, 3, axis=2),
}


def pixel_rows(msg: Image, dtype: np.dtype, channels: int, what: str, kind: str = "image") -> np.ndarray:
    """A read-only (height, width[, channels]) view of ``msg.data`` honouring its row step.

    One copy of the size, step and truncation checks for every Image this package reads
    (colour and depth): the step may pad rows, and the last row needs only its pixels, not its
    padding (publishers differ on this). ``what`` names the encoding and ``kind`` the image
    ("image", "depth image") in the reasons.

    Raises:
        InputError: zero width or height, a step shorter than a row, or too little data.
    """
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height == 0 or width == 0:
        raise InputError(f"empty {kind}: {width}x{height} pixels")
    pixel_bytes = dtype.itemsize * channels
    row_bytes = width * pixel_bytes
    if step < row_bytes:
        raise InputError(f"step {step} is shorter than one row of {width} {what} pixels ({row_bytes} bytes)")
    buffer = np.frombuffer(msg.data, dtype=np.uint8)
    needed = step * (height - 1) + row_bytes
    if buffer.size < needed:
        raise InputError(
            f"truncated {kind}: {buffer.size} bytes of data for {width}x{height} {what} "
            f"with step {step} (needs {needed})"
        )
    shape = (height, width, channels) if channels > 1 else (height, width)
    strides = (step, pixel_bytes, dtype.itemsize) if channels > 1 else (step, pixel_bytes)
    pixels = np.ndarray(shape, dtype=dtype, buffer=buffer, strides=strides)
    pixels.flags.writeable = False
    return pixels


def _to_rgb(pixels: np.ndarray, encoding: str) -> np.ndarray:
    """Reorder or widen (height, width, channels) pixels to RGB; rgb8 stays a view."""
    if encoding == "rgb8":
        return pixels
    if pixels.shape[:2] == (1, 1):
        # OpenCV 4.5.4 (Ubuntu 22.04's) cannot wrap a one-pixel array ("_step >= minstep").
        return np.ascontiguousarray(_ONE_PIXEL_TO_RGB[encoding](pixels.reshape(1, 1, -1)))
    return cv2.cvtColor(pixels, _TO_RGB_CODES[encoding])


def _unsupported_encoding_reason(encoding: str) -> str:
    """Say why ``encoding`` is refused and what is accepted instead."""
    accepted = ", ".join(SUPPORTED_ENCODINGS)
    why = _REJECTED_WHY.get(encoding.strip().lower())
    detail = f" ({why})" if why else ""
    return f"unsupported image encoding {quoted(encoding)}{detail}; accepted: {accepted}"


def compressed_to_rgb(msg: CompressedImage, max_side: int = preprocess.DEFAULT_MAX_IMAGE_SIDE) -> np.ndarray:
    """Decode a JPEG or PNG sensor_msgs/CompressedImage into uint8 (height, width, 3) RGB.

    The payload's own magic bytes decide the codec: the ``format`` field is free text
    ("jpeg", "bgr8; jpeg compressed bgr8", ...) and is only quoted in errors.
    compressedDepth payloads (16-bit PNG behind a 12-byte header) are refused.
    The size the header declares is checked against ``max_side`` before decoding: a
    1 MB PNG can declare 20000x20000 pixels, 1.2 GB once decoded.

    Raises:
        InputError: a payload that is neither JPEG nor PNG, one whose header declares a
            side outside 2..``max_side``, a JPEG cut short (no end-of-image marker), or one
            OpenCV cannot decode.
    """
    payload = np.frombuffer(msg.data, dtype=np.uint8)
    head = payload[:8].tobytes()
    if "compresseddepth" in msg.format.lower():
        raise InputError(f"compressedDepth images carry no colour for SAM 3 (format {quoted(msg.format)})")
    if not (head.startswith(preprocess.JPEG_MAGIC) or head.startswith(preprocess.PNG_MAGIC)):
        raise InputError(
            f"compressed image is neither JPEG nor PNG (format {quoted(msg.format)}, {payload.size} bytes)"
        )
    what = f"compressed image ({quoted(msg.format)}, {payload.size} bytes)"
    try:
        width, height = preprocess.declared_size(memoryview(payload))
    except InputError as error:
        raise InputError(f"corrupt {what}: {error}") from None
    preprocess.check_declared_size((width, height), what, max_side)
    if head.startswith(preprocess.JPEG_MAGIC) and not preprocess.jpeg_is_complete(payload):
        raise InputError(f"corrupt {what}: the JPEG ends before its end-of-image marker (cut short?)")
    bgr = cv2.imdecode(payload, cv2.IMREAD_COLOR)
    if bgr is None or bgr.size == 0:
        raise InputError(f"corrupt {what}: OpenCV could not decode it")
    if sorted(bgr.shape[:2]) != sorted((height, width)):  # sorted: EXIF may turn a JPEG a quarter
        raise InputError(f"corrupt {what}: its header says {width}x{height}, its pixels are another size")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def decode_image(msg: Image | CompressedImage, max_side: int) -> np.ndarray:
    """Pixels of a frame as uint8 RGB; a compressed one is held to ``max_side`` from its header,
    before decoding.

    Raises:
        InputError: what ``image_to_rgb`` or ``compressed_to_rgb`` refuses.
    """
    if isinstance(msg, CompressedImage):
        return compressed_to_rgb(msg, max_side)
    return image_to_rgb(msg)


def stamp_ns(header: Header) -> int:
    """A header's stamp in nanoseconds (0: unset)."""
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def rgb_to_image(rgb: np.ndarray, header: Header) -> Image:
    """Wrap uint8 (height, width, 3) RGB pixels as an rgb8 sensor_msgs/Image with ``header``."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise InputError(f"expected uint8 (height, width, 3) RGB, got {rgb.dtype} {rgb.shape}")
    return _packed_image(np.ascontiguousarray(rgb), "rgb8", header)


def instance_mask_to_image(labels: np.ndarray, header: Header) -> Image:
    """Wrap a uint8 (height, width) instance label image as a mono8 sensor_msgs/Image.

    Pixel value 0 is background and k is the k-th detection of the same frame's
    Detection2DArray (1-based), whether its ``id`` is a track id or its position.
    """
    if labels.dtype != np.uint8 or labels.ndim != 2:
        raise InputError(f"expected uint8 (height, width) labels, got {labels.dtype} {labels.shape}")
    return _packed_image(np.ascontiguousarray(labels), "mono8", header)


def _packed_image(pixels: np.ndarray, encoding: str, header: Header) -> Image:
    """An Image message over contiguous ``pixels``, rows unpadded."""
    msg = Image()
    msg.header = header
    msg.height, msg.width = int(pixels.shape[0]), int(pixels.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = msg.width * (pixels.shape[2] if pixels.ndim == 3 else 1)
    msg.data = pixels.tobytes()
    return msg


def result_to_detections(
    result: SegmentationResult, header: Header, class_ids: Mapping[str, int] | None = None
) -> Detection2DArray:
    """One Detection2D per labelled instance, in mask-id order, all stamped with ``header``.

    Detection k (1-based) is the instance whose pixels have value k in the mask. Its ``id`` is
    the instance's track id when it has one (kept across frames), else ``str(k)``;
    ``results[0].hypothesis`` holds the class id as a decimal string (``class_ids[prompt]``,
    default the prompt's index in ``result.prompts``), the key LabelInfo maps to the prompt
    text, and the instance score;
    the box is in source-image pixels (centre and size). Instances beyond the 255 a mono8
    mask can hold are left out here too, so every detection has its pixels in the mask.
    An empty result gives an empty array: "nothing found" is itself an answer.
    """
    msg = Detection2DArray()
    msg.header = header
    for detection_id, instance in zip(result.detection_ids(), result.instances, strict=False):
        x1, y1, x2, y2 = instance.box
        detection = Detection2D()
        detection.header = header
        detection.id = str(detection_id)
        hypothesis = ObjectHypothesisWithPose()
        class_id = instance.prompt_index if class_ids is None else class_ids[instance.prompt]
        hypothesis.hypothesis.class_id = str(class_id)
        hypothesis.hypothesis.score = float(instance.score)
        detection.results.append(hypothesis)
        detection.bbox = BoundingBox2D()
        detection.bbox.center.position.x = (x1 + x2) / 2.0
        detection.bbox.center.position.y = (y1 + y2) / 2.0
        detection.bbox.size_x = float(x2 - x1)
        detection.bbox.size_y = float(y2 - y1)
        msg.detections.append(detection)
    return msg


def label_info(
    prompts: Sequence[str], threshold: float, header: Header, class_ids: Mapping[str, int] | None = None
) -> LabelInfo:
    """LabelInfo mapping each prompt's class id (``class_ids``, default its index) to its text.

    The same ids, as decimal strings, are the detections' ``class_id``: a consumer looks a
    detection's class up here, as vision_msgs intends (integer class ids, names in the map).
    """
    msg = LabelInfo()
    msg.header = header
    msg.threshold = float(threshold)
    for index, prompt in enumerate(prompts):
        class_id = index if class_ids is None else class_ids[prompt]
        msg.class_map.append(VisionClass(class_id=class_id, class_name=prompt))
    return msg


def prompt_boxes(msg: Detection2DArray, class_ids: Mapping[str, int]) -> list[Exemplar]:
    """Exemplar boxes from a Detection2DArray on ``prompt_boxes``, in the image's pixels.

    Each detection's bbox (centre and size) is one box; ``results[0].hypothesis.class_id`` names
    the prompt it refines, by its text or by its class id (the decimal string the node's own
    detections carry, so a detection can be sent back as an exemplar), and is empty (or there is
    no result) for the box-only concept; its score marks it positive (>= 0.5, or no result) or
    negative. The boxes are checked by ``exemplars.check_exemplars`` when used.

    Raises:
        InputError: too many detections, or a class_id that is neither a prompt nor its id.
    """
    if len(msg.detections) > MAX_BOXES:
        raise InputError(f"too many exemplar boxes: {len(msg.detections)} given, at most {MAX_BOXES} allowed")
    by_id = {str(class_id): prompt for prompt, class_id in class_ids.items()}
    boxes = []
    for index, detection in enumerate(msg.detections):
        name, positive = "", True
        if detection.results:
            hypothesis = detection.results[0].hypothesis
            name = hypothesis.class_id.strip()
            positive = hypothesis.score >= POSITIVE_SCORE  # NaN counts as negative too
        if name and name not in class_ids:
            if name not in by_id:
                raise InputError(
                    f"box {index}: class_id {quoted(name)} is neither a prompt in force nor a class id "
                    "of /sam3/label_info (empty: a box-only concept)"
                )
            name = by_id[name]
        centre, width, height = detection.bbox.center.position, detection.bbox.size_x, detection.bbox.size_y
        corners = (centre.x - width / 2, centre.y - height / 2, centre.x + width / 2, centre.y + height / 2)
        boxes.append(Exemplar(corners, positive=positive, prompt=name or None))
    return boxes
