"""Talk to a /sam3 node in another process the way a robot's stack does: topics and services.

``Sam3Client`` wraps the test's probe node: it publishes frames, collects every
output by stamp, reads /diagnostics, and calls the parameter and lifecycle services
(the same services ``ros2 param set`` and ``ros2 lifecycle set`` call).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rclpy.node
from diagnostic_msgs.msg import DiagnosticArray
from frames import random_frame
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue, SetParametersResult
from rcl_interfaces.srv import GetParameters, SetParameters
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_harness import WAIT_LIMIT_S, ros_test_node, spin_until
from sensor_msgs.msg import CompressedImage, Image
from vision_msgs.msg import Detection2DArray, LabelInfo

#: Seconds to wait for one frame's answer (tiny-random takes ~0.3 s per frame on 2 cores).
ANSWER_TIMEOUT_S = WAIT_LIMIT_S
#: How long an idempotent service request waits for its answer before it is sent again.
RESEND_S = 5.0


def start_node(
    params: dict[str, str],
    log_path: Path,
    program: list[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[str]:
    """Start the node in its own process, ``-p name:=value`` for each param, output to ``log_path``.

    ``program`` replaces ``python -m tt_sam3_ros.ros.main`` (a helper script, the console script).
    A file, not a pipe, takes the output: nobody reads a pipe while the tests run, and a full
    one would block the node. ``cwd``: the node's working folder (tt-metal writes generated/ into
    it); None: this process's.
    """
    command = program or [sys.executable, "-m", "tt_sam3_ros.ros.main"]
    command = [*command, "--ros-args"]
    for name, value in params.items():
        command += ["-p", f"{name}:={value}"]
    with open(log_path, "w") as log:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )


def stop_node(process: subprocess.Popen[str], sig: int = signal.SIGINT, timeout_s: float = 20.0) -> int:
    """Signal the node and wait for it; kill it after ``timeout_s``. Returns its exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def stamp_ns(msg: Any) -> int:
    """A message's header stamp in nanoseconds: the key that pairs a frame with its outputs."""
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def stamp_now(msg: Any) -> int:
    """Stamp ``msg`` with the wall clock now (as a camera driver does); returns the key."""
    now = time.time_ns()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now, 1_000_000_000)
    return now


def scene(seed: int, width: int = 96, height: int = 64) -> np.ndarray:
    """A textured uint8 RGB (height, width, 3) picture; the same seed gives the same picture."""
    return random_frame(seed, (height, width))


def make_image(rgb: np.ndarray, encoding: str = "rgb8") -> Image:
    """An Image of ``rgb`` in ``encoding`` (rgb8 or bgr8), stamped now, frame_id 'cam'."""
    height, width = rgb.shape[:2]
    pixels = rgb[:, :, ::-1] if encoding == "bgr8" else rgb
    msg = Image(height=height, width=width, encoding=encoding, step=width * 3)
    msg.header.frame_id = "cam"
    msg.data = np.ascontiguousarray(pixels).tobytes()
    stamp_now(msg)
    return msg


def mask_pixels(msg: Image) -> np.ndarray:
    """The mono8 mask as uint8 (height, width)."""
    assert msg.encoding == "mono8"
    return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.step)[:, : msg.width]


