"""The sampling loop: a card backend and the host sampler, at a fixed interval.

A sample that falls behind (a slow vendor tool) is not made up: the next one is taken at once
and the schedule restarts from there, so the watch never runs the tools faster than asked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from nodeledger.watch.record import VERSION


class Watcher:
    def __init__(
        self, backend, host, interval: float = 1.0, clock: Callable[[], float] | None = None
    ):
        self.backend = backend
        self.host = host
        self.interval = interval
        self.clock = clock or getattr(backend, "clock", None) or time.time
        self.errors = 0
        self._host_info: dict | None = None

    def header(self, expect: dict | None = None, profile: str | None = None) -> dict:
        if self._host_info is None:
            self._host_info = self.host.describe()
        cards = getattr(self.backend, "cards", None) or self.backend.describe()
        note = self.backend.describe_note  # how the cards were listed, when unusual
        return {
            **({"notes": [note]} if note else {}),
            "nodeledger_watch": VERSION,
            "started": round(self.clock(), 3),
            "interval_s": self.interval,
            "backend": self.backend.name,
            "machine": dict(self._host_info, profile=profile, cards=cards),
            "plan": expect,
        }

    def sample(self) -> dict:
        t = self.clock()
        t0 = time.perf_counter()
        notes = []
        try:
            cards = self.backend.sample()
        except Exception as exc:  # a vendor tool failing mid-watch is a note, not a crash
            self.errors += 1
            cards = []
            notes.append(f"{self.backend.name}: {str(exc)[:160]}")
        pids = {p["pid"] for c in cards for p in c.get("processes") or []}
        host, procs = self.host.sample(pids)
        for c in cards:
            for p in c.get("processes") or []:
                if not p.get("name"):
                    p["name"] = (procs.get(str(p["pid"])) or {}).get("name")
        s = {"t": round(t, 3), "cards": cards, "host": host, "pids": procs,
             "sample_s": round(time.perf_counter() - t0, 6)}  # fmt: skip
        if notes:
            s["notes"] = notes
        return s

    def run(self, on_sample: Callable[[dict], bool | None], samples: int | None = None,
            duration: float | None = None, stop: threading.Event | None = None,
            sleep: Callable[[float], None] | None = None) -> int:  # fmt: skip
        """Sample until ``samples`` / ``duration`` / ``stop`` / on_sample returning False;
        returns the number of samples taken."""
        stop = stop or threading.Event()
        wait = sleep or stop.wait
        start = time.monotonic()
        due = start
        n = 0
        while not stop.is_set():
            s = self.sample()
            n += 1
            if on_sample(s) is False:
                break
            if samples is not None and n >= samples:
                break
            if duration is not None and time.monotonic() - start >= duration:
                break
            due += self.interval
            now = time.monotonic()
            if due < now:  # fell behind: sample now, and keep the interval from here
                due = now
            wait(due - now)
        return n
