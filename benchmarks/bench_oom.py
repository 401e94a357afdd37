"""`nodeledger oom` on large kernel logs (issue 14 targets: 100 MB in <= 5 s and <= 200 MiB peak
RSS, time linear in the size). Builds realistic kernel logs of 1 / 10 / 100 MB in a temp dir:
the real oom-killer reports of ../shared/fixtures/real/oom-kernel (else the project's own
tests/fixtures/oom kernel files) repeated with shifted timestamps and pids, between filler lines
of an ordinary kernel log. Runs ``nodeledger oom --no-kernel-log FILE --json`` as a subprocess
and prints, for each size: wall seconds, peak RSS (the child's own ``ru_maxrss`` from wait4),
incidents found, and beside it the time of a bare line count of the same file (``wc -l`` and a
Python loop). Exits 1 when a target is missed.

    python benchmarks/bench_oom.py [--sizes 1,10,100] [--fixtures DIR] [--keep DIR]

``--dense`` builds job logs instead, every line part of a card-side (or job-kill) message: the
tests/fixtures/oom job logs back to back, each copy's "Tried to allocate" figure changed, so
that every message is an incident of its own (the worst case of the card-OOM reader; no
size target, the MB/s column says how fast it reads):

    python benchmarks/bench_oom.py --dense --sizes 1,10
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("NODELEDGER_SHARED", ROOT.parent / "shared"))
TARGET_S = 5.0  # at 100 MB
TARGET_RSS_MIB = 200.0
MB = 10**6

_ISO = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)")
_CTIME = re.compile(r"\[(\w{3}) (\w{3}) +(\d+) (\d\d:\d\d:\d\d) (\d{4})\]")
_SYSLOG = re.compile(r"^(\w{3}) +(\d+) (\d\d:\d\d:\d\d)", re.M)
_UPTIME = re.compile(r"\[(\s*)(\d+)\.(\d+)\]")
_PID = re.compile(
    r"(Killed process |Kill process |reaped process |pid=|PID: |\[)(\s*)(\d+)(?=[\],\s)])"
)

FILLER = [
    "EXT4-fs (nvme0n1p2): re-mounted {n}. Opts: errors=remount-ro",
    'audit: type=1400 audit({t}:{n}): apparmor="DENIED" operation="open" pid={n} comm="cron"',
    "usb 1-{d}: new high-speed USB device number {d} using xhci_hcd",
    "mlx5_core 0000:{d}1:00.0 eth{d}: Link up",
    "NVRM: GPU at PCI:0000:{d}1:00: GPU-4c1b2a3e-{n}",
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{n}: link becomes ready",
    "docker0: port {d}(veth{n}) entered forwarding state",
    "nvme nvme{d}: I/O {n} QID {d} timeout, completion polled",
    "systemd[1]: Started Session {n} of user ubuntu.",
    "TCP: request_sock_TCP: Possible SYN flooding on port {n}. Sending cookies.",
]


def fixture_texts(folder: Path | None) -> list[str]:
    if folder is None:
        real = SHARED / "fixtures" / "real" / "oom-kernel"
        folder = real if real.is_dir() else ROOT / "tests" / "fixtures" / "oom"
    files = sorted(folder.glob("*.txt"))
    if folder.name == "oom":
        files = [f for f in files if f.name.startswith("kernel-")]
    return [f.read_text(errors="replace") for f in files]


def shifted(text: str, seconds: float, pid_shift: int = 0) -> str:
    """Text with every timestamp moved ``seconds`` later and its pids moved by ``pid_shift``."""
    dt = timedelta(seconds=seconds)

    def iso(m: re.Match[str]) -> str:
        t = datetime.fromisoformat(f"{m[1]}T{m[2]}") + dt
        return t.strftime("%Y-%m-%dT%H:%M:%S")

    def ctime(m: re.Match[str]) -> str:
        t = datetime.strptime(f"{m[2]} {m[3]} {m[4]} {m[5]}", "%b %d %H:%M:%S %Y") + dt
        return t.strftime("[%a %b %e %H:%M:%S %Y]")

    def syslog(m: re.Match[str]) -> str:
        t = datetime.strptime(f"2024 {m[1]} {m[2]} {m[3]}", "%Y %b %d %H:%M:%S") + dt
        return t.strftime("%b %e %H:%M:%S")

    def uptime(m: re.Match[str]) -> str:
        frac = len(m[3])
        v = float(f"{m[2]}.{m[3]}") + seconds
        return f"[{m[1]}{v:.{frac}f}]"

    def pid(m: re.Match[str]) -> str:
        return f"{m[1]}{m[2]}{int(m[3]) + pid_shift}"

    text = _ISO.sub(iso, text)
    text = _CTIME.sub(ctime, text)
    text = _SYSLOG.sub(syslog, text)
    text = _UPTIME.sub(uptime, text)
    return _PID.sub(pid, text) if pid_shift else text


def _style(fixture: str) -> str:
    """The line prefix (timestamps, host) of the fixture's last stamped line: its filler lines
    are written in the same style, as a real log is."""
    from nodeledger.logs.kernel import kernel_message
    from nodeledger.logs.logtime import find_time

    for raw in reversed(fixture.splitlines()):
        if find_time(raw) is not None:
            msg = kernel_message(raw)
            return raw[: len(raw) - len(msg)] if msg and raw.endswith(msg) else raw[:40] + " "
    return ""


def build(path: Path, size: int, fixtures: list[str]) -> None:
    """About ``size`` bytes: blocks of each fixture (shifted) followed by ~450 filler lines in the
    fixture's own line style, 0.2 s apart from 60 s after it (a block spans 1000 s)."""
    styles = [_style(fx) for fx in fixtures]
    written, block, k = 0, 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            for fx, style in zip(fixtures, styles, strict=True):
                base = 1000 * block
                chunk = shifted(fx, base, 7 * block)
                if not chunk.endswith("\n"):
                    chunk += "\n"
                lines = [chunk]
                for j in range(450):
                    msg = FILLER[k % len(FILLER)].format(n=10000 + k % 50000, d=k % 8, t=k)
                    lines.append(shifted(style, base + 60 + 0.2 * j) + msg + "\n")
                    k += 1
                chunk = "".join(lines)
                f.write(chunk)
                written += len(chunk.encode())
            block += 1


