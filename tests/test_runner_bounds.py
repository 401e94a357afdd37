"""Bounds on what a probe, a bundle and a watch replay may take (issue 14): an endless tool is
cut at the output cap and killed with its whole process group; a hung tool's children die with
it; a bundle or a replay over a size cap is refused with one line; the idle history is bounded
by count.  Every fault here finishes in seconds and leaves no process behind."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tarfile
import time
import zlib
from pathlib import Path

import pytest

from conftest import run_cli
from nodeledger.errors import InputError
from nodeledger.machine.probe import Runner, probe_machine
from nodeledger.machine.probe import bundle as bundle_mod
from nodeledger.machine.probe.bundle import FORMAT, load_bundle, write_bundle
from nodeledger.watch import analyze as analyze_mod
from nodeledger.watch import record as record_mod
from nodeledger.watch.analyze import Analyzer
from nodeledger.watch.record import read_stream

MiB, GiB = 2**20, 2**30
STDOUT_CAP, STDERR_CAP = 16 * MiB, 1 * MiB  # runner.py's caps


# -- helpers ----------------------------------------------------------------------------------


def _tool(bindir: Path, name: str, script: str) -> Path:
    bindir.mkdir(exist_ok=True)
    p = bindir / name
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"  # a zombie is dead (PID 1 reaps it, or not)


def _group(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st is not None and st[1] == pgid and st[0] != "Z":
                out.append(int(d))
    return out


def _assert_gone(pids: list[int], pgid: int) -> None:
    end = time.monotonic() + 3  # SIGKILL is delivered at once; give the kernel a moment
    while time.monotonic() < end and (any(map(_alive, pids)) or _group(pgid)):
        time.sleep(0.02)
    assert not [p for p in pids if _alive(p)], "children of the tool outlived it"
    assert _group(pgid) == [], f"process group {pgid} still has members"


def _pids(f: Path) -> list[int]:
    end = time.monotonic() + 2
    while time.monotonic() < end and not f.exists():
        time.sleep(0.01)
    return [int(x) for x in f.read_text().split()]


def _fake_root(root: Path) -> None:
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "meminfo").write_text(
        "MemTotal:       131072000 kB\nMemAvailable:   100000000 kB\nSwapTotal:       0 kB\n"
        "SwapFree:        0 kB\n"
    )
    d = root / "sys/devices/system/node/node0"
    d.mkdir(parents=True)
    (d / "cpulist").write_text("0-3\n")


def _cleanup_sleepers(f: Path) -> None:  # only if a test failed half-way: kill what it started
    if f.exists():
        for pid in f.read_text().split():
            st = _stat(int(pid))
            if st is not None and "sleep" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(
                errors="replace"
            ):
                os.kill(int(pid), 9)


@pytest.fixture
def pidfile(tmp_path):
    f = tmp_path / "pids"
    yield f
    _cleanup_sleepers(f)


# -- 1. output caps ---------------------------------------------------------------------------


def test_endless_stdout_is_cut_at_the_cap_and_the_tool_killed(tmp_path, pidfile):
    bindir = tmp_path / "bin"
    _tool(bindir, "endless", f"echo $$ > {pidfile}\nexec yes nodeledger\n")
    t0 = time.perf_counter()
    res = Runner(timeout=20, path=str(bindir)).run(["endless"])
    assert time.perf_counter() - t0 < 5  # stopped at the cap, not at the timeout
    assert len(res.stdout) == STDOUT_CAP == 16 * MiB
    assert res.stdout.startswith("nodeledger\nnodeledger\n")
    assert res.truncated == "stdout truncated at 16 MiB"
    assert res.problem.startswith("stdout truncated at 16 MiB") and not res.ok
    _assert_gone([], _pids(pidfile)[0])


def test_endless_stderr_is_cut_at_its_cap(tmp_path, pidfile):
    bindir = tmp_path / "bin"
    _tool(bindir, "errless", f"echo $$ > {pidfile}\nyes err >&2\n")
    t0 = time.perf_counter()
    res = Runner(timeout=20, path=str(bindir)).run(["errless"])
    assert time.perf_counter() - t0 < 5
    assert len(res.stderr) == STDERR_CAP and res.stdout == ""
    assert "stderr truncated at 1 MiB" in res.problem
    _assert_gone([], _pids(pidfile)[0])


def test_output_at_the_cap_exactly_is_not_truncated_and_text_is_as_before(tmp_path):
    bindir = tmp_path / "bin"
    blob = tmp_path / "blob"
    blob.write_bytes(b"a\r\nb\rc\n" + b"x" * (STDOUT_CAP - 7))
    _tool(bindir, "full", f"cat {blob}\necho 'bad thing' >&2\nexit 3\n")
    res = Runner(timeout=5, path=str(bindir)).run(["full"])
    assert res.truncated is None and res.returncode == 3
    assert res.problem == "exit 3: bad thing"
    assert res.stdout.startswith("a\nb\nc\nxx")  # universal newlines, as text=True gave them
    assert res.stderr == "bad thing\n"


def test_probe_with_an_endless_nvidia_smi_keeps_the_rest_and_bundles_small(tmp_path):
    root = tmp_path / "root"
    _fake_root(root)
    bindir = tmp_path / "bin"
    _tool(bindir, "nvidia-smi", "exec yes 0, NVIDIA H200, 143771, 00000000:01:00.0, Disabled\n")
    r = Runner(timeout=20, root=root, path=str(bindir))
    t0 = time.perf_counter()
    p = probe_machine(r)
    assert time.perf_counter() - t0 < 10
    assert p.host.ram_bytes == 131072000 * 1024  # the inventory of everything else is kept
    assert any("truncated at 16 MiB" in n for n in p.notes), p.notes
    assert p.accelerators == []  # a cut output is refused (noted), not half-parsed
    assert all(len(res.stdout) <= STDOUT_CAP for res in r.log)
    b = write_bundle(r, tmp_path / "b.tar.gz")
    assert b.stat().st_size < 2 * MiB
    with tarfile.open(b) as tar:
        assert max(m.size for m in tar.getmembers()) <= STDOUT_CAP
        manifest = json.load(tar.extractfile("manifest.json"))
    cut = [c for c in manifest["commands"] if c.get("truncated")]
    # the runner's cut, and past the bundle's stdout budget the bundle's own cut after it
    assert cut and all(c["truncated"].startswith("stdout truncated at 16 MiB") for c in cut)
    assert all("truncated at 16 MiB" in c["problem"] for c in cut)
    replayed = probe_machine(load_bundle(b))
    assert replayed.notes == p.notes and replayed.host.ram_bytes == p.host.ram_bytes


# -- 2. the whole process group dies ----------------------------------------------------------


def test_hung_tool_with_children_is_killed_with_its_whole_group(tmp_path, pidfile):
    bindir = tmp_path / "bin"
    _tool(bindir, "hang", f"for i in 1 2 3; do sleep 300 & echo $! >> {pidfile}; done\n"
                          f"echo $$ >> {pidfile}\nexec sleep 300\n")  # fmt: skip
    t0 = time.perf_counter()
    res = Runner(timeout=0.5, path=str(bindir)).run(["hang"])
    assert time.perf_counter() - t0 < 3
    assert res.problem == "timed out after 0.5 s (hung tool; killed)"
    pids = _pids(pidfile)
    assert len(pids) == 4
    _assert_gone(pids, pids[-1])  # the script leads its group ($$): nothing of it remains


def test_tool_that_exits_leaving_a_child_on_its_pipe_returns_and_the_child_dies(tmp_path, pidfile):
    bindir = tmp_path / "bin"
    _tool(bindir, "leaver", f"sleep 300 & echo $! >> {pidfile}\necho $$ >> {pidfile}\n"
                            "echo 0, ok\nexit 0\n")  # fmt: skip
    t0 = time.perf_counter()
    res = Runner(timeout=20, path=str(bindir)).run(["leaver"])
    assert time.perf_counter() - t0 < 3  # not held until the timeout by the child's pipe
    assert res.ok and res.returncode == 0 and res.stdout == "0, ok\n"
    pids = _pids(pidfile)
    _assert_gone(pids, pids[-1])


def test_endless_tool_with_children_is_killed_with_them_at_the_cap(tmp_path, pidfile):
    bindir = tmp_path / "bin"
    _tool(bindir, "spew", f"sleep 300 & echo $! >> {pidfile}\necho $$ >> {pidfile}\nyes\n")
    res = Runner(timeout=20, path=str(bindir)).run(["spew"])
    assert res.truncated == "stdout truncated at 16 MiB"
    pids = _pids(pidfile)
    _assert_gone(pids, pids[-1])


# -- 3. bundles -------------------------------------------------------------------------------


def _tar_gz(path: Path, members: list[tuple[tarfile.TarInfo, bytes]], end: bool = True) -> Path:
    raw = io.BytesIO()
    for info, data in members:
        raw.write(info.tobuf(tarfile.PAX_FORMAT))
        raw.write(data)
        if len(data) % 512:
            raw.write(b"\0" * (512 - len(data) % 512))
    if end:
        raw.write(b"\0" * 1024)
    path.write_bytes(gzip.compress(raw.getvalue(), compresslevel=1))
    return path


def _info(name: str, size: int, type_=tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, type_
    return info


def _manifest_bytes() -> bytes:
    return json.dumps(
        {"format": FORMAT, "commands": [], "files": {}, "tools": {}, "globs": {}}
    ).encode()


def test_bundle_member_announcing_gigabytes_is_refused_before_reading(tmp_path):
    # a gzip bomb: a member of 5 GiB of zeros (here only its first MiB is stored: the refusal
    # comes from the header, before any of it is decompressed)
    m = _manifest_bytes()
    b = _tar_gz(tmp_path / "bomb.tar.gz",
                [(_info("manifest.json", len(m)), m),
                 (_info("commands/000.stdout", 5 * GiB), b"\0" * MiB)], end=False)  # fmt: skip
    t0 = time.perf_counter()
    proc = run_cli("machine", "probe", "--from", str(b))
    assert time.perf_counter() - t0 < 10
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    cap = f"{bundle_mod.MAX_MEMBER_BYTES // MiB} MiB cap on a member"
    assert len(lines) == 1 and cap in lines[0], proc.stderr


def test_bundle_pax_record_announcing_gigabytes_is_refused(tmp_path):
    b = _tar_gz(tmp_path / "pax.tar.gz", [(_info("x", 2 * GiB, tarfile.XHDTYPE), b"\0" * MiB)],
                end=False)  # fmt: skip
    with pytest.raises(
        InputError, match=f"{bundle_mod.MAX_MEMBER_BYTES // MiB} MiB cap on a member"
    ):
        load_bundle(b)


def test_bundle_members_over_the_total_cap_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_TOTAL_BYTES", 3 * MiB)
    m = _manifest_bytes()
    zeros = b"\0" * MiB
    b = _tar_gz(tmp_path / "t.tar.gz", [(_info("manifest.json", len(m)), m)]
                + [(_info(f"files/{i:04d}", MiB), zeros) for i in range(5)])  # fmt: skip
    with pytest.raises(InputError, match=r"over 3 MiB uncompressed \(the cap on a bundle\)"):
        load_bundle(b)


def test_bundle_with_too_many_members_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_MEMBERS", 5)
    b = _tar_gz(
        tmp_path / "n.tar.gz", [(_info(f"d{i}", 0, tarfile.DIRTYPE), b"") for i in range(9)]
    )
    with pytest.raises(InputError, match="over 5 members"):
        load_bundle(b)


def test_bundle_archive_decompressing_past_the_stream_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_ARCHIVE_BYTES", 64 * 1024)
    b = _tar_gz(
        tmp_path / "s.tar.gz", [(_info(f"d{i}", 0, tarfile.DIRTYPE), b"") for i in range(400)]
    )
    with pytest.raises(InputError, match="decompresses to over"):
        load_bundle(b)


def test_deeply_nested_manifest_is_a_bad_bundle(tmp_path):
    deep = b"[" * 200_000 + b"]" * 200_000
    b = _tar_gz(tmp_path / "deep.tar.gz", [(_info("manifest.json", len(deep)), deep)])
    proc = run_cli("machine", "probe", "--from", str(b))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nests too deeply" in lines[0], proc.stderr


def test_bundle_of_a_cut_output_replays_the_cut(tmp_path):
    from nodeledger.machine.probe.runner import RawResult

    r = Runner()
    r.log.append(RawResult(["nvidia-smi"], "x" * 100, "", None, 0.1,
                           "stdout truncated at 16 MiB (endless output; the tool was killed)",
                           "stdout truncated at 16 MiB"))  # fmt: skip
    rr = load_bundle(write_bundle(r, tmp_path / "c.tar.gz"))
    res = rr.run(["nvidia-smi"])
    assert res.truncated == "stdout truncated at 16 MiB" and res.stdout == "x" * 100
    assert res.problem.startswith("stdout truncated")


# -- 4. watch replays -------------------------------------------------------------------------

HEADER = {"nodeledger_watch": 1, "started": 0, "interval_s": 1.0, "backend": "fake",
          "machine": {"cards": [{"index": 0, "total_bytes": 80 * GiB}]}, "plan": None}  # fmt: skip


def _sample(t: float, used: int = 2 * GiB, util: float = 0.0) -> dict:
    return {"t": t, "cards": [{"index": 0, "used_bytes": used, "total_bytes": 80 * GiB,
                               "util_pct": util, "processes": [{"pid": 7, "used_bytes": used}]}],
            "host": {}, "pids": {"7": {"alive": True, "name": "python"}}}  # fmt: skip


def test_gz_replay_with_a_huge_line_is_refused_by_line_number(tmp_path):
    p = tmp_path / "r.jsonl.gz"
    z = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip framing
    with open(p, "wb") as f:
        f.write(z.compress((json.dumps(HEADER) + "\n" + json.dumps(_sample(0)) + "\n").encode()))
        chunk = b"x" * (8 * MiB)
        for _ in range(32):  # a 256 MiB line, a few hundred KiB compressed
            f.write(z.compress(chunk))
        f.write(z.compress(b"\n"))
        f.write(z.flush())
    assert p.stat().st_size < 2 * MiB
    t0 = time.perf_counter()
    _header, samples = read_stream(p)
    with pytest.raises(InputError, match=r"line 3: longer than 16 MiB \(the cap on a line\)"):
        for _ in samples:
            pass
    assert time.perf_counter() - t0 < 5


def test_gz_replay_over_the_total_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(record_mod, "MAX_STREAM_CHARS", 64 * 1024)
    p = tmp_path / "r.jsonl.gz"
    lines = [json.dumps(HEADER)] + [json.dumps(_sample(float(i))) for i in range(1000)]
    p.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    _, samples = read_stream(p)
    with pytest.raises(InputError, match=r"decompresses to over .* GiB \(the cap on a replay\)"):
        for _ in samples:
            pass


def test_replay_line_nested_too_deep_is_a_bad_line_not_a_crash(tmp_path):
    p = tmp_path / "r.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    p.write_text("\n".join([json.dumps(HEADER), deep, json.dumps(_sample(1.0))]) + "\n")
    _, samples = read_stream(p)
    with pytest.raises(InputError, match="line 2: not valid JSON"):
        list(samples)
    p.write_text(deep + "\n")
    with pytest.raises(InputError, match="line 1: not a nodeledger watch stream"):
        read_stream(p)


def test_replay_history_at_one_timestamp_is_bounded_by_count():
    an = Analyzer(HEADER)
    s = _sample(1000.0)
    for _ in range(analyze_mod.HIST_MAX + 500):
        an.feed(s)
    assert len(an.hist) == analyze_mod.HIST_MAX
    assert an.n == analyze_mod.HIST_MAX + 500


def test_fast_sampling_past_the_count_bound_still_judges_the_window(monkeypatch):
    monkeypatch.setattr(analyze_mod, "HIST_MAX", 50)
    an = Analyzer(HEADER, idle_window=10.0)
    for k in range(300):  # every 0.05 s for 15 s: the window holds 200 samples, the bound 50
        an.feed(_sample(k * 0.05))
    assert len(an.hist) == 50
    assert [f["kind"] for f in an.idle(active_only=True)] == ["held, low activity"]


def test_reading_a_fifo_or_a_device_never_blocks(tmp_path):
    """A FIFO in a (fake or hostile) tree blocked Path.read_text forever; a device never ends.
    Only regular files are read; the rest is unknown with the reason."""
    (tmp_path / "proc").mkdir()
    os.mkfifo(tmp_path / "proc" / "meminfo")
    (tmp_path / "dev").mkdir()
    os.symlink("/dev/zero", tmp_path / "dev" / "zero")
    r = Runner(root=tmp_path)
    t0 = time.perf_counter()
    assert r.read("/proc/meminfo") is None and r.problems["/proc/meminfo"] == "not a regular file"
    assert r.read("/dev/zero") is None
    assert time.perf_counter() - t0 < 5


def test_a_huge_file_is_cut_at_the_cap(tmp_path):
    from nodeledger.machine.probe.runner import FILE_CAP

    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "big").write_text("x" * (FILE_CAP + 10))
    r = Runner(root=tmp_path)
    text = r.read("/sys/big")
    assert len(text) == FILE_CAP and "truncated" in r.problems["/sys/big"]


def test_proc_sys_is_read_in_chunks_the_kernel_accepts(tmp_path, monkeypatch):
    """Linux 6.18 answers ENOMEM to one read of /proc/sys asking for 4 MiB or more, so a read of
    the whole 16 MiB cap left numa_balancing and swappiness unknown on every modern host.  The
    kernel's refusal is played here by an os.read that refuses such sizes."""
    (tmp_path / "proc" / "sys" / "vm").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "vm" / "swappiness").write_text("60\n")
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "big").write_bytes(b"y" * (300 * 1024))
    real_read, asked = os.read, []

    def kernel_read(fd, n):
        asked.append(n)
        if n >= 4 * MiB:
            raise OSError(12, "Cannot allocate memory")
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", kernel_read)
    r = Runner(root=tmp_path)
    assert r.read("/proc/sys/vm/swappiness") == "60\n"
    assert r.read("/sys/big") == "y" * (300 * 1024) and "/sys/big" not in r.problems
    assert asked and max(asked) < 4 * MiB


