"""The /sam3 node: text-prompted SAM 3 instance segmentation as a managed ROS 2 node.

The only module that imports rclpy's Node. It adapts ``Sam3Segmenter`` to ROS:
parameters, QoS, the lifecycle, the newest-frame hand-off and /diagnostics. Image
conversion lives in ``messages.py``; the model lives behind ``segmenter.py``.

Threads (why: a slow model must never stall services, parameters or lifecycle calls):

- The executor runs the subscription, parameter and lifecycle callbacks (one
  mutually exclusive group) and the diagnostics timer (its own group, so /diagnostics
  keeps flowing while a transition is busy). None of them touches the model.
- One worker thread owns the segmenter from construction to ``close()``: engines
  require every device call on the thread that opened the device. The subscription
  callback drops the newest frame into a one-slot box and wakes the worker; a frame
  still in the box when the next arrives is dropped and counted, so no queue builds.

Lifecycle (``autostart`` true runs configure and activate at start):

- configure: start the worker, which resolves weights, opens the engine and warms up.
  SUCCESS -> inactive; FAILURE (weights missing, engine cannot open) -> unconfigured,
  with the reason logged, nothing left allocated.
- activate: create the image subscription, enable the publishers, latch LabelInfo.
- deactivate: unsubscribe and drop the pending frame; the engine stays loaded.
- cleanup / shutdown / error: ``_release()`` closes the engine on its thread and
  destroys every handle; idempotent, also called on SIGINT/SIGTERM.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import rclpy
import rclpy.exceptions
import rclpy.logging
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecyclePublisher, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from rclpy.subscription import Subscription
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header
from vision_msgs.msg import Detection2DArray, LabelInfo

from tt_sam3_ros import messages
from tt_sam3_ros.prompts import MAX_PROMPT_CHARS, MAX_PROMPTS, validate_prompts
from tt_sam3_ros.results import MAX_LABELLED_INSTANCES
from tt_sam3_ros.tiny_model import TINY_MODEL_ID

NODE_NAME = "sam3"
ENGINES = ("auto", "torch", "ttnn")
TRANSPORTS = ("raw", "compressed")
RELIABILITIES = {"best_effort": ReliabilityPolicy.BEST_EFFORT, "reliable": ReliabilityPolicy.RELIABLE}
#: Frames whose timings make up the percentiles on /diagnostics.
STATS_WINDOW = 100
#: Seconds between two log lines about the same kind of bad frame.
LOG_THROTTLE_S = 5.0

# Outputs are reliable (a reliable publisher serves both best-effort and reliable
# subscribers, so no consumer meets a QoS mismatch) and keep a few messages so a
# message_filters synchroniser can pair detections with masks.
OUTPUT_QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
# Latched: a consumer that starts later still learns which class id is which prompt.
LABEL_INFO_QOS = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)

# When each parameter may change. Dynamic ones apply from the next processed frame.
DYNAMIC = ("prompts", "threshold", "max_instances", "max_prompts", "publish_overlay")
READ_AT_CONFIGURE = ("engine", "device", "dtype", "model_id", "revision", "weights_dir", "max_image_side")
READ_AT_ACTIVATE = ("transport", "qos_reliability", "qos_depth")


def _describe(text: str, **extra: Any) -> ParameterDescriptor:
    return ParameterDescriptor(description=text, **extra)


def _int_range(low: int, high: int) -> list[IntegerRange]:
    return [IntegerRange(from_value=low, to_value=high, step=1)]


#: name -> (default, descriptor). ``prompts`` has no default: the node waits for them.
PARAMETERS: dict[str, tuple[Any, ParameterDescriptor]] = {
    "prompts": (
        Parameter.Type.STRING_ARRAY,
        _describe(
            f"Texts to segment, e.g. ['car', 'person']: 1 to max_prompts non-blank strings of at most "
            f"{MAX_PROMPT_CHARS} characters. Applies from the next frame. Unset: the node waits.",
            additional_constraints=f"1..max_prompts non-blank strings of at most {MAX_PROMPT_CHARS} chars",
        ),
    ),
    "threshold": (
        0.5,
        _describe(
            "Keep instances whose score (sigmoid(logit) * sigmoid(presence)) is above this; below 1.",
            floating_point_range=[FloatingPointRange(from_value=0.0, to_value=1.0, step=0.0)],
        ),
    ),
    "max_instances": (
        50,
        _describe(
            "Most instances published per frame, best first (a mono8 mask holds 255).",
            integer_range=_int_range(1, MAX_LABELLED_INSTANCES),
        ),
    ),
    "max_prompts": (
        MAX_PROMPTS,
        _describe(
            "Most prompts accepted in 'prompts'; each prompt adds decoder work to every frame.",
            integer_range=_int_range(1, MAX_PROMPTS),
        ),
    ),
    "publish_overlay": (True, _describe("Draw ~/overlay (rgb8) while someone subscribes to it.")),
    "engine": (
        "auto",
        _describe(
            "auto, torch or ttnn. auto: ttnn when a Tenstorrent device is present, else torch. "
            "Read at configure.",
            additional_constraints="one of: " + ", ".join(ENGINES),
        ),
    ),
    "device": (
        "",
        _describe("Engine device, e.g. cpu, cuda:0, or a ttnn device id; empty: the engine's default."),
    ),
    "dtype": ("", _describe("Compute dtype, e.g. float32 or bfloat16; empty: the engine's default.")),
    "model_id": (
        "facebook/sam3",
        _describe(
            f"Hugging Face model id, or '{TINY_MODEL_ID}' (offline random weights, meaningless output)."
        ),
    ),
    "revision": (
        "",
        _describe("Hub revision (branch, tag or commit); empty: the commit pinned for facebook/sam3."),
    ),
    "weights_dir": ("", _describe("Local folder with the weights; empty: the Hugging Face cache or hub.")),
    "max_image_side": (
        4096,
        _describe(
            "Input images with a longer side are rejected (bounds host memory per frame).",
            integer_range=_int_range(16, 32768),
        ),
    ),
    "transport": (
        "raw",
        _describe(
            "raw: subscribe to 'image' (sensor_msgs/Image); compressed: to 'image/compressed' "
            "(sensor_msgs/CompressedImage, JPEG or PNG). Read at activate.",
            additional_constraints="one of: " + ", ".join(TRANSPORTS),
        ),
    ),
    "qos_reliability": (
        "best_effort",
        _describe(
            "Input reliability: best_effort (matches every publisher) or reliable. Read at activate.",
            additional_constraints="one of: " + ", ".join(RELIABILITIES),
        ),
    ),
    "qos_depth": (
        1,
        _describe(
            "Input queue depth; 1 keeps only the newest frame. Read at activate.",
            integer_range=_int_range(1, 100),
        ),
    ),
    "autostart": (
        True,
        _describe("Configure and activate at start; false waits for lifecycle transitions.", read_only=True),
    ),
}


@dataclass(frozen=True)
class RunSettings:
    """What the worker reads at the start of each frame; replaced whole, never mutated."""

    prompts: tuple[str, ...] = ()
    threshold: float = 0.5
    max_instances: int = 50
    publish_overlay: bool = True


@dataclass
class Frame:
    """One received image message, and when it arrived (monotonic seconds)."""

    msg: Image | CompressedImage
    received_s: float


class FrameSlot:
    """A one-slot, lock-guarded hand-off from the subscription callback to the worker.

    ``put`` replaces an unprocessed frame (the caller counts it as dropped), so the worker
    always starts on the newest frame and latency cannot grow with the input rate.
    """

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._frame: Frame | None = None
        self._closed = False

    def put(self, frame: Frame) -> bool:
        """Store ``frame``; returns True when it replaced one the worker had not taken."""
        with self._ready:
            replaced = self._frame is not None
            self._frame = frame
            self._ready.notify()
        return replaced

    def take(self) -> Frame | None:
        """Wait for a frame and remove it; None once the slot is closed."""
        with self._ready:
            while self._frame is None and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            frame, self._frame = self._frame, None
            return frame

    def clear(self) -> bool:
        """Drop the pending frame, if any; returns whether there was one."""
        with self._ready:
            had_frame, self._frame = self._frame is not None, None
        return had_frame

    def close(self) -> None:
        """Wake the worker for good: ``take`` returns None from now on."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()


