"""The engine the node owns: building it on its chips, releasing it, and the policy when it is
lost (a chip taken out of service, the node deactivated after too many engine faults). A mixin
of ``Sam3Node``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from tt_sam3_ros.core.errors import StartCancelledError, printable
from tt_sam3_ros.core.settings import (
    ALL_DEVICES,
    device_names,
)
from tt_sam3_ros.engines import EngineError, chip_count
from tt_sam3_ros.ros import messages, raw_frames
from tt_sam3_ros.ros.cameras import FrameOutputs
from tt_sam3_ros.ros.parameters import (
    ttnn_options,
)
from tt_sam3_ros.runtime.chips import Chip
from tt_sam3_ros.runtime.pipeline import (
    ENGINE_ERROR_LIMIT,
    REASON_LIMIT,
    FrameInput,
    is_expected_failure,
)
from tt_sam3_ros.runtime.worker import Frame
from tt_sam3_ros.weights.tiny_model import TINY_MODEL_ID


def _decode(frame_msg: Any, max_side: int) -> Any:
    """The frame's pixels, on the worker: a raw frame is deserialised here, only when taken."""
    return messages.decode_image(raw_frames.message_of(frame_msg), max_side)


class EngineOwnership:
    """Sam3Node's engine side (mixed into the node: ``self`` is the LifecycleNode)."""

    # engine

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
            from tt_sam3_ros.core.video_engine import Sam3VideoEngine

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
            stopping=self._stop_requested.is_set,
        )

    def _report_configure_failure(self, error: BaseException, consequence: str = "") -> None:
        """Log why configure (or one chip of several) failed: an expected failure's reason alone
        (its traceback at DEBUG), any other with its traceback; ``consequence`` follows the reason
        when the node configures without that chip."""
        if isinstance(error, StartCancelledError):  # the node is stopping; the worker said so
            return
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

    # worker side

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
                decode=functools.partial(_decode, frame.msg),
                stamp_ns=messages.stamp_ns(header),
                frame_id=header.frame_id,
                received_s=frame.received_s,
                camera=frame.camera,
                boxes=frame.boxes,
                generation=frame.generation,
            ),
            self._settings,
            FrameOutputs(self, camera, header, self._depth_enabled),
            chip=chip.stats,
            wait_turn=wait_turn,
        )
        if report.outcome == "answered" and self._boxes_publisher(camera):
            stamp = messages.stamp_ns(header)
            kept = dataclasses.replace(frame, boxes=())
            camera.state.exemplars.note_answered(stamp, header.frame_id, kept, len(frame.msg.data))
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
        try:
            threading.Thread(target=self._take_error_path, name="sam3-engine-lost", daemon=True).start()
        except RuntimeError as error:  # no thread can start: the node stays up with no engine serving
            self.get_logger().error(
                f"cannot take the error path ({error}); no engine serves: ros2 lifecycle set "
                f"{self.get_fully_qualified_name()} deactivate, cleanup, then configure, activate"
            )
