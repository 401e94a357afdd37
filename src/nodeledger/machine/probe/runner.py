"""The one place that runs vendor tools and reads /proc and /sys: every probe, doctor fact,
watch sample, reservation check, bench and go-live read goes through a ``Runner`` (a live one,
one over a fake root in tests, or ``bundle.ReplayRunner`` over a support bundle), so a bundle
replays all of it.  No shell; every tool has a timeout and is killed when hung."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


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
            proc = subprocess.run(
                [exe, *argv[1:]], capture_output=True, text=True, timeout=self.timeout,
                stdin=subprocess.DEVNULL, errors="replace",
            )  # fmt: skip
            res.stdout, res.stderr, res.returncode = proc.stdout, proc.stderr, proc.returncode
            if proc.returncode != 0:
                first = (proc.stderr or proc.stdout).strip().splitlines()[:1]
                shown = (
                    "".join(ch if ch.isprintable() else "?" for ch in first[0][:160])
                    if first
                    else ""
                )
                res.problem = f"exit {proc.returncode}" + (f": {shown}" if shown else "")
        except subprocess.TimeoutExpired as exc:
            res.stdout = (
                exc.stdout.decode(errors="replace")
                if isinstance(exc.stdout, bytes)
                else (exc.stdout or "")
            )
            res.problem = f"timed out after {self.timeout:g} s (hung tool; killed)"
        except PermissionError:
            res.problem = "permission denied"
        except OSError as exc:
            res.problem = f"cannot run: {exc.strerror or exc}"
        res.seconds = time.perf_counter() - t0
        self.log.append(res)
        return res

    def read(self, path: str) -> str | None:
        """Text of ``root``/path, or None (the reason is kept in ``problems``)."""
        p = self.root / path.lstrip("/")
        try:
            text = p.read_text(errors="replace")
        except OSError as exc:
            self.files[path] = None
            self.problems[path] = exc.strerror or type(exc).__name__
            return None
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
