"""The one place that runs vendor tools and reads /proc and /sys: every probe, doctor fact,
watch sample, reservation check, bench and go-live read goes through a ``Runner`` (a live one,
one over a fake root in tests, or ``bundle.ReplayRunner`` over a support bundle), so a bundle
replays all of it.  No shell; every tool has a timeout and is killed when hung.

Each tool runs in its own session (process group): on a timeout, at the output cap, and when
it exits leaving children behind, the whole group is killed (SIGKILL) and the tool reaped, so
no ``sleep &`` a wrapper script started outlives the probe.  Its stdout and stderr are read
incrementally, at most STDOUT_CAP / STDERR_CAP bytes each: an endless tool is killed at the
cap and its result keeps what was read, with ``truncated`` and ``problem`` saying so (callers
then note it instead of parsing half an output)."""

from __future__ import annotations

import contextlib
import errno
import locale
import os
import selectors
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from nodeledger.units import MiB

STDOUT_CAP = 16 * MiB  # bytes of a tool's stdout kept; past it the tool is killed
STDERR_CAP = 1 * MiB  # stderr is for the first line of a failure (and the bundle manifest)
FILE_CAP = 16 * MiB  # bytes of one /proc or /sys file kept (the largest real ones are KiB)
FILE_CHUNK = 64 * 1024  # bytes asked for per read: /proc/sys refuses a read of 4 MiB or more
EXIT_GRACE = 0.5  # s a tool's leftover children may keep its pipes open after it exits
REAP_WAIT = 2.0  # s to wait for a killed tool (one stuck in the kernel cannot be waited for)
_CHUNK = 65536


