"""`nodeledger oom` from the command line: JSON shape, terminal report, bad input (one line,
exit 2), and the kernel-log faults with fake dmesg / journalctl on PATH (exit 0 with a note)."""

from __future__ import annotations

import json
import stat

import pytest

from conftest import FIXTURES, SHARED, cli_json, run_cli

OOM = FIXTURES / "oom"
REAL = SHARED / "fixtures" / "real"
DENIED = "dmesg: read kernel buffer failed: Operation not permitted"


def fake_path(tmp_path, **tools: str) -> dict:
    """env with PATH = a folder holding only the given fake tools (name -> sh body)."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    for name, body in tools.items():
        p = bindir / name
        p.write_text("#!/bin/sh\n" + body + "\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"PATH": str(bindir)}


def test_json_shape_and_links():
    d = cli_json(
        "oom",
        "--no-kernel-log",
        str(OOM / "kernel-dmesg-iso-global-dataloader.txt"),
        str(OOM / "job-torchrun-sigkill.log"),
        str(OOM / "job-vllm-serve.log"),
    )
    assert set(d) >= {"verdict", "incidents", "notes", "sources_read", "link_window_s", "since"}
    assert d["verdict"]["side"] == "both"
    assert d["notes"] == ["kernel log not read (--no-kernel-log)"]
    assert [s["kind"] for s in d["sources_read"]] == ["file", "file", "file"]
    k = d["incidents"][0]
    for key in ("id", "kind", "side", "pid", "card", "figures", "source", "time", "fixes"):
        assert key in k
    assert (k["kind"], k["side"], k["pid"], k["card"]) == ("kernel-oom-killer", "host", 41230, None)
    assert k["figures"]["anon_rss_bytes"] == 40 * 2**30
    assert k["source"].endswith("kernel-dmesg-iso-global-dataloader.txt:1")
    assert k["time_iso"] == "2025-03-14T09:26:53.101630+08:00"
    assert k["links"][0]["by"] == "pid" and k["links"][0]["to"] == 2
    v = next(i for i in d["incidents"] if i["kind"] == "vllm-kv-cache")
    assert v["side"] == "card" and v["figures"]["kv_cache_needed_bytes"] == 8783208120
    assert all(i["fixes"] for i in d["incidents"])


def test_terminal_report():
    proc = run_cli(
        "oom",
        "--no-kernel-log",
        str(OOM / "kernel-dmesg-iso-global-dataloader.txt"),
        str(OOM / "job-dataloader-worker-killed.log"),
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("oom: host")
    assert "kernel-oom-killer" in out and "job-killed" in out
    assert "anon-rss 40.00 GiB" in out
    assert "linked to #2" in out and "by time: 27 s apart" in out
    assert "fix: fewer DataLoader workers / smaller prefetch_factor: 8 'python' processes" in out
    assert "note: kernel log not read (--no-kernel-log)" in out


def test_missing_file_is_one_line_exit_2(tmp_path):
    proc = run_cli("oom", "--no-kernel-log", str(tmp_path / "nope.log"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"nodeledger: error: {tmp_path / 'nope.log'}: no such file"
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--since", "soon"], "--since 'soon': not a duration"),
        (["--timeout", "0"], "--timeout must be > 0"),
        (["--link-window", "-5"], "--link-window must be >= 0"),
    ],
)
def test_bad_options(args, msg):
    proc = run_cli("oom", "--no-kernel-log", *args)
    assert proc.returncode == 2 and msg in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_no_files_dmesg_denied_journal_absent(tmp_path):
    env = fake_path(tmp_path, dmesg=f'echo "{DENIED}" >&2; exit 1')
    d = cli_json("oom", env=env)
    assert d["incidents"] == [] and d["sources_read"] == []
    assert d["verdict"]["side"] == "none"
    assert d["verdict"]["verdict"] == "inconclusive"  # not "none": the kernel log was not read
    assert d["notes"][0].startswith("dmesg: permission denied")
    assert d["notes"][0].endswith("run as root or pass the log file")
    assert "journalctl: not found on PATH" in d["notes"]
    proc = run_cli("oom", env=env)
    assert proc.returncode == 0 and "note: dmesg: permission denied" in proc.stdout


def test_dmesg_missing(tmp_path):
    d = cli_json("oom", str(OOM / "job-torch-card-oom.log"), env=fake_path(tmp_path))
    assert d["notes"][:2] == ["dmesg: not found on PATH", "journalctl: not found on PATH"]
    assert d["verdict"]["side"] == "card" and len(d["incidents"]) == 4


def test_hung_journalctl(tmp_path):
    env = fake_path(tmp_path, dmesg=f'echo "{DENIED}" >&2; exit 1', journalctl="exec /bin/sleep 30")
    d = cli_json("oom", "--timeout", "0.5", "--since", "2h", env=env)
    assert "journalctl: timed out after 0.5 s (hung tool; killed)" in d["notes"]
    assert d["since"] == "2h" and d["incidents"] == []


def test_truncated_kernel_log_from_dmesg(tmp_path):
    env = fake_path(tmp_path, dmesg=f'exec /bin/cat "{OOM / "kernel-truncated-half-report.txt"}"')
    d = cli_json("oom", env=env)
    (inc,) = d["incidents"]
    assert inc["source"] == "dmesg --time-format iso:1" and inc["complete"] is False
    assert inc["details"]["invoked_by"]["process"] == "pt_main_thread"
    assert any("cut before its kill line" in n for n in inc["notes"])
    assert d["sources_read"][0] == {
        "source": "dmesg --time-format iso", "kind": "kernel-log", "lines": 15, "incidents": 1,
    }  # fmt: skip


def test_live_kernel_log_links_to_job_log(tmp_path):
    env = fake_path(
        tmp_path, dmesg=f'exec /bin/cat "{OOM / "kernel-dmesg-iso-global-dataloader.txt"}"'
    )
    d = cli_json("oom", str(OOM / "job-torchrun-sigkill.log"), env=env)
    k, j = d["incidents"]
    assert k["source"] == "dmesg --time-format iso:1"
    assert j["links"] == [
        {"to": 1, "kind": "kernel-oom-killer", "side": "host",
         "source": "dmesg --time-format iso:1", "by": "pid", "detail": "pid 41230",
         "pid": 41230, "process": "python"},
    ]  # fmt: skip


def test_since_drops_old_dated_incidents():
    d = cli_json(
        "oom", "--no-kernel-log", "--since", "1h", str(OOM / "kernel-dmesg-iso-global-dataloader.txt"),
        str(OOM / "kernel-plain-dmesg-memcg-v2.txt"),
    )  # fmt: skip
    assert [i["kind"] for i in d["incidents"]] == ["memcg-oom"]  # uptime only: kept
    assert any("older than the window left out" in n for n in d["notes"])


@pytest.mark.shared
def test_every_real_file_in_one_call():
    files = sorted((REAL / "oom-kernel").glob("*.txt")) + sorted((REAL / "oom-accel").glob("*.txt"))
    if len(files) < 26:
        pytest.skip(f"../shared/fixtures/real oom files absent at {REAL}")
    proc = run_cli("oom", "--no-kernel-log", "--json", *map(str, files))
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["verdict"]["side"] == "both"
    assert len(d["sources_read"]) == 26
    host = [i for i in d["incidents"] if i["side"] == "host"]
    card = [i for i in d["incidents"] if i["side"] == "card"]
    assert (len(host), len(card)) == (13, 17)
    assert [i["id"] for i in d["incidents"]] == list(range(1, 31))
