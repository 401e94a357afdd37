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

Prints a table.  Run: python benchmarks/bench_exporter.py [--rate 200] [--seconds 60]
"""

from __future__ import annotations

import argparse
import http.client
import os
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200.0, help="scrapes per second")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=65.0, help="> the 60 s idle window")
    ap.add_argument("--threads", type=int, default=4)
    a = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeledger", "exporter", "--backend", "fake:dead-owner",
         "--listen", f"127.0.0.1:{port}", "--interval", "1",
         "--duration", str(a.warmup + a.seconds + 30)],
        stderr=subprocess.PIPE, text=True,
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
    proc.terminate()
    proc.wait(10)
    n = len(lat)
    lat.sort()
    growth = rss[-1][1] - rss[0][1]
    print(f"nodeledger exporter under load, loopback, {os.cpu_count()} CPUs, "
          f"{a.threads} client threads (in the same box)")  # fmt: skip
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


def samples_total(body: bytes) -> float:
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name == "nodeledger_samples":
            return fam.samples[0].value
    return 0.0


if __name__ == "__main__":
    main()
