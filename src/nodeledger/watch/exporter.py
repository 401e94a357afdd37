"""Prometheus exporter: the watch's latest sample and diagnosis as metrics (prometheus-client).

One sampler thread runs the backend at the interval; a scrape only reads the metric families
built from the latest sample (built once per sample), so scrapes never run vendor tools and
any number of scrapers cost the cards nothing.

Names follow dcgm-exporter where they overlap (so existing Grafana dashboards work), for every
vendor: ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_GPU_UTIL`` (%),
labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``.
nodeledger's own (``card`` label = the card index):
  nodeledger_card_memory_used_bytes, nodeledger_card_memory_total_bytes,
  nodeledger_card_memory_planned_bytes (the ledger's prediction; planned cards only),
  nodeledger_card_headroom_bytes{to="plan"|"tight"|"cannot"} (bytes left before the card is
    above plan (prediction x (1 + tolerance) + tolerance bytes), before the ledger's "tight"
    (90 % of the card) and before it is full; negative once past),
  nodeledger_process_card_memory_bytes{card, pid, process},
  nodeledger_host_memory_total_bytes, nodeledger_host_memory_available_bytes,
  nodeledger_host_swap_total_bytes, nodeledger_host_swap_used_bytes,
  nodeledger_host_numa_free_bytes{node}, nodeledger_host_swap_pages_total{direction},
  nodeledger_finding{rule, card} (1 per active verify / idle finding),
  nodeledger_verify_failed (1 when verification fails), nodeledger_sample_timestamp_seconds,
  nodeledger_sample_duration_seconds, nodeledger_sample_errors_total, nodeledger_samples_total.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer

from nodeledger.errors import InputError
from nodeledger.units import MiB
from nodeledger.verdict.fit import TIGHT
from nodeledger.watch.analyze import Analyzer

DEFAULT_LISTEN = "127.0.0.1:9835"
DEVICE_PREFIX = {"nvml": "nvidia", "nvidia-smi": "nvidia", "rocm-smi": "card", "hy-smi": "card",
                 "npu-smi": "davinci"}  # fmt: skip


def parse_listen(text: str) -> tuple[str, int, bool]:
    """ "HOST:PORT" ("[::1]:9835" for IPv6) -> (host, port, loopback?)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host.strip("[]") or "0.0.0.0"
    try:
        loop = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = host == "localhost"
    return host, int(port), loop