class Sam3Client:
    """The probe node's view of /sam3: outputs keyed by stamp seconds, services wrapped."""

    def __init__(self, probe: rclpy.node.Node, node_name: str = "/sam3") -> None:
        self.probe = probe
        self.node_name = node_name
        self.detections: dict[int, Detection2DArray] = {}
        self.masks: dict[int, Image] = {}
        # The answers to frames exemplar boxes were drawn on (their own topics), by stamp.
        self.exemplar_detections: dict[int, Detection2DArray] = {}
        self.exemplar_masks: dict[int, Image] = {}
        self.arrivals: dict[int, float] = {}
        self.diagnostics: list[dict[str, str]] = []
        self.label_infos: list[LabelInfo] = []
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        probe.create_subscription(Detection2DArray, f"{node_name}/detections", self._on_detections, reliable)
        probe.create_subscription(Image, f"{node_name}/masks", self._on_mask, reliable)
        probe.create_subscription(
            Detection2DArray,
            f"{node_name}/exemplar_detections",
            lambda msg: self.exemplar_detections.__setitem__(stamp_ns(msg), msg),
            reliable,
        )
        probe.create_subscription(
            Image,
            f"{node_name}/exemplar_masks",
            lambda msg: self.exemplar_masks.__setitem__(stamp_ns(msg), msg),
            reliable,
        )
        probe.create_subscription(LabelInfo, f"{node_name}/label_info", self.label_infos.append, latched)
        probe.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.image_pub = probe.create_publisher(Image, "image", reliable)
        self.compressed_pub = probe.create_publisher(CompressedImage, "image/compressed", reliable)
        self._set_params = probe.create_client(SetParameters, f"{node_name}/set_parameters")
        self._get_params = probe.create_client(GetParameters, f"{node_name}/get_parameters")
        self._change_state = probe.create_client(ChangeState, f"{node_name}/change_state")
        self._get_state = probe.create_client(GetState, f"{node_name}/get_state")

    # -- topics

    def _on_detections(self, msg: Detection2DArray) -> None:
        self.detections[stamp_ns(msg)] = msg
        self.arrivals[stamp_ns(msg)] = time.time_ns()

    def prompt_of(self, detection: Any) -> str:
        """The prompt text of a detection: its class id looked up in the LabelInfo received.

        ~/label_info and ~/detections are separate topics, so a detection of a class new to the
        node (a box-only concept's 65535) may arrive before the LabelInfo naming it: wait for it.
        """
        class_id = int(detection.results[0].hypothesis.class_id)
        spin_until(self.probe, lambda: self._class_name(class_id) is not None, WAIT_LIMIT_S)
        name = self._class_name(class_id)
        if name is None:
            raise AssertionError(f"class id {class_id} is in no LabelInfo received")
        return name

    def _class_name(self, class_id: int) -> str | None:
        """The newest LabelInfo's name for ``class_id``, None while none names it."""
        for label_info in reversed(self.label_infos):
            for entry in label_info.class_map:
                if entry.class_id == class_id:
                    return entry.class_name
        return None

    def _on_mask(self, msg: Image) -> None:
        self.masks[stamp_ns(msg)] = msg

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith("sam3"):
                values = {kv.key: kv.value for kv in status.values}
                values["_name"] = status.name
                values["_level"] = int.from_bytes(status.level, "little")
                values["_message"] = status.message
                self.diagnostics.append(values)

    def wait_for_subscriber(
        self,
        compressed: bool = False,
        timeout_s: float = WAIT_LIMIT_S,
        process: subprocess.Popen | None = None,
    ) -> None:
        """Block until the node's image subscription has matched our publisher (or the node died)."""
        publisher = self.compressed_pub if compressed else self.image_pub

        def matched_or_dead() -> bool:
            return publisher.get_subscription_count() > 0 or (
                process is not None and process.poll() is not None
            )

        spin_until(self.probe, matched_or_dead, timeout_s)
        assert publisher.get_subscription_count() > 0, (
            "the node never subscribed to the image topic" + self._log()
        )

    def send(self, msg: Image | CompressedImage) -> None:
        (self.compressed_pub if isinstance(msg, CompressedImage) else self.image_pub).publish(msg)

    def answer(self, key: int, timeout_s: float = ANSWER_TIMEOUT_S) -> tuple[Detection2DArray, Image]:
        """Wait for both outputs stamped ``key`` (ns); fail the test when they do not come."""
        arrived = spin_until(self.probe, lambda: key in self.detections and key in self.masks, timeout_s)
        assert arrived, f"no detections+mask for the frame stamped {key} ns within {timeout_s} s"
        return self.detections[key], self.masks[key]

    def exemplar_answer(
        self, key: int, timeout_s: float = ANSWER_TIMEOUT_S
    ) -> tuple[Detection2DArray, Image]:
        """Wait for the exemplar answer (both of its topics) to the frame stamped ``key`` (ns)."""
        arrived = spin_until(
            self.probe, lambda: key in self.exemplar_detections and key in self.exemplar_masks, timeout_s
        )
        assert arrived, f"no exemplar answer for the frame stamped {key} ns within {timeout_s} s"
        return self.exemplar_detections[key], self.exemplar_masks[key]

    def ask(
        self, msg: Image | CompressedImage, timeout_s: float = ANSWER_TIMEOUT_S
    ) -> tuple[Detection2DArray, Image]:
        """Stamp one frame now, send it and wait for its answer."""
        key = stamp_now(msg)
        self.send(msg)
        return self.answer(key, timeout_s)

    def no_answer(self, key: int, wait_s: float) -> bool:
        """Spin ``wait_s`` seconds; True when nothing stamped ``key`` came."""
        spin_until(self.probe, lambda: key in self.detections, wait_s)
        return key not in self.detections and key not in self.masks

    def next_diagnostics(self, timeout_s: float = WAIT_LIMIT_S, where: Any = None) -> dict[str, str]:
        """The first /diagnostics status published from now on matching ``where``; without it,
        the node's ``<node>: segmentation`` status.

        The node publishes several statuses (segmentation, per camera, depth, tracking), each with
        its own keys: a status that lacks a key ``where`` reads is not the one it looks for.
        """
        start = len(self.diagnostics)

        def matches(status: dict[str, Any]) -> bool:
            if where is None:
                return status["_name"].endswith(": segmentation")
            try:
                return bool(where(status))
            except KeyError:
                return False

        def found() -> bool:
            return any(matches(d) for d in self.diagnostics[start:])

        assert spin_until(self.probe, found, timeout_s), (
            f"no matching /diagnostics within {timeout_s} s; last: {self.diagnostics[-1:]}"
        )
        return next(d for d in self.diagnostics[start:] if matches(d))

    # -- services

    def _call(
        self, client: Any, request: Any, timeout_s: float = WAIT_LIMIT_S, idempotent: bool = True
    ) -> Any:
        """One service call; an idempotent request is sent again every RESEND_S until answered.

        ``wait_for_service`` is true once the node's request reader matches our writer, but the
        node's response writer may not have matched our response reader yet: Fast DDS then drops
        the answer, and a loaded machine keeps that window open for seconds. A read (get_state,
        get_parameters) or setting a value is safe to send twice; a lifecycle transition is not.
        """
        assert client.wait_for_service(timeout_sec=timeout_s), f"service {client.srv_name} not available"
        deadline = time.monotonic() + timeout_s
        while True:
            future = client.call_async(request)
            left = deadline - time.monotonic()
            wait = min(RESEND_S, left) if idempotent else left
            if spin_until(self.probe, future.done, max(wait, 0.0)):
                return future.result()
            client.remove_pending_request(future)
            if time.monotonic() >= deadline:
                raise AssertionError(f"{client.srv_name} did not answer within {timeout_s} s{self._log()}")

    def _log(self) -> str:
        return f"\n{log_tail(self.log_path)}" if hasattr(self, "log_path") else ""

    def set_parameter(self, name: str, value: Any, type_: int | None = None) -> SetParametersResult:
        """Set one parameter through the node's set_parameters service, as ``ros2 param set`` does."""
        param_value = _parameter_value(value, type_)
        request = SetParameters.Request(parameters=[Parameter(name=name, value=param_value)])
        return self._call(self._set_params, request).results[0]

    def get_parameter(self, name: str) -> Any:
        response = self._call(self._get_params, GetParameters.Request(names=[name]))
        value = response.values[0]
        return {
            ParameterType.PARAMETER_STRING_ARRAY: list(value.string_array_value),
            ParameterType.PARAMETER_STRING: value.string_value,
            ParameterType.PARAMETER_INTEGER: value.integer_value,
            ParameterType.PARAMETER_DOUBLE: value.double_value,
            ParameterType.PARAMETER_BOOL: value.bool_value,
            ParameterType.PARAMETER_NOT_SET: None,
        }[value.type]

    def transition(self, transition_id: int) -> bool:
        """Request a lifecycle transition (Transition.TRANSITION_*); True on success."""
        request = ChangeState.Request(transition=Transition(id=transition_id))
        return self._call(self._change_state, request, idempotent=False).success

    def state(self) -> str:
        return self._call(self._get_state, GetState.Request()).current_state.label