@dataclass
class FrameStats:
    """Counters and recent timings for /diagnostics; every access holds ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    received: int = 0
    processed: int = 0
    dropped: int = 0
    rejected: int = 0
    engine_errors: int = 0
    processing_ms: deque[float] = field(default_factory=lambda: deque(maxlen=STATS_WINDOW))
    output_age_ms: deque[float] = field(default_factory=lambda: deque(maxlen=STATS_WINDOW))
    last_error: str = ""
    last_outcome: str = "none"  # none | ok | rejected | engine_error


class InferenceWorker(threading.Thread):
    """The thread that owns the segmenter: builds it, runs every frame, closes it.

    ``ready`` is set once the segmenter is built and warmed up, or when that failed
    (then ``startup_error`` holds the exception and the thread has ended).
    """

    def __init__(
        self,
        build: Callable[[], Any],
        handle_frame: Callable[[Any, Frame], None],
        slot: FrameSlot,
        on_closed: Callable[[dict[str, str]], None],
        logger: Any,
    ) -> None:
        super().__init__(name="sam3-inference", daemon=True)
        self._logger = logger
        self._build = build
        self._handle_frame = handle_frame
        self._slot = slot
        self._on_closed = on_closed
        self.ready = threading.Event()
        self.startup_error: BaseException | None = None
        self.description: dict[str, str] = {}

    def run(self) -> None:
        try:
            segmenter = self._build()
            self.description = dict(segmenter.describe())
            segmenter.warmup()
        except BaseException as error:  # reported by on_configure, which waits on ready
            self.startup_error = error
            self.ready.set()
            return
        self.ready.set()
        try:
            while (frame := self._slot.take()) is not None:
                try:
                    self._handle_frame(segmenter, frame)
                except Exception:  # a bug here must not silently end inference
                    self._logger.error(f"frame handling failed:\n{traceback.format_exc()}")
        finally:
            segmenter.close()
            self._on_closed(self.description)

    def stop(self) -> None:
        """Ask the loop to end after the frame in flight; ``join`` to wait for the close."""
        self._slot.close()


def _transition(callback: Callable[..., TransitionCallbackReturn]) -> Callable[..., TransitionCallbackReturn]:
    """Log an exception escaping a transition callback and return ERROR.

    rclpy turns such an exception into ERROR without a word; this keeps the reason.
    """

    @functools.wraps(callback)
    def guarded(node: Sam3Node, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            return callback(node, state)
        except Exception:
            node.get_logger().error(f"{callback.__name__} failed:\n{traceback.format_exc()}")
            return TransitionCallbackReturn.ERROR

    return guarded


class Sam3Node(LifecycleNode):
    """Managed node ``sam3``: images in, Detection2DArray + mono8 instance mask out."""

    def __init__(self, stop_requested: threading.Event | None = None, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        # Set by main's signal handler: a configure still loading gives up at once.
        self._stop_requested = stop_requested or threading.Event()
        for name, (default, descriptor) in PARAMETERS.items():
            self.declare_parameter(name, default, descriptor)
        self._settings = RunSettings()
        self._check_startup_parameters()
        self.add_on_set_parameters_callback(self._validate_parameter_change)
        self.add_post_set_parameters_callback(self._apply_parameter_change)

        self._state = "unconfigured"
        self._stats = FrameStats()
        self._slot = FrameSlot()
        self._worker: InferenceWorker | None = None
        self._image_sub: Subscription | None = None
        self._detections_pub: LifecyclePublisher | None = None
        self._mask_pub: LifecyclePublisher | None = None
        self._overlay_pub: LifecyclePublisher | None = None
        self._label_info_pub: LifecyclePublisher | None = None
        self._engine_info: dict[str, str] = {}
        self._release_lock = threading.Lock()

        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diagnostics_timer = self.create_timer(
            1.0, self._publish_diagnostics, callback_group=MutuallyExclusiveCallbackGroup()
        )

    # ----------------------------------------------------------------- parameters

    @property
    def autostart(self) -> bool:
        """Whether ``main`` should configure and activate the node by itself."""
        return bool(self.get_parameter("autostart").value)

    def _parameter_values(self) -> dict[str, Any]:
        """Every parameter's current value; None for one declared without a value (prompts)."""
        values = {}
        for name in PARAMETERS:
            try:
                values[name] = self.get_parameter(name).value
            except rclpy.exceptions.ParameterUninitializedException:
                values[name] = None
        return values

    def _check_startup_parameters(self) -> None:
        """Validate values given with -p / --params-file, which bypass the set callback.

        Raises:
            ValueError: naming the parameter and what is wrong with it.
        """
        values = self._parameter_values()
        reason = _invalid_values(values)
        if reason:
            raise ValueError(reason)
        self._settings = _settings_from(values)

    def _validate_parameter_change(self, parameters: list[Parameter]) -> SetParametersResult:
        """Accept or refuse a set-parameters request as a whole, with the reason.

        Runs before anything changes; types and ranges were already checked by rclpy
        against the descriptors. Applying happens in ``_apply_parameter_change``.
        """
        values = self._parameter_values()
        for parameter in parameters:
            refusal = self._refuse_now(parameter.name)
            if refusal:
                return SetParametersResult(successful=False, reason=refusal)
            values[parameter.name] = parameter.value
        reason = _invalid_values(values, prompts_required=any(p.name == "prompts" for p in parameters))
        return SetParametersResult(successful=not reason, reason=reason)

    def _refuse_now(self, name: str) -> str:
        """Why ``name`` cannot change in the current lifecycle state ('' when it can)."""
        if name in READ_AT_CONFIGURE and self._state != "unconfigured":
            return (
                f"{name} is read at configure and the node is {self._state}: "
                "deactivate and clean it up, set it, then configure again"
            )
        if name in READ_AT_ACTIVATE and self._state == "active":
            return f"{name} is read at activate: deactivate the node, set it, then activate again"
        return ""

    def _apply_parameter_change(self, parameters: list[Parameter]) -> None:
        """Publish the new settings to the worker (next frame) and re-latch LabelInfo."""
        values = self._parameter_values()
        self._settings = _settings_from(values)
        changed = {parameter.name for parameter in parameters}
        if changed & {"prompts", "threshold"}:
            self._publish_label_info()
        if "prompts" in changed:
            self.get_logger().info(f"prompts now {list(self._settings.prompts)}")

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> bool:
        """Configure and activate (autostart); False when either transition failed."""
        if self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            return False
        return self.trigger_activate() == TransitionCallbackReturn.SUCCESS

    @_transition
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Build, load and warm up the segmenter on the worker thread; create publishers.

        SUCCESS -> inactive. FAILURE -> unconfigured, the reason logged, nothing held.
        """
        self._state = "configuring"
        self._slot = FrameSlot()
        values = self._parameter_values()
        request = {name: values[name] for name in READ_AT_CONFIGURE}
        worker = InferenceWorker(
            functools.partial(self._build_segmenter, request),
            self._handle_frame,
            self._slot,
            self._on_engine_closed,
            self.get_logger(),
        )
        self._worker = worker
        self.get_logger().info(f"configuring: {self._engine_request()}")
        started = time.monotonic()
        worker.start()
        while not worker.ready.wait(0.2):
            if self._stop_requested.is_set() or not self.context.ok():
                self.get_logger().warning("shutdown requested while configuring")
                self._release()
                return TransitionCallbackReturn.FAILURE
        if worker.startup_error is not None:
            self._report_configure_failure(worker.startup_error)
            self._release()
            return TransitionCallbackReturn.FAILURE
        self._engine_info = worker.description
        self._create_publishers()
        self._state = "inactive"
        self.get_logger().info(
            f"configured in {time.monotonic() - started:.1f} s: "
            + ", ".join(f"{key}={value}" for key, value in self._engine_info.items())
        )
        return super().on_configure(state)

    @_transition
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Enable the publishers, latch LabelInfo, subscribe to the image topic."""
        result = super().on_activate(state)
        if result != TransitionCallbackReturn.SUCCESS:
            return result
        self._subscribe()
        self._state = "active"
        self._publish_label_info()
        if not self._settings.prompts:
            self.get_logger().warning(
                "active but no prompts set; frames are ignored until e.g. "
                "ros2 param set /sam3 prompts \"['car', 'person']\""
            )
        return TransitionCallbackReturn.SUCCESS

    @_transition
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop inference: unsubscribe and drop the pending frame; the engine stays loaded."""
        self._unsubscribe()
        if self._slot.clear():
            with self._stats.lock:
                self._stats.dropped += 1
        self._state = "inactive"
        return super().on_deactivate(state)

    @_transition
    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release the engine and every handle -> unconfigured."""
        self._release()
        return super().on_cleanup(state)

    @_transition
    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything -> finalized."""
        self._release()
        self._state = "finalized"
        return TransitionCallbackReturn.SUCCESS

    @_transition
    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything -> unconfigured (a later configure may succeed)."""
        self.get_logger().error(f"error while leaving state '{state.label}'; releasing the engine")
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def shut_down(self) -> None:
        """Exit path of ``main``: the lifecycle shutdown transition, or a bare release.

        The transition needs a live context (it publishes the state change); when ROS is
        already down, ``_release`` alone still frees the device.
        """
        if self._state not in ("finalized", "configuring") and self.context.ok():
            self.trigger_shutdown()
        self._release()

    def _release(self) -> None:
        """Close the engine on its thread and destroy every handle. Safe to call repeatedly."""
        with self._release_lock:
            self._unsubscribe()
            worker, self._worker = self._worker, None
            if worker is not None:
                worker.stop()
                if worker.is_alive():
                    self.get_logger().info("releasing the engine (once the work in flight is done)")
                worker.join()
            for name in ("_detections_pub", "_mask_pub", "_overlay_pub", "_label_info_pub"):
                publisher = getattr(self, name)
                if publisher is not None:
                    self.destroy_lifecycle_publisher(publisher)
                    setattr(self, name, None)
            self._engine_info = {}
            if self._state != "finalized":
                self._state = "unconfigured"

    # ----------------------------------------------------------------- engine

    def _engine_request(self) -> str:
        names = ("engine", "model_id", "device", "dtype")
        return ", ".join(f"{name}={self.get_parameter(name).value or 'default'}" for name in names)

    def _build_segmenter(self, request: dict[str, Any]) -> Any:
        """Called on the worker thread: weights, device, engine (all device calls stay there).

        ``request`` holds the READ_AT_CONFIGURE parameter values, captured by on_configure.
        """
        from tt_sam3_ros.segmenter import Sam3Segmenter

        if request["model_id"] == TINY_MODEL_ID:
            self.get_logger().warning(
                f"model_id '{TINY_MODEL_ID}': a tiny model with RANDOM weights; "
                "every detection and mask it publishes is MEANINGLESS (plumbing tests only)"
            )
        return Sam3Segmenter.from_pretrained(
            model_id=request["model_id"],
            revision=request["revision"] or None,
            weights_dir=request["weights_dir"] or None,
            engine=request["engine"],
            device=request["device"] or None,
            dtype=request["dtype"] or None,
            max_image_side=request["max_image_side"],
        )

    def _report_configure_failure(self, error: BaseException) -> None:
        """Log why configure failed: the message alone when it is actionable by itself."""
        from tt_sam3_ros.weights import WeightsError

        with self._stats.lock:
            self._stats.last_error = f"configure: {error}"
        if isinstance(error, WeightsError | ValueError):
            self.get_logger().error(f"cannot configure: {error}")
        else:
            details = "".join(traceback.format_exception(error))
            self.get_logger().error(f"cannot configure: {type(error).__name__}: {error}\n{details}")

    def _on_engine_closed(self, description: dict[str, str]) -> None:
        """Called on the worker thread once ``close()`` returned: the device is free."""
        self.get_logger().info(
            "engine released: " + ", ".join(f"{key}={value}" for key, value in description.items())
        )

    # ----------------------------------------------------------------- topics

    def _create_publishers(self) -> None:
        self._detections_pub = self.create_lifecycle_publisher(Detection2DArray, "~/detections", OUTPUT_QOS)
        self._mask_pub = self.create_lifecycle_publisher(Image, "~/masks", OUTPUT_QOS)
        self._overlay_pub = self.create_lifecycle_publisher(Image, "~/overlay", OUTPUT_QOS)
        self._label_info_pub = self.create_lifecycle_publisher(LabelInfo, "~/label_info", LABEL_INFO_QOS)

    def _subscribe(self) -> None:
        """Subscribe with the QoS from parameters; best effort by default, which every publisher matches."""
        reliability = RELIABILITIES[self.get_parameter("qos_reliability").value]
        qos = QoSProfile(depth=self.get_parameter("qos_depth").value, reliability=reliability)
        if self.get_parameter("transport").value == "compressed":
            self._image_sub = self.create_subscription(
                CompressedImage, "image/compressed", self._on_image, qos
            )
        else:
            self._image_sub = self.create_subscription(Image, "image", self._on_image, qos)
        self.get_logger().info(f"subscribed to {self._image_sub.topic_name}")

    def _unsubscribe(self) -> None:
        subscription, self._image_sub = self._image_sub, None
        if subscription is not None:
            self.destroy_subscription(subscription)

    def _on_image(self, msg: Image | CompressedImage) -> None:
        """Hand the newest frame to the worker; never waits for inference."""
        with self._stats.lock:
            self._stats.received += 1
        if not self._settings.prompts:
            return
        if self._slot.put(Frame(msg, time.monotonic())):
            with self._stats.lock:
                self._stats.dropped += 1

    def _publish_label_info(self) -> None:
        if self._label_info_pub is None:
            return
        header = Header()
        header.stamp = self.get_clock().now().to_msg()
        self._label_info_pub.publish(
            messages.label_info(self._settings.prompts, self._settings.threshold, header)
        )

    # ----------------------------------------------------------------- worker side

    def _handle_frame(self, segmenter: Any, frame: Frame) -> None:
        """Decode, segment and publish one frame; bad input and engine faults are counted, never fatal."""
        settings = self._settings
        started = time.monotonic()
        try:
            rgb = self._decode(frame.msg)
            result = segmenter(
                rgb,
                list(settings.prompts),
                threshold=settings.threshold,
                max_instances=settings.max_instances,
            )
        except ValueError as error:
            self._count_rejected(frame, error)
            return
        except Exception as error:
            self._count_engine_error(error)
            return
        try:
            self._publish_result(frame.msg.header, rgb, result, settings)
        except Exception as error:
            if not self.context.ok():
                return  # shutting down: the publishers are gone
            self._count_engine_error(error)
            return
        self._count_processed(frame.msg.header, (time.monotonic() - started) * 1000.0)

    @staticmethod
    def _decode(msg: Image | CompressedImage) -> np.ndarray:
        if isinstance(msg, CompressedImage):
            return messages.compressed_to_rgb(msg)
        return messages.image_to_rgb(msg)

    def _publish_result(self, header: Header, rgb: np.ndarray, result: Any, settings: RunSettings) -> None:
        """Publish detections and mask (and the overlay while subscribed), all with the input header."""
        detections_pub, mask_pub, overlay_pub = self._detections_pub, self._mask_pub, self._overlay_pub
        if detections_pub is None or mask_pub is None:
            return
        labels = result.instance_mask()
        detections_pub.publish(messages.result_to_detections(result, header))
        mask_pub.publish(messages.instance_mask_to_image(labels, header))
        if settings.publish_overlay and overlay_pub is not None and overlay_pub.get_subscription_count() > 0:
            from tt_sam3_ros.overlay import draw_overlay

            overlay_pub.publish(messages.rgb_to_image(draw_overlay(rgb, result, labels), header))

    def _count_processed(self, header: Header, processing_ms: float) -> None:
        stamp_ns = header.stamp.sec * 1_000_000_000 + header.stamp.nanosec
        age_ms = (self.get_clock().now().nanoseconds - stamp_ns) / 1e6 if stamp_ns else None
        with self._stats.lock:
            self._stats.processed += 1
            self._stats.processing_ms.append(processing_ms)
            if age_ms is not None:
                self._stats.output_age_ms.append(age_ms)
            self._stats.last_outcome = "ok"

    def _count_rejected(self, frame: Frame, error: ValueError) -> None:
        reason = f"bad input frame ({frame.msg.header.frame_id or 'no frame_id'}): {error}"
        with self._stats.lock:
            self._stats.rejected += 1
            self._stats.last_error = reason
            self._stats.last_outcome = "rejected"
        self.get_logger().warning(f"skipped {reason}", throttle_duration_sec=LOG_THROTTLE_S)

    def _count_engine_error(self, error: Exception) -> None:
        reason = f"engine error: {type(error).__name__}: {error}"
        with self._stats.lock:
            self._stats.engine_errors += 1
            self._stats.last_error = reason
            self._stats.last_outcome = "engine_error"
        self.get_logger().error(
            f"{reason}; skipping the frame and carrying on\n{traceback.format_exc()}",
            throttle_duration_sec=LOG_THROTTLE_S,
        )

    # ----------------------------------------------------------------- diagnostics

    def _publish_diagnostics(self) -> None:
        """One DiagnosticStatus about engine, state, frame counts and recent timings (~1 Hz)."""
        status = self._diagnostic_status()
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status.append(status)
        self._diagnostics_pub.publish(array)

    def _diagnostic_status(self) -> DiagnosticStatus:
        stats = self._stats
        with stats.lock:
            counts = {
                "frames_received": stats.received,
                "frames_processed": stats.processed,
                "frames_dropped": stats.dropped,
                "frames_rejected": stats.rejected,
                "engine_errors": stats.engine_errors,
            }
            processing = list(stats.processing_ms)
            ages = list(stats.output_age_ms)
            last_error, last_outcome = stats.last_error, stats.last_outcome
        level, message = self._health(last_outcome, last_error)
        engine = self._engine_info
        values = {
            "state": self._state,
            "engine": engine.get("engine", self.get_parameter("engine").value),
            "device": engine.get("device", self.get_parameter("device").value or "default"),
            "dtype": engine.get("dtype", self.get_parameter("dtype").value or "default"),
            "model": engine.get("model", self.get_parameter("model_id").value),
            "prompts": ", ".join(self._settings.prompts),
            **{key: str(value) for key, value in counts.items()},
            **_percentiles("processing_ms", processing),
            **_percentiles("output_age_ms", ages),
            "last_error": last_error,
        }
        return DiagnosticStatus(
            level=level,
            name=f"{self.get_name()}: segmentation",
            message=message,
            hardware_id=values["device"],
            values=[KeyValue(key=key, value=str(value)) for key, value in values.items()],
        )

    def _health(self, last_outcome: str, last_error: str) -> tuple[bytes, str]:
        """Level and one-line summary: ERROR while the last frame failed in the engine."""
        if last_outcome == "engine_error":
            return DiagnosticStatus.ERROR, last_error
        if self._state != "active":
            return DiagnosticStatus.WARN, f"{self._state}: not segmenting"
        if not self._settings.prompts:
            return DiagnosticStatus.WARN, "no prompts set: ros2 param set /sam3 prompts \"['car']\""
        if last_outcome == "rejected":
            return DiagnosticStatus.WARN, last_error
        return DiagnosticStatus.OK, "segmenting"