def _text(data: bytes) -> str:
    """Bytes as ``subprocess.run(text=True, errors="replace")`` gives them (universal newlines)."""
    text = data.decode(locale.getpreferredencoding(False), errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_capped(fd: int, cap: int) -> bytes:
    """At most ``cap`` bytes of ``fd``, asked for FILE_CHUNK at a time: Linux refuses one read of
    a /proc/sys file that asks for KMALLOC_MAX_SIZE or more (4 MiB on x86-64; ENOMEM from
    proc_sys_call_handler, seen on 6.18), so a single read of the whole cap fails there."""
    parts: list[bytes] = []
    got = 0
    while got < cap:
        chunk = os.read(fd, min(FILE_CHUNK, cap - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, signal.SIGKILL)


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the tool has exited, without reaping it where the OS allows: while it is not
    reaped its pid, and so its process group id, cannot be taken by an unrelated process."""
    if not hasattr(os, "waitid"):  # macOS
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _capture(cmd: list[str], timeout: float) -> tuple[bytes, bytes, int | None, str | None]:
    """Run ``cmd`` (no shell, stdin from /dev/null, its own session); (stdout, stderr, exit
    code, why it was stopped: None, "timeout", "stdout" or "stderr" (that stream's cap))."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    pgid = proc.pid  # start_new_session: the tool leads its own process group
    streams = {proc.stdout: ("stdout", STDOUT_CAP), proc.stderr: ("stderr", STDERR_CAP)}
    bufs = {f: bytearray() for f in streams}
    sel = selectors.DefaultSelector()
    for f in streams:
        sel.register(f, selectors.EVENT_READ)
    stop: str | None = None

    def pump(wait: float) -> None:
        nonlocal stop
        for key, _ in sel.select(max(wait, 0.0)):
            data = os.read(key.fd, _CHUNK)
            if not data:
                sel.unregister(key.fileobj)
                continue
            name, cap = streams[key.fileobj]
            buf = bufs[key.fileobj]
            room = cap - len(buf)
            buf += data[:room]
            if len(data) > room and stop is None:
                stop = name

    try:
        deadline = time.monotonic() + timeout
        exited_at = None
        nap = 0.001
        while stop is None:
            now = time.monotonic()
            if exited_at is None and _exited(proc):
                exited_at = now
            if not sel.get_map():  # both pipes closed: wait for the exit, as subprocess.run did
                if exited_at is not None:
                    break
                if now >= deadline:
                    stop = "timeout"
                    break
                time.sleep(min(nap, deadline - now))
                nap = min(nap * 2, 0.05)
                continue
            if exited_at is not None:  # done; children it left may hold the pipes: killed below
                if now - exited_at >= EXIT_GRACE:
                    break
                pump(exited_at + EXIT_GRACE - now)
                continue
            if now >= deadline:
                stop = "timeout"
                break
            pump(min(deadline - now, 0.05))
        _kill_group(pgid)  # hung, endless, or children left behind: the whole group
        end = time.monotonic() + 0.5  # what the killed group had written already
        while sel.get_map() and stop in (None, "timeout") and time.monotonic() < end:
            pump(end - time.monotonic())
        try:
            code = proc.wait(timeout=REAP_WAIT)
        except subprocess.TimeoutExpired:  # stuck in the kernel (D state): Popen reaps it later
            code = None
    finally:
        sel.close()
        for f in streams:
            f.close()
        if proc.returncode is None:
            _kill_group(pgid)
    return bytes(bufs[proc.stdout]), bytes(bufs[proc.stderr]), code, stop


@dataclass
class RawResult:
    """One command's outcome, kept verbatim (stdout, stderr, exit code, duration)."""

    argv: list[str]
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    seconds: float = 0.0
    problem: str | None = (
        None  # "absent", "timed out after 5 s", "exit 1: ...", "permission denied"
    )
    truncated: str | None = None  # "stdout truncated at 16 MiB": the output kept is cut there

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass
class Runner:
    """Runs commands and reads files under ``root`` (``/`` live; a fake tree in tests)."""

    timeout: float = 5.0
    root: Path = Path("/")
    path: str | None = None  # PATH used to find tools (None: the process PATH)
    log: list[RawResult] = field(default_factory=list)
    live: bool = False  # in-process libraries (NVML) may be asked too; off for tests and replays
    files: dict[str, str | None] = field(default_factory=dict)  # path -> text (None: unreadable)

    def which(self, tool: str) -> str | None:
        found = shutil.which(tool, path=self.path)
        self.tools[tool] = found
        return found

    def run(self, argv: list[str]) -> RawResult:
        exe = self.which(argv[0])
        res = RawResult(list(argv))
        if exe is None:
            res.problem = "absent (not on PATH)"
            self.log.append(res)
            return res
        t0 = time.perf_counter()
        try:
            out, err, code, stop = _capture([exe, *argv[1:]], self.timeout)
        except PermissionError:
            res.problem = "permission denied"
        except OSError as exc:
            res.problem = f"cannot run: {exc.strerror or exc}"
        else:
            res.stdout = _text(out)
            if stop == "timeout":
                res.problem = f"timed out after {self.timeout:g} s (hung tool; killed)"
            elif stop is not None:  # "stdout" / "stderr": endless output, cut at the cap
                cap = STDOUT_CAP if stop == "stdout" else STDERR_CAP
                res.stderr, res.truncated = _text(err), f"{stop} truncated at {cap / MiB:g} MiB"
                res.problem = f"{res.truncated} (endless output; the tool was killed)"
            else:
                res.stderr, res.returncode = _text(err), code
                if code != 0:
                    first = (res.stderr or res.stdout).strip().splitlines()[:1]
                    shown = (
                        "".join(ch if ch.isprintable() else "?" for ch in first[0][:160])
                        if first
                        else ""
                    )
                    res.problem = f"exit {code}" + (f": {shown}" if shown else "")
        res.seconds = time.perf_counter() - t0
        self.log.append(res)
        return res

    def read(self, path: str) -> str | None:
        """:meth:`_read_file`; a Runner keeping its records for a bundle's watch samples also
        logs every read in order (``file_log``), so each sample's /proc figures replay."""
        text = self._read_file(path)
        if self.keep_records:
            self.file_log.append((path, text, self.problems.get(path)))
        return text

    def _read_file(self, path: str) -> str | None:
        """Text of ``root``/path, or None (the reason is kept in ``problems``).  Regular files
        only — a FIFO or device in a (fake or hostile) tree would block or never end — and at
        most FILE_CAP characters, the cut kept in ``problems`` beside the text."""
        p = self.root / path.lstrip("/")
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            self.files[path] = None
            self.problems[path] = exc.strerror or type(exc).__name__
            return None
        try:
            try:
                mode = os.fstat(fd).st_mode
            except OSError:
                os.close(fd)
                raise
            if not stat.S_ISREG(mode):
                os.close(fd)
                self.files[path] = None
                self.problems[path] = (
                    os.strerror(errno.EISDIR) if stat.S_ISDIR(mode) else "not a regular file"
                )
                return None
            try:
                data = _read_capped(fd, FILE_CAP + 1)
            finally:
                os.close(fd)
        except OSError as exc:
            self.files[path] = None
            self.problems[path] = exc.strerror or type(exc).__name__
            return None
        text = _text(data[:FILE_CAP])  # as Path.read_text: locale encoding, universal newlines
        if len(data) > FILE_CAP:
            self.problems[path] = f"truncated at {FILE_CAP / MiB:g} MiB"
        self.files[path] = text
        return text

    def readlink(self, path: str) -> str | None:
        """A symlink's target (``/proc/self/cwd``), kept as the text of ``path`` so that a
        bundle replays it as a file; None (the reason kept in ``problems``) if unreadable."""
        try:
            target = os.readlink(self.root / path.lstrip("/"))
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # a plain file (a fake tree may hold the target as text)
                text = self.read(path)
                return text.strip() if text else None
            self.files[path] = None
            self.problems[path] = exc.strerror or type(exc).__name__
            return None
        self.files[path] = target
        return target

    def realpath(self, path: str) -> str | None:
        """``path`` with every symlink resolved, as a path inside ``root``
        (``/sys/bus/pci/devices/0000:04:00.0`` -> ``/sys/devices/pci0000:00/.../0000:04:00.0``);
        None (the reason kept in ``problems``) if it does not exist or leads out of ``root``."""
        try:
            real = (self.root / path.lstrip("/")).resolve(strict=True)
            rel = real.relative_to(self.root.resolve())
        except ValueError:
            self.problems[path] = f"leads out of {self.root}"
            return None
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
            self.problems[path] = getattr(exc, "strerror", None) or type(exc).__name__
            return None
        return "/" + rel.as_posix() if rel.parts else "/"

    def glob(self, pattern: str) -> list[str]:
        base = self.root
        try:
            found = sorted("/" + str(p.relative_to(base)) for p in base.glob(pattern.lstrip("/")))
        except OSError:
            found = []
        self.globs[pattern] = found
        return found

    problems: dict[str, str] = field(default_factory=dict)
    tools: dict[str, str | None] = field(default_factory=dict)  # which() answers
    globs: dict[str, list[str]] = field(default_factory=dict)  # glob() answers
    keep_records: bool = False  # a bundle taking watch samples keeps what a watch would clear
    # (path, text, problem) of every read, in order, while keep_records
    file_log: list = field(default_factory=list)
