"""Raw image subscriptions: the header read from the serialised message, the rest deserialised
only when the worker takes the frame; anything the reader does not know is deserialised whole.

Messages are serialised by rclpy itself (the bytes a raw subscription receives).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage, Image

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.ros import raw_frames

_frame_ids = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=300
)


def _image(sec: int, nanosec: int, frame_id: str, size: int = 12) -> Image:
    msg = Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(i % 256 for i in range(size)))
    msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id = sec, nanosec, frame_id
    return msg


@settings(max_examples=200, deadline=None)
@given(
    sec=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    nanosec=st.integers(min_value=0, max_value=2**32 - 1),
    frame_id=_frame_ids,
    compressed=st.booleans(),
)
def test_the_header_read_from_the_bytes_is_the_one_rclpy_deserialises(
    sec, nanosec, frame_id, compressed
) -> None:
    msg = _image(sec, nanosec, frame_id)
    if compressed:
        msg = CompressedImage(header=msg.header, format="jpeg", data=b"\xff\xd8\xff\xd9")
    raw = raw_frames.taken(serialize_message(msg), type(msg))
    assert isinstance(raw, raw_frames.RawImage), "plain CDR must be read, not deserialised whole"
    assert raw.header == msg.header
    assert raw.message() == msg


def test_a_frame_kept_raw_holds_its_serialised_size_and_nothing_else() -> None:
    msg = _image(5, 7, "cam", size=1 << 20)
    serialized = serialize_message(msg)
    raw = raw_frames.taken(serialized, Image)
    assert len(raw.data) == len(serialized) < (1 << 20) + 200


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_give_a_header_or_a_reason_never_a_crash(data: bytes) -> None:
    """Untrusted bytes (the reader must not trust a length field): a header or InputError."""
    try:
        header = raw_frames.read_header(data)
    except InputError:
        return
    assert len(header.frame_id.encode()) < len(data)


def test_a_frame_id_length_beyond_the_message_is_refused_without_allocating_it() -> None:
    data = b"\x00\x01\x00\x00" + struct.pack("<iII", 1, 2, 2**32 - 1) + b"cam\x00"
    with pytest.raises(InputError, match="frame_id of 4294967295 bytes in a 20-byte message"):
        raw_frames.read_header(data)


def test_another_encapsulation_is_deserialised_whole_rather_than_guessed_at() -> None:
    msg = _image(1, 2, "cam")
    serialized = bytearray(serialize_message(msg))
    assert raw_frames.RawImage.of(bytes(serialized), Image).header == msg.header
    serialized[1] = 0x07  # an XCDR2 identifier: this reader does not know its layout
    with pytest.raises(InputError, match=r"encapsulation other than plain CDR \(0007\)"):
        raw_frames.read_header(bytes(serialized))


def test_bytes_that_do_not_make_the_type_are_bad_input_when_the_worker_takes_them() -> None:
    serialized = serialize_message(_image(1, 2, "cam"))
    broken = raw_frames.RawImage.of(serialized[:30], Image)  # the header is whole, the rest is cut
    assert broken.header.frame_id == "cam"
    with pytest.raises(InputError, match="cannot deserialise the Image"):
        raw_frames.message_of(broken)
