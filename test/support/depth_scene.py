"""Known geometry for the depth tests: rectangles and boxes ray-cast through a pinhole camera.

Every pixel's ray ``K^-1 (u, v, 1)`` (z = 1) is intersected with the objects analytically, so a
test knows each pixel's true 3D surface point independently of the code under test, and builds
from it the depth image a registered depth camera would publish (16UC1 or 32FC1), the label
image and the expected statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A 640x480 camera with a 600 px focal length (about a RealSense D435's colour stream at VGA).
WIDTH, HEIGHT = 640, 480
K = np.array([[600.0, 0.0, 319.5], [0.0, 600.0, 239.5], [0.0, 0.0, 1.0]])


def rays(k: np.ndarray = K, size: tuple[int, int] = (HEIGHT, WIDTH)) -> np.ndarray:
    """float64 (height, width, 3): each pixel centre's ray with z = 1."""
    rows, cols = np.mgrid[0 : size[0], 0 : size[1]].astype(np.float64)
    pixels = np.stack([cols, rows, np.ones_like(cols)], axis=-1)
    return pixels @ np.linalg.inv(k).T


@dataclass(frozen=True)
class Rectangle:
    """A flat rectangle: its centre, two unit in-plane axes and its full side lengths (metres)."""

    centre: tuple[float, float, float]
    axis_u: tuple[float, float, float]
    axis_v: tuple[float, float, float]
    width: float
    height: float

    def hit(self, ray: np.ndarray) -> np.ndarray:
        """float64 (...,): the ray parameter (= z) where each ray meets the rectangle, inf where not."""
        centre, u, v = (np.asarray(a, dtype=np.float64) for a in (self.centre, self.axis_u, self.axis_v))
        normal = np.cross(u, v)
        facing = ray @ normal
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (centre @ normal) / facing
        points = ray * t[..., None] - centre
        inside = (np.abs(points @ u) <= self.width / 2) & (np.abs(points @ v) <= self.height / 2)
        return np.where(inside & (t > 0) & np.isfinite(t), t, np.inf)


def facing_rectangle(centre: tuple[float, float, float], width: float, height: float) -> Rectangle:
    """A rectangle facing the camera (parallel to the image plane)."""
    return Rectangle(centre, (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), width, height)


def box_faces(
    centre: tuple[float, float, float], size: tuple[float, float, float], yaw: float
) -> list[Rectangle]:
    """The six faces of a box turned by ``yaw`` radians about the camera's y axis (down)."""
    c, s = np.cos(yaw), np.sin(yaw)
    axes = [np.array([c, 0.0, -s]), np.array([0.0, 1.0, 0.0]), np.array([s, 0.0, c])]
    faces = []
    for normal_index in range(3):
        others = [i for i in range(3) if i != normal_index]
        for sign in (-1.0, 1.0):
            face_centre = np.asarray(centre) + sign * axes[normal_index] * size[normal_index] / 2
            faces.append(
                Rectangle(
                    tuple(face_centre),
                    tuple(axes[others[0]]),
                    tuple(axes[others[1]]),
                    size[others[0]],
                    size[others[1]],
                )
            )
    return faces


@dataclass
class Scene:
    """One frame: per-pixel true depth and label, and each instance's true surface points."""

    z: np.ndarray  # float64 (height, width), inf where nothing is hit
    labels: np.ndarray  # uint8 (height, width)

    def depth_16uc1(self) -> np.ndarray:
        """uint16 millimetres, 0 where nothing is hit (what a RealSense publishes)."""
        mm = np.where(np.isfinite(self.z), np.round(self.z * 1000.0), 0.0)
        return np.clip(mm, 0, 65535).astype(np.uint16)

    def depth_32fc1(self) -> np.ndarray:
        """float32 metres, NaN where nothing is hit (what a ZED publishes)."""
        return np.where(np.isfinite(self.z), self.z, np.nan).astype(np.float32)

    def true_points(self, instance_id: int, k: np.ndarray = K) -> np.ndarray:
        """float64 (n, 3): the true surface points of the pixels labelled ``instance_id``."""
        keep = (self.labels == instance_id) & np.isfinite(self.z)
        return rays(k, self.labels.shape)[keep] * self.z[keep][:, None]


def render(objects: list[list[Rectangle]], background_m: float | None = None) -> Scene:
    """Ray-cast ``objects`` (instance k = objects[k - 1], a list of faces); nearest surface wins.

    A label is painted where its object is the nearest surface; ``background_m`` adds an
    unlabelled wall facing the camera at that depth.
    """
    ray = rays()
    z = np.full((HEIGHT, WIDTH), np.inf)
    labels = np.zeros((HEIGHT, WIDTH), dtype=np.uint8)
    if background_m is not None:
        z[:] = background_m
    for instance_id, faces in enumerate(objects, start=1):
        nearest = np.min([face.hit(ray) for face in faces], axis=0)
        closer = nearest < z
        z[closer] = nearest[closer]
        labels[closer] = instance_id
    return Scene(z, labels)


def expected_statistics(points: np.ndarray, k: np.ndarray = K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(box centre, box size, median) by the documented rule, computed on the true points with numpy.

    The box spans the 0.5th to 99.5th percentile on each axis, widened on x and y by one pixel's
    footprint (z / f) at the far end of that extent.
    """
    low, median, high = np.percentile(points, (0.5, 50.0, 99.5), axis=0)
    footprint = np.array([high[2] / k[0, 0], high[2] / k[1, 1], 0.0])
    low, high = low - footprint / 2, high + footprint / 2
    return (low + high) / 2, high - low, median


#: The integration test's camera: 320x240, a pixel about 4 mm wide on the plane.
SMALL_WIDTH, SMALL_HEIGHT = 320, 240
SMALL_K = np.array([[300.0, 0.0, 159.5], [0.0, 300.0, 119.5], [0.0, 0.0, 1.0]])
#: The raw (unrectified) camera's K beside it: another matrix, as on a real camera.
SMALL_RAW_K = np.array([[318.0, 0.0, 164.0], [0.0, 316.0, 116.0], [0.0, 0.0, 1.0]])
#: A plane seen across the whole small frame: normal . P = PLANE_DISTANCE (metres).
PLANE_NORMAL = np.array([0.15, -0.1, 1.0])
PLANE_DISTANCE = 1.2


def plane_z(k: np.ndarray = SMALL_K, size: tuple[int, int] = (SMALL_HEIGHT, SMALL_WIDTH)) -> np.ndarray:
    """float64 (height, width): the depth of the tilted plane at every pixel (about 1.1-1.3 m)."""
    return PLANE_DISTANCE / (rays(k, size) @ PLANE_NORMAL)


def plane_points(mask: np.ndarray, k: np.ndarray = SMALL_K) -> np.ndarray:
    """float64 (n, 3): the plane's true points at the pixels of ``mask``, raster order."""
    ray = rays(k, mask.shape)
    return ray[mask] * plane_z(k, mask.shape)[mask][:, None]
