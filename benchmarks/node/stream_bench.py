"""Stream section: frames at 30 Hz into the real node, whose model is slower than the frame period.

The node runs in its own process (benchmarks.node.slow_node: the tiny random model plus a fixed
sleep per image). This process plays the camera, publishing rgb8 frames stamped with the
time of publishing, and a consumer: output age is the arrival time of each Detection2DArray
minus its stamp, which the node copies from the input frame. A node that queued frames
would show ages growing frame after frame; one that keeps only the newest frame shows flat
ages of about one model latency plus up to one frame period, and counts the frames it drops.

Then several cameras into one node (``cameras``): 1 and 3 cameras at 30 Hz each, side by side.
Last, several chips (benchmarks/node/stream_chips.py): 8 cameras at 15 Hz dealt across 1, 2 and 4
stand-in chips by the node's own dealing code, without ROS.
Each camera's output rate is one over the mean interval between its outputs (so a count cut
off mid-round does not skew it); fairness is the slowest camera's rate over the fastest's
(round robin should give about 1.0), and each camera's age must not grow over the run.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO

import numpy as np

from ..common import report, scenes
from . import stream_chips

FRAME_RATE_HZ = 30.0
FRAMES = 100
IMAGE_SIZE = (480, 640)
#: Sleep added to every image on top of the tiny model's own time.
EXTRA_SECONDS = 0.05
#: A liveness bound for the node's start (imports, model, subscription): on 2 cores shared with
#: other work (load average 18-19) it took over 120 s twice.
STARTUP_TIMEOUT_S = 600.0
#: Longest wait, after the last frame, for the node to account for every frame it received.
DRAIN_TIMEOUT_S = 60.0
#: Diagnostics counters that together account for every frame the node received.
FATES = ("frames_processed", "frames_dropped", "frames_rejected", "engine_errors")


#: Cameras of the several-cameras part, each at FRAME_RATE_HZ. Each run streams at least
#: MULTI_SECONDS and until every camera has MULTI_OUTPUTS outputs (a loaded machine's model is
#: slow), but never past MULTI_MAX_SECONDS; --quick asks for fewer.
MULTI_CAMERAS = (1, 3)
MULTI_SECONDS, MULTI_OUTPUTS, MULTI_MAX_SECONDS = 20.0, 8, 300.0
QUICK_SECONDS, QUICK_OUTPUTS, QUICK_MAX_SECONDS = 4.0, 3, 120.0


def start_node(extra_seconds: float, log: IO[str], *extra: str) -> subprocess.Popen[str]:
    """The slowed node in its own process, tiny random model, fp32 on the CPU, one prompt.

    Its output goes to ``log``, a file: a pipe nobody reads while frames flow could fill and block it.
    """
    args = [
        sys.executable, "-m", "benchmarks.node.slow_node", str(extra_seconds), "--ros-args",
        "-p", "model_id:=tiny-random", "-p", "engine:=torch", "-p", "device:=cpu",
        "-p", "dtype:=float32", "-p", "prompts:=['car']", "-p", "publish_overlay:=false", *extra,
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))


def stop_node(process: subprocess.Popen[str], log: IO[str]) -> str:
    """SIGINT (the node shuts down through its lifecycle), then SIGKILL; returns its output."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    log.seek(0)
    return log.read()


class Camera:
    """Publishes frames at a fixed rate and records every detection message's age."""

    def __init__(self, context: object, rgb: np.ndarray) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image
        from vision_msgs.msg import Detection2DArray

        self.node = rclpy.create_node("stream_bench_camera", context=context)
        self.publisher = self.node.create_publisher(Image, "image", qos_profile_sensor_data)
        self.node.create_subscription(Detection2DArray, "/sam3/detections", self._on_detections, 10)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.frame = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3)
        self.frame.data = rgb.tobytes()
        self.frame.header.frame_id = "camera"
        self.sent = 0
        self.last_sent_at = 0.0
        self.ages_ms: list[float] = []
        self.diagnostics: dict[str, str] = {}
        self.diagnostics_at = 0.0

    def publish(self) -> None:
        self.frame.header.stamp = self.node.get_clock().now().to_msg()
        self.publisher.publish(self.frame)
        self.sent += 1
        self.last_sent_at = time.monotonic()

    def all_accounted(self) -> bool:
        """Whether diagnostics newer than the last frame account for every frame the node received.

        Best-effort transport may lose frames before the node sees them; those never count.
        """
        fates = [self.diagnostics.get(key, "") for key in (*FATES, "frames_received")]
        if self.diagnostics_at < self.last_sent_at + 0.5 or not all(f.isdigit() for f in fates):
            return False
        *outcomes, received = (int(f) for f in fates)
        return sum(outcomes) >= received

    def _on_detections(self, msg: object) -> None:
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self.ages_ms.append((self.node.get_clock().now().nanoseconds - stamp_ns) / 1e6)

    def _on_diagnostics(self, msg: object) -> None:
        # The segmentation status holds the frame counters; the node's tracking (and depth)
        # statuses follow it in the same array and hold none.
        for status in msg.status:
            if status.name == "sam3: segmentation":
                self.diagnostics = {kv.key: kv.value for kv in status.values}
                self.diagnostics_at = time.monotonic()