_TRIED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?)")


def build_dense(path: Path, size: int) -> None:
    """About ``size`` bytes of job logs made only of out-of-memory messages (see --dense)."""
    files = sorted((ROOT / "tests" / "fixtures" / "oom").glob("job-*.log"))
    texts = [f.read_text(errors="replace").rstrip("\n") + "\n" for f in files]
    written, k = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            for t in texts:
                chunk = _TRIED.sub(lambda m, k=k: f"Tried to allocate {k}.{len(m[1]) % 10}", t)
                f.write(chunk)
                written += len(chunk.encode())
            k += 1


def line_counts(path: Path) -> tuple[float | None, float, int]:
    """(wc -l seconds or None, Python loop seconds, lines)."""
    wc_s = None
    if shutil.which("wc"):
        t = time.perf_counter()
        subprocess.run(["wc", "-l", str(path)], check=True, capture_output=True)
        wc_s = time.perf_counter() - t
    t = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        for _ in f:
            n += 1
    return wc_s, time.perf_counter() - t, n


def run_oom(path: Path, out: Path) -> tuple[float, float, int, int]:
    """(wall s, peak RSS MiB of the child, incidents, exit code)."""
    cmd = [sys.executable, "-m", "nodeledger", "oom", "--no-kernel-log", str(path), "--json"]
    with open(out, "wb") as o:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=o, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        print(f"oom exited {proc.returncode}: {err.strip()[:500]}", file=sys.stderr)
        return wall, usage.ru_maxrss / 1024, -1, proc.returncode
    d = json.loads(out.read_text())
    rss_mib = usage.ru_maxrss / 1024  # Linux: kB
    return wall, rss_mib, len(d["incidents"]), 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,10,100", help="MB, comma-separated")
    ap.add_argument("--fixtures", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="build the logs here and keep them")
    ap.add_argument("--dense", action="store_true",
                    help="job logs of out-of-memory messages only (no size target)")  # fmt: skip
    a = ap.parse_args(argv)
    sizes = [float(x) for x in a.sizes.split(",")]
    fixtures = fixture_texts(a.fixtures)
    tmp = Path(tempfile.mkdtemp(prefix="bench-oom-")) if a.keep is None else a.keep
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    failed = False
    try:
        for mb in sizes:
            log = tmp / f"{'dense' if a.dense else 'kernel'}-{mb:g}MB.log"
            if a.dense:
                build_dense(log, int(mb * MB))
            else:
                build(log, int(mb * MB), fixtures)
            wc_s, py_s, n = line_counts(log)
            wall, rss, incs, rc = run_oom(log, tmp / "out.json")
            real_mb = log.stat().st_size / MB
            miss = []
            if rc != 0:
                miss.append(f"exit {rc}")
            if mb >= 100 and not a.dense:
                if wall > TARGET_S * mb / 100:
                    miss.append(f"> {TARGET_S * mb / 100:g} s")
                if rss > TARGET_RSS_MIB:
                    miss.append(f"> {TARGET_RSS_MIB:g} MiB")
            failed |= bool(miss)
            rows.append((real_mb, n, wall, rss, incs, wc_s, py_s, ", ".join(miss) or "ok"))
            if a.keep is None:
                log.unlink()
    finally:
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    head = ("size MB", "lines", "oom wall s", "peak RSS MiB", "incidents", "wc -l s",
            "py count s", "s/MB", "MB/s", "target")  # fmt: skip
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    for real_mb, n, wall, rss, incs, wc_s, py_s, verdict in rows:
        print(
            f"{real_mb:.1f} | {n:,} | {wall:.2f} | {rss:.0f} | {incs:,} | "
            f"{'-' if wc_s is None else f'{wc_s:.3f}'} | {py_s:.3f} | {wall / real_mb:.3f} | "
            f"{real_mb / wall:.2f} | {verdict}"
        )
    print(f"targets: 100 MB <= {TARGET_S:g} s and <= {TARGET_RSS_MIB:g} MiB peak RSS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
