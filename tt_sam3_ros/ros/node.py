"""The /sam3 node: text-prompted SAM 3 instance segmentation as a managed ROS 2 node.

The only module that imports rclpy's Node: the ROS wiring (lifecycle, subscriptions,
publishers, parameter callbacks); the process around it (executor, signals) is ``node_main.py``.
What it wires lives beside it: the parameter table and its checks in ``node_parameters.py``,
the per-frame pipeline (decode, segment, track, 3D, and whose fault a failure is) in
``pipeline.py``, the inference thread, the newest-frame hand-off and the counters in
``worker.py``, the /diagnostics status in ``diagnostics.py``, message conversion in
``messages.py`` and ``messages_3d.py``.

Threads (why: a slow model must never stall services, parameters or lifecycle calls):

- The executor runs the subscription, parameter and lifecycle callbacks (one
  mutually exclusive group), the change_state service (its own group: a configure it runs
  waits for the model load, which must not hold parameters or get_state) and the
  diagnostics timer (its own group, so /diagnostics keeps flowing while a transition is
  busy). None of them touches the model.
- One worker thread owns the segmenter from construction to ``close()``: engines
  require every device call on the thread that opened the device. The subscription
  callback drops the newest frame into a one-slot box and wakes the worker; a frame
  still in the box when the next arrives is dropped and counted, so no queue builds.
  With ``cameras`` each camera has its own box, and the worker takes them in turn.

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

import contextlib
import copy
import dataclasses
import functools
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import rclpy
import rclpy.exceptions
import rclpy.logging
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy._rclpy_pybind11 import InvalidHandle
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecyclePublisher, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from std_msgs.msg import Header
from vision_msgs.msg import Detection2DArray, Detection3DArray, LabelInfo

from tt_sam3_ros.core.class_ids import ClassIds
from tt_sam3_ros.core.depth_pairing import Answer3D
from tt_sam3_ros.core.errors import InputError, printable, quoted
from tt_sam3_ros.core.exemplars import BOX_ONLY_PROMPT, check_exemplars
from tt_sam3_ros.core.settings import (
    ALL_DEVICES,
    RunSettings,
    camera_names,
    device_names,
    invalid_values,
    settings_from,
)
from tt_sam3_ros.engines import CHECKED_STAGES, EngineError, chip_count
from tt_sam3_ros.engines.ttnn_model.device import BlackholeChips
from tt_sam3_ros.ros import messages, messages_3d
from tt_sam3_ros.ros.diagnostics import (
    NodeView,
    camera_status,
    chip_status,
    depth_status,
    segmentation_status,
    tracking_status,
)
from tt_sam3_ros.ros.log_forwarding import forward_library_logging, stop_forwarding
from tt_sam3_ros.ros.parameters import (
    PARAMETERS,
    READ_AT_ACTIVATE,
    READ_AT_CONFIGURE,
    RELIABILITIES,
    coerced,
    ttnn_options,
    wrong_type,
)
from tt_sam3_ros.runtime.chips import Chip, ChipPool
from tt_sam3_ros.runtime.pipeline import (
    ENGINE_ERROR_LIMIT,
    LOG_THROTTLE_S,
    REASON_LIMIT,
    CameraState,
    FrameInput,
    FrameOutput,
    FramePipeline,
    Wants,
    is_expected_failure,
)
from tt_sam3_ros.runtime.worker import Frame, FrameSlot
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID

__all__ = ["ENGINE_ERROR_LIMIT", "NODE_NAME", "Sam3Node"]

NODE_NAME = "sam3"

# Outputs are reliable (a reliable publisher serves both best-effort and reliable
# subscribers, so no consumer meets a QoS mismatch) and keep a few messages so a
# message_filters synchroniser can pair detections with masks.
OUTPUT_QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
# Exemplar boxes are rare and each one matters: reliable, a few kept.
PROMPT_BOXES_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
# Latched: a consumer that starts later still learns which class id is which prompt.
LABEL_INFO_QOS = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


@dataclass
class _Camera:
    """One camera's ROS handles beside its pipeline state. Without ``cameras`` the node has one,
    named ''.

    Its topics are the node's own names under the camera's: ``front/image`` in,
    ``~/front/detections`` out; the unnamed camera keeps ``image`` and ``~/detections``.
    """

    state: CameraState
    subscriptions: list[Subscription] = field(default_factory=list)
    detections_pub: LifecyclePublisher | None = None
    mask_pub: LifecyclePublisher | None = None
    overlay_pub: LifecyclePublisher | None = None
    detections_3d_pub: LifecyclePublisher | None = None
    points_pub: LifecyclePublisher | None = None
    label_info_pub: LifecyclePublisher | None = None
    #: ~/<camera>/prompt_boxes (also in ``subscriptions``): its publisher count decides whether
    #: the camera's frames are kept for boxes drawn on them.
    boxes_sub: Subscription | None = None

    PUBLISHERS = (
        "detections_pub",
        "mask_pub",
        "overlay_pub",
        "detections_3d_pub",
        "points_pub",
        "label_info_pub",
    )
    #: Created at activate, only while the depth parameter is on.
    PUBLISHERS_3D = ("detections_3d_pub", "points_pub")

    @property
    def name(self) -> str:
        return self.state.name

    def topic(self, base: str) -> str:
        """``base`` under this camera's name: ``front/image``; the unnamed camera's is ``base``."""
        return f"{self.name}/{base}" if self.name else base


class _FrameOutputs:
    """One frame's outputs onto its camera's publishers, every message with the input header.

    Made per frame on the worker thread: the pipeline asks what is wanted and hands the
    outputs over as plain data; the conversion modules build the messages.
    """

    def __init__(self, node: Sam3Node, camera: _Camera, header: Header, depth: bool) -> None:
        self._node = node
        self._camera = camera
        self._header = header
        self.depth = depth
        self._detections: Detection2DArray | None = None

    def wants(self) -> Wants:
        overlay, points = self._camera.overlay_pub, self._camera.points_pub
        return Wants(
            overlay=overlay is not None and overlay.get_subscription_count() > 0,
            cloud=points is not None and points.get_subscription_count() > 0,
        )

    def publish(self, output: FrameOutput) -> None:
        camera, header = self._camera, self._header
        if camera.detections_pub is None or camera.mask_pub is None:
            return
        if BOX_ONLY_PROMPT in output.result.prompts and not self._node.label_info_has_box_only:
            self._node.publish_label_info()  # the box-only concept's class id, before its first use
        with self._node.publishing():
            self._detections = messages.result_to_detections(output.result, header, output.class_ids)
            camera.detections_pub.publish(self._detections)
            camera.mask_pub.publish(messages.instance_mask_to_image(output.labels, header))
            if output.overlay is not None and camera.overlay_pub is not None:
                camera.overlay_pub.publish(messages.rgb_to_image(output.overlay, header))

    def publish_3d(self, answer: Answer3D) -> None:
        # Read once: an activate with depth off removes them from the camera meanwhile.
        detections_3d_pub, points_pub = self._camera.detections_3d_pub, self._camera.points_pub
        if detections_3d_pub is None or points_pub is None or self._detections is None:
            return
        with self._node.publishing():
            detections_3d_pub.publish(
                messages_3d.detections_3d(self._detections, answer.geometries, self._header)
            )
            if answer.points is not None:
                points_pub.publish(messages_3d.cloud_to_message(answer.points, self._header))


def _has_parameter_hooks() -> bool:
    """Whether rclpy runs callbacks before and after a parameter set: Iron and later; not Humble.

    Asked per node, not at import, so a test can hide them and run the Humble path on any rclpy.
    """
    return hasattr(LifecycleNode, "add_pre_set_parameters_callback") and hasattr(
        LifecycleNode, "add_post_set_parameters_callback"
    )


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

    #: Set on an rclpy without pre/post set-parameters callbacks (Humble): ``set_parameters_atomically``
    #: then coerces and applies itself. False until the callbacks are registered, so the startup
    #: checks' own set goes straight to rclpy.
    _parameter_hooks_emulated = False

    def __init__(self, stop_requested: threading.Event | None = None, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        # Set by main's signal handler: a configure still loading gives up at once.
        self._stop_requested = stop_requested or threading.Event()
        self._log_forwarding = forward_library_logging(self.get_logger())
        for name, (default, descriptor) in PARAMETERS.items():
            # Dynamically typed: a value of the wrong type reaches our check, which says what
            # was expected with an example (rclpy's own check says "expected '9' got '6'").
            dynamic = copy.deepcopy(descriptor)
            dynamic.dynamic_typing = True
            self.declare_parameter(name, None if isinstance(default, Parameter.Type) else default, dynamic)
        self._settings = RunSettings()
        # Class ids stay with their prompt texts for the node's life (LabelInfo, class_id).
        self._class_ids = ClassIds()
        self._check_startup_parameters()
        self._register_parameter_callbacks()

        self._state = "unconfigured"
        # Decode, segment, track, 3D; the engine's counters (every camera's frames together)
        # and one tracker per camera, kept for the node's life so no track id is given twice.
        self._pipeline = FramePipeline(now_ns=lambda: self.get_clock().now().nanoseconds)
        self._stats = self._pipeline.engine_stats
        # The cameras (``cameras``, read at configure); their slots, inputs, outputs, counters.
        self._cameras = self._make_cameras(())
        self._slot = FrameSlot()
        # One engine per chip (``devices``; one engine on ``device`` without it), on threads of their own.
        self._chips: ChipPool | None = None
        # Whether ``devices`` named the chips at the last configure: /diagnostics then has one
        # status per chip.
        self._per_chip = False
        # With ``devices``: the chips, opened together by whichever chip's thread builds first
        # (ttnn ties a chip opened alone to those opened before it: closing one chip would close
        # the others). Set before the chips' threads start, read by them, dropped at release.
        self._chip_set: BlackholeChips | None = None
        self._label_info_pub: LifecyclePublisher | None = None
        # Whether the LabelInfo latched last names the box-only concept.
        self.label_info_has_box_only = False
        # The depth path (``depth: true``, read at activate) of every camera.
        self._depth_enabled = False
        self._engine_info: dict[str, str] = {}
        self._release_lock = threading.Lock()
        # Set when the engine is deemed lost: the deactivate it triggers returns ERROR.
        self._engine_lost = False

        self._run_transitions_apart()
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diagnostics_timer = self.create_timer(
            1.0, self._publish_diagnostics, callback_group=MutuallyExclusiveCallbackGroup()
        )

    def _run_transitions_apart(self) -> None:
        """Serve the change_state service in a callback group of its own.

        ``ros2 lifecycle set <node> configure`` runs ``on_configure`` inside that service, and
        configure waits for the model load (seconds; minutes on a first download). rclpy puts
        the lifecycle services in the node's default group, beside the parameter services,
        get_state and the subscriptions: the wait would hold them all. Apart, it holds one
        executor thread and nothing else.
        """
        service = self._service_change_state
        group = MutuallyExclusiveCallbackGroup()
        group.add_entity(service)
        service.callback_group = group

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
        """Validate values given with -p / --params-file, which bypass the set callbacks.

        Raises:
            ValueError: naming the parameter, what is wrong with it and an example.
        """
        for name in PARAMETERS:
            parameter = self.get_parameter(name)
            if name in ("prompts", "cameras", "devices") and parameter.type_ == Parameter.Type.NOT_SET:
                continue  # unset: the node waits for prompts; one camera on image; one device
            reason = wrong_type(name, parameter.type_, parameter.value)
            if reason:
                raise ValueError(reason)
            if coerced(parameter) is not parameter:
                # An integer given for a double escaped the descriptor's range at declare (rclpy
                # checks a double range on doubles only); as a double it is checked here.
                (result,) = self.set_parameters([coerced(parameter)])
                if not result.successful:
                    raise ValueError(result.reason)
        values = self._parameter_values()
        reason = invalid_values(values)
        if reason:
            raise ValueError(reason)
        self._settings = self._with_class_ids(settings_from(values))

    @staticmethod
    def _coerce_parameters(parameters: list[Parameter]) -> list[Parameter]:
        """Before rclpy's checks: an integer given for a double is that double (threshold 0)."""
        return [coerced(parameter) for parameter in parameters]

    def _register_parameter_callbacks(self) -> None:
        """Coerce, validate and apply every later change (values given at start were checked above).

        The validating callback must refuse with a reason before anything changes, so applying
        waits until rclpy has stored the values. Iron's rclpy added callbacks that run before and
        after a set; Humble's has only the validating one, so there ``set_parameters_atomically``
        coerces before rclpy's checks and applies after rclpy's store itself: the same order, on
        the same thread, before the caller (a parameter service) has its answer.
        """
        if _has_parameter_hooks():
            self.add_pre_set_parameters_callback(self._coerce_parameters)
            self.add_on_set_parameters_callback(self._validate_parameter_change)
            self.add_post_set_parameters_callback(self._apply_parameter_change)
            return
        self._parameter_hooks_emulated = True
        self.add_on_set_parameters_callback(self._validate_parameter_change)

    def set_parameters(self, parameter_list: list[Parameter]) -> list[SetParametersResult]:
        """rclpy's; on Humble one parameter at a time through ``set_parameters_atomically``, as
        rclpy itself sets them, so each is coerced and applied as on Iron and later."""
        if not self._parameter_hooks_emulated:
            return super().set_parameters(parameter_list)
        return [self.set_parameters_atomically([parameter]) for parameter in parameter_list]

    def set_parameters_atomically(self, parameter_list: list[Parameter]) -> SetParametersResult:
        """rclpy's; on Humble coerced first, so the descriptors' ranges judge the double an integer
        means and the double is what is stored, and applied once rclpy has stored the values.

        Humble's parameter services call this for ``ros2 param set`` and ``ros2 param load``.
        """
        if not self._parameter_hooks_emulated:
            return super().set_parameters_atomically(parameter_list)
        parameters = self._coerce_parameters(parameter_list)
        result = super().set_parameters_atomically(parameters)
        if result.successful:
            self._apply_parameter_change(parameters)
        return result

    def _with_class_ids(self, settings: RunSettings) -> RunSettings:
        """``settings`` with the class ids of its prompts (new prompts get the next ids)."""
        return dataclasses.replace(settings, class_ids=self._class_ids.assign(settings.prompts))

    def _validate_parameter_change(self, parameters: list[Parameter]) -> SetParametersResult:
        """Accept or refuse a set-parameters request as a whole, with the reason.

        Runs before anything changes; ranges were already checked by rclpy against the
        descriptors, types are checked here (the parameters are dynamically typed).
        Applying happens in ``_apply_parameter_change``.
        """
        values = self._parameter_values()
        for parameter in parameters:
            refusal = wrong_type(parameter.name, parameter.type_, parameter.value) or self._refuse_now(
                parameter.name
            )
            if refusal:
                return self._refused(refusal)
            values[parameter.name] = parameter.value
        reason = invalid_values(values, prompts_required=any(p.name == "prompts" for p in parameters))
        return self._refused(reason) if reason else SetParametersResult(successful=True)

    def _refused(self, reason: str) -> SetParametersResult:
        """A refusal with its reason, also logged (at most once per 5 s): whoever watches the
        robot's log sees why a change another tool asked for did not happen."""
        self.get_logger().warning(f"parameter change refused: {reason}", throttle_duration_sec=LOG_THROTTLE_S)
        return SetParametersResult(successful=False, reason=reason)

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
        self._settings = self._with_class_ids(settings_from(values))
        changed = {parameter.name for parameter in parameters}
        if changed & {"prompts", "threshold"}:
            self.publish_label_info()
        if "prompts" in changed:
            self.get_logger().info(f"prompts now [{', '.join(quoted(p) for p in self._settings.prompts)}]")

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
        self._stats.start_run()
        values = self._parameter_values()
        request = {name: values[name] for name in READ_AT_CONFIGURE}
        # max_instances changes any time; its value at configure sizes the chip's top-k (a later,
        # larger value is still served exactly, by reading every query back).
        request["max_instances"] = values["max_instances"]
        self._cameras = self._make_cameras(camera_names(values["cameras"]))
        self._slot = FrameSlot(tuple(self._cameras))
        try:
            devices = self._devices_to_open(values)
        except EngineError as error:
            self._report_configure_failure(error)
            self._release()
            return TransitionCallbackReturn.FAILURE
        if device_names(values["devices"]):
            self._chip_set = BlackholeChips([int(name) for name, _ in devices])
        chips = ChipPool(
            devices,
            functools.partial(self._build_segmenter, request),
            self._handle_frame,
            self._slot,
            self.get_logger(),
            on_lost=self._on_chip_lost,
            on_closed=self._on_engine_closed,
        )
        self._chips = chips
        self._per_chip = bool(device_names(values["devices"]))
        self.get_logger().info(f"configuring: {self._engine_request()}")
        started = time.monotonic()
        chips.start()
        while not chips.wait_ready(0.2):
            if self._stop_requested.is_set() or not self.context.ok():
                self.get_logger().warning("shutdown requested while configuring")
                self._release()
                return TransitionCallbackReturn.FAILURE
        chips.settle()
        self._close_unclaimed_chips()
        failures = chips.startup_errors
        if not chips.serving:
            for error in failures.values():
                self._report_configure_failure(error)
            self._release()
            return TransitionCallbackReturn.FAILURE
        for name, error in failures.items():
            self._report_configure_failure(error, f"chip {name} is out of service until the next configure")
        self._engine_info = chips.description
        self._create_publishers()
        self._state = "inactive"
        self.get_logger().info(
            f"configured in {time.monotonic() - started:.1f} s: "
            + ", ".join(f"{key}={value}" for key, value in self._engine_info.items())
        )
        return super().on_configure(state)

    @_transition
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Enable the publishers (the 3D ones exist only with depth on), latch LabelInfo, subscribe."""
        self._create_3d_publishers(bool(self.get_parameter("depth").value))
        result = super().on_activate(state)
        if result != TransitionCallbackReturn.SUCCESS:
            return result
        self._subscribe()
        self._state = "active"
        self.publish_label_info()
        if not self._settings.prompts:
            self.get_logger().warning(
                "active but no prompts set; frames are ignored until e.g. "
                f"ros2 param set {self.get_fully_qualified_name()} prompts \"['car', 'person']\""
            )
        return TransitionCallbackReturn.SUCCESS

    @_transition
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop inference: unsubscribe and drop the pending frame; the engine stays loaded.

        ERROR instead when the engine was deemed lost: rclpy then runs ``on_error``.
        """
        self._unsubscribe()
        for camera in self._slot.drain():
            self._cameras[camera].state.stats.count_dropped()
        if self._engine_lost:
            return TransitionCallbackReturn.ERROR
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
        self._engine_lost = False
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
            chips, self._chips = self._chips, None
            if chips is not None:
                # Said before stop(): the worker may log "engine released" at once.
                if chips.alive:
                    self.get_logger().info("releasing the engine (once the work in flight is done)")
                chips.stop()
                chips.join()
            self._close_unclaimed_chips()
            self._chip_set = None
            for camera in self._cameras.values():
                for name in camera.PUBLISHERS:
                    publisher = getattr(camera, name)
                    if publisher is not None:
                        self.destroy_lifecycle_publisher(publisher)
                        setattr(camera, name, None)
            if self._label_info_pub is not None:
                self.destroy_lifecycle_publisher(self._label_info_pub)
                self._label_info_pub = None
            self._engine_info = {}
            self._pipeline.reset_tracks()
            if self._state != "finalized":
                self._state = "unconfigured"

    def destroy_node(self) -> None:
        """Stop forwarding the library's logging to this node's logger, then destroy it."""
        stop_forwarding(self._log_forwarding)
        super().destroy_node()

    # ----------------------------------------------------------------- engine

    def _engine_request(self) -> str:
        names = ("engine", "tracker", "model_id", "device", "dtype")
        return ", ".join(f"{name}={self.get_parameter(name).value or 'default'}" for name in names)

    def _build_segmenter(self, request: dict[str, Any], device: str) -> Any:
        """Called on a chip's thread: weights, device, engine (all its device calls stay there).

        ``request`` holds the READ_AT_CONFIGURE parameter values and max_instances' value,
        captured by on_configure; ``device`` is the chip's (``device``'s value with one chip).
        """
        from tt_sam3_ros.core.segmenter import Sam3Segmenter

        request = {**request, "device": device}

        if request["model_id"] == TINY_MODEL_ID:
            self.get_logger().warning(
                f"model_id '{TINY_MODEL_ID}': a tiny model with RANDOM weights; "
                "every detection and mask it publishes is MEANINGLESS (plumbing tests only)"
            )
        if request["tracker"] == "sam3":
            from tt_sam3_ros.core.video_tracker import Sam3VideoEngine

            return Sam3VideoEngine.from_pretrained(
                model_id=request["model_id"],
                revision=request["revision"] or None,
                weights_dir=request["weights_dir"] or None,
                device=request["device"] or None,
                max_image_side=request["max_image_side"],
            )
        return Sam3Segmenter.from_pretrained(
            model_id=request["model_id"],
            revision=request["revision"] or None,
            weights_dir=request["weights_dir"] or None,
            engine=request["engine"],
            device=request["device"] or None,
            dtype=request["dtype"] or None,
            max_image_side=request["max_image_side"],
            max_prompts=request["max_prompts"],
            max_instances=request["max_instances"],
            ttnn_options=ttnn_options(request),
            chips=self._chip_set,
        )

    def _report_configure_failure(self, error: BaseException, consequence: str = "") -> None:
        """Log why configure (or one chip of several) failed: an expected failure's reason alone
        (its traceback at DEBUG), any other with its traceback; ``consequence`` follows the reason
        when the node configures without that chip."""
        details = "".join(traceback.format_exception(error))
        after = f" ({consequence})" if consequence else ""
        if not consequence:
            self._stats.note_error(f"configure: {printable(error, REASON_LIMIT)}")
        if is_expected_failure(error):
            self.get_logger().error(f"cannot configure: {error}{after}")
            self.get_logger().debug(f"cannot configure:\n{details}")
        else:
            self.get_logger().error(f"cannot configure: {type(error).__name__}: {error}{after}\n{details}")

    def _on_engine_closed(self, chip: Chip) -> None:
        """Called on the chip's thread once its engine's ``close()`` returned: the device is free."""
        description = chip.snapshot().description
        which = f" (chip {chip.name})" if self._per_chip else ""
        self.get_logger().info(
            f"engine released{which}: " + ", ".join(f"{key}={value}" for key, value in description.items())
        )

    def _close_unclaimed_chips(self) -> None:
        """Close the chips opened together whose engine never took its device (its build failed
        first), so the next configure can open them again; the others' engines close their own."""
        if self._chip_set is None:
            return
        try:
            closed = self._chip_set.close_unclaimed()
        except Exception as error:  # a chip that will not close must not stop the release
            self.get_logger().error(f"closing the chips no engine took failed: {error}")
            return
        if closed:
            self.get_logger().info(f"closed chip(s) {', '.join(map(str, closed))}: no engine started on them")

    def _devices_to_open(self, values: dict[str, Any]) -> list[tuple[str, str]]:
        """(name, device) of each chip to open: ``devices`` (``all``: every chip ttnn sees), else
        the one device ``device`` names.

        Raises:
            EngineError: ``all`` and ttnn cannot be loaded or sees no chip.
        """
        names = device_names(values["devices"])
        if not names:
            device = values["device"] or ""
            return [(device or "default", device)]
        if names == (ALL_DEVICES,):
            count = chip_count()
            if count < 1:
                raise EngineError(f"devices '{ALL_DEVICES}': ttnn sees no Tenstorrent chip")
            names = tuple(str(index) for index in range(count))
            self.get_logger().info(f"devices '{ALL_DEVICES}': ttnn sees {count} chip(s): {', '.join(names)}")
        return [(name, name) for name in names]

    # ----------------------------------------------------------------- topics

    def _make_cameras(self, names: tuple[str, ...]) -> dict[str, _Camera]:
        """Fresh per-camera state, counting into the engine's; no names: the one camera on ``image``."""
        return {name: _Camera(state) for name, state in self._pipeline.make_cameras(names).items()}

    def _create_publishers(self) -> None:
        """Each camera's outputs under ``~/<camera>/``; LabelInfo is one topic for all cameras."""
        for camera in self._cameras.values():
            camera.detections_pub = self._output(camera, Detection2DArray, "detections")
            camera.mask_pub = self._output(camera, Image, "masks")
            camera.overlay_pub = self._output(camera, Image, "overlay")
            if camera.name:  # a named camera; the unnamed one's is ~/label_info itself
                # vision_msgs: LabelInfo at the image's namespace level, beside this camera's masks.
                camera.label_info_pub = self.create_lifecycle_publisher(
                    LabelInfo, f"~/{camera.topic('label_info')}", LABEL_INFO_QOS
                )
        self._label_info_pub = self.create_lifecycle_publisher(LabelInfo, "~/label_info", LABEL_INFO_QOS)

    def _create_3d_publishers(self, depth: bool) -> None:
        """~/detections_3d and ~/points for each camera with depth on; none (destroyed) with it off.

        Called at activate, where the depth parameter is read: a node without depth advertises
        no 3D topic a consumer could wait on.
        """
        for camera in self._cameras.values():
            if depth and camera.detections_3d_pub is None:
                camera.detections_3d_pub = self._output(camera, Detection3DArray, "detections_3d")
                camera.points_pub = self._output(camera, PointCloud2, "points")
            elif not depth:
                for name in camera.PUBLISHERS_3D:
                    publisher = getattr(camera, name)
                    if publisher is not None:
                        setattr(camera, name, None)  # first, so a frame in flight sees it gone
                        self.destroy_lifecycle_publisher(publisher)

    def _output(self, camera: _Camera, msg_type: Any, name: str) -> LifecyclePublisher:
        return self.create_lifecycle_publisher(msg_type, f"~/{camera.topic(name)}", OUTPUT_QOS)

    def _input(
        self, camera: _Camera, msg_type: Any, name: str, callback: Callable[[Any], None]
    ) -> Subscription:
        """An input of the node's own, ``~/<camera>/<name>`` (exemplar boxes)."""
        return self.create_subscription(msg_type, f"~/{camera.topic(name)}", callback, PROMPT_BOXES_QOS)

    def _subscribe(self) -> None:
        """Subscribe with the QoS from parameters; best effort by default, which every publisher matches."""
        reliability = RELIABILITIES[self.get_parameter("qos_reliability").value]
        qos = QoSProfile(depth=self.get_parameter("qos_depth").value, reliability=reliability)
        compressed = self.get_parameter("transport").value == "compressed"
        depth = bool(self.get_parameter("depth").value)
        for camera in self._cameras.values():
            on_image = functools.partial(self._on_image, camera)
            if compressed:
                image_sub = self.create_subscription(
                    CompressedImage, camera.topic("image/compressed"), on_image, qos
                )
            else:
                image_sub = self.create_subscription(Image, camera.topic("image"), on_image, qos)
            camera.subscriptions.append(image_sub)
            self.get_logger().info(f"subscribed to {image_sub.topic_name}")
            on_boxes = functools.partial(self._on_prompt_boxes, camera)
            camera.boxes_sub = self._input(camera, Detection2DArray, "prompt_boxes", on_boxes)
            camera.subscriptions.append(camera.boxes_sub)
            if depth:
                self._subscribe_depth(camera, qos)
        self._depth_enabled = depth

    def _subscribe_depth(self, camera: _Camera, qos: QoSProfile) -> None:
        """Depth and camera_info, with the image's QoS; their callbacks only store the message."""
        camera.state.depth_pairing.clear()
        depth_sub = self.create_subscription(
            Image, camera.topic("depth"), functools.partial(self._on_depth, camera), qos
        )
        camera_info_sub = self.create_subscription(
            CameraInfo, camera.topic("camera_info"), functools.partial(self._on_camera_info, camera), qos
        )
        camera.subscriptions += [depth_sub, camera_info_sub]
        self.get_logger().info(
            f"depth on: subscribed to {depth_sub.topic_name} and {camera_info_sub.topic_name}"
        )

    def _unsubscribe(self) -> None:
        self._depth_enabled = False
        for camera in self._cameras.values():
            subscriptions, camera.subscriptions, camera.boxes_sub = camera.subscriptions, [], None
            camera.state.exemplars.forget_frames()
            for subscription in subscriptions:
                self.destroy_subscription(subscription)
            camera.state.depth_pairing.clear()

    def _on_image(self, camera: _Camera, msg: Image | CompressedImage) -> None:
        """Hand the camera's newest frame to the worker; never waits for inference."""
        state = camera.state
        state.stats.count_received()
        frame = Frame(msg, time.monotonic(), camera.name)
        if self._boxes_publisher(camera):
            state.exemplars.note_received(messages.stamp_ns(msg.header), msg.header.frame_id, frame)
        else:
            state.exemplars.forget_frames()
        if not self._settings.prompts and not state.exemplars.has_box_only:
            return
        if self._depth_enabled:
            state.depth_pairing.note_colour(messages.stamp_ns(msg.header))
        if self._slot.put(frame):
            state.stats.count_dropped()

    def _boxes_publisher(self, camera: _Camera) -> bool:
        """Whether anyone publishes on the camera's prompt_boxes: only then are its frames kept
        to draw boxes on (each is a whole image message)."""
        subscription = camera.boxes_sub
        if subscription is None:
            return False
        try:
            return self._publisher_count(subscription) > 0
        except InvalidHandle:  # destroyed by a deactivate while the worker answers its last frame
            return False

    def _publisher_count(self, subscription: Subscription) -> int:
        """The publishers ``subscription`` is matched with; on Humble, whose subscriptions cannot
        count them (Iron added that), the graph's publishers on its topic, which also counts one
        whose QoS does not match (its frames are then kept for boxes that cannot arrive)."""
        if hasattr(subscription, "get_publisher_count"):
            return subscription.get_publisher_count()
        return self.count_publishers(subscription.topic_name)

    def _on_prompt_boxes(self, camera: _Camera, msg: Detection2DArray) -> None:
        """Exemplar boxes drawn on a kept frame of this camera: that frame goes to the worker with
        them (ahead of plain frames); an empty array clears the camera's exemplars."""
        state = camera.state
        if not msg.detections:
            if state.exemplars.clear():
                self.get_logger().info(f"exemplars cleared on camera {quoted(camera.name)}")
                self.publish_label_info()
            return
        settings = self._settings
        try:
            boxes = messages.prompt_boxes(msg, dict(settings.class_ids))
            check_exemplars(boxes, settings.prompts)
            frame, generation = state.exemplars.find(messages.stamp_ns(msg.header), msg.header.frame_id)
        except InputError as error:
            reason = f"prompt_boxes refused: {printable(error, REASON_LIMIT)}"
            state.stats.count_rejected(reason)
            self.get_logger().warning(reason, throttle_duration_sec=LOG_THROTTLE_S)
            return
        request = dataclasses.replace(frame, boxes=tuple(boxes), generation=generation)
        if self._slot.put(request):
            state.stats.count_dropped()

    def _on_depth(self, camera: _Camera, msg: Image) -> None:
        camera.state.depth_stats.count_depth()
        camera.state.depth_pairing.add_depth(messages_3d.depth_frame(msg))

    def _on_camera_info(self, camera: _Camera, msg: CameraInfo) -> None:
        camera.state.depth_stats.count_camera_info()
        camera.state.depth_pairing.set_camera_info(messages_3d.camera_info_data(msg))

    def _box_only_in_force(self) -> bool:
        return any(camera.state.exemplars.has_box_only for camera in self._cameras.values())

    def publish_label_info(self) -> None:
        """Latch the class map on ~/label_info and beside each named camera's masks: the prompts,
        and the box-only concept ('') while a camera has one.

        Called from the executor (parameters, prompt_boxes) and the worker (a box-only concept's
        first answer); rclpy's publish is thread-safe."""
        publisher = self._label_info_pub
        if publisher is None:
            return
        header = Header()
        header.stamp = self.get_clock().now().to_msg()
        settings = self._settings
        names, class_ids = settings.prompts, dict(settings.class_ids)
        box_only = self._box_only_in_force()
        if box_only:
            names = (*names, BOX_ONLY_PROMPT)
            class_ids[BOX_ONLY_PROMPT] = settings.box_only_class_id
        self.label_info_has_box_only = box_only
        label_info = messages.label_info(names, settings.threshold, header, class_ids)
        publisher.publish(label_info)
        for camera in self._cameras.values():
            if camera.label_info_pub is not None:
                camera.label_info_pub.publish(label_info)

    # ----------------------------------------------------------------- worker side

    def _handle_frame(self, segmenter: Any, frame: Frame, chip: Chip, wait_turn: Callable[[], None]) -> str:
        """Called on a chip's thread: one frame through the pipeline onto its camera's topics.

        ``wait_turn`` holds the outputs until the camera's earlier frames are out (``chips``).
        Returns why the chip is lost when this frame made it so, else ''.
        """
        camera = self._cameras[frame.camera]
        header = frame.msg.header
        report = self._pipeline.process(
            segmenter,
            camera.state,
            FrameInput(
                decode=functools.partial(messages.decode_image, frame.msg),
                stamp_ns=messages.stamp_ns(header),
                frame_id=header.frame_id,
                received_s=frame.received_s,
                camera=frame.camera,
                boxes=frame.boxes,
                generation=frame.generation,
            ),
            self._settings,
            _FrameOutputs(self, camera, header, self._depth_enabled),
            chip=chip.stats,
            wait_turn=wait_turn,
        )
        if report.outcome == "answered" and self._boxes_publisher(camera):
            stamp = messages.stamp_ns(header)
            camera.state.exemplars.note_answered(stamp, header.frame_id, dataclasses.replace(frame, boxes=()))
        if self.label_info_has_box_only and not self._box_only_in_force():
            self.publish_label_info()  # the box-only concept was replaced: its class leaves the map
        if report.engine_lost:
            return f"{ENGINE_ERROR_LIMIT} frames in a row failed in the engine (last: {report.reason})"
        return ""

    def _on_chip_lost(self, chip: Chip) -> None:
        """Called on the lost chip's thread (its engine about to close): the other chips serve on,
        or, with none left, the node takes the lifecycle's error path."""
        chips = self._chips
        serving = chips.serving if chips is not None else ()
        if not serving:
            self._engine_given_up(chip.reason)
            return
        names = ", ".join(c.name for c in serving)
        self.get_logger().error(
            f"chip {chip.name} taken out of service: {chip.reason}; chip(s) {names} serve every camera. "
            f"The next configure opens it again: ros2 lifecycle set {self.get_fully_qualified_name()} "
            "deactivate, cleanup, configure, activate"
        )

    @contextlib.contextmanager
    def publishing(self) -> Iterator[None]:
        """Publish on the worker thread; a failure while ROS shuts down is no failure (the
        publishers are gone) and is dropped, any other is the pipeline's to count."""
        try:
            yield
        except Exception:
            if self.context.ok():
                raise

    def _engine_given_up(self, reason: str) -> None:
        """Called on the worker thread: the engine (the last chip serving) failed ENGINE_ERROR_LIMIT
        frames in a row; ``reason`` says so.

        The lifecycle's error path (deactivate returns ERROR, on_error releases the engine,
        the node ends unconfigured) runs on a thread of its own: it joins this worker.
        """
        summary = (
            f"{reason}; the engine looks lost: taking the lifecycle error path (engine released, node "
            f"unconfigured). Fix the device, then: ros2 lifecycle set {self.get_fully_qualified_name()} "
            "configure, activate"
        )
        self._stats.note_error(summary)
        self.get_logger().fatal(summary)
        self._engine_lost = True
        threading.Thread(target=self.trigger_deactivate, name="sam3-engine-lost", daemon=True).start()

    # ----------------------------------------------------------------- diagnostics

    def _publish_diagnostics(self) -> None:
        """The engine's status (state, frame counts and recent timings of all cameras), ~1 Hz.

        With ``cameras``, one status per camera follows (and its depth status with depth on).
        """
        view = self._node_view()
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status.append(segmentation_status(view, self._stats.snapshot()))
        chips = self._chips
        if self._per_chip and chips is not None:
            array.status += [chip_status(view, chip.snapshot()) for chip in chips.chips]
        for camera in self._cameras.values():
            if camera.name:
                array.status.append(camera_status(view, camera.name, camera.state.stats.camera.snapshot()))
            prefix = f"{self.get_name()}: camera {camera.name}" if camera.name else self.get_name()
            if self._depth_enabled:
                array.status.append(depth_status(prefix, camera.state.depth_stats.snapshot()))
            if self._settings.tracking:
                array.status.append(tracking_status(prefix, camera.state.tracker.ageing()))
        self._diagnostics_pub.publish(array)

    def _node_view(self) -> NodeView:
        engine = self._engine_info
        return NodeView(
            name=self.get_name(),
            state=self._state,
            engine=engine.get("engine", self.get_parameter("engine").value),
            device=engine.get("device", self.get_parameter("device").value or "default"),
            dtype=engine.get("dtype", self.get_parameter("dtype").value or "default"),
            model=engine.get("model", self.get_parameter("model_id").value),
            prompts=self._settings.prompts,
            fully_qualified_name=self.get_fully_qualified_name(),
            prompt_path=engine.get("prompt_path", ""),
            input_path=engine.get("input", ""),
            devices=self._devices_view(),
            stage_checks=tuple((stage, engine[stage]) for stage in CHECKED_STAGES if stage in engine),
        )

    def _devices_view(self) -> str:
        """The chips and which serve, for /diagnostics ('' without ``devices``)."""
        chips = self._chips
        if not self._per_chip or chips is None:
            return ""
        serving = ", ".join(chip.name for chip in chips.serving) or "none"
        return f"{', '.join(chip.name for chip in chips.chips)} (serving: {serving})"