def run_stream(camera: Camera, executor: object) -> None:
    """Wait for the node's subscription, publish FRAMES at FRAME_RATE_HZ, then drain outputs."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while camera.publisher.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the node did not subscribe to /image in time")
        executor.spin_once(timeout_sec=0.1)
    executor.spin_once(timeout_sec=0.5)  # let discovery settle both ways
    period = 1.0 / FRAME_RATE_HZ
    next_at = time.monotonic()
    while camera.sent < FRAMES:
        if time.monotonic() >= next_at:
            camera.publish()
            next_at += period
        executor.spin_once(timeout_sec=max(0.0, next_at - time.monotonic()))
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while not camera.all_accounted() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)


def main(quick: bool) -> None:
    """Print output-age percentiles, first vs last quartile, drops and the model's own latency."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    report.title(
        f"stream: frames at {FRAME_RATE_HZ:.0f} Hz into the node, model slower than the frame period"
    )
    with tempfile.TemporaryFile("w+") as log:
        process = start_node(EXTRA_SECONDS, log)
        context = rclpy.context.Context()
        rclpy.init(context=context)
        camera = Camera(context, scenes.picture(*IMAGE_SIZE))
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(camera.node)
        try:
            run_stream(camera, executor)
        finally:
            executor.shutdown()
            camera.node.destroy_node()
            rclpy.shutdown(context=context)
            output = stop_node(process, log)
    if not camera.ages_ms:
        raise RuntimeError(
            f"the node published no detections; diagnostics {camera.diagnostics}; log:\n{output}"
        )
    print_results(camera)
    print_deserialisation(camera, repeats=5 if quick else 20)
    multi_camera_main(quick)
    stream_chips.main(quick)


