"""Property-based tests: untrusted images in (messages, compressed payloads, files and bytes).

For any input, the host pipeline either returns pixels that satisfy the documented contract
(uint8 RGB, the declared size, the same pixels) or raises InputError (a ValueError) with a
reason; never another exception, and never an allocation far beyond the input's declared size.
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from sensor_msgs.msg import CompressedImage, Image

from tt_sam3_ros.core.errors import InputError
from tt_sam3_ros.core.preprocess import MIN_IMAGE_SIDE, declared_size, load_image
from tt_sam3_ros.ros.messages import SUPPORTED_ENCODINGS, compressed_to_rgb, image_to_rgb

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from image_bombs import traced_peak  # noqa: E402

PROPERTY = settings(max_examples=100)
#: Bytes of bookkeeping (headers, Python objects) allowed on top of the pixels an input declares.
ALLOCATION_SLACK = 1 << 20

REFUSED_ENCODINGS = ["mono16", "16UC1", "32FC1", "bayer_rggb8", "yuv422", "rgb16", "", "8UC3", "jpeg"]


def refused_or(call: Callable[[], np.ndarray]) -> np.ndarray | None:
    """The call's result, or None when it raised InputError with a reason (any other error fails)."""
    try:
        return call()
    except InputError as error:
        assert_readable(error)
        return None


def assert_readable(error: InputError) -> None:
    """A reason someone can read in a log line or /diagnostics: present, one line, bounded."""
    text = str(error)
    assert text.strip(), "an InputError must say why"
    assert "\n" not in text and "\x1b" not in text, "untrusted text must not forge log lines"
    assert len(text) < 400, "a reason must stay readable whatever the message carried"


# --- sensor_msgs/Image -------------------------------------------------------------------------


def _stored_bytes(rgb: np.ndarray, alpha: np.ndarray, encoding: str) -> np.ndarray:
    """(height, width, channels) bytes as a publisher of ``encoding`` lays them out."""
    name = encoding.strip().lower()
    if name == "rgb8":
        return rgb
    if name == "bgr8":
        return rgb[:, :, ::-1]
    if name == "rgba8":
        return np.dstack([rgb, alpha])
    if name == "bgra8":
        return np.dstack([rgb[:, :, ::-1], alpha])
    if name == "mono8":
        return rgb[:, :, :1]
    return rgb  # a refused encoding: any bytes


@st.composite
def raw_images(draw: st.DrawFn) -> tuple[Image, np.ndarray | None]:
    """An Image message (any encoding, size, padding, truncation) and the RGB it must decode to.

    The expected RGB is None when the documented rules refuse the message: an unsupported
    encoding, a zero side, a step shorter than a row, or fewer than step * (h - 1) + row bytes.
    """
    encoding = draw(
        st.sampled_from(list(SUPPORTED_ENCODINGS))
        | st.sampled_from(list(SUPPORTED_ENCODINGS))
        | st.sampled_from(["RGB8", " bgr8 ", "Mono8", "BGRA8"])
        | st.sampled_from(REFUSED_ENCODINGS)
        | st.text(max_size=12)
    )
    height, width = draw(st.integers(0, 24)), draw(st.integers(0, 24))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rgb = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    if encoding.strip().lower() == "mono8":
        rgb = np.repeat(rgb[:, :, :1], 3, axis=2)
    alpha = rng.integers(0, 256, (height, width, 1), dtype=np.uint8)
    stored = _stored_bytes(rgb, alpha, encoding)
    channels = stored.shape[2]
    row_bytes = width * channels
    padding = draw(st.integers(0, 9))
    step = draw(st.sampled_from([row_bytes + padding, max(row_bytes - 1, 0), row_bytes]))
    data = np.zeros((height, max(step, row_bytes)), dtype=np.uint8)
    data[:, :row_bytes] = stored.reshape(height, row_bytes)
    payload = data[:, :step].tobytes() if step >= row_bytes else stored.tobytes()
    cut = draw(st.sampled_from([0, 0, 0, 1, padding, padding + 1, step, -3]))
    payload = payload[: len(payload) - cut] if cut > 0 else payload + bytes(-cut)
    msg = Image(height=height, width=width, encoding=encoding, step=step)
    msg.data = payload
    valid = (
        encoding.strip().lower() in SUPPORTED_ENCODINGS
        and height > 0
        and width > 0
        and step >= row_bytes
        and len(payload) >= step * (height - 1) + row_bytes
    )
    return msg, (rgb if valid else None)


