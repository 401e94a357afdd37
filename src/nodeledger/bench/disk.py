"""Disk read bench (no torch): sequential and random 4 KiB reads of a dataset path and of the
model cache path, page cache bypassed where the filesystem allows.

Method, per tested directory:
1. write a test file of ``file_bytes`` (quick 128 MiB, full 1 GiB) of incompressible bytes,
   ``fsync`` it (the write rate is kept as evidence, not judged);
2. open it with ``O_DIRECT`` and read into a page-aligned ``mmap`` buffer with ``os.preadv``
   (the page cache is bypassed).  Where the filesystem refuses ``O_DIRECT`` (tmpfs on old
   kernels, some FUSE / network filesystems), read it normally and drop its pages before every
   phase with ``posix_fadvise(POSIX_FADV_DONTNEED)`` after ``fdatasync``; ``mincore(2)`` then
   says how much of the file is still resident.  When pages stay resident the figures include
   memory and are not judged (verdict ``unknown``, with the resident share);
3. sequential: one stream of 4 MiB reads over the whole file;
4. random QD1: one 4 KiB read in flight at page offsets in random order (no page twice), for
   ``random_seconds`` (quick 1.5 s, full 5 s) -> mean / p50 / p99 latency and MB/s;
5. random QD16: 16 threads doing the same (``os.preadv`` releases the GIL) -> MB/s;
6. delete the test file (also on error or Ctrl-C).

A directory that is not writable (or lacks room) is ``unavailable`` with the reason, never a
failure.  The mount kind (nvme / ssd / hdd / network / unknown) is the probe's storage section
(``machine probe``) by longest-prefix match; the filesystem type comes from /proc/mounts.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import random
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nodeledger.bench import judge as J
from nodeledger.machine.parsers.hf_cache import DEFAULT as HF_DEFAULT
from nodeledger.machine.parsers.hf_cache import KEYS as HF_KEYS
from nodeledger.machine.parsers.hf_cache import hf_hub_cache
from nodeledger.units import MiB

PAGE = 4096
SEQ_BLOCK = 4 * MiB
RESIDENT_LIMIT = 0.05  # more of the file resident after a drop: figures include memory

MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}


@dataclass(frozen=True)
class DiskSizes:
    file_bytes: int
    random_seconds: float
    threads: int = 16

    def describe(self) -> str:
        return (f"{self.file_bytes / MiB:,.0f} MiB test file, one pass of 4 MiB sequential reads, "
                f"4 KiB random reads for up to {self.random_seconds:g} s at QD1 and at QD{self.threads}")  # fmt: skip


QUICK = DiskSizes(128 * MiB, 1.5)
FULL = DiskSizes(1024 * MiB, 5.0)


# ---------------------------------------------------------------------------------------
# where a path lives
# ---------------------------------------------------------------------------------------


def model_cache_dir(env: dict[str, str] | None = None) -> tuple[Path, str]:
    """The HuggingFace hub cache as huggingface_hub resolves it, and which rule gave it
    (``machine.parsers.hf_cache``; ``~`` expanded as the shell does)."""
    env = dict(os.environ) if env is None else env
    given = {k: os.path.expanduser(env[k]) for k in HF_KEYS if env.get(k)}
    path, rule = hf_hub_cache(given, os.path.expanduser("~"))
    if rule == HF_DEFAULT:
        return Path(path or HF_DEFAULT).expanduser(), f"default {HF_DEFAULT}"
    return Path(path or "").expanduser(), rule


def existing_dir(path: Path) -> Path:
    """The path if it is a directory, its folder if a file, else the nearest existing parent."""
    p = path.absolute()
    if p.is_file():
        return p.parent
    while not p.is_dir():
        if p.parent == p:
            break
        p = p.parent
    return p


def _under(path: str, mount: str) -> bool:
    m = mount.rstrip("/") or "/"
    return m == "/" or path == m or path.startswith(m + "/")


def mount_entry(path: str, mounts_text: str | None) -> dict | None:
    """Longest-prefix /proc/mounts entry holding ``path``: {mount, filesystem, device}."""
    best = None
    for line in (mounts_text or "").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if _under(path, mnt) and (best is None or len(mnt) >= len(best["mount"])):
            best = {"mount": mnt, "filesystem": parts[2], "device": parts[0]}
    return best


def mount_kind(
    path: str, mounts: list, mount_path: str | None = None
) -> tuple[str, str | None, str]:
    """(kind, mount path, source) of the longest-prefix probe Mount holding ``path``.  When
    /proc/mounts puts the path on a longer mount (``mount_path``) that the probe does not list
    (tmpfs, overlay), the kind is unknown rather than that of a parent mount."""
    best = None
    for m in mounts:
        if _under(path, m.path) and (best is None or len(m.path) > len(best.path)):
            best = m
    if best is None:
        return "unknown", None, "no mount in the probe's storage section holds this path"
    if mount_path is not None and mount_path.rstrip("/") != best.path.rstrip("/"):
        return (
            "unknown",
            mount_path,
            (f"{mount_path} is not a block or network mount in the probe's storage section"),
        )
    return (
        best.kind,
        best.path,
        f"machine probe storage: {best.path} ({best.filesystem}) {best.kind}",
    )


# ---------------------------------------------------------------------------------------
# page cache
# ---------------------------------------------------------------------------------------


def resident_fraction(path: str, size: int) -> float | None:
    """Share of the file's pages in the page cache (mincore(2) on a fresh mapping); None when
    it cannot be asked (not Linux, no libc)."""
    if size <= 0:
        return 0.0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]  # fmt: skip
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                    return None
                return sum(b & 1 for b in vec) / pages
            finally:
                libc.munmap(ctypes.c_void_p(addr), size)
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        return None


def drop_cache(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def open_direct(path: str) -> tuple[int | None, str]:
    """An O_DIRECT descriptor that really reads, or None and why not."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None, "O_DIRECT not available on this platform"
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError as exc:
        return None, f"O_DIRECT refused by the filesystem ({exc.strerror or exc})"
    buf = mmap.mmap(-1, PAGE)
    try:
        os.preadv(fd, [buf], 0)
    except OSError as exc:
        os.close(fd)
        return None, f"O_DIRECT read refused ({exc.strerror or exc})"
    finally:
        buf.close()
    return fd, ""


