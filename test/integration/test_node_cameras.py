"""cameras:=[front, left] over real rclpy: one node, one engine, each camera its own topics and counts.

One node process (tiny random SAM 3) serves the module; this process plays both cameras and
reads ~/front/... and ~/left/... as two consumers would.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from helpers.sam3_client import ANSWER_TIMEOUT_S, log_tail, make_image, running_node, scene, stamp_ns
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_harness import HELPERS, WAIT_LIMIT_S, spin_until, start_process, stop_process
from sensor_msgs.msg import Image
from vision_msgs.msg import Detection2DArray, Detection3DArray, LabelInfo

CAMERAS = ("front", "left")
TRACK_MAX_AGE_S = 1.0  # the default
NODE_PARAMS = {
    "model_id": "tiny-random",
    "prompts": "['car']",
    "threshold": "0.0",
    "max_instances": "4",
    "cameras": str(list(CAMERAS)),
    "depth": "true",  # each camera its own depth pairing; frames without depth are answered in 2D
}


class Cameras:
    """Both cameras' publishers, each camera's outputs by stamp, and every /diagnostics status by name."""

    def __init__(self, client) -> None:
        self.client = client
        self.probe = client.probe
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        self.images = {
            name: self.probe.create_publisher(Image, f"{name}/image", reliable) for name in CAMERAS
        }
        self.detections: dict[str, dict[int, Detection2DArray]] = {name: {} for name in CAMERAS}
        self.masks: dict[str, dict[int, Image]] = {name: {} for name in CAMERAS}
        for name in CAMERAS:
            self.probe.create_subscription(
                Detection2DArray, f"/sam3/{name}/detections", self._store(self.detections[name]), reliable
            )
            self.probe.create_subscription(
                Image, f"/sam3/{name}/masks", self._store(self.masks[name]), reliable
            )
        self.detections_3d: dict[str, dict[int, Detection3DArray]] = {name: {} for name in CAMERAS}
        for name in CAMERAS:
            self.probe.create_subscription(
                Detection3DArray,
                f"/sam3/{name}/detections_3d",
                self._store(self.detections_3d[name]),
                reliable,
            )
        self.statuses: list[dict[str, dict[str, str]]] = []
        self.probe.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    @staticmethod
    def _store(into: dict):
        return lambda msg: into.__setitem__(stamp_ns(msg), msg)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        statuses = {}
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            values["_level"] = int.from_bytes(status.level, "little")
            statuses[status.name] = values
        if any(name.startswith("sam3") for name in statuses):
            self.statuses.append(statuses)

    def send(self, camera: str, msg: Image) -> int:
        self.images[camera].publish(msg)
        return stamp_ns(msg)

    def answered(self, camera: str, key: int, timeout_s: float = ANSWER_TIMEOUT_S) -> bool:
        return spin_until(
            self.probe, lambda: key in self.detections[camera] and key in self.masks[camera], timeout_s
        )

    def diagnostics(self, where, timeout_s: float = 10.0) -> dict[str, dict[str, str]]:
        """The first /diagnostics array from now on for which ``where(statuses by name)`` holds."""
        start = len(self.statuses)
        found = spin_until(self.probe, lambda: any(where(s) for s in self.statuses[start:]), timeout_s)
        assert found, f"no matching /diagnostics within {timeout_s} s; last: {self.statuses[-1:]}"
        return next(s for s in self.statuses[start:] if where(s))


@pytest.fixture(scope="module")
def cameras(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cameras]:
    log_path = tmp_path_factory.mktemp("sam3_cameras") / "node.log"
    with running_node(NODE_PARAMS, log_path, wait_for_subscription=False) as client:
        rig = Cameras(client)
        subscribed = spin_until(
            rig.probe,
            lambda: (
                all(p.get_subscription_count() for p in rig.images.values())
                or client.process.poll() is not None
            ),
            120.0,
        )
        assert subscribed and client.process.poll() is None, log_tail(log_path)
        yield rig


def _frame(camera: str, seed: int) -> Image:
    msg = make_image(scene(seed))
    msg.header.frame_id = f"{camera}_optical"
    return msg


def test_each_camera_is_answered_with_its_own_header_on_its_own_topics(cameras: Cameras) -> None:
    front, left = _frame("front", 1), _frame("left", 2)
    left.header.stamp.nanosec = (left.header.stamp.nanosec + 1000) % 1_000_000_000  # two distinct stamps
    front_key, left_key = cameras.send("front", front), cameras.send("left", left)
    assert cameras.answered("front", front_key), log_tail(cameras.client.log_path)
    assert cameras.answered("left", left_key), log_tail(cameras.client.log_path)
    assert cameras.detections["front"][front_key].header == front.header
    assert cameras.masks["front"][front_key].header == front.header
    assert cameras.detections["left"][left_key].header == left.header
    assert cameras.masks["left"][left_key].header == left.header
    assert left_key not in cameras.detections["front"] and front_key not in cameras.detections["left"]
    # No camera is listening on the single-camera input any more.
    assert cameras.client.image_pub.get_subscription_count() == 0


def test_a_camera_that_stops_publishing_does_not_stall_the_other(cameras: Cameras) -> None:
    cameras.send("left", _frame("left", 3))  # left's last frame; then it falls silent
    for seed in range(4, 8):
        key = cameras.send("front", _frame("front", seed))
        assert cameras.answered("front", key), f"front frame {seed} not answered while left is silent"


def test_bad_frames_on_one_camera_are_counted_on_that_camera_only(cameras: Cameras) -> None:
    def camera_values(statuses: dict, camera: str) -> dict[str, str]:
        return statuses[f"sam3: camera {camera}"]

    before = cameras.diagnostics(lambda s: "sam3: camera left" in s)
    bad = _frame("left", 9)
    bad.encoding = "yuv422_fancy"  # no such encoding: rejected with the reason
    cameras.send("left", bad)

    def left_rejected(statuses: dict) -> bool:
        left = camera_values(statuses, "left")
        return int(left["frames_rejected"]) == int(camera_values(before, "left")["frames_rejected"]) + 1

    after = cameras.diagnostics(left_rejected)
    left, front = camera_values(after, "left"), camera_values(after, "front")
    assert left["_level"] == 1 and "yuv422_fancy" in left["last_error"]
    assert front["frames_rejected"] == camera_values(before, "front")["frames_rejected"]
    assert front["_level"] == 0 and front["last_error"] == ""
    engine = after["sam3: segmentation"]
    assert int(engine["frames_rejected"]) == int(left["frames_rejected"]) + int(front["frames_rejected"])
    assert int(engine["frames_received"]) == int(left["frames_received"]) + int(front["frames_received"])
    # The next good frame of that camera is answered again.
    key = cameras.send("left", _frame("left", 10))
    assert cameras.answered("left", key)


def test_each_camera_has_its_own_tracks(cameras: Cameras) -> None:
    """Tracks age by their own camera's stamps and frames: front jumping past track_max_age_s
    leaves left's tracks going on with the same ids; ids come from one space, so no id of one
    camera is ever given by the other."""

    def ids(camera: str, seed: int, ahead_s: int = 0) -> list[str]:
        msg = _frame(camera, seed)
        msg.header.stamp.sec += ahead_s
        key = cameras.send(camera, msg)
        assert cameras.answered(camera, key), log_tail(cameras.client.log_path)
        return [d.id for d in cameras.detections[camera][key].detections]

    # Compared as sets: the tiny model gives near-duplicate instances of one prompt, which may
    # trade ids with each other between frames; a restarted track would get a new id.
    left_ids = ids("left", 21)
    assert set(ids("left", 21)) == set(left_ids) and left_ids
    front_ids = ids("front", 22, ahead_s=int(2 * TRACK_MAX_AGE_S))  # front's clock leaps
    assert set(ids("left", 21)) == set(left_ids), "left's tracks must not age by front's stamps"
    assert front_ids and not set(front_ids) & set(left_ids), "one id space for every camera"


def test_depth_pairs_within_its_own_camera(cameras: Cameras) -> None:
    """A depth camera on front/ (colour, depth, camera_info remapped there) gets 3D answers on
    ~/front/detections_3d; left, colour only, stays 2D and its depth status says so."""
    remaps = [f"{topic}:=front/{topic}" for topic in ("image", "depth", "camera_info")]
    feeder = start_process(
        [str(HELPERS / "publish_depth_scene.py"), "--ros-args", *(a for r in remaps for a in ("-r", r))]
    )
    try:
        arrived = spin_until(cameras.probe, lambda: bool(cameras.detections_3d["front"]), 150.0)
    finally:
        feeder_output = stop_process(feeder)
    assert arrived, (
        f"no 3D answer on front\nfeeder: {feeder_output[-2000:]}\n{log_tail(cameras.client.log_path)}"
    )
    detections_3d = next(iter(cameras.detections_3d["front"].values()))
    assert detections_3d.header.frame_id == "cam"  # the depth scene's frame, on front's topic
    key = cameras.send("left", _frame("left", 40))
    assert cameras.answered("left", key)

    def both(statuses: dict) -> bool:
        front, left = statuses.get("sam3: camera front: depth"), statuses.get("sam3: camera left: depth")
        return bool(front and left) and int(front["frames_3d"]) > 0 and int(left["frames_without_depth"]) > 0

    statuses = cameras.diagnostics(both)
    assert statuses["sam3: camera left: depth"]["frames_3d"] == "0"
    assert statuses["sam3: camera left: depth"]["depth_received"] == "0"
    assert not cameras.detections_3d["left"]


def test_each_camera_has_its_label_info_beside_its_masks(cameras: Cameras) -> None:
    """vision_msgs: LabelInfo at the image's namespace level, so ~/<camera>/label_info beside
    ~/<camera>/masks; ~/label_info stays for consumers of every camera. All latched."""
    latched = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    received: dict[str, list[LabelInfo]] = {}
    for topic in ("/sam3/label_info", *(f"/sam3/{name}/label_info" for name in CAMERAS)):
        received[topic] = []
        cameras.probe.create_subscription(LabelInfo, topic, received[topic].append, latched)
    assert spin_until(cameras.probe, lambda: all(received.values()), WAIT_LIMIT_S), {
        t: len(m) for t, m in received.items()
    }
    maps = {
        topic: [(e.class_id, e.class_name) for e in messages[-1].class_map]
        for topic, messages in received.items()
    }
    assert [name for _, name in maps["/sam3/label_info"]] == ["car"]
    assert all(class_map == maps["/sam3/label_info"] for class_map in maps.values()), maps
