"""The lane's measurement (bench/gpu_lane.py) runs end to end on the CPU (static passes there), its
lanes agree token for token, and a lane that breaks is reported without costing the others."""
import json

from specdec_core.bench import gpu_lane


def test_the_lane_measurement_runs_and_reports_a_broken_lane(tmp_path, monkeypatch):
    real = gpu_lane.hf_lanes

    def lanes(target, max_len, compiled):
        out = real(target, max_len, compiled)
        out["hf_broken"] = lambda ids, n: (_ for _ in ()).throw(RuntimeError("no such kernel"))
        return out
    monkeypatch.setattr(gpu_lane, "hf_lanes", lanes)
    rc = gpu_lane.main(["--device", "cpu", "--n", "1", "--max-new-tokens", "8", "--repeats", "1",
                        "--out", str(tmp_path)])
    report = json.loads((tmp_path / "report.json").read_text())
    s = report["summary"]
    assert rc == 0 and set(s["tok_s"]) == {"plain_dynamic", "spec_dynamic", "plain_static", "spec_static",
                                            "hf_dynamic", "hf_static"}
    assert all(s["identical"].values())
    assert report["failed"] == {"hf_broken": "RuntimeError: no such kernel"}
    assert s["step_over_floor_static"] > 0 and report["passes"]["static"].startswith("static cache")
    assert "FAILED hf_broken" in (tmp_path / "report.md").read_text()