def _parameter_value(value: Any, type_: int | None) -> ParameterValue:
    """A ParameterValue as ros2cli builds it from a YAML value."""
    if type_ is None:
        if isinstance(value, bool):
            type_ = ParameterType.PARAMETER_BOOL
        elif isinstance(value, int):
            type_ = ParameterType.PARAMETER_INTEGER
        elif isinstance(value, float):
            type_ = ParameterType.PARAMETER_DOUBLE
        elif isinstance(value, str):
            type_ = ParameterType.PARAMETER_STRING
        else:
            type_ = ParameterType.PARAMETER_STRING_ARRAY
    field = {
        ParameterType.PARAMETER_BOOL: "bool_value",
        ParameterType.PARAMETER_INTEGER: "integer_value",
        ParameterType.PARAMETER_DOUBLE: "double_value",
        ParameterType.PARAMETER_STRING: "string_value",
        ParameterType.PARAMETER_STRING_ARRAY: "string_array_value",
    }[type_]
    return ParameterValue(type=type_, **{field: value})


@contextlib.contextmanager
def running_node(
    params: dict[str, str],
    log_path: Path,
    program: list[str] | None = None,
    wait_for_subscription: bool = True,
    env: dict[str, str] | None = None,
    startup_timeout_s: float = WAIT_LIMIT_S,
    cwd: Path | None = None,
) -> Iterator[Sam3Client]:
    """A node process plus a probe node talking to it; both torn down on exit.

    The client's ``process`` and ``log_path`` attributes let a test signal the node and
    read its output. ``startup_timeout_s`` bounds the wait for its image subscription;
    ``cwd`` is the node's working folder (start_node).
    """
    process = start_node(params, log_path, program, env, cwd)
    probe_lifetime = ros_test_node()
    probe = next(probe_lifetime)
    try:
        client = Sam3Client(probe)
        client.process = process
        client.log_path = log_path
        if wait_for_subscription:
            # Startup (imports, tiny model build, warm-up) takes ~10 s on 2 cores.
            client.wait_for_subscriber(timeout_s=startup_timeout_s, process=process)
        yield client
    finally:
        stop_node(process)
        next(probe_lifetime, None)


def module_node(params: dict[str, str], log_folder: str) -> Any:
    """A module-scoped fixture (assign it to the fixture's name): a node started with ``params``,
    its log in a fresh temporary folder named after ``log_folder``, shared by the module's tests."""

    @pytest.fixture(scope="module")
    def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sam3Client]:
        with running_node(params, tmp_path_factory.mktemp(log_folder) / "node.log") as client:
            yield client

    return node


def log_tail(log_path: Path, lines: int = 40) -> str:
    """The end of a node's output, for assertion messages."""
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