def print_results(camera: Camera) -> None:
    """The age table, the quartile comparison and the node's own counters."""
    ages = np.array(camera.ages_ms)
    quarter = max(1, len(ages) // 4)
    first, last = np.median(ages[:quarter]), np.median(ages[-quarter:])
    diag = camera.diagnostics
    latency = float(diag.get("processing_ms_p50") or "nan")
    processing = [diag.get(f"processing_ms_{k}", "?") for k in ("p50", "p90", "max")]
    height, width = IMAGE_SIZE
    print(
        "node process: tiny random model, fp32 cpu, 1 prompt, "
        f"+{EXTRA_SECONDS * 1000:.0f} ms sleep per image; "
        f"{camera.sent} frames {width}x{height} rgb8 at {FRAME_RATE_HZ:.0f} Hz, best effort, depth 1"
    )
    p50, p90, p99 = np.percentile(ages, [50, 90, 99])
    rows = [
        ["frames sent / received by the node", f"{camera.sent} / {diag.get('frames_received', '?')}"],
        ["outputs / dropped by the node", f"{len(ages)} / {diag.get('frames_dropped', '?')}"],
        ["model: node processing time per frame p50 / p90 / max ms", " / ".join(processing)],
        ["output age p50 / p90 / p99 / max ms", f"{p50:.1f} / {p90:.1f} / {p99:.1f} / {ages.max():.1f}"],
        ["output age p50 / model time p50", f"{p50 / latency:.2f}x"],
        ["output age median, first vs last quarter of outputs ms", f"{first:.1f} vs {last:.1f}"],
    ]
    report.table(["stream of frames", "value"], rows)
    print(
        "age: arrival of /sam3/detections minus the input stamp (ms); model ms: the node's own "
        "processing time per frame (diagnostics processing_ms_p50)."
    )


#: The frame of the deserialisation comparison: a 1080p colour camera's.
COPY_FRAME_SIZE = (1080, 1920)
#: Cameras x Hz the comparison extrapolates to (a robot's camera set).
COPY_CAMERAS, COPY_RATE_HZ = 8, 30.0


def _median_ms(run: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000.0)
    return float(np.median(times))


def print_deserialisation(camera: Camera, repeats: int) -> None:
    """What the raw image subscriptions save: the executor reads a frame's header and the worker
    deserialises only the frame it takes, where a typed subscription deserialises (copies the
    pixels of) every frame. Measured side by side on one 1080p rgb8 Image's serialised bytes;
    the node's counters of the run above say how many frames it took."""
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Image

    from tt_sam3_ros.ros import raw_frames

    height, width = COPY_FRAME_SIZE
    msg = Image(height=height, width=width, encoding="rgb8", step=width * 3)
    msg.data = scenes.picture(height, width).tobytes()
    serialized = serialize_message(msg)
    whole_ms = _median_ms(lambda: deserialize_message(serialized, Image), repeats)
    header_ms = _median_ms(lambda: raw_frames.taken(serialized, Image), repeats)
    diag = camera.diagnostics
    received = int(diag.get("frames_received", "0") or 0)
    taken = sum(int(diag.get(key, "0") or 0) for key in FATES if key != "frames_dropped")
    rate = COPY_CAMERAS * COPY_RATE_HZ
    mb = len(serialized) / 1e6
    report.table(
        ["deserialising image messages", "typed subscription", "raw subscription", "ratio"],
        [
            [f"per {width}x{height} rgb8 frame on receipt, ms", f"{whole_ms:.3f}", f"{header_ms:.4f}",
             f"{whole_ms / max(header_ms, 1e-9):.0f}x"],
            ["frames deserialised in the stream above (received)", f"{received}", f"{taken}",
             f"{received / max(taken, 1):.1f}x"],
            [f"{COPY_CAMERAS} cameras at {COPY_RATE_HZ:.0f} Hz: MB/s deserialised on receipt",
             f"{rate * mb:.0f}", "0", "-"],
            [f"{COPY_CAMERAS} cameras at {COPY_RATE_HZ:.0f} Hz: ms of executor time per second",
             f"{rate * whole_ms:.0f}", f"{rate * header_ms:.1f}", f"{whole_ms / max(header_ms, 1e-9):.0f}x"],
        ],
    )  # fmt: skip
    print(
        f"median of {repeats} runs in this process; a {mb:.1f} MB serialised Image. Both take the serialised "
        "bytes from the middleware; the raw subscription's worker deserialises each frame it takes (the "
        "second row's count), off the executor."
    )


class CameraRig:
    """Several cameras at FRAME_RATE_HZ each into one node; every output's arrival and age, per camera."""

    def __init__(self, context: object, rgb: np.ndarray, names: tuple[str, ...]) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image
        from vision_msgs.msg import Detection2DArray

        self.names = names
        self.node = rclpy.create_node("stream_bench_cameras", context=context)
        qos = qos_profile_sensor_data
        self.publishers = {name: self.node.create_publisher(Image, f"{name}/image", qos) for name in names}
        self.frame = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3)
        self.frame.data = rgb.tobytes()
        self.sent = dict.fromkeys(names, 0)
        self.arrivals: dict[str, list[float]] = {name: [] for name in names}
        self.ages_ms: dict[str, list[float]] = {name: [] for name in names}
        self.statuses: dict[str, dict[str, str]] = {}
        self.seconds = 0.0  # how long it streamed
        for name in names:
            self.node.create_subscription(
                Detection2DArray, f"/sam3/{name}/detections", functools.partial(self._on_detections, name), 10
            )
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def publish(self, name: str) -> None:
        self.frame.header.stamp = self.node.get_clock().now().to_msg()
        self.frame.header.frame_id = name
        self.publishers[name].publish(self.frame)
        self.sent[name] += 1

    def _on_detections(self, name: str, msg: object) -> None:
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self.arrivals[name].append(time.monotonic())
        self.ages_ms[name].append((self.node.get_clock().now().nanoseconds - stamp_ns) / 1e6)

    def _on_diagnostics(self, msg: object) -> None:
        for status in msg.status:
            if status.name.startswith("sam3"):
                self.statuses[status.name] = {kv.key: kv.value for kv in status.values}

    def rate_hz(self, name: str) -> float:
        """One over the mean interval between this camera's outputs (nan with fewer than two)."""
        arrivals = self.arrivals[name]
        if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
            return float("nan")
        return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


def stream_limits(quick: bool) -> tuple[float, int, float]:
    """Least seconds, least outputs per camera, most seconds of one several-cameras run."""
    if quick:
        return QUICK_SECONDS, QUICK_OUTPUTS, QUICK_MAX_SECONDS
    return MULTI_SECONDS, MULTI_OUTPUTS, MULTI_MAX_SECONDS