# ---------------------------------------------------------------------------------------
# the measurement
# ---------------------------------------------------------------------------------------


class Unavailable(Exception):
    """The directory cannot be tested (not writable, no room): a reason, not a failure."""


def write_test_file(folder: Path, size: int) -> tuple[str, float]:
    """Create the test file (incompressible, fsynced); return its path and write MB/s."""
    try:
        st = os.statvfs(folder)
    except OSError as exc:
        raise Unavailable(f"cannot stat {folder}: {exc.strerror or exc}") from None
    free = st.f_bavail * st.f_frsize
    if free < 2 * size:
        raise Unavailable(f"needs {2 * size / MiB:,.0f} MiB free for a {size / MiB:,.0f} MiB test "
                          f"file, has {free / MiB:,.0f} MiB")  # fmt: skip
    if not os.access(folder, os.W_OK):
        raise Unavailable(f"{folder} is not writable by this user (uid {os.getuid()})")
    try:
        fd, name = tempfile.mkstemp(prefix=".nodeledger-bench-", dir=folder)
    except OSError as exc:
        raise Unavailable(f"{folder} is not writable: {exc.strerror or exc}") from None
    block = bytearray(os.urandom(min(SEQ_BLOCK, size)))
    t0 = time.perf_counter()
    try:
        done, i = 0, 0
        while done < size:
            block[:8] = i.to_bytes(8, "little")  # no two blocks alike (dedup)
            n = os.write(fd, block[: min(len(block), size - done)])
            done, i = done + n, i + 1
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise Unavailable(f"writing the test file failed: {exc.strerror or exc}") from None
    seconds = time.perf_counter() - t0
    os.close(fd)
    return name, size / seconds / 1e6


def _seq(fd: int, size: int) -> float:
    buf = mmap.mmap(-1, SEQ_BLOCK)
    try:
        t0 = time.perf_counter()
        off = 0
        while off < size:
            n = os.preadv(fd, [buf], off)
            if n <= 0:
                break
            off += n
        return off / (time.perf_counter() - t0) / 1e6
    finally:
        buf.close()


