"""Each camera's topics: subscriptions in, one frame's outputs onto its publishers, LabelInfo.

A mixin of ``Sam3Node`` (``CameraTopics``) and the per-camera handles it creates."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rclpy._rclpy_pybind11 import InvalidHandle
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecyclePublisher
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from std_msgs.msg import Header
from vision_msgs.msg import Detection2DArray, Detection3DArray, LabelInfo

from tt_sam3_ros.core.depth_pairing import Answer3D
from tt_sam3_ros.core.errors import InputError, printable, quoted
from tt_sam3_ros.core.exemplars import BOX_ONLY_PROMPT, check_exemplars
from tt_sam3_ros.ros import messages, messages_3d, raw_frames
from tt_sam3_ros.ros.parameters import READ_AT_ACTIVATE, RELIABILITIES
from tt_sam3_ros.runtime.pipeline import (
    LOG_THROTTLE_S,
    REASON_LIMIT,
    CameraState,
    FrameOutput,
    Wants,
)
from tt_sam3_ros.runtime.worker import Frame

if TYPE_CHECKING:
    from tt_sam3_ros.ros.node import Sam3Node

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
class Camera:
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
    #: The answer to a frame exemplar boxes were drawn on: an earlier frame, so not on the live
    #: topics (their stamps would go backwards).
    exemplar_detections_pub: LifecyclePublisher | None = None
    exemplar_mask_pub: LifecyclePublisher | None = None
    detections_3d_pub: LifecyclePublisher | None = None
    points_pub: LifecyclePublisher | None = None
    label_info_pub: LifecyclePublisher | None = None
    #: The camera's inputs run in a group of their own: one camera's callbacks neither wait for
    #: another's nor hold the parameter and lifecycle services (the default group).
    group: MutuallyExclusiveCallbackGroup = field(default_factory=MutuallyExclusiveCallbackGroup)
    #: ~/<camera>/prompt_boxes (also in ``subscriptions``): its publisher count decides whether
    #: the camera's frames are kept for boxes drawn on them.
    boxes_sub: Subscription | None = None

    PUBLISHERS = (
        "detections_pub",
        "mask_pub",
        "overlay_pub",
        "exemplar_detections_pub",
        "exemplar_mask_pub",
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


class FrameOutputs:
    """One frame's outputs onto its camera's publishers, every message with the input header.

    Made per frame on the worker thread: the pipeline asks what is wanted and hands the
    outputs over as plain data; the conversion modules build the messages.
    """

    def __init__(self, node: Sam3Node, camera: Camera, header: Header, depth: bool) -> None:
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
        """The frame's detections and mask: on the live topics, or, for the answer to a frame
        exemplar boxes were drawn on, on ``exemplar_detections`` and ``exemplar_masks``."""
        camera, header = self._camera, self._header
        detections_pub, mask_pub = camera.detections_pub, camera.mask_pub
        if output.exemplar_answer:
            detections_pub, mask_pub = camera.exemplar_detections_pub, camera.exemplar_mask_pub
        if detections_pub is None or mask_pub is None:
            return
        if BOX_ONLY_PROMPT in output.result.prompts and not self._node.label_info_has_box_only:
            self._node.publish_label_info()  # the box-only concept's class id, before its first use
        with self._node.publishing():
            self._detections = messages.result_to_detections(output.result, header, output.class_ids)
            detections_pub.publish(self._detections)
            mask_pub.publish(messages.instance_mask_to_image(output.labels, header))
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


class CameraTopics:
    """Sam3Node's topic side (mixed into the node: ``self`` is the LifecycleNode)."""

    # topics

    def _make_cameras(self, names: tuple[str, ...]) -> dict[str, Camera]:
        """Fresh per-camera state, counting into the engine's; no names: the one camera on ``image``."""
        return {name: Camera(state) for name, state in self._pipeline.make_cameras(names).items()}

    def _create_publishers(self) -> None:
        """Each camera's outputs under ``~/<camera>/``; LabelInfo is one topic for all cameras."""
        for camera in self._cameras.values():
            camera.detections_pub = self._output(camera, Detection2DArray, "detections")
            camera.mask_pub = self._output(camera, Image, "masks")
            camera.overlay_pub = self._output(camera, Image, "overlay")
            camera.exemplar_detections_pub = self._output(camera, Detection2DArray, "exemplar_detections")
            camera.exemplar_mask_pub = self._output(camera, Image, "exemplar_masks")
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

    def _output(self, camera: Camera, msg_type: Any, name: str) -> LifecyclePublisher:
        return self.create_lifecycle_publisher(msg_type, f"~/{camera.topic(name)}", OUTPUT_QOS)

    def _image_input(self, camera: Camera, msg_type: type, name: str, qos: QoSProfile) -> Subscription:
        """The camera's image input, raw: its callback reads the header, and the worker
        deserialises only the frame it takes (``raw_frames``)."""
        on_image = functools.partial(self._on_raw_image, camera, msg_type)
        return self.create_subscription(
            msg_type, camera.topic(name), on_image, qos, callback_group=camera.group, raw=True
        )

    def _input(
        self, camera: Camera, msg_type: Any, name: str, callback: Callable[[Any], None]
    ) -> Subscription:
        """An input of the node's own, ``~/<camera>/<name>`` (exemplar boxes)."""
        return self.create_subscription(
            msg_type, f"~/{camera.topic(name)}", callback, PROMPT_BOXES_QOS, callback_group=camera.group
        )

    def _activation_values(self) -> dict[str, Any]:
        """The parameters read at activate (READ_AT_ACTIVATE), read once: the 3D publishers and the
        subscriptions are both made from this copy, so a change while activating cannot leave
        depth subscribed with no 3D publisher (or the reverse); it applies at the next activate."""
        return {name: self.get_parameter(name).value for name in READ_AT_ACTIVATE}

    def _subscribe(self, values: dict[str, Any]) -> None:
        """Subscribe with the QoS from the activation ``values``; best effort by default, which
        every publisher matches."""
        reliability = RELIABILITIES[values["qos_reliability"]]
        qos = QoSProfile(depth=values["qos_depth"], reliability=reliability)
        compressed = values["transport"] == "compressed"
        depth = bool(values["depth"])
        for camera in self._cameras.values():
            if compressed:
                image_sub = self._image_input(camera, CompressedImage, "image/compressed", qos)
            else:
                image_sub = self._image_input(camera, Image, "image", qos)
            camera.subscriptions.append(image_sub)
            self.get_logger().info(f"subscribed to {image_sub.topic_name}")
            on_boxes = functools.partial(self._on_prompt_boxes, camera)
            camera.boxes_sub = self._input(camera, Detection2DArray, "prompt_boxes", on_boxes)
            camera.subscriptions.append(camera.boxes_sub)
            if depth:
                self._subscribe_depth(camera, qos)
        self._depth_enabled = depth

    def _subscribe_depth(self, camera: Camera, qos: QoSProfile) -> None:
        """Depth and camera_info, with the image's QoS; their callbacks only store the message."""
        camera.state.depth_pairing.clear()
        on_depth, on_info = (
            functools.partial(self._on_depth, camera),
            functools.partial(self._on_camera_info, camera),
        )
        depth_sub = self.create_subscription(
            Image, camera.topic("depth"), on_depth, qos, callback_group=camera.group
        )
        camera_info_sub = self.create_subscription(
            CameraInfo, camera.topic("camera_info"), on_info, qos, callback_group=camera.group
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

    def _on_raw_image(self, camera: Camera, msg_type: type, serialized: bytes) -> None:
        """A raw image subscription's callback: the header read, the pixels left serialised."""
        self._on_image(camera, raw_frames.taken(serialized, msg_type))

    def _on_image(self, camera: Camera, msg: Image | CompressedImage | raw_frames.RawImage) -> None:
        """Hand the camera's newest frame to the worker; never waits for inference.

        ``msg`` is the message, or a RawImage (only its header read) from a raw subscription."""
        state = camera.state
        state.stats.count_received()
        frame = Frame(msg, time.monotonic(), camera.name)
        if self._boxes_publisher(camera):
            stamp = messages.stamp_ns(msg.header)
            state.exemplars.note_received(stamp, msg.header.frame_id, frame, len(msg.data))
        else:
            state.exemplars.forget_frames()
        if not self._settings.prompts and not state.exemplars.has_box_only:
            return
        if self._depth_enabled:
            state.depth_pairing.note_colour(messages.stamp_ns(msg.header))
        if self._slot.put(frame):
            state.stats.count_dropped()

    def _boxes_publisher(self, camera: Camera) -> bool:
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

    def _on_prompt_boxes(self, camera: Camera, msg: Detection2DArray) -> None:
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

    def _on_depth(self, camera: Camera, msg: Image) -> None:
        camera.state.depth_stats.count_depth()
        camera.state.depth_pairing.add_depth(messages_3d.depth_frame(msg))

    def _on_camera_info(self, camera: Camera, msg: CameraInfo) -> None:
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