def families(sample: dict | None, header: dict, an: Analyzer, state: dict) -> list:
    """The metric families of one sample (also used by tests without a server)."""
    mach = header.get("machine") or {}
    info = {c["index"]: c for c in mach.get("cards", [])}
    hostname = mach.get("hostname") or ""
    prefix = DEVICE_PREFIX.get(header.get("backend", ""), "card")
    dl = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
    fb_used = GaugeMetricFamily(
        "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=dl
    )
    fb_free = GaugeMetricFamily(
        "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=dl
    )
    util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=dl)
    used_b = GaugeMetricFamily(
        "nodeledger_card_memory_used_bytes", "Card memory in use.", labels=["card"]
    )
    total_b = GaugeMetricFamily(
        "nodeledger_card_memory_total_bytes", "Card memory.", labels=["card"]
    )
    planned = GaugeMetricFamily("nodeledger_card_memory_planned_bytes",
                                "The ledger's prediction for the card (plan / job).", labels=["card"])  # fmt: skip
    head = GaugeMetricFamily("nodeledger_card_headroom_bytes",
                             "Bytes left before the card is above plan / tight (90 %) / full.",
                             labels=["card", "to"])  # fmt: skip
    proc = GaugeMetricFamily("nodeledger_process_card_memory_bytes",
                             "Card memory a process holds.", labels=["card", "pid", "process"])  # fmt: skip
    out = [fb_used, fb_free, util, used_b, total_b, planned, head, proc]
    for c in (sample or {}).get("cards", []):
        i = c["index"]
        d = info.get(i, {})
        labels = [str(i), d.get("uuid") or "", d.get("pci_bus_id") or "", f"{prefix}{i}",
                  d.get("name") or "", hostname]  # fmt: skip
        used, total = c.get("used_bytes"), c.get("total_bytes") or d.get("total_bytes")
        if used is not None:
            fb_used.add_metric(labels, used / MiB)
            used_b.add_metric([str(i)], used)
        if used is not None and total:
            fb_free.add_metric(labels, (total - used) / MiB)
        if c.get("util_pct") is not None:
            util.add_metric(labels, c["util_pct"])
        if total:
            total_b.add_metric([str(i)], total)
        pred = an.predicted.get(i)
        if pred is not None:
            planned.add_metric([str(i)], pred)
        if used is not None:
            if pred is not None:
                head.add_metric(
                    [str(i), "plan"], pred * (1 + an.tolerance) + an.tolerance_bytes - used
                )
            if total:
                head.add_metric([str(i), "tight"], TIGHT["card memory"] * total - used)
                head.add_metric([str(i), "cannot"], total - used)
        for p in c.get("processes") or []:
            if p.get("used_bytes") is not None:
                proc.add_metric([str(i), str(p["pid"]), p.get("name") or ""], p["used_bytes"])
    h = (sample or {}).get("host") or {}
    for name, key, doc in (("nodeledger_host_memory_total_bytes", "mem_total", "Host RAM."),
                           ("nodeledger_host_memory_available_bytes", "mem_available", "MemAvailable."),
                           ("nodeledger_host_swap_total_bytes", "swap_total", "Swap size.")):  # fmt: skip
        m = GaugeMetricFamily(name, doc)
        if h.get(key) is not None:
            m.add_metric([], h[key])
        out.append(m)
    sw = GaugeMetricFamily("nodeledger_host_swap_used_bytes", "Swap in use.")
    if h.get("swap_total") is not None and h.get("swap_free") is not None:
        sw.add_metric([], h["swap_total"] - h["swap_free"])
    out.append(sw)
    numa = GaugeMetricFamily(
        "nodeledger_host_numa_free_bytes", "Free memory per NUMA node.", labels=["node"]
    )
    for node, (_tot, free) in sorted((h.get("numa") or {}).items()):
        if free is not None:
            numa.add_metric([node], free)
    out.append(numa)
    pages = CounterMetricFamily(
        "nodeledger_host_swap_pages", "Pages swapped since boot.", labels=["direction"]
    )
    for d, key in (("in", "pswpin"), ("out", "pswpout")):
        if h.get(key) is not None:
            pages.add_metric([d], h[key])
    out.append(pages)
    fnd = GaugeMetricFamily(
        "nodeledger_finding", "1 per active verify / idle finding.", labels=["rule", "card"]
    )
    ver = an.verify()
    for f in ver["findings"]:
        for c in f["cards"]:
            fnd.add_metric([f["rule"], str(c)], 1)
    for f in an.idle(active_only=True):
        fnd.add_metric([f"idle: {f['kind']}", str(f["card"])], 1)
    out.append(fnd)
    vf = GaugeMetricFamily(
        "nodeledger_verify_failed", "1 when verification against the plan fails."
    )
    vf.add_metric([], 1 if ver["status"] == "failed" else 0)
    out.append(vf)
    ts = GaugeMetricFamily("nodeledger_sample_timestamp_seconds", "Unix time of the latest sample.")
    dur = GaugeMetricFamily("nodeledger_sample_duration_seconds", "Seconds the latest sample took.")
    if sample:
        ts.add_metric([], sample["t"])
        dur.add_metric([], sample.get("sample_s") or 0.0)
    err = CounterMetricFamily("nodeledger_sample_errors", "Samples whose card backend failed.")
    err.add_metric([], state.get("errors", 0))
    n = CounterMetricFamily("nodeledger_samples", "Samples taken.")
    n.add_metric([], state.get("samples", 0))
    out += [ts, dur, err, n]
    return out


class _Collector:
    def __init__(self, exp: Exporter):
        self.exp = exp

    def collect(self):
        return iter(self.exp.cached)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


class Exporter:
    """Samples in a thread; serves the latest families over HTTP."""

    def __init__(self, watcher, analyzer: Analyzer, header: dict):
        self.w, self.an, self.header = watcher, analyzer, header
        self.state = {"samples": 0, "errors": 0}
        self.cached: list = families(None, header, analyzer, self.state)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.server = None

    def update(self, s: dict) -> None:
        self.an.feed(s)
        self.state["samples"] += 1
        if s.get("notes"):
            self.state["errors"] += 1
        self.cached = families(s, self.header, self.an, self.state)  # one reference swap

    def start_sampling(self) -> None:
        self.thread = threading.Thread(target=self.w.run, args=(self.update,),
                                       kwargs={"stop": self.stop}, name="sampler", daemon=True)  # fmt: skip
        self.thread.start()

    def serve(self, host: str, port: int):
        cls = ThreadingWSGIServer
        if ":" in host:  # IPv6

            class cls(ThreadingWSGIServer):
                address_family = socket.AF_INET6

        try:
            self.server = make_server(host, port, make_wsgi_app(self.registry), cls,
                                      handler_class=_Quiet)  # fmt: skip
        except OSError as exc:
            raise InputError(
                f"--listen {host}:{port}: cannot bind ({exc.strerror or exc})"
            ) from None
        return self.server

    def shutdown(self) -> None:
        self.stop.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(5)
