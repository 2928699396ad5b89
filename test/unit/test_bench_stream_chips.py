"""benchmarks/node/stream_chips.py: 8 cameras dealt across stand-in chips by the node's own ChipPool.

Short runs (a second or two of stand-in frames): what a reader of the tables relies on, every
camera served and every chip used, one row per chip count and per camera, and the goal column.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.common import report
from benchmarks.node import stream_chips


def test_every_camera_is_answered_and_every_chip_serves() -> None:
    run = stream_chips.stream(2, frame_s=0.02, seconds=1.0, cameras=4)
    assert set(run.rates_hz) == {"cam0", "cam1", "cam2", "cam3"}
    assert not any(np.isnan(rate) for rate in run.rates_hz.values())  # at least two outputs each
    assert set(run.utilisation) == {"0", "1"} and all(share > 0 for share in run.utilisation.values())
    assert run.offered > run.dropped >= 0 and run.ages_ms.size >= 8


def test_the_tables_have_a_row_per_chip_count_and_per_camera(monkeypatch) -> None:
    monkeypatch.setattr(stream_chips, "QUICK_SECONDS", 1.5)
    report.recorded()
    stream_chips.main(quick=True, chip_counts=(1, 2))
    scaling, cameras = report.recorded()
    assert scaling["title"] == "stream: 8 cameras at 15 Hz each on 1, 2 chips, stand-in engine"
    assert [row[0] for row in scaling["rows"]] == ["1", "2"]
    assert scaling["rows"][0][3] == "1.00"  # one chip against itself
    assert [row[0] for row in cameras["rows"]] == [f"cam{index}" for index in range(8)]
    assert cameras["headers"][1:] == ["1 chip: rate Hz / age p50 ms", "2 chips: rate Hz / age p50 ms"]


def _run(chips: int, rates: list[float]) -> stream_chips.Run:
    names = [f"cam{index}" for index in range(len(rates))]
    return stream_chips.Run(
        chips=chips,
        seconds=1.0,
        rates_hz=dict(zip(names, rates, strict=True)),
        age_p50_ms=dict.fromkeys(names, 80.0),
        ages_ms=np.array([80.0]),
        utilisation={str(chip): 1.0 for chip in range(chips)},
        offered=10,
        dropped=0,
    )


@pytest.mark.parametrize(
    "rates, met",
    [
        ([4.5, 4.5, 4.5, 4.5], True),  # 18 Hz on 2 chips against 10 Hz on one: 0.90
        ([4.2, 4.2, 4.2, 4.2], False),  # 0.84 of twice one chip's
        ([5.0, 5.0, 5.0, 4.4], False),  # enough in total, but the slowest camera at 0.88 of the fastest
    ],
)
def test_the_goal_needs_both_the_scaling_and_the_fairness(rates, met) -> None:
    assert stream_chips.goal_met(_run(2, rates), one_chip_hz=10.0) is met
