"""Collecting the kernel log for `nodeledger oom` when things go wrong: dmesg denied
(kernel.dmesg_restrict=1), dmesg missing, an old dmesg without --time-format, a hung journalctl,
a truncated report — each ends in a report with a note, never a traceback. Fake tools on a
private PATH stand in for dmesg / journalctl (run through the probe Runner: no shell, timeout)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conftest import FIXTURES
from nodeledger.errors import InputError
from nodeledger.machine.probe.runner import Runner
from nodeledger.triage.collect import parse_duration, read_files, read_kernel_log
from nodeledger.triage.report import build_report

OOM = FIXTURES / "oom"
DENIED = "dmesg: read kernel buffer failed: Operation not permitted"


def tool(bindir: Path, name: str, body: str) -> None:
    p = bindir / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake(tmp_path):
    """(bindir, root): a PATH with only our fake tools, and a fake / for /proc reads."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    root = tmp_path / "root"
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/dmesg_restrict").write_text("1\n")
    (root / "proc/uptime").write_text("9000.00 17000.00\n")
    return bindir, root


def runner(fake, timeout=5.0) -> Runner:
    bindir, root = fake
    return Runner(timeout=timeout, root=root, path=str(bindir))


def test_dmesg_iso(fake):
    bindir, _ = fake
    tool(bindir, "dmesg", f'exec /bin/cat "{OOM / "kernel-dmesg-iso-global-dataloader.txt"}"')
    kl = read_kernel_log(runner(fake))
    assert kl.source is not None and kl.source.label == "dmesg --time-format iso"
    assert kl.notes == []
    assert [r.argv for r in kl.attempts] == [["dmesg", "--time-format", "iso"]]
    rep = build_report([kl.source], notes=kl.notes)
    assert rep.incidents[0].origin == "kernel-log" and rep.incidents[0].pid == 41230
    assert rep.incidents[0].where == "dmesg --time-format iso:1"


def test_old_dmesg_falls_back_to_T_then_plain(fake):
    bindir, _ = fake
    half = OOM / "kernel-plain-dmesg-memcg-v2.txt"
    tool(
        bindir,
        "dmesg",
        'case "$1" in --time-format) echo "dmesg: unrecognized option \'--time-format\'" >&2; '
        "exit 1;; -T) echo \"dmesg: invalid option -- 'T'\" >&2; exit 1;; esac\n"
        f'exec /bin/cat "{half}"',
    )
    kl = read_kernel_log(runner(fake))
    assert kl.source.label == "dmesg"
    assert [r.argv for r in kl.attempts] == [
        ["dmesg", "--time-format", "iso"], ["dmesg", "-T"], ["dmesg"],
    ]  # fmt: skip
    assert kl.source.boot is not None  # uptime placed on the wall clock via /proc/uptime
    assert any("seconds since boot" in n for n in kl.notes)
    (inc,) = build_report([kl.source]).incidents
    assert inc.time.dt is not None and inc.time.uptime_s == 8123.45699


def test_dmesg_permission_denied_then_journalctl(fake):
    bindir, _ = fake
    tool(bindir, "dmesg", f'echo "{DENIED}" >&2; exit 1')
    tool(
        bindir,
        "journalctl",
        f'exec /bin/cat "{OOM / "kernel-dmesg-iso-global-dataloader.txt"}"',
    )
    kl = read_kernel_log(runner(fake), since_s=3600)
    assert kl.notes[0] == (
        "dmesg: permission denied (kernel.dmesg_restrict=1): run as root or pass the log file"
    )
    assert len(kl.attempts) == 2  # no -T / plain retries after a denial
    assert kl.attempts[1].argv[:6] == ["journalctl", "-k", "-o", "short-iso", "--no-pager", "-q"]
    assert kl.attempts[1].argv[6] == "--since"
    assert kl.source.label == "journalctl -k -o short-iso"
    assert any("instead" in n for n in kl.notes)


def test_denied_everywhere_gives_a_report_with_notes(fake):
    bindir, _ = fake
    tool(bindir, "dmesg", f'echo "{DENIED}" >&2; exit 1')
    tool(
        bindir,
        "journalctl",
        'echo "No journal files were opened due to insufficient permissions." >&2; exit 1',
    )
    kl = read_kernel_log(runner(fake))
    assert kl.source is None
    assert "permission denied (kernel.dmesg_restrict=1)" in kl.notes[0]
    assert kl.notes[1].startswith("journalctl: permission denied")
    assert kl.notes[2].startswith("no kernel log could be read")
    rep = build_report([], notes=kl.notes)
    assert rep.verdict["side"] == "none" and rep.notes == kl.notes


def test_dmesg_and_journalctl_missing(fake):
    kl = read_kernel_log(runner(fake))  # an empty PATH
    assert kl.source is None
    assert kl.notes[:2] == ["dmesg: not found on PATH", "journalctl: not found on PATH"]


def test_hung_journalctl_times_out(fake):
    bindir, _ = fake
    tool(bindir, "dmesg", f'echo "{DENIED}" >&2; exit 1')
    tool(bindir, "journalctl", "exec /bin/sleep 30")
    kl = read_kernel_log(runner(fake, timeout=0.5))
    assert kl.source is None
    assert kl.notes[1] == "journalctl: timed out after 0.5 s (hung tool; killed)"
    assert kl.attempts[1].seconds < 10


def test_hung_dmesg_times_out(fake):
    bindir, _ = fake
    tool(bindir, "dmesg", "exec /bin/sleep 30")
    kl = read_kernel_log(runner(fake, timeout=0.5))
    assert kl.notes[0] == "dmesg: timed out after 0.5 s (hung tool; killed)"
    assert len([a for a in kl.attempts if a.argv[0] == "dmesg"]) == 1


def test_truncated_kernel_log_from_dmesg(fake):
    bindir, _ = fake
    tool(bindir, "dmesg", f'exec /bin/cat "{OOM / "kernel-truncated-half-report.txt"}"')
    kl = read_kernel_log(runner(fake))
    (inc,) = build_report([kl.source]).incidents
    assert inc.complete is False and inc.fixes
    assert any("cut before its kill line" in n for n in inc.notes)


def test_dmesg_restrict_zero_is_not_blamed(fake):
    bindir, root = fake
    (root / "proc/sys/kernel/dmesg_restrict").write_text("0\n")
    tool(bindir, "dmesg", f'echo "{DENIED}" >&2; exit 1')
    kl = read_kernel_log(runner(fake))
    assert kl.notes[0] == "dmesg: permission denied: run as root or pass the log file"


def test_read_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_files([str(tmp_path / "missing.log")])
    with pytest.raises(InputError, match="is a directory"):
        read_files([str(tmp_path)])
    p = tmp_path / "bin.log"
    p.write_bytes(b"\xff\xfeRuntimeError: CUDA error: out of memory\n")
    (s,) = read_files([str(p)])
    assert s.text is None and s.path == str(p)  # streamed, not held
    assert "CUDA error: out of memory" in "\n".join(s.lines())
    if os.geteuid() != 0:
        q = tmp_path / "secret.log"
        q.write_text("x")
        q.chmod(0)
        with pytest.raises(InputError, match="cannot read"):
            read_files([str(q)])


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1w", 604800)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "h", "0s", "1h junk", "-1h"])
def test_parse_duration_bad(text):
    with pytest.raises(InputError, match="not a duration"):
        parse_duration(text)