@pytest.mark.skipif(not Path("/proc/sys/vm/swappiness").is_file(), reason="no /proc/sys here")
def test_probe_reads_swappiness_and_numa_balancing_on_this_live_kernel():
    """On the live kernel (6.18 here, where the single large read failed): both tuning facts
    are read, not 'unknown (Cannot allocate memory)'."""
    r = Runner()
    assert (r.read("/proc/sys/vm/swappiness") or "").strip().isdigit(), r.problems
    if Path("/proc/sys/kernel/numa_balancing").is_file():
        assert (r.read("/proc/sys/kernel/numa_balancing") or "").strip().isdigit(), r.problems


def test_machine_probe_cli_with_an_endless_tool_is_bounded_in_time_and_memory(tmp_path):
    """As a user runs it: `machine probe` with an nvidia-smi that never stops printing.  Before
    the caps it grew to 4.6 GB; now it ends in seconds, well under 300 MiB, with the host kept
    and the cut named (the child's peak RSS from the kernel's own accounting)."""
    import sys

    from conftest import run_measured

    bindir = tmp_path / "bin"
    _tool(bindir, "nvidia-smi", "exec yes 0, NVIDIA H200, 143771, 00000000:01:00.0, Disabled\n")
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    run = run_measured([sys.executable, "-m", "nodeledger", "machine", "probe", "--json",
                        "--timeout", "20"], env=env, timeout=60)  # fmt: skip
    assert run["rc"] == 0
    data = json.loads(run["stdout"])
    assert data["host"]["ram_bytes"] and any("truncated at 16 MiB" in n for n in data["notes"])
    assert run["wall"] < 20
    assert run["peak_mib"] < 300, run["peak_mib"]


