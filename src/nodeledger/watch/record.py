"""Recorded sample streams: JSON Lines (``.jsonl``, or ``.jsonl.gz`` compressed).

Line 1 is the header::

  {"nodeledger_watch": 1, "started": <unix s>, "interval_s": 1.0, "backend": "nvml",
   "machine": {"hostname", "cpus", "numa_nodes": {"0": "0-11", ...}, "profile": <preset|null>,
               "cards": [{"index", "name", "uuid", "pci_bus_id", "total_bytes", "numa_node"}]},
   "plan": <expectations (watch/expect.py) or null>}

then one sample per line::

  {"t": <unix s>, "sample_s": <seconds the sample took>,
   "cards": [{"index", "used_bytes", "total_bytes", "util_pct",
              "processes": [{"pid", "name", "used_bytes"}] | null}],
   "host": {"mem_total", "mem_available", "swap_total", "swap_free", "pswpin", "pswpout",
            "cpu": {"total", "idle", "iowait"}, "numa": {"<node>": [total, free]}},
   "pids": {"<pid>": {"alive", "name", "state", "cpus", "mems", "cpu_s", "children": [...]}},
   "notes": [...]}

Bytes are bytes, utilisation is percent, counters (jiffies, pages, CPU seconds) are cumulative.
A stream cut by a kill (a partial last line) replays up to its last whole sample.

A replay is read line by line with bounds (a small ``.gz`` must not take gigabytes): a line
longer than MAX_LINE_CHARS is refused naming its number, like any other bad line, without
being read whole; a compressed stream that decompresses to more than MAX_STREAM_CHARS is
refused at that point.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

from nodeledger.errors import InputError
from nodeledger.files import special_kind

VERSION = 1
MAX_LINE_CHARS = 16 * 2**20  # a sample of 8 cards with hundreds of pids is a few tens of KiB
MAX_STREAM_CHARS = 4 * 2**30  # decompressed text of a .gz replay (a week at 1 s is ~1-3 GiB)


def _open(path: Path, mode: str):
    if path.suffix == ".gz":
        if mode == "w":  # mtime 0: the same samples give the same bytes
            return io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding="utf-8")
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    # reading: a byte that is not UTF-8 spoils only its own line (not valid JSON, named by number)
    return open(path, mode, encoding="utf-8", errors="replace" if mode == "r" else "strict")


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Recorder:
    """Writes the header, then one line per sample, flushed (a killed watch keeps its samples)."""

    def __init__(self, path: str | Path, header: dict):
        self.path = Path(path)
        try:
            self.f = _open(self.path, "w")
        except OSError as exc:
            raise InputError(
                f"--record {self.path}: cannot write ({exc.strerror or exc})"
            ) from None
        self.f.write(dumps(header) + "\n")
        self.f.flush()
        self.n = 0

    def write(self, sample: dict) -> None:
        self.f.write(dumps(sample) + "\n")
        self.f.flush()
        self.n += 1

    def close(self) -> None:
        self.f.close()


def _check_sample(d, where: str) -> dict:
    if not isinstance(d, dict) or not isinstance(d.get("t"), (int, float)):
        raise InputError(f"{where}: not a watch sample (no time 't')")
    cards = d.get("cards")
    if not isinstance(cards, list) or not all(
        isinstance(c, dict) and isinstance(c.get("index"), int) for c in cards
    ):
        raise InputError(f"{where}: 'cards' must be a list of objects with an integer 'index'")
    d.setdefault("host", {})
    d.setdefault("pids", {})
    return d


def _too_long(p: Path, n: int) -> InputError:
    return InputError(
        f"{p} line {n}: longer than {MAX_LINE_CHARS / 2**20:g} MiB (the cap on a line): "
        "not a watch sample"
    )


def _lines(f, p: Path, header: dict) -> Iterator[str]:
    """The file's lines (each at most MAX_LINE_CHARS + 1 characters: a longer one is read no
    further, and refused by the caller); a compressed stream that ends early (the watch was
    killed while writing) ends the samples there, with a note, instead of losing the ones
    already read."""
    total = 0
    cap = MAX_STREAM_CHARS if p.suffix == ".gz" else None
    while True:
        try:
            line = f.readline(MAX_LINE_CHARS + 1)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            header.setdefault("notes", []).append(
                f"{p}: the compressed stream ends early ({exc}): samples up to there are judged "
                "(the watch was killed?)"
            )
            return
        if not line:
            return
        total += len(line)
        if cap is not None and total > cap:
            raise InputError(
                f"{p}: decompresses to over {cap / 2**30:g} GiB (the cap on a replay); "
                "refusing the rest"
            )
        yield line


def read_stream(path: str | Path) -> tuple[dict, Iterator[dict]]:
    """(header, samples) of a recorded stream; a malformed file is InputError naming the line."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"--replay {p}: is a directory, not a recorded stream")
    try:
        kind = special_kind(p.stat().st_mode)
    except OSError:
        kind = None  # missing: "file not found" below
    if kind is not None:
        raise InputError(f"--replay {p}: not a regular file ({kind}): a recorded stream is a file")
    if not p.is_file():
        raise InputError(f"--replay {p}: file not found")
    try:
        f = _open(p, "r")
        first = f.readline(MAX_LINE_CHARS + 1)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"--replay {p}: cannot read ({exc})") from None
    if len(first) > MAX_LINE_CHARS:
        f.close()
        raise _too_long(p, 1)
    try:
        header = json.loads(first)
    except (ValueError, RecursionError):  # JSONDecodeError, or nested 100,000 deep
        f.close()
        raise InputError(f"{p} line 1: not a nodeledger watch stream (no JSON header)") from None
    if not isinstance(header, dict) or "nodeledger_watch" not in header:
        f.close()
        raise InputError(f"{p} line 1: not a nodeledger watch stream (no 'nodeledger_watch' key)")
    if header["nodeledger_watch"] != VERSION:
        f.close()
        raise InputError(
            f"{p}: stream version {header['nodeledger_watch']!r}, this nodeledger reads {VERSION}"
        )
    machine = header.get("machine")
    if not isinstance(machine, dict) or not isinstance(machine.get("cards"), list):
        f.close()
        raise InputError(f"{p} line 1: header has no machine.cards list")

    def samples() -> Iterator[dict]:
        with f:
            n = 1
            pending = None
            for line in _lines(f, p, header):
                n += 1
                if pending is not None:  # a bad line followed by more lines: not a cut tail
                    raise InputError(f"{p} line {pending}: not valid JSON")
                if len(line) > MAX_LINE_CHARS:
                    raise _too_long(p, n)
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                except (ValueError, RecursionError):  # JSONDecodeError, or nested too deep
                    pending = n
                    continue
                yield _check_sample(d, f"{p} line {n}")
            if pending is not None:
                header.setdefault("notes", []).append(
                    f"line {pending} (the last) is cut short: ignored (the watch was killed?)"
                )

    return header, samples()
