"""`python -m benchmarks.blackhole.compare_device REPORT`: a device run's report against both cost models.

The report is made here the way a device run makes it (test/support/device_report.py), from an
engine on the TT-NN emulator whose ttnn.group_norm is made to raise (so the report carries a
warm-up fallback), with latency samples and gates given by the test; the predictions come from a
results file the test writes, so every printed figure is known. The repository's own results
must give every stage both predictions (a renamed benchmark table would leave them blank)."""

from __future__ import annotations

import json

import pytest
from device_report import LATENCY_STAGES, DeviceReport

from benchmarks.blackhole import compare_device

RESULTS = {
    "meta": {
        "command": "python -m benchmarks --only blackhole --results benchmarks/results",
        "commit": "abc1234",
    },
    "tables": [
        {
            "title": "image trace, calibrated (110 cores) beside the roofline (120 cores)",
            "headers": ["stage", "ops (hidden included)", "roofline ms", "calibrated ms"],
            "rows": [
                ["ViT windowed blocks", "560", "19.00", "29.53"],
                ["image trace", "764", "25.00", "40.00"],
            ],
        },
        {
            "title": "prompt traces and the frame, calibrated (110 cores)",
            "headers": [
                "prompts",
                "replay ops (hidden included)",
                "prompt trace roofline ms",
                "prompt trace calibrated ms",
                "mask read calibrated ms",
                "frame calibrated ms (upload + image + prompt + read)",
            ],
            "rows": [
                ["1", "755", "5.00", "10.00", "0.29", "50.00"],
                ["4", "756", "20.00", "40.00", "1.11", "80.00"],
            ],
        },
        {
            "title": "per frame: upload + image trace + prompt trace + mask read (device time, roofline)",
            "headers": [
                "prompts",
                "upload ms",
                "image trace ms",
                "frame ms, sequential",
                "frame ms, pipelined",
            ],
            "rows": [["1", "0.048", "25.00", "30.000", "29.9"]],
        },
    ],
}


@pytest.fixture(scope="module")
def device_run(tmp_path_factory, tiny_model, tokenizer):
    """A report from an emulated chip whose group_norm raises, with given latencies and gates."""
    import ttnn_emulator

    from tt_sam3_ros.engines.ttnn_engine import TtnnEngine

    def group_norm(x, **kwargs):
        raise RuntimeError("TT_FATAL: legacy mode only")

    ttnn_emulator.reset()
    report = DeviceReport("pytest -m device test/device")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ttnn_emulator, "group_norm", group_norm)
        engine = TtnnEngine(
            tiny_model, tokenizer, ttnn_module=ttnn_emulator, prompt_path="chip", max_prompts=1
        )
        with engine:
            engine.check_input_upload()
            engine.check_stages()
            report.engine("chip prompt path", engine)
            report.profile(ttnn_emulator, engine.device)
    ttnn_emulator.reset()
    for stage, samples in zip(
        LATENCY_STAGES, ([44.0, 45.0, 47.0], [12.0], [30.0, 30.0], [70.0]), strict=True
    ):
        report.latency(stage, samples)
    assert report.gate("image trace ms, goal", 45.0, "<", 40.0) is False
    assert report.gate("FPN map PCC", 0.999, ">=", 0.995) is True
    tmp_path = tmp_path_factory.mktemp("device-run")
    path = report.write(tmp_path / "device_report.json")
    results = tmp_path / "blackhole.json"
    results.write_text(json.dumps(RESULTS))
    return path, results


def test_the_report_holds_what_the_owner_sends_back(device_run):
    data = json.loads(device_run[0].read_text())
    assert data["schema"] == 1 and data["versions"]["ttnn"] == "0.81.1-emulated"
    assert data["versions"]["tt_metal_commit"] and data["versions"]["firmware"]  # a value or why not
    engine = data["engines"]["chip prompt path"]
    assert engine["grid"] == [11, 10] and engine["dispatch"] == "worker" and engine["command_queues"] == 2
    assert [c["stage"] for c in engine["stage_checks"]] == [
        "input",
        "neck_convs",
        "topk",
        "group_norm",
        "pixel_decoder_convs",
    ]
    assert [(f["engine"], f["stage"], f["serves"]) for f in data["fallbacks"]] == [
        ("chip prompt path", "group_norm", "composite GroupNorm")
    ]
    assert data["latency_ms"]["image trace"] == {"median": 45.0, "samples": [44.0, 45.0, 47.0]}
    assert [(g["name"], g["passed"]) for g in data["gates"]] == [
        ("image trace ms, goal", False),
        ("FPN map PCC", True),
    ]
    assert data["profiler"]["available"] is False
    assert data["profiler"]["reason"].startswith("set TT_METAL_DEVICE_PROFILER")


def test_compare_device_prints_measured_against_both_models(device_run, capsys):
    report_path, results = device_run
    assert compare_device.main([str(report_path), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    lines = {
        line.split("  ")[0]: line.split() for line in out.splitlines() if line.startswith(LATENCY_STAGES)
    }
    assert lines["image trace"][-5:] == ["45.00", "40.00", "1.12x", "25.00", "1.80x"]
    assert lines["prompt trace, 1 prompt"][-5:] == ["12.00", "10.00", "1.20x", "5.00", "2.40x"]
    assert lines["prompt trace, 4 prompts"][-5:] == ["30.00", "40.00", "0.75x", "20.00", "1.50x"]
    assert lines["frame to mask, 1 prompt"][-5:] == ["70.00", "50.00", "1.40x", "30.00", "2.33x"]
    assert "warm-up fallbacks taken: 1" in out and "composite GroupNorm" in out
    assert "gates: 2 recorded, 1 failed" in out and "image trace ms, goal" in out
    assert "device profiler: not in this report (set TT_METAL_DEVICE_PROFILER" in out


def test_the_repository_results_predict_every_stage():
    results = json.loads(compare_device.DEFAULT_RESULTS.read_text())
    predicted = compare_device.predictions(results)
    assert set(predicted) == set(LATENCY_STAGES)
    missing = [stage for stage, pair in predicted.items() if None in pair]
    assert not missing, f"benchmarks/results/blackhole.json gives no prediction for {missing}"


def test_a_report_without_a_stage_prints_a_dash(tmp_path, capsys):
    report = DeviceReport()
    report.latency("image trace", [30.0])
    path = report.write(tmp_path / "report.json")
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    assert compare_device.main([str(path), "--results", str(results)]) == 0
    rows = [
        line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("prompt trace, 1")
    ]
    assert rows == [["prompt", "trace,", "1", "prompt", "-", "10.00", "-", "5.00", "-"]]
    assert compare_device.main([str(tmp_path / "absent.json"), "--results", str(results)]) == 2
