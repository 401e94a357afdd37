"""golive: each checklist step's logic (pass / fail / unavailable with evidence), the recovery
drill on this host (host-only canary; the card parts unavailable), the report and exit code."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from nodeledger.doctor.machine_state import MachineState
from nodeledger.errors import InputError
from nodeledger.golive import checklist as G
from nodeledger.machine import resolve_machine
from nodeledger.machine.profile import Accelerator, CardProcess, MachineProfile

PLAN7 = """
[[workloads]]
id = "chat"
model = "qwen3-8b"
job = "serve"
replicas = 7
context = 4096
concurrency = 4
"""
PLAN8 = PLAN7.replace("replicas = 7", "replicas = 8")
SMALL = {"host_bytes": 32 * G.MiB, "back_timeout": 2.0, "ready_timeout": 30.0}


def _card(i: int = 0, **kw) -> Accelerator:
    base = {"index": i, "vendor": "nvidia", "product": "NVIDIA H100 80GB HBM3",
            "persistence_mode": "enabled", "ecc_mode": "enabled", "ecc_errors_corrected": 0,
            "ecc_errors_uncorrected": 0, "remapped_rows_pending": "no", "remapped_rows_failed": "no",
            "partition": "MIG disabled"}  # fmt: skip
    base.update(kw)
    return Accelerator(**base)


def test_card_settings_pass_fail_unavailable():
    ok = MachineProfile(name="box", accelerators=[_card(0), _card(1)])
    s = G.card_settings_step(ok, live=True)
    assert s["status"] == "pass" and len(s["details"]["cards"]) == 2
    assert any("clocks: not confirmed" in e for e in s["evidence"])
    bad = MachineProfile(name="box", accelerators=[
        _card(0, persistence_mode="disabled"), _card(1, ecc_errors_uncorrected=3),
        _card(2, remapped_rows_pending="yes"), _card(3, partition="MIG enabled"),
        _card(4, ecc_mode="disabled"), _card(5, ecc_errors_corrected=7),
        _card(6, processes=[CardProcess(pid=42, name="vllm")])])  # fmt: skip
    s = G.card_settings_step(bad, live=True)
    assert s["status"] == "fail" and s["summary"] == "cards 0,1,2,3,4 not ready"
    fails = {c["card"]: c["failures"] for c in s["details"]["cards"]}
    assert "persistence mode off" in fails[0][0] and "3 uncorrected ECC" in fails[1][0]
    assert "row remap waits" in fails[2][0] and "split by partitions" in fails[3][0]
    assert "ECC off" in fails[4][0] and fails[5] == [] and fails[6] == []
    notes = {c["card"]: c["notes"] for c in s["details"]["cards"]}
    assert notes[5] == ["7 corrected ECC errors"] and "pid 42 (vllm)" in notes[6][0]
    assert G.card_settings_step(MachineProfile(name="h"), live=True)["status"] == "unavailable"
    preset = G.card_settings_step(resolve_machine("dgx-h100"), live=False)
    assert preset["status"] == "unavailable" and "no card state" in preset["summary"]


def test_partition_split():
    assert G.partition_split("MIG enabled") and G.partition_split("MIG Enabled")
    assert not G.partition_split("MIG disabled")
    assert not G.partition_split("MIG disabled by default (H100 supports up to 7 instances)")
    assert not G.partition_split(
        "NVIDIA H100 datasheet: MIG up to 7 instances; MIG mode is off until enabled"
    )
    assert G.partition_split("NPS1, CPX") and not G.partition_split("NPS1, SPX")
    assert not G.partition_split(None)


def test_bench_step_fails_on_low_or_bad_only():
    def fig(v, part="disk"):
        return {"part": part, "subject": "s", "metric": "m", "value": 1.0, "unit": "MB/s",
                "verdict": v, "expected": "e", "source": "src", "evidence": "ev"}  # fmt: skip

    s = G.bench_step({"figures": [fig("ok"), fig("unknown"), fig("unavailable", "peer")]}, "run")
    assert s["status"] == "pass" and s["details"]["counts"]["unavailable"] == 1
    assert any(e.startswith("unavailable: s m: ev") for e in s["evidence"])
    s = G.bench_step({"figures": [fig("ok"), fig("low")]}, "run")
    assert s["status"] == "fail" and any(
        e.startswith("low: s m = 1 MB/s (expected e; src)") for e in s["evidence"]
    )


def test_plan_step(tmp_path):
    f = tmp_path / "plan.toml"
    f.write_text(PLAN7)
    s, res = G.plan_step(resolve_machine("dgx-h100"), str(f))
    assert (
        s["status"] == "pass"
        and res["lifeboat"] == [7]
        and "card 7 kept as the lifeboat" in s["summary"]
    )
    f.write_text(PLAN8)
    s, _ = G.plan_step(resolve_machine("dgx-h100"), str(f))
    assert s["status"] == "fail" and any(e.startswith("NOT PLACED chat#7") for e in s["evidence"])
    assert G.plan_step(resolve_machine("dgx-h100"), None)[0]["status"] == "unavailable"
    s, _ = G.plan_step(MachineProfile(name="cpu-box"), str(f))
    assert s["status"] == "unavailable" and "--machine" in s["summary"]
    with pytest.raises(InputError, match="not found"):
        G.plan_step(resolve_machine("dgx-h100"), str(tmp_path / "none.toml"))


def test_doctor_step_needs_live_state():
    st = MachineState(
        resolve_machine("dgx-h100"), None, "machine dgx-h100 (a profile: no live state)"
    )
    s = G.doctor_step(st)
    assert s["status"] == "unavailable" and "no live state" in s["summary"]


def test_drill_host_only_canary():
    s = G.drill_step(MachineProfile(name="h"), None, **SMALL)
    checks = {c["check"]: c for c in s["details"]["checks"]}
    assert checks["start the canary"]["status"] == "pass"
    assert (
        checks["kill it on purpose"]["status"] == "pass"
        and "-9" in checks["kill it on purpose"]["evidence"]
    )
    assert checks["host memory back"]["status"] == "pass"
    assert "no process of the canary left" in checks["host memory back"]["evidence"]
    for k in ("card memory back", "reservation cleared", "reserve the lifeboat"):
        assert checks[k]["status"] == "unavailable"
    assert s["status"] == "pass" and "3 part(s) unavailable" in s["summary"]


def test_drill_on_a_lifeboat_card_reserves_and_clears(tmp_path):
    """The canary is told card 7 (CUDA_VISIBLE_DEVICES=7); the reservation goes into a test state
    file and must be gone after the kill; card memory is read through used_fn."""
    reads = iter([1 * G.GiB, 2 * G.GiB] + [1 * G.GiB] * 100)
    s = G.drill_step(MachineProfile(name="h"), 7, state_path=str(tmp_path / "state.sqlite"),
                     used_fn=lambda _i: (next(reads), "test"), card_bytes=1 << 20, **SMALL)  # fmt: skip
    checks = {c["check"]: c for c in s["details"]["checks"]}
    assert checks["reserve the lifeboat"]["status"] == "pass"
    assert checks["reservation cleared"]["status"] == "pass"
    # without torch (or a card 7) the canary holds no card memory: said, not failed
    assert checks["card memory back"]["status"] in ("unavailable", "pass")
    assert s["status"] == "pass" and s["details"]["card"] == 7
    from nodeledger.placement.reserve import Store

    live, _ = Store(tmp_path / "state.sqlite").check()
    assert live == []


def test_drill_refused_when_the_lifeboat_is_reserved(tmp_path):
    from nodeledger.placement.reserve import Store

    st = Store(tmp_path / "s.sqlite")
    plan = {"machine": "h", "not_placed": [], "replicas": [
        {"replica": "svc#0", "workload": "svc", "cards": [7], "host_bytes": 0}]}  # fmt: skip
    import os

    assert st.take(plan, "svc#0", os.getpid(), settle=0).ok
    s = G.drill_step(MachineProfile(name="h"), 7, state_path=str(tmp_path / "s.sqlite"), **SMALL)
    checks = {c["check"]: c for c in s["details"]["checks"]}
    assert (
        checks["reserve the lifeboat"]["status"] == "fail"
        and "svc#0" in checks["reserve the lifeboat"]["evidence"]
    )
    assert s["status"] == "fail"
    st.close()


def test_descendants_of_this_process():
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        import os

        assert p.pid in G.descendants(os.getpid())
    finally:
        p.kill()
        p.wait()


def _bench_json(tmp_path, figures):
    f = tmp_path / "bench.json"
    f.write_text(json.dumps({"figures": figures}))
    return f


def test_golive_cli_on_a_preset_with_a_recorded_bench(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN7)
    ok = [{"part": "disk", "subject": "d", "metric": "sequential read", "value": 900.0, "unit": "MB/s",
           "verdict": "ok", "expected": "e", "source": "s", "evidence": ""}]  # fmt: skip
    env = {"NODELEDGER_STATE": str(tmp_path / "state.sqlite")}
    # a preset has no live state (doctor, cards) and the drill runs host-only here: without
    # accepting those, go-live is refused (exit 1) and says which steps did not run
    bare = ["golive", "--machine", "dgx-h100", "--plan", str(plan), "--bench-json"]
    proc = run_cli(*bare, str(_bench_json(tmp_path, ok)), "--json", env=env)
    assert proc.returncode == 1
    assert "doctor unavailable, cards unavailable" in json.loads(proc.stdout)["verdict"]
    accept = ["--allow-unavailable", "doctor", "--allow-unavailable", "cards",
              "--allow-unavailable", "drill"]  # fmt: skip
    args = [*bare[:-1], *accept, "--bench-json"]
    proc = run_cli(*args, str(_bench_json(tmp_path, ok)), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    st = {s["id"]: s["status"] for s in d["steps"]}
    assert st == {
        "doctor": "unavailable",
        "cards": "unavailable",
        "bench": "pass",
        "plan": "pass",
        "drill": "pass",
    }
    assert d["exit_code"] == 0 and d["verdict"] == "go live"
    drill = next(s for s in d["steps"] if s["id"] == "drill")
    assert drill["details"]["card"] == 7  # the plan's lifeboat
    # a low figure fails the bench step: exit 1, and the Markdown report says so
    low = [dict(ok[0], verdict="low")]
    proc = run_cli(*args, str(_bench_json(tmp_path, low)), "--format", "md", env=env)
    assert proc.returncode == 1, proc.stderr
    md = proc.stdout
    assert md.startswith("# Go-live checklist: dgx-h100") and "**Verdict: not ready: bench**" in md
    assert "| bench figures ok | fail |" in md and "## recovery drill: pass" in md
    assert "| d | sequential read | 900 MB/s | low | e | s |" in md
    # terminal
    proc = run_cli(*args, str(_bench_json(tmp_path, ok)), env=env)
    assert proc.returncode == 0 and "go live (exit 0)" in proc.stdout


def test_golive_cli_bad_input(tmp_path):
    for args, msg in ((["--plan", str(tmp_path / "none.toml")], "--plan"),
                      (["--bench-json", str(tmp_path / "none.json")], "--bench-json"),
                      (["--format", "html"], "--format 'html'")):  # fmt: skip
        proc = run_cli("golive", "--machine", "dgx-h100", *args)
        assert proc.returncode == 2 and msg in proc.stderr and len(proc.stderr.splitlines()) == 1
    bad = tmp_path / "b.json"
    bad.write_text('{"x": 1}')
    proc = run_cli("golive", "--machine", "dgx-h100", "--bench-json", str(bad))
    assert proc.returncode == 2 and "not a `nodeledger bench --json` output" in proc.stderr
