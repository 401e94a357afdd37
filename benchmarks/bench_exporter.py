"""Benchmark: `nodeledger exporter` under load on loopback.

Target (issue 8): 200 scrapes/s for 60 s with no error and no memory growth; the metrics text
passes prometheus-client's parser.  The exporter runs as its own process (the CLI, fake card
backend `dead-owner`: 8 cards, a dead owner, a new pid every 15 s on card 7 so per-process
series come and go); client threads here pace the scrapes.  RSS of the exporter process is read
(psutil) at start, after a warm-up under the same load and every 10 s; "no growth" = the end
is within 1 MiB of the warm-up figure.  The warm-up (65 s) outlasts the idle window: the
analysis keeps the last 60 s of samples, so RSS rises by ~0.6 MiB while that window fills and
is flat from then on (a shorter --warmup shows that rise as growth).  Every 100th body is parsed with prometheus_client.parser; every body must be a 200
with the DCGM_FI_DEV_FB_USED family.  The exporter samples once per --interval whatever the
scrape rate: its own nodeledger_samples_total shows it.

Issue 14 adds hostile idle clients: from the start of the warm-up to the end of the run a holder
thread keeps --idle (500) connections open on loopback that never send a byte; each one the
exporter drops is recorded (how long it survived) and reopened within 0.25 s, so the pressure
stays on the whole time (bounded: the run's length and a cap on reconnects).  If this process's
soft RLIMIT_NOFILE is too low for that it is raised (up to the hard limit) and the table says so;
--exporter-nofile N runs the exporter itself under an N-fd soft limit (the issue's case: 128).
The exporter's threads are read from /proc/<pid>/status every 0.1 s: the maximum must stay at
its fixed handler pool plus the accept loop, the sampler and the --duration timer.

Prints a table.  Run: python benchmarks/bench_exporter.py [--rate 200] [--seconds 60]
[--idle 500] [--client-timeout 5] [--exporter-nofile 128]
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time

import psutil
from prometheus_client.parser import text_string_to_metric_families

MiB = 2**20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def raise_nofile(need: int) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        return f"raised soft RLIMIT_NOFILE of this process {soft} -> {new}"
    return f"soft RLIMIT_NOFILE of this process {soft} (enough, not changed)"


def proc_threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


class IdleHolder:
    """Keeps ``n`` silent connections open to 127.0.0.1:port; reopens those the server drops."""

    def __init__(self, port: int, n: int, max_connects: int):
        self.port, self.n, self.max_connects = port, n, max_connects
        self.sel = selectors.DefaultSelector()
        self.lifetimes: list[float] = []
        self.connects = 0
        self.connect_errors = 0
        self.open_min = n
        self.open_samples: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def open_one(self) -> None:
        if self.connects >= self.max_connects:
            return
        self.connects += 1
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError:
            self.connect_errors += 1
            return
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ, time.monotonic())

    def run(self) -> None:
        for _ in range(self.n):
            self.open_one()
        next_refill = time.monotonic() + 0.25
        while not self.stop.is_set():
            for key, _ev in self.sel.select(0.05):
                s = key.fileobj
                try:
                    data = s.recv(1)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.lifetimes.append(time.monotonic() - key.data)
                    self.sel.unregister(s)
                    s.close()
            now = time.monotonic()
            if now >= next_refill:
                next_refill = now + 0.25
                open_now = len(self.sel.get_map())
                self.open_samples.append(open_now)
                self.open_min = min(self.open_min, open_now)
                for _ in range(self.n - open_now):
                    self.open_one()
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200.0, help="scrapes per second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=65.0, help="> the 60 s idle window")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--idle", type=int, default=500, help="silent connections held open")
    ap.add_argument("--client-timeout", type=float, default=5.0, help="the exporter's")
    ap.add_argument("--exporter-nofile", type=int, default=0, help="the exporter's fd limit")
    a = ap.parse_args()
    nofile_note = raise_nofile(a.idle + 4 * a.threads + 128)
    port = free_port()

    def limit_exporter() -> None:
        if a.exporter_nofile:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (a.exporter_nofile, hard))

    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeledger", "exporter", "--backend", "fake:dead-owner",
         "--listen", f"127.0.0.1:{port}", "--interval", "1",
         "--client-timeout", str(a.client_timeout),
         "--duration", str(a.warmup + a.seconds + 30)],
        stderr=subprocess.PIPE, text=True, preexec_fn=limit_exporter,
    )  # fmt: skip
    for _ in range(100):
        try:
            scrape(port)
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise SystemExit(f"exporter did not start: {proc.stderr.read()}")
    ps = psutil.Process(proc.pid)
    rss_start = ps.memory_info().rss
    threads_start = proc_threads(proc.pid)
    threads_max = [threads_start]
    watching = threading.Event()

    def watch_threads() -> None:
        while not watching.wait(0.1):
            try:
                threads_max[0] = max(threads_max[0], proc_threads(proc.pid))
            except OSError:
                return

    threading.Thread(target=watch_threads, daemon=True).start()
    total = a.warmup + a.seconds
    holder = IdleHolder(port, a.idle, a.idle * int(4 * total / max(a.client_timeout, 0.1) + 10))
    holder.thread.start()
    lock = threading.Lock()
    lat: list[float] = []
    errors: list[str] = []
    parsed = [0]
    stop_at = [0.0]
    last_body = [b""]

    def client(k: int) -> None:
        period = a.threads / a.rate
        due = time.monotonic() + k * period / a.threads
        n = 0
        while True:
            now = time.monotonic()
            if now >= stop_at[0]:
                return
            if due > now:
                time.sleep(due - now)
            due += period
            t0 = time.perf_counter()
            try:
                status, body = scrape(port)
                ok = status == 200 and b"DCGM_FI_DEV_FB_USED" in body
                err = None if ok else f"status {status}"
            except Exception as exc:
                err = f"{type(exc).__name__}: {exc}"
            dt = time.perf_counter() - t0
            n += 1
            if err is None and n % 100 == 0:
                try:
                    list(text_string_to_metric_families(body.decode()))
                    with lock:
                        parsed[0] += 1
                except Exception as exc:
                    err = f"parse: {exc}"
            with lock:
                lat.append(dt)
                if err:
                    errors.append(err)
                else:
                    last_body[0] = body

    def run_for(seconds: float) -> float:
        stop_at[0] = time.monotonic() + seconds
        ts = [threading.Thread(target=client, args=(k,)) for k in range(a.threads)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return time.monotonic() - t0

    run_for(a.warmup)
    lifetimes_warm = len(holder.lifetimes)
    holder.open_samples.clear()
    holder.open_min = a.idle
    lat.clear()
    errors.clear()
    parsed[0] = 0
    rss = [(0.0, ps.memory_info().rss)]
    samples0 = samples_total(last_body[0])
    t_start = time.monotonic()
    sampler = threading.Event()

    def watch_rss() -> None:
        while not sampler.wait(10):
            rss.append((time.monotonic() - t_start, ps.memory_info().rss))

    th = threading.Thread(target=watch_rss, daemon=True)
    th.start()
    wall = run_for(a.seconds)
    sampler.set()
    rss.append((wall, ps.memory_info().rss))
    samples1 = samples_total(last_body[0])
    holder.stop.set()
    holder.thread.join(10)
    watching.set()
    life = sorted(holder.lifetimes[lifetimes_warm:])
    proc.terminate()
    proc.wait(10)
    n = len(lat)
    lat.sort()
    growth = rss[-1][1] - rss[0][1]
    print(f"nodeledger exporter under load, loopback, {os.cpu_count()} CPUs, "
          f"{a.threads} client threads (in the same box), {a.idle} idle connections held open; "
          f"{nofile_note}; exporter fd limit "
          f"{a.exporter_nofile or 'inherited'}")  # fmt: skip
    print()
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| scrapes in {wall:.1f} s | {n:,} | {a.rate * a.seconds:,.0f} |")
    print(f"| achieved rate | {n / wall:.1f} /s | >= {a.rate:g} /s |")
    print(f"| errors | {len(errors)}{' (' + errors[0] + ')' if errors else ''} | 0 |")
    print(
        f"| bodies parsed by prometheus_client.parser | {parsed[0]} (every 100th; a failure is an error) | all parse |"
    )
    print(f"| latency p50 / p99 / max | {1000 * statistics.median(lat):.2f} / "
          f"{1000 * lat[int(0.99 * (n - 1))]:.2f} / {1000 * lat[-1]:.2f} ms | - |")  # fmt: skip
    print(f"| exporter samples during the run | {samples1 - samples0:.0f} "
          f"(interval 1 s: ~{wall:.0f}) | not per scrape |")  # fmt: skip
    print(
        f"| exporter RSS at start / after {a.warmup:g} s warm-up / end | {rss_start / MiB:.1f} / "
        f"{rss[0][1] / MiB:.1f} / {rss[-1][1] / MiB:.1f} MiB | - |"
    )
    print(f"| RSS growth | {growth / MiB:+.2f} MiB | <= 1 MiB |")
    print(f"| RSS every 10 s (MiB) | {', '.join(f'{r / MiB:.1f}' for _, r in rss)} | flat |")
    opened = holder.open_samples or [0]
    print(f"| idle connections open (min / mean, every 0.25 s) | {holder.open_min} / "
          f"{statistics.mean(opened):.0f} of {a.idle} | held open |")  # fmt: skip
    print(f"| idle connections dropped by the exporter during the run | {len(life):,} "
          f"({holder.connects:,} opened in all, {holder.connect_errors} refused) | - |")  # fmt: skip
    if life:
        print(f"| idle connection survives (min / median / max) | {life[0]:.2f} / "
              f"{statistics.median(life):.2f} / {life[-1]:.2f} s | "
              f"~ --client-timeout {a.client_timeout:g} s |")  # fmt: skip
    print(f"| exporter threads at start / max seen | {threads_start} / {threads_max[0]} | "
          f"bounded (8 handlers + accept + sampler + timer) |")  # fmt: skip


def samples_total(body: bytes) -> float:
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name == "nodeledger_samples":
            return fam.samples[0].value
    return 0.0


if __name__ == "__main__":
    main()
