"""The /sam3 node: text-prompted SAM 3 instance segmentation as a managed ROS 2 node.

The lifecycle node: its construction and its transitions. Its other sides are mixins, one
module each: parameter callbacks (``parameter_handling.py``), each camera's topics and one
frame's outputs (``cameras.py``), the engine it owns and the policy when it is lost
(``engine_ownership.py``), /diagnostics (``node_status.py``). The process around it (executor,
signals, exit code) is ``main.py``; the parameter table is ``parameters.py``, its rules
``tt_sam3_ros.core.settings``; the per-frame pipeline, the worker and the chips are
``tt_sam3_ros.runtime``; message conversion is ``messages.py`` and ``messages_3d.py``.

Threads (why: a slow model must never stall services, parameters or lifecycle calls):

- The executor runs the parameter and lifecycle services (the default group), each
  camera's inputs (a group per camera: image, prompt_boxes, depth, camera_info), the
  change_state service (its own group: a configure it runs waits for the model load, which
  must not hold parameters or get_state) and the diagnostics timer (its own group, so
  /diagnostics keeps flowing while a transition is busy). None of them touches the model.
  The image subscriptions are raw: their callback reads the header, and the worker
  deserialises only the frame it takes (``raw_frames.py``).
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

import copy
import functools
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecyclePublisher, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter

from tt_sam3_ros.core.class_ids import ClassIds
from tt_sam3_ros.core.errors import printable
from tt_sam3_ros.core.settings import (
    RunSettings,
    camera_names,
    device_names,
)
from tt_sam3_ros.engines import BlackholeChips, EngineError
from tt_sam3_ros.ros.callbacks_in_flight import CallbackCounter, CallbacksInFlight
from tt_sam3_ros.ros.cameras import PROMPT_BOXES_QOS, CameraTopics
from tt_sam3_ros.ros.engine_ownership import EngineOwnership
from tt_sam3_ros.ros.log_forwarding import forward_library_logging, stop_forwarding
from tt_sam3_ros.ros.node_status import NodeStatus
from tt_sam3_ros.ros.parameter_handling import ParameterHandling
from tt_sam3_ros.ros.parameters import (
    PARAMETERS,
    READ_AT_CONFIGURE,
)
from tt_sam3_ros.runtime.chips import ChipPool
from tt_sam3_ros.runtime.pipeline import (
    ENGINE_ERROR_LIMIT,
    REASON_LIMIT,
    FramePipeline,
)
from tt_sam3_ros.runtime.worker import FrameSlot

__all__ = ["ENGINE_ERROR_LIMIT", "NODE_NAME", "PROMPT_BOXES_QOS", "Sam3Node"]

NODE_NAME = "sam3"


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


class Sam3Node(
    ParameterHandling, CameraTopics, EngineOwnership, NodeStatus, CallbacksInFlight, LifecycleNode
):
    """Managed node ``sam3``: images in, Detection2DArray + mono8 instance mask out."""

    #: Set on an rclpy without pre/post set-parameters callbacks (Humble): ``set_parameters_atomically``
    #: then coerces and applies itself. False until the callbacks are registered, so the startup
    #: checks' own set goes straight to rclpy.
    _parameter_hooks_emulated = False

    def __init__(self, stop_requested: threading.Event | None = None, **kwargs: Any) -> None:
        self._callback_counter = CallbackCounter()  # before rclpy creates the parameter services
        super().__init__(NODE_NAME, **kwargs)
        try:
            self._set_up(stop_requested)
        except BaseException:
            # A refused startup parameter: the half-built node must not outlive its context.
            # Left to the garbage collector, its rcl node is finalised after rclpy shut down,
            # where Fast DDS's participant teardown can spin forever.
            self.destroy_node()
            raise

    def _set_up(self, stop_requested: threading.Event | None) -> None:
        """Everything but the rclpy node itself: parameters, their checks and callbacks, state,
        the change_state group, /diagnostics."""
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
        # Held by every lifecycle transition, whoever starts it (change_state service, autostart,
        # the engine-lost path, the exit path): rclpy's state machine takes one at a time.
        self._transitions = threading.RLock()
        # Set when the engine is deemed lost: the deactivate it triggers returns ERROR.
        self._engine_lost = False

        self._run_transitions_apart()
        self._count_service_callbacks()
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diagnostics_timer = self.create_timer(
            1.0, self._publish_diagnostics, callback_group=MutuallyExclusiveCallbackGroup()
        )
        # Frames kept for exemplar boxes leave at their age limit even when no frame comes.
        self._kept_frames_timer = self.create_timer(5.0, self._pipeline.kept_frames.expire)

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
        service.callback = self._one_transition_at_a_time(service.callback)

    def _one_transition_at_a_time(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """``run`` (a transition) under the node's transition lock.

        rclpy has no lock of its own: the change_state service, autostart and the engine-lost
        thread would otherwise drive its state machine at once, and the second transition is
        refused mid-way ("Unable to start transition"), leaving the node where the first left it.
        """

        @functools.wraps(run)
        def locked(*args: Any) -> Any:
            with self._transitions:
                return run(*args)

        return locked

    def trigger_configure(self) -> TransitionCallbackReturn:
        return self._one_transition_at_a_time(super().trigger_configure)()

    def trigger_activate(self) -> TransitionCallbackReturn:
        return self._one_transition_at_a_time(super().trigger_activate)()

    def trigger_deactivate(self) -> TransitionCallbackReturn:
        return self._one_transition_at_a_time(super().trigger_deactivate)()

    def trigger_cleanup(self) -> TransitionCallbackReturn:
        return self._one_transition_at_a_time(super().trigger_cleanup)()

    def trigger_shutdown(self) -> TransitionCallbackReturn:
        return self._one_transition_at_a_time(super().trigger_shutdown)()

    def _take_error_path(self) -> None:
        """Release a lost engine through the lifecycle, from whatever state the node is in now.

        Active: deactivate, which returns ERROR, and on_error releases. Inactive (an operator's
        deactivate ran while the last failing frame was in flight): cleanup releases. Otherwise
        a cleanup or shutdown already released it. Under the transition lock, so the state read
        is the state the transition starts from.
        """
        with self._transitions:
            if self._state == "active":
                self.trigger_deactivate()
            elif self._state == "inactive":
                self.get_logger().error("the engine was lost while inactive; releasing it (cleanup)")
                self.trigger_cleanup()
            self._engine_lost = False

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
                self.get_logger().warning(
                    "stop requested while configuring: the phase in flight (weights, engine or "
                    "warm-up) finishes, the later ones are skipped, then anything opened is released"
                )
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
        """Enable the publishers (the 3D ones exist only with depth on), latch LabelInfo, subscribe.

        FAILURE (the node stays inactive) when no chip serves: every engine was lost since
        configure, and an active node would drop every frame."""
        chips = self._chips
        if chips is None or not chips.serving:
            self.get_logger().error(
                "cannot activate: no engine serves (lost since configure); ros2 lifecycle set "
                f"{self.get_fully_qualified_name()} cleanup, then configure, activate"
            )
            return TransitionCallbackReturn.FAILURE
        values = self._activation_values()
        self._create_3d_publishers(bool(values["depth"]))
        result = super().on_activate(state)
        if result != TransitionCallbackReturn.SUCCESS:
            return result
        self._subscribe(values)
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
        try:
            if self._state not in ("finalized", "configuring") and self.context.ok():
                self.trigger_shutdown()
        except Exception as error:  # rclpy raises from a transition state (a cleanup in flight)
            self.get_logger().warning(
                f"no lifecycle shutdown ({printable(error, REASON_LIMIT)}); releasing the engine directly"
            )
        finally:
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
                stuck = chips.join()
                if stuck:
                    which = f"chip(s) {', '.join(stuck)}" if self._per_chip else "engine"
                    self.get_logger().error(
                        f"{which} stuck: not closed (a call into the engine never returned); "
                        "the device stays open until this process exits"
                    )
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
        forwarding = getattr(self, "_log_forwarding", None)
        if forwarding is not None:
            stop_forwarding(forwarding)
        super().destroy_node()
