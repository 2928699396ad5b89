"""Stream section, several chips: 8 cameras at 15 Hz each dealt across 1, 2 and 4 chips.

No chip and no ROS: the node's own dealing code (tt_sam3_ros.runtime.chips.ChipPool over one
worker.FrameSlot: each chip, when free, takes the next camera's newest frame; a camera's outputs
leave in the order its frames were taken) runs with a stand-in engine per chip that holds its
chip for the calibrated cost model's prediction of one frame on a p150a (1 prompt, chip prompt
path: benchmarks/results/blackhole.json, ``figures.blackhole_prediction``) and computes nothing.
The host's own work per frame (decode, resize, post-processing, publishing) is left out: this
measures how the dealing shares the chips, not the node's CPU.

Per run: each camera's output rate (1 / mean interval between its outputs), output age (output
time minus the frame's arrival in the slot) p50 / p90, fairness (slowest camera's rate over the
fastest's), each chip's utilisation (time its engine held it over the time streamed), and the
total rate against N times the one-chip rate. Goal: within 10 % of N times one chip, fairness
>= 0.9.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tt_sam3_ros.runtime.chips import Chip, ChipPool
from tt_sam3_ros.runtime.worker import Frame, FrameSlot

from ..common import figures, report

CAMERAS = 8
CAMERA_RATE_HZ = 15.0
CHIP_COUNTS = (1, 2, 4)
#: Seconds each run streams (after every chip has started), and the same for --quick.
SECONDS, QUICK_SECONDS = 20.0, 3.0
#: Goals: total rate at least this share of N times one chip's, fairness at least this.
SCALING_GOAL, FAIRNESS_GOAL = 0.9, 0.9
#: A liveness bound for starting the stand-in chips and for their last frames.
START_TIMEOUT_S = 30.0


class StandInEngine:
    """One chip's engine that computes nothing: each frame holds the chip for ``frame_s``."""

    def __init__(self, device: str, frame_s: float) -> None:
        self.device = device
        self.frame_s = frame_s
        self._hold = threading.Event()  # never set: waiting on it is the chip's time per frame

    def describe(self) -> dict[str, str]:
        return {
            "engine": "stand-in",
            "device": f"chip {self.device}",
            "frame_ms": f"{self.frame_s * 1000:.1f}",
        }

    def warmup(self) -> None:
        pass

    def close(self) -> None:
        pass

    def run(self) -> tuple[float, float]:
        """One frame: (start, end) monotonic seconds of the chip's hold."""
        started = time.monotonic()
        self._hold.wait(self.frame_s)
        return started, time.monotonic()


@dataclass
class Outputs:
    """What the stand-in chips answered: per camera, each output's time and age; per chip, when
    its engine held it (start, end)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    arrivals: dict[str, list[float]] = field(default_factory=dict)
    ages_s: dict[str, list[float]] = field(default_factory=dict)
    holds: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def busy_s(self, chip: str, start: float, end: float) -> float:
        """Seconds the chip's engine held it between ``start`` and ``end``."""
        with self.lock:
            spans = list(self.holds.get(chip, []))
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)

    def handle_frame(
        self, engine: StandInEngine, frame: Frame, chip: Chip, wait_turn: Callable[[], None]
    ) -> None:
        """ChipPool's handle_frame: the engine's hold, the camera's turn, then the output."""
        started, ended = engine.run()
        wait_turn()
        out = time.monotonic()
        with self.lock:
            self.holds.setdefault(chip.name, []).append((started, ended))
            self.arrivals.setdefault(frame.camera, []).append(out)
            self.ages_s.setdefault(frame.camera, []).append(out - frame.received_s)


@dataclass(frozen=True)
class Run:
    """One run's figures: per camera (rate Hz, age p50 ms), and the run's totals."""

    chips: int
    seconds: float
    rates_hz: dict[str, float]
    age_p50_ms: dict[str, float]
    ages_ms: np.ndarray
    utilisation: dict[str, float]
    offered: int
    dropped: int

    @property
    def total_hz(self) -> float:
        return sum(self.rates_hz.values())

    @property
    def fairness(self) -> float:
        return min(self.rates_hz.values()) / max(self.rates_hz.values())


def rate_hz(arrivals: list[float]) -> float:
    """One over the mean interval between outputs (nan with fewer than two)."""
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
        return float("nan")
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