def _invalid_values(values: dict[str, Any], prompts_required: bool = False) -> str:
    """Why this combination of parameter values is unusable ('' when it is fine)."""
    prompts = values["prompts"]
    if prompts is not None or prompts_required:
        try:
            validate_prompts(prompts if prompts is not None else [], max_prompts=values["max_prompts"])
        except ValueError as error:
            return f"prompts rejected: {error}"
    if not 0.0 <= values["threshold"] < 1.0:
        return f"threshold must be in [0, 1), got {values['threshold']}"
    for name, choices in (("engine", ENGINES), ("transport", TRANSPORTS), ("qos_reliability", RELIABILITIES)):
        if values[name] not in choices:
            return f"{name} must be one of {', '.join(choices)}; got '{values[name]}'"
    return ""


def _settings_from(values: dict[str, Any]) -> RunSettings:
    prompts = values["prompts"]
    return RunSettings(
        prompts=tuple(validate_prompts(prompts, values["max_prompts"])) if prompts else (),
        threshold=float(values["threshold"]),
        max_instances=int(values["max_instances"]),
        publish_overlay=bool(values["publish_overlay"]),
    )


def _percentiles(name: str, samples: list[float]) -> dict[str, str]:
    """p50, p90 and max of the recent window, in milliseconds, as strings for KeyValue."""
    if not samples:
        return {f"{name}_p50": "", f"{name}_p90": "", f"{name}_max": ""}
    p50, p90 = np.percentile(samples, [50, 90])
    return {f"{name}_p50": f"{p50:.1f}", f"{name}_p90": f"{p90:.1f}", f"{name}_max": f"{max(samples):.1f}"}