def _random(fd: int, pages: list[int], seconds: float, threads: int) -> tuple[list[int], float]:
    """4 KiB reads at ``pages`` (in order, split among threads) until done or ``seconds``;
    returns the latencies (ns) and the elapsed wall time."""
    lat: list[list[int]] = [[] for _ in range(threads)]
    deadline = time.perf_counter() + seconds
    errors: list[BaseException] = []

    def work(k: int) -> None:
        buf = mmap.mmap(-1, PAGE)
        mine, out = pages[k::threads], lat[k]
        clock = time.perf_counter_ns
        end = int(deadline * 1e9)
        try:
            for p in mine:
                t = clock()
                os.preadv(fd, [buf], p * PAGE)
                t2 = clock()
                out.append(t2 - t)
                if t2 >= end:
                    break
        except BaseException as exc:  # re-raised in the caller
            errors.append(exc)
        finally:
            buf.close()

    # perf_counter and perf_counter_ns share one clock
    t0 = time.perf_counter()
    if threads == 1:
        work(0)
    else:
        ts = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return [x for xs in lat for x in xs], elapsed


def measure_file(name: str, size: int, sizes: DiskSizes, seed: int = 0) -> dict:
    """Read the test file; return the raw figures and how the page cache was handled."""
    fd, why = open_direct(name)
    direct = fd is not None
    if fd is None:
        fd = os.open(name, os.O_RDONLY)
    resident: list[float] = []

    def drop() -> None:
        if direct:
            return
        drop_cache(fd)
        r = resident_fraction(name, size)
        if r is not None:
            resident.append(r)

    rng = random.Random(seed)
    npages = size // PAGE
    try:
        drop()
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        seq = _seq(fd, size)
        drop()
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        order = list(range(npages))
        rng.shuffle(order)
        lat, el1 = _random(fd, order, sizes.random_seconds, 1)
        drop()
        rng.shuffle(order)
        plat, el2 = _random(fd, order, sizes.random_seconds, sizes.threads)
    finally:
        if not direct:
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    if direct:
        cache = {"mode": "bypassed", "text": "bypassed: O_DIRECT reads into a page-aligned buffer"}
    else:
        worst = max(resident) if resident else None
        if worst is None:
            text = (f"dropped: posix_fadvise(POSIX_FADV_DONTNEED) after fdatasync before each phase "
                    f"(not verified: mincore unavailable); O_DIRECT not used: {why}")  # fmt: skip
            mode = "dropped-unverified"
        elif worst <= RESIDENT_LIMIT:
            text = (f"dropped: posix_fadvise(POSIX_FADV_DONTNEED) after fdatasync before each phase, "
                    f"verified with mincore (at most {worst:.0%} of pages resident); O_DIRECT not used: {why}")  # fmt: skip
            mode = "dropped"
        else:
            text = (f"not bypassed: {worst:.0%} of the file stayed in the page cache after "
                    f"POSIX_FADV_DONTNEED (O_DIRECT not used: {why}); figures include memory")  # fmt: skip
            mode = "cached"
        cache = {"mode": mode, "text": text}
    ms = sorted(x / 1e6 for x in lat)
    return {
        "sequential_mbps": seq,
        "qd1_reads": len(ms),
        "qd1_mean_ms": statistics.fmean(ms) if ms else None,
        "qd1_p50_ms": ms[len(ms) // 2] if ms else None,
        "qd1_p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else None,
        "qd1_mbps": len(ms) * PAGE / el1 / 1e6 if el1 > 0 else None,
        "qd_threads": sizes.threads,
        "qdn_reads": len(plat),
        "qdn_mbps": len(plat) * PAGE / el2 / 1e6 if el2 > 0 else None,
        "page_cache": cache,
    }


def bench_dir(label: str, path: Path, sizes: DiskSizes, mounts: list,
              mounts_text: str | None, how: str = "") -> dict:  # fmt: skip
    """Measure one directory (``label``: "dataset", "model cache"); a section with its figures."""
    folder = existing_dir(path)
    real = os.path.realpath(folder)
    entry = mount_entry(real, mounts_text) or {}
    kind, mnt, ksrc = mount_kind(real, mounts, entry.get("mount"))
    fs = entry.get("filesystem")
    sec = {
        "label": label, "path": str(path), "how": how, "tested_in": str(folder),
        "mount": entry.get("mount") or mnt, "filesystem": fs, "kind": kind, "kind_source": ksrc,
        "file_bytes": sizes.file_bytes, "sizes": sizes.describe(), "status": "measured",
        "reason": "", "page_cache": None, "write_mbps": None, "raw": None, "figures": [],
    }  # fmt: skip
    if str(folder) != str(path.absolute()):
        sec["how"] = (how + "; " if how else "") + f"{path} does not exist yet: tested {folder}"
    subject = f"{label} {folder} ({kind}{', ' + fs if fs else ''})"
    try:
        name, wmbps = write_test_file(folder, sizes.file_bytes)
    except Unavailable as exc:
        sec.update(status="unavailable", reason=str(exc))
        sec["figures"] = [J.unavailable("disk", subject, "read bench", f"not measured: {exc}")]
        return sec
    try:
        raw = measure_file(name, sizes.file_bytes, sizes)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    sec.update(write_mbps=round(wmbps, 1), raw=raw, page_cache=raw["page_cache"]["text"])
    sec["figures"] = disk_figures(subject, kind, fs, raw)
    return sec


def disk_figures(subject: str, kind: str, fs: str | None, raw: dict) -> list[dict]:
    """Judge one directory's raw figures (pure)."""
    override, why = None, ""
    if fs in MEMORY_FS:
        override, why = "unknown", f"{fs} is memory-backed: these are RAM figures, not a disk's"
    elif raw["page_cache"]["mode"] == "cached":
        override, why = "unknown", "page cache not dropped: figures include memory"
    cache = raw["page_cache"]["text"]

    def fig(metric: str, value, unit: str, expect: J.Expect, evidence: str) -> dict:
        f = J.figure("disk", subject, metric, value, unit, expect, verdict=override,
                     evidence=evidence + (f"; {why}" if why else ""))  # fmt: skip
        return f

    lat_ev = (f"{raw['qd1_reads']:,} reads; p50 {_r(raw['qd1_p50_ms'])} ms, p99 "
              f"{_r(raw['qd1_p99_ms'])} ms; {_r(raw['qd1_mbps'])} MB/s at QD1")  # fmt: skip
    if (
        kind == "hdd"
        and raw["qd1_mean_ms"] is not None
        and raw["qd1_mean_ms"] < 1.0
        and not override
    ):
        # a spinning disk cannot seek in under a millisecond (4.17 ms of rotation alone at
        # 7200 rpm): the kernel's rotational flag is wrong here (virtual disks set it), so the
        # figures are judged as a solid-state disk's and the evidence says why
        kind = "ssd"
        subject = subject.replace("(hdd,", "(hdd per the kernel, measured as ssd;", 1)
        lat_ev += ("; faster than any spinning disk (>= 4.17 ms of rotational latency at 7200 "
                   "rpm): the kernel's rotational flag, which virtual disks (virtio) often set, "
                   "called it hdd; judged as ssd")  # fmt: skip
    return [
        fig("sequential read", raw["sequential_mbps"], "MB/s", J.disk_seq_expect(kind),
            f"4 MiB reads, one stream; page cache {cache}"),
        fig("random 4 KiB read latency (QD1, mean)", raw["qd1_mean_ms"], "ms",
            J.disk_latency_expect(kind), lat_ev),
        fig(f"random 4 KiB read (QD{raw['qd_threads']})", raw["qdn_mbps"], "MB/s",
            J.disk_parallel_expect(kind), f"{raw['qdn_reads']:,} reads by {raw['qd_threads']} threads"),
    ]  # fmt: skip


def _r(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x:,.3f}" if x < 1 else f"{x:,.1f}"


def same_filesystem(a: Path, b: Path) -> bool | None:
    try:
        return os.stat(existing_dir(a)).st_dev == os.stat(existing_dir(b)).st_dev
    except OSError:
        return None