def test_bundle_with_a_big_pax_header_is_refused_at_once(tmp_path):
    """A 200 KB pax record (Python's own pax parser is quadratic in it before 3.11.10) and
    thousands of chained GNU long-name headers (tarfile recurses per header): one line each."""
    import tarfile as T

    def member(name: str, data: bytes, kind=T.REGTYPE) -> bytes:
        info = T.TarInfo(name)
        info.size, info.type = len(data), kind
        pad = b"\0" * (-len(data) % 512)
        return info.tobuf(format=T.USTAR_FORMAT) + data + pad

    pax = member("././@PaxHeader", b"1" * 200_000, T.XHDTYPE) + member("manifest.json", b"{}")
    chain = b"".join(member("././@LongLink", b"x" * 10, T.GNUTYPE_LONGNAME) for _ in range(5000))
    for n, body in (("pax", pax), ("chain", chain + member("manifest.json", b"{}"))):
        b = tmp_path / f"{n}.tar.gz"
        b.write_bytes(gzip.compress(body + b"\0" * 1024))
        t0 = time.perf_counter()
        with pytest.raises(InputError):
            load_bundle(b)
        assert time.perf_counter() - t0 < 5


def test_bundle_path_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    f = tmp_path / "b.tar.gz"
    os.mkfifo(f)
    with pytest.raises(InputError, match="not a regular file"):
        load_bundle(f)
