"""Small files that declare huge pictures are refused from their header, before any pixel is decoded.

A 1.2 MB PNG of a 20000x20000 single colour would decode to a 1.2 GB bitmap without a size
check from the header. The peak memory of a fresh process is measured around the refusals (every
entry point: CompressedImage messages, files and bytes given to the Python API, the CLI).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

SUPPORT = Path(__file__).resolve().parents[1] / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

from image_bombs import jpeg_declaring, png_bomb, traced_peak  # noqa: E402

BOMB_SIDE = 20000
#: Allowed growth of the peak RSS across all the refusals; decoding one bomb costs 1.2 GB.
PEAK_GROWTH_LIMIT = 100 * 1024 * 1024


def test_the_generated_png_is_a_real_picture_of_its_declared_size() -> None:
    # The generator itself, on a size that is cheap to decode.
    small = png_bomb(300, rows_per_block=7)
    pixels = cv2.imdecode(np.frombuffer(small, np.uint8), cv2.IMREAD_COLOR)
    assert pixels.shape == (300, 300, 3)
    assert np.all(pixels == (90, 60, 30))  # BGR of the colour


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bombs")
    png, jpeg = folder / "bomb.png", folder / "bomb.jpg"
    png.write_bytes(png_bomb(BOMB_SIDE))
    jpeg.write_bytes(jpeg_declaring(BOMB_SIDE, BOMB_SIDE))
    return {"png": png, "jpeg": jpeg}


_MEASURE = """
import json, resource, sys
from sensor_msgs.msg import CompressedImage
from tt_sam3_ros.ros import messages
from tt_sam3_ros.core import preprocess
from tt_sam3_ros.core.errors import InputError

def peak_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux

calls = []
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    msg = CompressedImage(format=path.rsplit(".", 1)[1])
    msg.data = data
    calls += [lambda msg=msg: messages.compressed_to_rgb(msg),
              lambda path=path: preprocess.load_image(path),
              lambda data=data: preprocess.load_image(data)]
before = peak_bytes()
reasons = []
for call in calls:
    try:
        call()
        reasons.append("accepted")
    except InputError as error:
        reasons.append(str(error))
    except Exception as error:  # any other type is a failure the test reports
        reasons.append(f"{type(error).__name__}: {error}")
print(json.dumps({"before": before, "after": peak_bytes(), "reasons": reasons}))
"""


def test_bombs_are_refused_from_the_header_with_peak_memory_flat(bombs: dict[str, Path]) -> None:
    assert bombs["png"].stat().st_size < 2_000_000  # about 1.2 MB on disk, 1.2 GB decoded
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(bombs["png"]), str(bombs["jpeg"])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.splitlines()[-1])
    assert len(measured["reasons"]) == 6
    growth = measured["after"] - measured["before"]
    print(f"peak RSS {measured['before'] / 2**20:.0f} MB before the refusals, {growth / 2**20:.1f} MB growth")
    for reason in measured["reasons"]:
        assert f"declares {BOMB_SIDE}x{BOMB_SIDE} pixels" in reason and "4096" in reason, reason
    assert growth < PEAK_GROWTH_LIMIT, f"peak RSS grew {growth / 2**20:.0f} MB while refusing"


def test_cli_refuses_a_bomb_with_the_reason_and_no_traceback(bombs: dict[str, Path], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tt_sam3_ros.cli.main", "segment", str(bombs["png"]), "--prompt", "car",
         "--model", "tiny-random", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"declares {BOMB_SIDE}x{BOMB_SIDE} pixels" in done.stderr and "Traceback" not in done.stderr


def test_a_larger_limit_lets_the_same_header_through() -> None:
    # The check is the configured max side, not a fixed cap: 5000x40 passes at 8192 and decodes.
    from tt_sam3_ros.core.preprocess import load_image

    _, encoded = cv2.imencode(".png", np.zeros((40, 5000, 3), np.uint8))
    with pytest.raises(ValueError, match="declares 5000x40 pixels; the largest side allowed is 4096"):
        load_image(encoded.tobytes())
    assert load_image(encoded.tobytes(), max_side=8192).shape == (40, 5000, 3)


def test_a_lazily_opened_pil_image_is_refused_before_it_decodes(tmp_path: Path) -> None:
    # 9000x9000 stays under PIL's own bomb limit, so PIL would decode it (243 MB) when asked.
    from PIL import Image

    from tt_sam3_ros.core.preprocess import load_image

    path = tmp_path / "big.png"
    path.write_bytes(png_bomb(9000))
    with Image.open(path) as picture:
        refusal, peak = traced_peak(lambda: load_image(picture))
    assert "declares 9000x9000 pixels; the largest side allowed is 4096" in str(refusal)
    assert peak < 1_000_000


@pytest.mark.parametrize(("fmt", "options"), [("GIF", {}), ("TIFF", {"compression": "tiff_deflate"})])
def test_other_formats_pil_reads_are_refused_from_their_header(fmt: str, options: dict) -> None:
    # Formats beyond PNG/JPEG reach load_image as bytes too; PIL reads their size lazily.
    import io

    from PIL import Image

    from tt_sam3_ros.core.preprocess import load_image

    buffer = io.BytesIO()
    Image.new("1", (9000, 9000)).save(buffer, fmt, **options)  # 10 MB in memory, small on disk
    data = buffer.getvalue()
    assert len(data) < 2_000_000
    refusal, peak = traced_peak(lambda: load_image(data))
    assert "declares 9000x9000 pixels" in str(refusal)
    assert peak < 4 * len(data) + 1_000_000
