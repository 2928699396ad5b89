"""Image messages taken from the middleware still serialised: the header read, the rest kept as bytes.

The image subscriptions are raw (``raw=True``): a camera at 30 Hz into a node that answers a
frame a second would otherwise have every Image deserialised (its pixels copied into a new
message) on the executor, only for all but the newest to be dropped. ``RawImage`` reads the
header, which the callback needs (stamp, frame_id for exemplar boxes and depth pairing), and
deserialises the whole message only when the worker takes the frame.

The header is read by hand because rclpy deserialises whole messages only. It is the first
field of sensor_msgs/Image and CompressedImage, so its CDR layout is fixed: a 4-byte
encapsulation header (representation 0x0000 big-endian or 0x0001 little-endian CDR, the
forms ROS 2's middlewares write), then int32 sec, uint32 nanosec, and frame_id as a uint32
length (with its NUL) and the bytes. Anything else is not guessed at: ``taken`` then
deserialises the whole message at once, as a subscription that is not raw would.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from builtin_interfaces.msg import Time
from rclpy.serialization import deserialize_message
from std_msgs.msg import Header

from tt_sam3_ros.core.errors import InputError

#: Encapsulation identifiers (the first two bytes) of plain CDR, by byte order.
_ENCODINGS = {b"\x00\x00": ">", b"\x00\x01": "<"}
#: Encapsulation, sec, nanosec, the frame_id length.
_FIXED = 4 + 4 + 4 + 4


@dataclasses.dataclass(frozen=True)
class RawImage:
    """A serialised Image or CompressedImage with its header read; ``message()`` deserialises it."""

    serialized: bytes
    msg_type: type
    header: Header

    @classmethod
    def of(cls, serialized: bytes, msg_type: type) -> RawImage:
        """Read the header of ``serialized`` (a ``msg_type`` as the middleware delivered it).

        Raises:
            InputError: not plain CDR, or shorter than its header says.
        """
        return cls(bytes(serialized), msg_type, read_header(serialized))

    @property
    def data(self) -> bytes:
        """The serialised message: its size is what keeping the frame holds."""
        return self.serialized

    def message(self) -> Any:
        """The whole message, deserialised now.

        Raises:
            InputError: the bytes past the header do not make a ``msg_type``.
        """
        try:
            return deserialize_message(self.serialized, self.msg_type)
        except Exception as error:  # rclpy's own error types differ by distribution
            raise InputError(f"cannot deserialise the {self.msg_type.__name__}: {error}") from error


def taken(serialized: bytes, msg_type: type) -> Any:
    """What an image callback keeps of a raw message: a ``RawImage``, or, when its header cannot
    be read here (another encapsulation), the message deserialised now."""
    try:
        return RawImage.of(serialized, msg_type)
    except InputError:
        return deserialize_message(serialized, msg_type)


def message_of(frame_msg: Any) -> Any:
    """The whole message of what ``taken`` kept (deserialised now for a ``RawImage``).

    Raises:
        InputError: a RawImage whose bytes do not make its type.
    """
    return frame_msg.message() if isinstance(frame_msg, RawImage) else frame_msg


def read_header(serialized: bytes) -> Header:
    """The std_msgs/Header at the start of a serialised message (see the module's docstring).

    Raises:
        InputError: not plain CDR, truncated, or a frame_id that is not NUL-terminated UTF-8.
    """
    view = memoryview(serialized)
    if len(view) < _FIXED:
        raise InputError(f"serialised message of {len(view)} bytes: too short for a header")
    order = _ENCODINGS.get(bytes(view[:2]))
    if order is None:
        raise InputError(
            f"serialised message in an encapsulation other than plain CDR ({bytes(view[:2]).hex()})"
        )
    sec, nanosec, length = struct.unpack_from(f"{order}iII", view, 4)
    if length < 1 or _FIXED + length > len(view):
        raise InputError(f"serialised header's frame_id of {length} bytes in a {len(view)}-byte message")
    text = bytes(view[_FIXED : _FIXED + length])
    if text[-1:] != b"\x00":
        raise InputError("serialised header's frame_id is not NUL-terminated")
    try:
        frame_id = text[:-1].decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"serialised header's frame_id is not UTF-8: {error}") from error
    return Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=frame_id)