def main(args: list[str] | None = None) -> int:
    """Run the node until SIGINT/SIGTERM; exit 0 then, 1 when it could not start.

    rclpy's own signal handlers would shut the context down first, leaving the node
    unable to log to /rosout or announce its last transition; ours only ask the spin
    loop to stop, so the node goes through a real lifecycle shutdown while ROS is up.
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    _handle_stop_signals(stop)
    node: Sam3Node | None = None
    exit_code = 0
    try:
        node = Sam3Node(stop_requested=stop)
        if node.autostart and not node.start():
            exit_code = 0 if stop.is_set() else 1
            if exit_code:
                node.get_logger().fatal("could not start; see the error above")
        else:
            _spin_until(node, stop)
    except (
        ValueError,
        rclpy.exceptions.InvalidParameterTypeException,
        rclpy.exceptions.InvalidParameterValueException,
    ) as error:
        rclpy.logging.get_logger(NODE_NAME).fatal(f"invalid parameters: {error}")
        exit_code = 1
    finally:
        if node is not None:
            node.shut_down()
            node.destroy_node()
        rclpy.try_shutdown()
    return exit_code


def _handle_stop_signals(stop: threading.Event) -> None:
    """Make the first SIGINT/SIGTERM stop the node gracefully and a second one at once.

    The first sets ``stop``: the frame or model load in flight finishes, then the device
    is released. A second exits immediately, leaving the device to the driver's
    process-exit cleanup, for a user who will not wait for a long model load.
    """

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            rclpy.logging.get_logger(NODE_NAME).warning(f"second {signal.Signals(signum).name}: exiting now")
            os._exit(130)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)


def _spin_until(node: Sam3Node, stop: threading.Event) -> None:
    """Spin on two threads (transitions and diagnostics apart) until ``stop`` is set."""
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    try:
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except ExternalShutdownException:
        pass
    finally:
        executor.shutdown()


if __name__ == "__main__":
    sys.exit(main())
