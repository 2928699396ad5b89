"""Sam3VideoTracker: SAM 3's own detector and memory tracker on a live stream, with bounded state.

    from tt_sam3_ros.core.video_tracker import Sam3VideoTracker
    tracker = Sam3VideoTracker.from_pretrained()            # facebook/sam3 (transformers format)
    for frame in camera:                                   # uint8 RGB HxWx3, one at a time
        result = tracker(frame, ["car", "person"])
        ids = [instance.track_id for instance in result.instances]

Each frame runs SAM 3's video inference in streaming mode (transformers' ``Sam3VideoModel``
with an inference session that is given frames one at a time): the detector finds the prompts'
objects, the memory tracker carries every known object from frame to frame through its memory
of recent frames, and the two are associated, so an object keeps its id through a missed
detection or an occlusion. ``Instance.track_id`` is SAM 3's object id: stable, never reused.

transformers' session keeps everything it has ever seen (each frame's pixels, every object's
outputs on every frame, per-frame scores and suppression lists): a live stream would grow
without bound. This tracker keeps what the memory tracker reads and drops the rest after each
frame:

- per object, the outputs of the last ``memory_frames`` frames (SAM 3 reads the six most recent
  for memory attention and fifteen for object pointers, so 15), reduced to the memory features,
  their position encoding, the object pointer and the object score;
- per object, its ``max_conditioning_frames`` most recent conditioning frames (the frame the
  detector first found it on, and the frames where a confident detection re-anchored it);
  SAM 3 attends to the four most recent and reads the object pointers of all of them, so with
  more than this many an object's outputs start to differ from an unbounded session's;
- no pixels, no cached image features, no per-frame score or suppression history;
- objects: one that no detection has confirmed for ``forget_after_frames`` processed frames is
  forgotten (transformers' streaming mode keeps every object ever seen, and runs the tracker
  for each on every frame).

While no object holds more conditioning frames than the cap and none is forgotten, the outputs
equal transformers' own streaming inference on the same frames.

No ROS here; the node and the CLI use it through the per-frame pipeline (the node's worker
holds ``video_engine.Sam3VideoEngine``, which serves one tracker per camera). The session's
frame store and its accounting are in ``video_session.py``.
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tt_sam3_ros.core import preprocess
from tt_sam3_ros.core.errors import quoted
from tt_sam3_ros.core.prompts import validate_prompts
from tt_sam3_ros.core.results import Instance, SegmentationResult
from tt_sam3_ros.core.video_session import SessionState, StreamFrames, storage_bytes, tensors_in

if TYPE_CHECKING:
    from transformers import Sam3VideoModel, Sam3VideoProcessor

LOG = logging.getLogger(__name__)

#: The trackers a user can choose (the node's ``tracker`` parameter, ``tt-sam3 track --tracker``).
TRACKERS = ("association", "sam3")
#: Engines SAM 3's video tracker runs on: it needs transformers' video model in PyTorch.
SAM3_TRACKER_ENGINES = ("auto", "torch")
#: Devices it runs on (torch's names; empty or auto: CUDA when torch sees one, else the CPU), and
#: its dtype: float32 only (transformers' video processor hands it float32 frames).
SAM3_TRACKER_DEVICE = re.compile(r"(auto|cpu|cuda(:[0-9]+)?)?")
SAM3_TRACKER_DTYPES = ("", "auto", "float32", "fp32")
#: Frames an object may go unconfirmed by any detection before it is forgotten (10 s at 15 fps).
DEFAULT_FORGET_AFTER_FRAMES = 150
#: What a past frame's output keeps: what memory attention and the object pointers read.
MEMORY_KEYS = frozenset({"maskmem_features", "maskmem_pos_enc", "object_pointer", "object_score_logits"})
#: CLIP's context, as transformers' processor tokenises video prompts.
_TEXT_CONTEXT = 32


def check_tracker_engine(tracker: str, engine: str, device: str | None = "", dtype: str | None = "") -> None:
    """Refuse a tracker the engine, device or dtype cannot serve, saying why and what to do.

    Raises:
        EngineError: ``sam3`` on an engine other than torch (the Blackhole engine runs SAM 3's
            detector as traced chip programs; SAM 3's memory tracker has no chip port yet), or
            with a device or dtype its PyTorch model cannot take (``sam3_tracker_problem``).
    """
    from tt_sam3_ros.engines.base import EngineError

    if tracker not in TRACKERS:
        raise EngineError(f"tracker must be one of {', '.join(TRACKERS)}, got {tracker!r}")
    if tracker == "sam3" and engine not in SAM3_TRACKER_ENGINES:
        raise EngineError(
            f"tracker 'sam3' cannot run on the {engine} engine: SAM 3's video tracker (detector and memory "
            "tracker) runs in PyTorch only; use engine 'torch', or tracker 'association' on this engine"
        )
    if tracker == "sam3" and (problem := sam3_tracker_problem(device, dtype)):
        raise EngineError(problem)


def sam3_tracker_problem(device: str | None, dtype: str | None) -> str:
    """Why SAM 3's video tracker cannot run on ``device`` in ``dtype``; '' when it can.

    A chip id (``0``) is a ttnn device: the tracker runs in PyTorch, whose devices are named.
    """
    device, dtype = device or "", dtype or ""
    if not SAM3_TRACKER_DEVICE.fullmatch(device):
        return (
            f"tracker 'sam3' runs in PyTorch: device must be cpu, cuda or cuda:N (empty: CUDA when "
            f"available), got {quoted(device)}"
        )
    if dtype not in SAM3_TRACKER_DTYPES:
        return f"tracker 'sam3' runs in float32: dtype must be float32 or empty, got {quoted(dtype)}"
    return ""


def keep_best(result: SegmentationResult, threshold: float, max_instances: int) -> SegmentationResult:
    """``result`` with only the instances scoring above ``threshold``, at most ``max_instances``."""
    kept = [i for i in result.instances if i.score > threshold][:max_instances]
    return SegmentationResult(result.image_size, result.prompts, kept, result.presence, result.timing_ms)


class Sam3VideoTracker:
    """SAM 3's video inference on one live stream, frame by frame, with bounded state.

    One tracker per stream (camera): its session is that stream's memory. Not thread-safe; call
    it from one thread.
    """

    def __init__(
        self,
        model: Sam3VideoModel,
        processor: Sam3VideoProcessor,
        forget_after_frames: int = DEFAULT_FORGET_AFTER_FRAMES,
        max_conditioning_frames: int | None = None,
        is_random: bool = False,
    ) -> None:
        """``model`` in eval mode on its device; ``processor`` sized for it (image side, tokenizer).

        ``max_conditioning_frames``: None keeps SAM 3's own count in memory attention
        (``tracker_config.max_cond_frame_num``, 4).
        """
        if type(forget_after_frames) is not int or forget_after_frames < 1:
            raise ValueError(f"forget_after_frames must be a positive integer, got {forget_after_frames!r}")
        tracker_config = model.config.tracker_config
        if max_conditioning_frames is None:
            max_conditioning_frames = max(1, tracker_config.max_cond_frame_num)
        if type(max_conditioning_frames) is not int or max_conditioning_frames < 1:
            raise ValueError(
                f"max_conditioning_frames must be a positive integer, got {max_conditioning_frames!r}"
            )
        self.model = model
        self.processor = processor
        self.forget_after_frames = forget_after_frames
        self.max_conditioning_frames = max_conditioning_frames
        #: Past non-conditioning frames the tracker reads: memory (num_maskmem - 1) and pointers.
        self.memory_frames = max(
            tracker_config.num_maskmem - 1, tracker_config.max_object_pointers_in_encoder - 1, 1
        )
        self.is_random = is_random
        self._prompts: list[str] = []
        self._next_prompt_id = 0
        self._frame_index = 0
        self._last_confirmed: dict[int, int] = {}
        self._session = self._new_session()

    @classmethod
    def from_pretrained(
        cls,
        model_id: str = "facebook/sam3",
        revision: str | None = None,
        weights_dir: str | None = None,
        device: str | None = None,
        **options: Any,
    ) -> Sam3VideoTracker:
        """Load SAM 3's video model (detector and tracker) in the transformers format.

        ``model_id`` ``tiny-random`` builds the project's tiny random video model (no download).
        ``device``: cpu, cuda or cuda:N; None or empty: CUDA when torch sees one, else the CPU
        (as the torch engine chooses). ``options`` go to the constructor
        (``forget_after_frames``, ``max_conditioning_frames``).

        Raises:
            tt_sam3_ros.engines.EngineError: a device the tracker cannot run on (a chip id, CUDA
                that torch does not see); the message says which.
            tt_sam3_ros.weights.WeightsError: the weights cannot be loaded; the message says why.
        """
        from tt_sam3_ros.engines import EngineError, torch_device
        from tt_sam3_ros.weights.errors import WeightsError
        from tt_sam3_ros.weights.tiny_model import (
            TINY_MODEL_ID,
            build_tiny_sam3_video,
            tiny_sam3_video_processor,
        )

        if problem := sam3_tracker_problem(device, None):
            raise EngineError(problem)
        device = str(torch_device(device))
        if model_id == TINY_MODEL_ID and weights_dir is None:
            model = build_tiny_sam3_video()
            LOG.warning("random weights loaded (%s): outputs are meaningless", TINY_MODEL_ID)
            return cls(model.to(device), tiny_sam3_video_processor(model.config), is_random=True, **options)
        from transformers import Sam3VideoModel, Sam3VideoProcessor

        source = weights_dir or model_id
        try:
            model = Sam3VideoModel.from_pretrained(source, revision=revision).eval().to(device)
            processor = Sam3VideoProcessor.from_pretrained(source, revision=revision)
        except (OSError, ValueError) as error:
            raise WeightsError(
                f"SAM 3's video model could not be loaded from {source!r} (it needs the transformers-format "
                f"checkpoint with the tracker's weights, as facebook/sam3 ships it): {error}"
            ) from error
        return cls(model, processor, **options)

    @property
    def prompts(self) -> list[str]:
        """The prompts the session detects, in the order last given."""
        return list(self._prompts)

    @property
    def object_ids(self) -> list[int]:
        """SAM 3 ids of the objects being tracked (some may have no pixels on the last frame)."""
        return list(self._session.obj_ids)

    @property
    def next_object_id(self) -> int:
        """The id SAM 3 gives the next new object (ids are never reused)."""
        return self._session.max_obj_id + 1

    @property
    def frame_index(self) -> int:
        """Frames processed so far (the next frame's index)."""
        return self._frame_index

    def set_prompts(self, prompts: Sequence[str]) -> None:
        """Detect ``prompts`` from the next frame on.

        A prompt that stays keeps its objects and their ids; a dropped prompt's objects are
        forgotten; a new prompt's objects appear as the detector finds them.

        Raises:
            InputError: ``prompts`` breaks a limit (see ``prompts.validate_prompts``).
        """
        wanted = validate_prompts(prompts)
        session = self._session
        for prompt_id, text in list(session.prompts.items()):
            if text not in wanted:
                self._drop_prompt(prompt_id)
        known = set(session.prompts.values())
        for text in dict.fromkeys(wanted):
            if text not in known:
                self._add_prompt(text)
        self._prompts = wanted

    def __call__(self, image: object, prompts: Sequence[str] | None = None) -> SegmentationResult:
        """Track the prompts' objects into ``image``, the stream's next frame.

        ``image``: uint8 RGB (H, W, 3), or anything ``preprocess.load_image`` takes. ``prompts``:
        when given and different from the current ones, ``set_prompts`` first.

        Returns:
            The frame's instances, highest score first, ``track_id`` set to SAM 3's object id;
            ``score`` is the detection score the object was first found with (SAM 3's video
            score); masks at the image's size, not overlapping within a prompt.
        """
        if prompts is not None and list(prompts) != self._prompts:
            self.set_prompts(prompts)
        rgb = preprocess.load_image(image)
        if not rgb.flags.writeable:  # a view over a ROS message buffer; torch wants writable memory
            rgb = rgb.copy()
        height, width = rgb.shape[:2]
        if not self._prompts:
            return SegmentationResult((height, width), [], [], {})
        import torch

        started = time.perf_counter()
        pixels = self.processor(images=rgb, return_tensors="pt").pixel_values[0]
        pixels = pixels.to(self.model.device, dtype=self._session.dtype)
        prepared = time.perf_counter()
        frame_index = self._frame_index
        with torch.inference_mode():
            outputs = self.model(inference_session=self._session, frame=pixels, frame_idx=frame_index)
            tracked = time.perf_counter()
            processed = self.processor.postprocess_outputs(
                self._session, outputs, original_sizes=[[height, width]]
            )
        instances = self._instances(processed, (height, width))
        self._frame_index += 1
        self._note_confirmed(outputs, frame_index)
        self._forget_unconfirmed(frame_index)
        self._trim(frame_index)
        finished = time.perf_counter()
        timing = {
            "preprocess": (prepared - started) * 1e3,
            "track": (tracked - prepared) * 1e3,
            "postprocess": (finished - tracked) * 1e3,
        }
        return SegmentationResult((height, width), list(self._prompts), instances, {}, timing)

    def reset(self) -> None:
        """Forget every object and frame (a new video); the prompts stay, ids are never reused."""
        next_id = self._session.max_obj_id + 1
        self._session = self._new_session()
        self._session.max_obj_id = next_id - 1
        self._last_confirmed.clear()
        self._frame_index = 0
        prompts, self._prompts = self._prompts, []
        if prompts:
            self.set_prompts(prompts)

    def close(self) -> None:
        """Drop the session and the model reference (a closed tracker cannot be called)."""
        self._session = None
        self.model = None

    def state(self) -> SessionState:
        """What the session holds now (objects, frames kept, tensors and their bytes)."""
        session = self._session
        memory = [len(out["non_cond_frame_outputs"]) for out in session.output_dict_per_obj.values()]
        conditioning = [len(out["cond_frame_outputs"]) for out in session.output_dict_per_obj.values()]
        tensors = tensors_in(vars(session))
        return SessionState(
            objects=len(session.obj_ids),
            memory_frames=max(memory, default=0),
            conditioning_frames=max(conditioning, default=0),
            tensors=len(tensors),
            tensor_bytes=sum(storage_bytes(tensors.values()).values()),
        )

    # --- session bookkeeping -------------------------------------------------------------------

    def _new_session(self):
        import torch

        session = self.processor.init_video_session(inference_device=self.model.device, dtype=torch.float32)
        session.processed_frames = StreamFrames()
        return session

    def _add_prompt(self, text: str) -> None:
        """Register ``text`` as transformers' ``add_text_prompt`` does, under an id never used before
        (the session's own numbering, ``len(prompts)``, would reuse a dropped prompt's id)."""
        session = self._session
        prompt_id = self._next_prompt_id
        self._next_prompt_id += 1
        encoded = self.processor.tokenizer(
            text, return_tensors="pt", padding="max_length", max_length=_TEXT_CONTEXT
        ).to(session.inference_device)
        session.prompts[prompt_id] = text
        session.prompt_input_ids[prompt_id] = encoded.input_ids
        session.prompt_attention_masks[prompt_id] = encoded.attention_mask

    def _drop_prompt(self, prompt_id: int) -> None:
        session = self._session
        for obj_id in [o for o, p in session.obj_id_to_prompt_id.items() if p == prompt_id]:
            self._forget_object(obj_id)
        for table in (session.prompts, session.prompt_input_ids, session.prompt_embeddings):
            table.pop(prompt_id, None)
        session.prompt_attention_masks.pop(prompt_id, None)

    def _forget_object(self, obj_id: int) -> None:
        """Remove an object and every per-object entry the session keeps for it."""
        session = self._session
        if obj_id in session.obj_ids:
            session.remove_object(obj_id)
            if obj_id in session.obj_ids:  # remove_object resets, not removes, the last object
                session.obj_ids.remove(obj_id)
        for table in (
            session.obj_id_to_prompt_id,
            session.obj_id_to_score,
            session.obj_id_to_last_occluded,
            session.obj_first_frame_idx,
            session.unmatched_frame_inds,
            session.trk_keep_alive,
            self._last_confirmed,
        ):
            table.pop(obj_id, None)

    def _note_confirmed(self, outputs: Any, frame_index: int) -> None:
        """Record the frame for every object a detection confirmed (new, or matched: its
        masklet is not empty and the association did not list it as unmatched)."""
        unmatched = self._session.unmatched_frame_inds
        for obj_id in outputs.object_ids:
            mask = outputs.obj_id_to_mask.get(obj_id)
            missed = unmatched.get(obj_id) and unmatched[obj_id][-1] == frame_index
            if obj_id not in self._last_confirmed or (
                mask is not None and bool((mask > 0).any()) and not missed
            ):
                self._last_confirmed[obj_id] = frame_index

    def _forget_unconfirmed(self, frame_index: int) -> None:
        stale = [
            o for o, seen in self._last_confirmed.items() if frame_index - seen >= self.forget_after_frames
        ]
        for obj_id in stale:
            LOG.debug("forgetting object %d: unconfirmed for %d frames", obj_id, self.forget_after_frames)
            self._forget_object(obj_id)

    def _trim(self, frame_index: int) -> None:
        """Drop every per-frame entry the next frames cannot read (see the module docstring)."""
        session = self._session
        session.processed_frames.drop_pixels()
        session.cache.clear_all()
        keep_from = frame_index + 1 - self.memory_frames
        for outputs in session.output_dict_per_obj.values():
            past = outputs["non_cond_frame_outputs"]
            for index in [i for i in past if i < keep_from]:
                del past[index]
            conditioning = outputs["cond_frame_outputs"]
            for index in sorted(conditioning)[: -self.max_conditioning_frames]:
                del conditioning[index]
            for frame_outputs in (*past.values(), *conditioning.values()):
                for key in [k for k in frame_outputs if k not in MEMORY_KEYS]:
                    del frame_outputs[key]
        for per_object in (
            session.frames_tracked_per_obj,
            session.mask_inputs_per_obj,
            session.point_inputs_per_obj,
        ):
            for entries in per_object.values():
                entries.clear()
        current_scores = session.obj_id_to_tracker_score_frame_wise.get(frame_index, {})
        session.obj_id_to_tracker_score_frame_wise = defaultdict(dict, {frame_index: current_scores})
        session.suppressed_obj_ids = defaultdict(set)
        for frames in session.unmatched_frame_inds.values():
            del frames[:-1]
        session.overlap_pair_to_frame_inds.clear()
        session.output_buffer.clear()

    def _instances(self, processed: dict[str, Any], image_size: tuple[int, int]) -> list[Instance]:
        """transformers' post-processed outputs as our instances, highest score first."""
        session = self._session
        masks = processed["masks"].cpu().numpy()
        instances = []
        object_ids, scores = processed["object_ids"].tolist(), processed["scores"].tolist()
        for obj_id, score, mask in zip(object_ids, scores, masks, strict=True):
            rows = np.flatnonzero(mask.any(axis=1))
            cols = np.flatnonzero(mask.any(axis=0))
            if rows.size == 0:
                continue
            top, bottom, left, right = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
            prompt = session.prompts[session.obj_id_to_prompt_id[obj_id]]
            instances.append(
                Instance(
                    prompt=prompt,
                    prompt_index=self._prompts.index(prompt),
                    score=float(score),
                    box=(float(left), float(top), float(right), float(bottom)),
                    mask_crop=np.ascontiguousarray(mask[top:bottom, left:right]),
                    crop_origin=(int(top), int(left)),
                    image_size=image_size,
                    track_id=int(obj_id),
                )
            )
        instances.sort(key=lambda instance: (-instance.score, instance.track_id))
        return instances