def stream(chip_count: int, frame_s: float, seconds: float, cameras: int = CAMERAS) -> Run:
    """``cameras`` cameras at CAMERA_RATE_HZ, evenly staggered, into ``chip_count`` stand-in chips."""
    names = tuple(f"cam{index}" for index in range(cameras))
    slot = FrameSlot(names)
    outputs = Outputs()
    devices = [(str(index), str(index)) for index in range(chip_count)]
    pool = ChipPool(
        devices,
        lambda device: StandInEngine(device, frame_s),
        outputs.handle_frame,
        slot,
        logging.getLogger("benchmarks.node.stream_chips"),
    )
    pool.start()
    if not pool.wait_ready(START_TIMEOUT_S):
        raise RuntimeError("the stand-in chips did not start")
    pool.settle()
    period = 1.0 / CAMERA_RATE_HZ
    offered = dropped = 0
    pace = threading.Event()  # never set: waiting on it paces the cameras
    start = time.monotonic()
    due = {name: start + index * period / cameras for index, name in enumerate(names)}
    try:
        while (now := time.monotonic()) < start + seconds:
            name = min(due, key=due.__getitem__)
            if due[name] > now:
                pace.wait(due[name] - now)
                continue
            offered += 1
            dropped += slot.put(Frame(msg=None, received_s=time.monotonic(), camera=name))
            due[name] += period
        end = time.monotonic()
    finally:
        pool.stop()
        pool.join()
    with outputs.lock:
        rates = {name: rate_hz(outputs.arrivals.get(name, [])) for name in names}
        ages = {name: np.array(outputs.ages_s.get(name, [])) * 1000.0 for name in names}
    streamed = end - start
    return Run(
        chips=chip_count,
        seconds=streamed,
        rates_hz=rates,
        age_p50_ms={name: float(np.median(a)) if a.size else float("nan") for name, a in ages.items()},
        ages_ms=np.concatenate(list(ages.values())),
        utilisation={chip: outputs.busy_s(chip, start, end) / streamed for chip, _ in devices},
        offered=offered,
        dropped=dropped,
    )


def scaling(run: Run, one_chip_hz: float) -> float:
    """The run's total rate over N times one chip's."""
    return run.total_hz / (run.chips * one_chip_hz)


def goal_met(run: Run, one_chip_hz: float) -> bool:
    """Within 10 % of N times one chip's rate, and fairness >= 0.9."""
    return scaling(run, one_chip_hz) >= SCALING_GOAL and run.fairness >= FAIRNESS_GOAL


def calibrated_frame_s() -> tuple[float, str]:
    """The calibrated cost model's per-frame prediction (1 prompt, chip prompt path), and its source."""
    prediction = figures.blackhole_prediction()["calibrated_frame_ms"]
    meta = figures.load("blackhole")["meta"]
    return prediction / 1000.0, f"{meta['date']}, commit {meta['commit']}"


def main(quick: bool, chip_counts: tuple[int, ...] = CHIP_COUNTS) -> list[Run]:
    """Print the scaling table and the per-camera table; returns the runs."""
    frame_s, source = calibrated_frame_s()
    seconds = QUICK_SECONDS if quick else SECONDS
    report.title(
        f"stream: {CAMERAS} cameras at {CAMERA_RATE_HZ:.0f} Hz each on "
        f"{', '.join(map(str, chip_counts))} chips, stand-in engine"
    )
    print(
        f"stand-in engine per chip: holds the chip {frame_s * 1000:.1f} ms per frame, the calibrated cost "
        f"model's prediction for a p150a (1 prompt, chip prompt path; benchmarks/results/blackhole.json, "
        f"{source}), not a measurement; the node's dealing (tt_sam3_ros.runtime.chips.ChipPool), no ROS, "
        f"no host work per frame; each run streams {seconds:.0f} s"
    )
    runs = []
    for count in chip_counts:
        report.progress(f"stream: {CAMERAS} cameras on {count} stand-in chip(s), {seconds:.0f} s")
        runs.append(stream(count, frame_s, seconds))
    one = runs[0].total_hz / runs[0].chips
    rows = []
    for run in runs:
        p50, p90 = np.percentile(run.ages_ms, [50, 90]) if run.ages_ms.size else (float("nan"),) * 2
        utilisation = list(run.utilisation.values())
        rows.append([
            f"{run.chips}", f"{run.offered} / {run.dropped}",
            f"{run.total_hz:.1f}", f"{scaling(run, one):.2f}",
            f"{min(run.rates_hz.values()):.2f} / {max(run.rates_hz.values()):.2f}", f"{run.fairness:.2f}",
            f"{p50:.0f} / {p90:.0f}", f"{np.mean(utilisation):.2f} / {min(utilisation):.2f}",
            "met" if goal_met(run, one) else "missed",
        ])  # fmt: skip
    report.table(
        ["chips", "frames offered / replaced", "total output rate Hz", "rate / (N x one chip's)",
         "camera rate min / max Hz", "fairness (slowest / fastest)", "output age p50 / p90 ms",
         "chip utilisation mean / min", "goal"],
        rows,
    )  # fmt: skip
    cameras = list(runs[0].rates_hz)
    per_camera = [
        [name, *(f"{run.rates_hz[name]:.2f} / {run.age_p50_ms[name]:.0f}" for run in runs)]
        for name in cameras
    ]
    report.table(
        [
            "camera",
            *(f"{run.chips} chip{'s' if run.chips > 1 else ''}: rate Hz / age p50 ms" for run in runs),
        ],
        per_camera,
    )
    print(
        "replaced: a camera's frame replaced by its next before any chip took it (the newest-frame rule); "
        "rate: 1 / mean interval between a camera's outputs; age: output time minus the frame's arrival; "
        "utilisation: the time the engine held the chip while the cameras streamed, over that time; "
        f"goal: total rate within {1 - SCALING_GOAL:.0%} of N times one chip's, fairness >= {FAIRNESS_GOAL}."
    )
    return runs
