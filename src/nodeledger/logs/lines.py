"""Bounded line reading for `nodeledger oom`: logs are streamed, never held whole.

- Only regular files are read (or ``-``: standard input, spooled to an anonymous temporary
  file up to :data:`MAX_STDIN_BYTES`: it has no name from the start, so however the process
  ends — SIGTERM, SIGKILL, a crash — nothing is left in the temporary folder); a device, FIFO,
  socket or directory is bad input.
- Lines are read with a maximum length (:data:`MAX_LINE_BYTES`): a longer line is cut to its
  first :data:`MAX_LINE_BYTES` bytes and the rest is skipped in chunks (never held), and the cut
  is counted (:class:`LineStats`) so the report can say so in a note.
- Lines are split like ``str.splitlines`` (``\\n``, ``\\r\\n``, ``\\r`` and the other Unicode line
  boundaries), so a file read here gives the same lines as its text read whole.

Memory is bounded by the longest line, not by the file: the parsers keep only their incidents
and a few lines of context.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from nodeledger.errors import InputError
from nodeledger.files import special_kind

MAX_LINE_BYTES = 64 * 1024  # a log line longer than this is cut (a note says how many)
MAX_STDIN_BYTES = 1 << 30  # standard input is spooled to a temporary file up to this size
_CHUNK = 1 << 16
_READ = 1 << 20  # bytes read at a time


@dataclass
class LineStats:
    lines: int = 0
    cut: int = 0  # lines longer than MAX_LINE_BYTES, cut to that length
    truncated_bytes: int = 0  # input left unread past a size cap (stdin only)


def file_problem(path: str) -> str | None:
    """Why ``path`` cannot be read as a log (None when it is a readable regular file)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    what = special_kind(st.st_mode)
    if what is None:
        return None
    if what == "a directory":
        return "is a directory, not a log file"
    return f"is {what}, not a log file (pass a regular file, or - for standard input)"


def read_lines(f: BinaryIO, stats: LineStats, max_line: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of a binary stream, decoded as UTF-8 (errors replaced), each at most
    ``max_line`` bytes; ``stats`` counts lines and cuts. Read in chunks of :data:`_READ` bytes
    (split at newlines, so no character is split); a line longer than ``max_line`` is cut and
    the rest of it skipped as it streams by, never held."""
    carry = b""
    skipping = False  # inside an over-long line already cut: drop bytes up to its newline
    while True:
        chunk = f.read(_READ)
        if not chunk:
            break
        if skipping:
            k = _first_break(chunk)
            if k < 0:
                continue
            chunk = chunk[k + 1 :]
            skipping = False
        data = carry + chunk if carry else chunk
        k = _last_break(data)
        if k < 0:
            carry = data
        else:
            carry = data[k + 1 :]
            yield from _lines_of(data[: k + 1], stats, max_line)
        if len(carry) > max_line:  # a line still going past the limit: cut it here
            stats.cut += 1
            yield from _lines_of(carry[:max_line], stats, max_line)
            carry = b""
            skipping = True
    if carry:
        yield from _lines_of(carry, stats, max_line)


def _first_break(data: bytes) -> int:
    """The first line break (\\n or a lone \\r: a progress bar's) in ``data``, or -1."""
    found = [k for k in (data.find(b"\n"), data.find(b"\r")) if k >= 0]
    return min(found) if found else -1


def _last_break(data: bytes) -> int:
    """The last line break in ``data``, or -1; a \\r at the very end may be half of a \\r\\n
    split between two reads, so it does not count."""
    return max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1))


def _lines_of(data: bytes, stats: LineStats, max_line: int) -> list[str]:
    lines = data.decode("utf-8", errors="replace").splitlines()
    stats.lines += len(lines)
    if lines and max(map(len, lines)) > max_line:  # rare: a long line inside one chunk
        for n, line in enumerate(lines):
            if len(line.encode("utf-8", errors="replace")) > max_line:
                stats.cut += 1
                lines[n] = line.encode("utf-8", errors="replace")[:max_line].decode(
                    "utf-8", errors="replace"
                )
    return lines


def text_lines(text: str, stats: LineStats, max_line: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of text already in memory (the live kernel log), cut like a file's."""
    for line in text.splitlines():
        stats.lines += 1
        if len(line) > max_line:
            stats.cut += 1
            line = line[:max_line]
        yield line


def spool_stdin(stats: LineStats, limit: int = MAX_STDIN_BYTES) -> BinaryIO:
    """Standard input copied to an anonymous temporary file (at most ``limit`` bytes), open
    for reading; closing it frees the space (and so does the end of the process, however it
    ends). Input past the limit is left unread and counted in ``stats``."""
    src = sys.stdin.buffer
    try:
        return _spool(src, stats, limit)
    except OSError as exc:  # a full or read-only temporary folder
        raise InputError(
            f"standard input: cannot keep it in {tempfile.gettempdir()} "
            f"({exc.strerror or exc}); pass the log as a file"
        ) from None


def _spool(src, stats: LineStats, limit: int) -> BinaryIO:
    # no name, ever (O_TMPFILE, or unlinked as soon as made): a SIGTERM mid-copy of 1 GiB
    # used to leave /tmp/nodeledger-oom-*.log behind
    out = tempfile.TemporaryFile(prefix="nodeledger-oom-", suffix=".log")  # noqa: SIM115 (returned open)
    total = 0
    try:
        while True:
            chunk = src.read(_CHUNK)
            if not chunk:
                break
            room = limit - total
            if len(chunk) > room:
                out.write(chunk[:room])
                total += room
                stats.truncated_bytes += len(chunk) - room
                break
            out.write(chunk)
            total += len(chunk)
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def as_lines(text: str | Iterable[str]) -> Iterable[str]:
    """A parser's input: text (split into lines) or lines already split."""
    if isinstance(text, str):
        return text.splitlines()
    return text