@PROPERTY
@given(raw_images())
@example((Image(height=1, width=1, encoding="rgb8", step=3, data=b"abc"), np.uint8([[[97, 98, 99]]])))
@example((Image(height=1, width=1, encoding="x\n[FATAL] forged\x1b[2J" * 5000, step=3, data=b"abc"), None))
def test_image_messages_decode_to_their_pixels_or_are_refused(case: tuple[Image, np.ndarray | None]) -> None:
    msg, expected = case
    rgb = refused_or(lambda: image_to_rgb(msg))
    event("decoded" if rgb is not None else "refused")
    if expected is None:
        assert rgb is None, "a message the rules refuse was accepted"
        return
    assert rgb is not None, "a valid message was refused"
    assert rgb.dtype == np.uint8 and rgb.shape == (msg.height, msg.width, 3)
    np.testing.assert_array_equal(rgb, expected)


@PROPERTY
@given(
    height=st.integers(0, 2**32 - 1),
    width=st.integers(0, 2**32 - 1),
    step=st.integers(0, 2**32 - 1),
    encoding=st.sampled_from(list(SUPPORTED_ENCODINGS)),
    size=st.integers(0, 4096),
)
def test_huge_declared_sizes_with_little_data_allocate_nothing(
    height: int, width: int, step: int, encoding: str, size: int
) -> None:
    msg = Image(height=height, width=width, encoding=encoding, step=step)
    msg.data = bytes(size)
    outcome, peak = traced_peak(lambda: image_to_rgb(msg), InputError)
    if not isinstance(outcome, InputError):  # it fits in the data: at most 3 bytes per data byte
        assert outcome.shape == (height, width, 3)
    assert peak <= 3 * size + ALLOCATION_SLACK


# --- sensor_msgs/CompressedImage ----------------------------------------------------------------


def _encoded(extension: str, height: int, width: int, seed: int) -> bytes:
    """An OpenCV encoding of random pixels; the seed also picks the layout the file stores.

    PNG: grey, grey+alpha-less BGR or BGRA, 8 or 16 bits. JPEG: grey or colour, baseline or
    progressive (SOF2 instead of SOF0).
    """
    rng = np.random.default_rng(seed)
    channels = [1, 3, 3, 4][seed % 4] if extension == ".png" else [1, 3][seed % 2]
    if extension == ".tiff" and (height, width) == (1, 1):
        channels = 1  # OpenCV 4.5.4's TIFF writer fails on a one-pixel colour image
    deep = extension == ".png" and seed % 3 == 0
    pixels = rng.integers(
        0, 65536 if deep else 256, (height, width, channels), dtype=np.uint16 if deep else np.uint8
    )
    params = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if extension == ".jpg" and seed % 5 == 0 else []
    ok, encoded = cv2.imencode(extension, pixels, params)
    assert ok
    return encoded.tobytes()


