"""The camera of a CameraInfo: which matrix is the image's camera (P when set, K otherwise) and
what is refused with the fields named (another stereo camera's P, binning, a region of interest).
How the rectified image's P back-projects a known scene is in test_depth.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tt_sam3_ros.core.camera_model import Camera
from tt_sam3_ros.core.errors import InputError

HEIGHT, WIDTH = 480, 640
#: A raw (unrectified) camera's K, row-major.
RAW_K = [640.0, 0.0, 300.0, 0.0, 635.0, 250.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("p", [[], [0.0] * 12])
def test_without_p_k_is_used(p: list[float]) -> None:
    camera_k = Camera.from_calibration(RAW_K, p, (HEIGHT, WIDTH))
    np.testing.assert_array_equal(camera_k.matrix, np.reshape(RAW_K, (3, 3)))


@pytest.mark.parametrize(
    ("p", "reason"),
    [
        ([600.0, 0, 320, -36.0, 0, 600, 240, 0, 0, 0, 1, 0], "Tx -36"),
        ([600.0, 0, 320, 0, 0, 600, 240, 12.0, 0, 0, 1, 0], "Ty 12"),
        ([600.0, 0, 320, 0, 0, 600, 240, 0, 0, 0, 1, 0.5], "last column"),
        ([600.0, 0, 320, 0, 0, 600, 240, 0], "12 numbers"),
        ([0.0, 0, 320, 0, 0, 600, 240, 0, 0, 0, 1, 0], "P has focal lengths"),
        ([600.0, 0, np.inf, 0, 0, 600, 240, 0, 0, 0, 1, 0], "P holds NaN or inf"),
    ],
)
def test_a_p_that_is_not_the_left_cameras_is_refused_with_the_reason(p, reason) -> None:
    """A right stereo camera's P (Tx = -fx * baseline) projects from another origin: refused."""
    with pytest.raises(InputError, match=reason):
        Camera.from_calibration(RAW_K, p, (HEIGHT, WIDTH))


@pytest.mark.parametrize(
    ("binning", "roi", "reason"),
    [
        ((2, 2), (0, 0, 0, 0), "binning_x 2, binning_y 2"),
        ((1, 4), (0, 0, 0, 0), "binning_x 1, binning_y 4"),
        ((0, 0), (16, 8, 200, 300), "roi x_offset 16, y_offset 8, width 300, height 200"),
        ((0, 0), (0, 0, 200, 300), "roi x_offset 0, y_offset 0, width 300, height 200"),
    ],
)
def test_binning_or_a_region_of_interest_is_refused_naming_them(binning, roi, reason) -> None:
    with pytest.raises(InputError, match=reason):
        Camera.from_calibration(RAW_K, [], (HEIGHT, WIDTH), binning=binning, roi=roi)


@pytest.mark.parametrize(
    ("binning", "roi"),
    [((0, 0), (0, 0, 0, 0)), ((1, 1), (0, 0, 0, 0)), ((0, 0), (0, 0, HEIGHT, WIDTH))],
)
def test_no_binning_and_the_full_image_as_roi_are_accepted(binning, roi) -> None:
    Camera.from_calibration(RAW_K, [], (HEIGHT, WIDTH), binning=binning, roi=roi)


@given(
    scale=st.integers(1, 4),
    focal=st.floats(50.0, 2000.0),
    centre=st.tuples(st.floats(0.0, 639.0), st.floats(0.0, 479.0)),
    pixel=st.tuples(st.integers(0, 159), st.integers(0, 119)),
)
def test_a_scaled_camera_keeps_each_pixel_centre_on_its_ray(scale, focal, centre, pixel) -> None:
    """A depth image of twice (or 1/2) the colour image's size: the pixel at the same place on the
    finer grid, u' = (u + 0.5) * s - 0.5, looks along the same ray."""
    small = Camera.from_k([focal, 0, centre[0] / 4, 0, focal, centre[1] / 4, 0, 0, 1], (120, 160))
    large = small.scaled_to((120 * scale, 160 * scale))
    u, v = pixel
    ray = small.inverse.astype(np.float64) @ (u, v, 1.0)
    fine = ((u + 0.5) * scale - 0.5, (v + 0.5) * scale - 0.5, 1.0)
    np.testing.assert_allclose(large.inverse.astype(np.float64) @ fine, ray, rtol=1e-5, atol=1e-6)
    assert small.scaled_to((120, 160)) is small


def test_a_size_that_is_no_integer_scale_is_refused_naming_both() -> None:
    camera = Camera.from_k(RAW_K, (HEIGHT, WIDTH))
    with pytest.raises(InputError, match="camera_info is 640x480 and image 600x480"):
        camera.scaled_to((480, 600))
