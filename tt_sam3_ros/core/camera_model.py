"""The pinhole camera of one pixel grid, from a sensor_msgs/CameraInfo's numbers.

Pure numpy, no ROS: the depth path's camera model (``depth.py`` back-projects through it). Which
matrix is the camera of the image's pixels follows image_geometry's rule (P[:3, :3] when P is
set, K otherwise); binning and regions of interest are refused (the depth path neither crops
nor bins), and a camera scales to a grid that is an integer multiple of its own. Distortion is
not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tt_sam3_ros.core.errors import InputError


@dataclass(frozen=True)
class Camera:
    """A pinhole camera for one pixel grid: its 3x3 matrix K and the grid's (height, width)."""

    matrix: np.ndarray
    size: tuple[int, int]

    @classmethod
    def from_calibration(
        cls,
        k: Sequence[float] | np.ndarray,
        p: Sequence[float] | np.ndarray,
        size: tuple[int, int],
        binning: tuple[int, int] = (0, 0),
        roi: tuple[int, int, int, int] = (0, 0, 0, 0),
    ) -> Camera:
        """The camera of a CameraInfo's pixel grid ``size`` = (height, width): image_geometry's rule.

        P[:3, :3] when P is set (not all zero): the image is rectified, and P is the camera of
        its pixels. K otherwise (a raw image; distortion is not modelled). P must be the left
        (or only) camera's: a stereo partner's P carries Tx = -fx * baseline (or Ty) and
        projects from the left camera's origin, not its own.

        Args:
            k: CameraInfo.k, 9 numbers, row-major.
            p: CameraInfo.p, 12 numbers, row-major, or empty / all zero when unset.
            size: (height, width) the calibration is for.
            binning: (binning_x, binning_y); 0 and 1 both mean none.
            roi: (x_offset, y_offset, height, width); all zero or the full image means none.

        Raises:
            InputError: binning or a region of interest (the grid they describe differs from
                the image's), a P of another camera than the left one (non-zero Tx or Ty), or a
                matrix that ``from_k`` refuses; each reason names the fields.
        """
        _check_full_grid(binning, roi, size)
        projection = np.asarray(p, dtype=np.float64).ravel()
        if projection.size == 0 or not np.any(projection):
            return cls.from_k(k, size)
        if projection.size != 12:
            raise InputError(f"camera_info P needs 12 numbers, got {projection.size}")
        projection = projection.reshape(3, 4)
        if not np.all(np.isfinite(projection)):
            raise InputError("camera_info P holds NaN or inf")
        tx, ty, last = projection[0, 3], projection[1, 3], projection[2, 3]
        if tx != 0.0 or ty != 0.0:
            raise InputError(
                f"camera_info P has Tx {tx:g}, Ty {ty:g}: the projection of a stereo camera other than "
                "the left one; depth must be registered to the left (or only) camera, whose P has "
                "Tx = Ty = 0"
            )
        if last != 0.0:
            raise InputError(f"camera_info P's last column must be zero, got (0, 0, {last:g})")
        return cls.from_k(projection[:, :3].ravel(), size, name="P")

    @classmethod
    def from_k(cls, k: Sequence[float] | np.ndarray, size: tuple[int, int], name: str = "K") -> Camera:
        """Check a row-major K (9 numbers, CameraInfo.k) for ``size`` = (height, width).

        ``name`` is the matrix's name in the reasons ("P" for P[:3, :3]).

        Raises:
            InputError: not 9 finite numbers, a focal length that is not positive, a last row
                other than (0, 0, 1), or an empty size.
        """
        matrix = np.asarray(k, dtype=np.float64)
        if matrix.size != 9:
            raise InputError(f"camera matrix {name} needs 9 numbers, got {matrix.size}")
        matrix = matrix.reshape(3, 3)
        if not np.all(np.isfinite(matrix)):
            raise InputError(f"camera matrix {name} holds NaN or inf")
        fx, fy = matrix[0, 0], matrix[1, 1]
        if fx <= 0.0 or fy <= 0.0:
            raise InputError(f"camera matrix {name} has focal lengths fx={fx:g}, fy={fy:g}; both must be > 0")
        if not np.array_equal(matrix[2], [0.0, 0.0, 1.0]):
            raise InputError(f"camera matrix {name}'s last row must be (0, 0, 1), got {tuple(matrix[2])}")
        height, width = int(size[0]), int(size[1])
        if height <= 0 or width <= 0:
            raise InputError(f"camera image size must be positive, got {width}x{height}")
        return cls(matrix, (height, width))

    def scaled_to(self, size: tuple[int, int]) -> Camera:
        """The same camera for a pixel grid ``size`` that is an integer scale of this one.

        Pixel centres stay on the same rays: ``u' = (u + 0.5) * s - 0.5``, so the focal lengths
        and skew scale by s and the principal point by ``(c + 0.5) * s - 0.5``.
        """
        if tuple(size) == self.size:
            return self
        scale = integer_scale(self.size, size, "camera_info", "image")
        matrix = self.matrix.copy()
        matrix[:2, :2] *= scale
        matrix[:2, 2] = (matrix[:2, 2] + 0.5) * scale - 0.5
        return Camera(matrix, (int(size[0]), int(size[1])))

    @cached_property
    def inverse(self) -> np.ndarray:
        """K^-1 (3x3 float32): pixel (u, v, 1) to the ray with z = 1."""
        return np.linalg.inv(self.matrix).astype(np.float32)


def _check_full_grid(binning: tuple[int, int], roi: tuple[int, int, int, int], size: tuple[int, int]) -> None:
    """CameraInfo must describe the full, unbinned grid: the depth path does not crop or bin.

    Raises:
        InputError: binning above 1 on an axis, or a region of interest other than the full image.
    """
    binning_x, binning_y = (int(v) for v in binning)
    if binning_x > 1 or binning_y > 1:
        raise InputError(
            f"camera_info binning_x {binning_x}, binning_y {binning_y}: binned images are not supported; "
            "publish the colour and depth images and camera_info at full resolution (binning 0 or 1)"
        )
    x_offset, y_offset, height, width = (int(v) for v in roi)
    full = (x_offset, y_offset) == (0, 0) and (height, width) in ((0, 0), (int(size[0]), int(size[1])))
    if not full:
        raise InputError(
            f"camera_info roi x_offset {x_offset}, y_offset {y_offset}, width {width}, height {height}: "
            "a region of interest is not supported; publish the full image (roi all zero)"
        )


def integer_scale(
    source: tuple[int, int], target: tuple[int, int], source_name: str, target_name: str
) -> float:
    """The factor s with target = source * s, when s or 1/s is the same integer on both axes.

    Raises:
        InputError: sizes that are not an integer scale of each other; the reason names both.
    """
    (sh, sw), (th, tw) = (int(v) for v in source), (int(v) for v in target)
    if min(sh, sw, th, tw) <= 0:
        raise InputError(f"empty {source_name} ({sw}x{sh}) or {target_name} ({tw}x{th})")
    for big, small, up in (((th, tw), (sh, sw), True), ((sh, sw), (th, tw), False)):
        if big[0] % small[0] == 0 and big[1] % small[1] == 0:
            factor = big[0] // small[0]
            if big[1] // small[1] == factor:
                return float(factor) if up else 1.0 / factor
    raise InputError(
        f"{source_name} is {sw}x{sh} and {target_name} {tw}x{th}: neither is an integer scale of the other"
    )