def run_cameras(rig: CameraRig, executor: object, seconds: float, outputs: int, max_seconds: float) -> None:
    """Wait for every camera's subscription, then publish all cameras, evenly staggered.

    For at least ``seconds`` and until each camera has ``outputs`` outputs, at most ``max_seconds``.
    """
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not all(p.get_subscription_count() for p in rig.publishers.values()):
        if time.monotonic() > deadline:
            raise RuntimeError("the node did not subscribe to every camera's image in time")
        executor.spin_once(timeout_sec=0.1)
    executor.spin_once(timeout_sec=0.5)
    period = 1.0 / FRAME_RATE_HZ
    start = time.monotonic()
    due = {name: start + index * period / len(rig.names) for index, name in enumerate(rig.names)}

    def streaming() -> bool:
        elapsed = time.monotonic() - start
        enough = all(len(arrivals) >= outputs for arrivals in rig.arrivals.values())
        return elapsed < max_seconds and (elapsed < seconds or not enough)

    while streaming():
        name = min(due, key=due.__getitem__)
        wait = due[name] - time.monotonic()
        if wait > 0:
            executor.spin_once(timeout_sec=wait)
            continue
        rig.publish(name)
        due[name] += period
    settle = time.monotonic() + 2.0  # the frames in flight, and a last /diagnostics
    while time.monotonic() < settle:
        executor.spin_once(timeout_sec=0.05)


def measure_cameras(count: int, quick: bool) -> CameraRig:
    """One node with ``count`` cameras (cam0, cam1, ...), streamed as ``run_cameras`` says."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    names = tuple(f"cam{index}" for index in range(count))
    with tempfile.TemporaryFile("w+") as log:
        process = start_node(EXTRA_SECONDS, log, "-p", f"cameras:={list(names)}")
        context = rclpy.context.Context()
        rclpy.init(context=context)
        rig = CameraRig(context, scenes.picture(*IMAGE_SIZE), names)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(rig.node)
        try:
            limits = stream_limits(quick)
            started = time.monotonic()
            run_cameras(rig, executor, *limits)
            rig.seconds = time.monotonic() - started
        finally:
            executor.shutdown()
            rig.node.destroy_node()
            rclpy.shutdown(context=context)
            output = stop_node(process, log)
    if not all(rig.arrivals.values()):
        raise RuntimeError(f"a camera got no detections; diagnostics {rig.statuses}; log:\n{output}")
    return rig


def multi_camera_main(quick: bool) -> None:
    """Per-camera rate, ages and fairness for 1 and 3 cameras at FRAME_RATE_HZ each."""
    seconds, outputs, _ = stream_limits(quick)
    report.title(
        f"stream: {' and '.join(map(str, MULTI_CAMERAS))} cameras at {FRAME_RATE_HZ:.0f} Hz each "
        f"into one node, at least {seconds:.0f} s and {outputs} outputs per camera"
    )
    rows, summary = [], []
    for count in MULTI_CAMERAS:
        rig = measure_cameras(count, quick)
        rates = {name: rig.rate_hz(name) for name in rig.names}
        for name in rig.names:
            ages = np.array(rig.ages_ms[name])
            quarter = max(1, len(ages) // 4)
            p50, p90 = np.percentile(ages, [50, 90])
            status = rig.statuses.get(f"sam3: camera {name}", {})
            rows.append([
                f"{count} camera{'s' if count > 1 else ''}", name,
                f"{rig.sent[name]} / {status.get('frames_received', '?')}",
                f"{len(ages)} / {status.get('frames_dropped', '?')}",
                f"{rates[name]:.2f}", f"{p50:.0f} / {p90:.0f}",
                f"{np.median(ages[:quarter]):.0f} vs {np.median(ages[-quarter:]):.0f}",
                f"{p50 / float(status.get('processing_ms_p50') or 'nan'):.2f}x",
            ])  # fmt: skip
        engine = rig.statuses.get("sam3: segmentation", {})
        fairness = min(rates.values()) / max(rates.values())
        summary.append([
            f"{count}", f"{rig.seconds:.0f}", f"{sum(rates.values()):.2f}", f"{fairness:.2f}",
            engine.get("processing_ms_p50", "?"),
        ])  # fmt: skip
    report.table(
        ["run", "camera", "sent / received", "outputs / dropped", "rate Hz", "age p50 / p90 ms",
         "age median first vs last quarter ms", "age p50 / its model ms p50"],
        rows,
    )  # fmt: skip
    report.table(["cameras", "streamed s", "total output rate Hz", "fairness (slowest / fastest rate)",
                  "model ms p50 (node)"], summary)  # fmt: skip
    print(
        "rate: 1 / mean interval between a camera's outputs; age: arrival of /sam3/<camera>/detections "
        "minus the input stamp; model ms: the node's processing time per frame (the camera's "
        "processing_ms_p50); goal: fairness >= 0.9, last-quarter age no higher than the first's "
        "(on a loaded machine the model time itself drifts: compare the age over model ratio)."
    )