def _with_declared_size(data: bytes, width: int, height: int) -> bytes:
    """``data`` (PNG or JPEG from OpenCV) with its header rewritten to declare width x height."""
    patched = bytearray(data)
    if data.startswith(b"\x89PNG"):
        patched[16:24] = struct.pack(">II", width, height)
        patched[29:33] = struct.pack(">I", zlib.crc32(bytes(patched[12:29])))  # a valid IHDR: libpng reads on
    else:
        baseline = patched.find(b"\xff\xc0")
        sof = baseline if baseline >= 0 else patched.index(b"\xff\xc2")  # else progressive
        patched[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(patched)


@st.composite
def damaged(draw: st.DrawFn, data: bytes, kind: str) -> bytes:
    """``data`` cut short at any byte, or with one byte changed anywhere."""
    position = draw(st.integers(0, len(data) - 1))
    if kind == "truncated":
        return data[:position]
    return data[:position] + bytes([data[position] ^ draw(st.integers(1, 255))]) + data[position + 1 :]


@st.composite
def compressed_payloads(draw: st.DrawFn) -> bytes:
    """Real PNG/JPEG encodings, cut short, bit-flipped, re-declared, or random bytes."""
    kind = draw(st.sampled_from(["valid", "truncated", "flipped", "declared", "random", "magic+random"]))
    if kind == "random":
        return draw(st.binary(max_size=256))
    if kind == "magic+random":
        return draw(st.sampled_from([b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n"])) + draw(st.binary(max_size=256))
    extension = draw(st.sampled_from([".png", ".jpg"]))
    data = _encoded(extension, draw(st.integers(1, 40)), draw(st.integers(1, 40)), draw(st.integers(0, 99)))
    if kind in ("truncated", "flipped"):
        return draw(damaged(data, kind))
    if kind == "declared":
        side = st.sampled_from([0, 1, 2, 17, 4096, 4097, 20000, 65535]) | st.integers(0, 65535)
        return _with_declared_size(data, draw(side), draw(side))
    return data


def _reason_kind(error: InputError) -> str:
    """The kind of a refusal, for hypothesis' statistics (the text itself varies)."""
    text = str(error)
    kinds = ("neither JPEG nor PNG", "compressedDepth", "declares", "at least", "header", "could not decode")
    return next((kind for kind in kinds if kind in text), "other")


def _declared_or_none(data: bytes) -> tuple[int, int] | None:
    try:
        return declared_size(data)
    except InputError:
        return None


@PROPERTY
@given(
    compressed_payloads(),
    st.sampled_from(["jpeg", "png", "bgr8; jpeg compressed bgr8", "", "x" * 300, "png\n[FATAL] forged"]),
)
@example(b"\xff\xd8\xff\xe0" + bytes(200), "jpeg")  # a JPEG header and nothing after it
@example(_with_declared_size(_encoded(".png", 8, 8, 0), 20000, 20000), "png")  # the bomb's header
def test_compressed_payloads_decode_within_their_declared_size_or_are_refused(data: bytes, fmt: str) -> None:
    msg = CompressedImage(format=fmt)
    msg.data = data
    declared = _declared_or_none(data)
    # What the header may cost: its pixels, if its size is within the limit; else nothing.
    allowed = 3 * 3 * declared[0] * declared[1] if declared and max(declared) <= 4096 else 0
    outcome, peak = traced_peak(lambda: compressed_to_rgb(msg, max_side=4096), InputError)
    assert peak <= allowed + 4 * len(data) + ALLOCATION_SLACK
    if isinstance(outcome, InputError):
        event(f"refused: {_reason_kind(outcome)}")
        assert_readable(outcome)
        return
    event("decoded")
    assert declared is not None, "decoded a payload whose header declares no size"
    width, height = declared
    assert outcome.dtype == np.uint8 and outcome.ndim == 3 and outcome.shape[2] == 3
    assert sorted(outcome.shape[:2]) == sorted((height, width))
    assert min(outcome.shape[:2]) >= MIN_IMAGE_SIDE and max(outcome.shape[:2]) <= 4096


@settings(max_examples=40)
@given(st.sampled_from([".png", ".jpg"]), st.integers(2, 300), st.integers(2, 300), st.integers(0, 99))
def test_declared_size_is_the_size_opencv_decodes(extension: str, height: int, width: int, seed: int) -> None:
    data = _encoded(extension, height, width, seed)
    assert declared_size(data) == (width, height)
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2] == (height, width)


# --- files, bytes and PIL images given to the Python API and the CLI ---------------------------------


@st.composite
def encoded_files(draw: st.DrawFn) -> bytes:
    """Payloads in the formats PIL reads (PNG, JPEG, BMP, GIF, TIFF, WebP) and broken ones."""
    extension = draw(st.sampled_from([".png", ".jpg", ".bmp", ".tiff", ".webp"]))
    kind = draw(st.sampled_from(["valid", "truncated", "flipped", "random"]))
    if kind == "random":
        return draw(st.binary(max_size=300))
    data = _encoded(extension, draw(st.integers(1, 30)), draw(st.integers(1, 30)), draw(st.integers(0, 99)))
    if kind in ("truncated", "flipped"):
        return draw(damaged(data, kind))
    return data


@PROPERTY
@pytest.mark.filterwarnings("ignore::UserWarning:PIL")  # PIL warns about the corrupt TIFFs it reads
@given(encoded_files(), st.sampled_from([2, 16, 4096]))
def test_load_image_bytes_give_rgb_within_the_limit_or_are_refused(data: bytes, max_side: int) -> None:
    outcome, peak = traced_peak(lambda: load_image(data, max_side=max_side), InputError)
    if isinstance(outcome, InputError):
        event("refused")
        assert str(outcome).strip()  # it may quote a file name, which the caller chose
        return
    event("decoded")
    height, width = outcome.shape[:2]
    assert outcome.dtype == np.uint8 and outcome.shape == (height, width, 3)
    assert min(height, width) >= MIN_IMAGE_SIDE and max(height, width) <= max_side
    assert peak <= 8 * height * width * 3 + 4 * len(data) + ALLOCATION_SLACK


@pytest.mark.parametrize("declared", [(20000, 20000), (0, 10), (10, 1), (70000, 2)])
def test_load_image_refuses_bad_declared_sizes_from_files(tmp_path, declared: tuple[int, int]) -> None:
    path = tmp_path / "declared.png"
    path.write_bytes(_with_declared_size(_encoded(".png", 8, 8, 0), *declared))
    with pytest.raises(InputError, match=f"{declared[0]}x{declared[1]}"):
        load_image(path)
