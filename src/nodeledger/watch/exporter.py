"""Prometheus exporter: the watch's latest sample and diagnosis as metrics (prometheus-client).

One sampler thread runs the backend at the interval; a scrape only reads the metric families
built from the latest sample (built once per sample), so scrapes never run vendor tools and
any number of scrapers cost the cards nothing.

Serving (issue 14): only ``/metrics`` (GET / HEAD; other paths 404, other methods 405), by
MetricsServer: a fixed pool of handler threads, idle / slow clients dropped after
``client_timeout``, at most ``max_connections`` open (oldest idle dropped first), an optional
``--allow`` network list, TLS (``ssl`` as prometheus-client's own start_http_server does it) and
basic auth (``user:sha256hex`` lines, constant-time compare).

Names follow the vendor's own exporter where they overlap (so existing Grafana dashboards
work): dcgm-exporter on NVIDIA (and Hygon, whose exporter's names no public source documents):
``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_GPU_UTIL`` (%), labels
``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``; AMD's
device-metrics-exporter on amd-smi / amdsmi / rocm-smi (``gpu_used_vram``, ``gpu_total_vram``,
``gpu_free_vram`` in MiB, ``gpu_gfx_activity``; labels ``gpu_id``, ``serial_number``,
``card_model``, ``hostname``, ``gpu_partition_id``, ``gpu_compute_partition_type``); Ascend's
npu-exporter on npu-smi (``npu_chip_info_hbm_used_memory`` / ``_hbm_total_memory`` in MiB,
``npu_chip_info_utilization``; labels ``id``, ``model_name``, ``vdie_id``): each vendor's
``ExporterNames`` in machine/vendors.
``--no-vendor-series`` leaves these out (the box runs the vendor's exporter already: two
series per card otherwise); the ``Hostname`` / ``hostname`` label is ``NODE_NAME`` when set.
nodeledger's own (``card`` label = the card index, and ``gpu`` = the same, as dcgm-exporter
names it, so a join ``on (gpu)`` works):
  nodeledger_card_memory_used_bytes, nodeledger_card_memory_total_bytes,
  nodeledger_card_memory_planned_bytes (the ledger's prediction; planned cards only),
  nodeledger_card_headroom_bytes{to="plan"|"tight"|"full"} (bytes left before the card is
    above plan (prediction x (1 + tolerance) + tolerance bytes), before the ledger's "tight"
    (90 % of the card) and before it is full; negative once past),
  nodeledger_process_card_memory_bytes{card, pid, process},
  nodeledger_host_memory_total_bytes, nodeledger_host_memory_available_bytes,
  nodeledger_host_page_cache_bytes (/proc/meminfo Cached + Buffers),
  nodeledger_host_swap_total_bytes, nodeledger_host_swap_used_bytes,
  nodeledger_host_numa_free_bytes{node}, nodeledger_host_swap_pages_total{direction},
  nodeledger_finding{rule, card, cause} (1 per active verify / idle finding; cause: the idle
    card's likely cause as a short class), nodeledger_lifeboat_card{card} (the plan's lifeboat),
  nodeledger_card_processes{card} (processes the card tool lists),
  nodeledger_verify_failed (1 when verification fails), nodeledger_sample_timestamp_seconds,
  nodeledger_sample_duration_seconds, nodeledger_sample_errors_total, nodeledger_samples_total.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import hmac
import io
import ipaddress
import queue
import select
import selectors
import socket
import ssl
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from nodeledger.errors import InputError
from nodeledger.files import check_user_file
from nodeledger.machine.vendors import ExporterNames
from nodeledger.machine.vendors import of_backend as vendor_of_backend
from nodeledger.units import MiB
from nodeledger.verdict.fit import TIGHT
from nodeledger.watch.analyze import Analyzer

# 19835: the Prometheus "default port allocations" wiki has 9100-9999 taken (9835 is
# utkuozdemir/nvidia_gpu_exporter's); 19835 is in no list it keeps, nor in /etc/services
DEFAULT_PORT = 19835
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
METRICS_PATH = "/metrics"
MAX_HEAD = 16384  # bytes of request line + headers; a scrape sends a few hundred
DEFAULT_WORKERS = 8
DEFAULT_CLIENT_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 1024
EVICT_SCAN = 32  # waiting connections looked at for an idle one to drop


# The vendor's own exporter names (machine/vendors: ``ExporterNames`` with their sources), used
# instead of dcgm-exporter's on its cards (a dashboard made for that exporter works unchanged).
# NVIDIA, Hygon (its DCU exporter's names are not in a public source found) and the fake
# scenarios: dcgm-exporter's (it serves no total).
DCGM_NAMES = ExporterNames(
    used="DCGM_FI_DEV_FB_USED", total=None, free="DCGM_FI_DEV_FB_FREE", util="DCGM_FI_DEV_GPU_UTIL",
    labels=(("gpu", "index"), ("UUID", "uuid"), ("pci_bus_id", "pci_bus_id"), ("device", "device"),
            ("modelName", "name"), ("Hostname", "hostname")),
)  # fmt: skip


def _card_labels(labels: tuple[tuple[str, str], ...], i: int, d: dict, hostname: str,
                 prefix: str) -> list[str]:  # fmt: skip
    """Card ``i``'s label values in the order of its exporter's ``labels`` ("" where nodeledger
    does not know one)."""
    known = {"index": str(i), "uuid": d.get("uuid") or "", "pci_bus_id": d.get("pci_bus_id") or "",
             "device": f"{prefix}{i}", "name": d.get("name") or "", "hostname": hostname}  # fmt: skip
    return [known.get(what, "") for _, what in labels]


# An idle finding's likely cause (free text with figures) as a label value of few values: the
# words each cause sentence of Analyzer._causes starts with.
_CAUSES = (("its job fails verification", "verification failed"), ("remote NUMA", "remote numa"),
           ("CPU starvation", "cpu starvation"), ("host swapping", "host swapping"),
           ("IO wait", "io wait"), ("NUMA node", "numa node full"),
           ("host RAM nearly exhausted", "host ram exhausted"),
           ("no host-side cause", "none on the host"))  # fmt: skip


def cause_class(text: str | None) -> str:
    """A finding's likely cause as one of a few label values ("" when none was found)."""
    if not text:
        return ""
    for start, cls in _CAUSES:
        if text.startswith(start):
            return cls
    return "other"


def parse_listen(text: str) -> tuple[str, int, bool]:
    """ "HOST:PORT" ("[::1]:19835" for IPv6) -> (host, port, loopback?)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if not 0 < int(port) < 65536:
        raise InputError(f"--listen {text!r}: port {int(port)} is outside 1-65535")
    host = host.strip("[]") or "0.0.0.0"
    try:
        loop = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = host == "localhost"
    return host, int(port), loop


def with_node_name(header: dict, environ) -> dict:
    """``header`` with the machine's hostname taken from ``NODE_NAME`` when it is set: in a
    Kubernetes Pod the host name is the Pod's, so the DaemonSet passes the node's name through
    the downward API (spec.nodeName), as dcgm-exporter reads it for its Hostname label."""
    name = (environ.get("NODE_NAME") or "").strip()
    if not name or len(name) > 253 or not name.isprintable():
        return header
    return {**header, "machine": {**(header.get("machine") or {}), "hostname": name}}


def families(sample: dict | None, header: dict, an: Analyzer, state: dict,
             vendor_series: bool = True) -> list:  # fmt: skip
    # long: every metric family of one scrape, each declared then filled, in exposition order
    """The metric families of one sample (also used by tests without a server).  Without
    ``vendor_series`` the vendor-named families (DCGM_FI_DEV_*, gpu_*_vram, npu_chip_info_*)
    are left out: a box that runs the vendor's own exporter has them from it already."""
    mach = header.get("machine") or {}
    info = {c["index"]: c for c in mach.get("cards", [])}
    hostname = mach.get("hostname") or ""
    vs = vendor_of_backend(header.get("backend", ""))
    prefix = vs.device_label_prefix if vs else "card"
    names = (vs.exporter_names if vs else None) or DCGM_NAMES
    dl = [label for label, _ in names.labels]

    def vendor_family(key: str, doc: str):  # None where the vendor's exporter has no such name
        if not vendor_series or not getattr(names, key):
            return None
        return GaugeMetricFamily(getattr(names, key), doc, labels=dl)

    fb_used = vendor_family("used", "Card memory used (in MiB).")
    fb_free = vendor_family("free", "Card memory free (in MiB).")
    fb_total = vendor_family("total", "Card memory (in MiB).")
    util = vendor_family("util", "Card utilization (in %).")
    # nodeledger's own per-card series carry ``card`` and, as dcgm-exporter names the card
    # index, ``gpu`` (the same value): `... * on (gpu) group_left () DCGM_FI_DEV_GPU_UTIL` joins
    used_b = GaugeMetricFamily(
        "nodeledger_card_memory_used_bytes", "Card memory in use.", labels=["card", "gpu"]
    )
    total_b = GaugeMetricFamily(
        "nodeledger_card_memory_total_bytes", "Card memory.", labels=["card", "gpu"]
    )
    planned = GaugeMetricFamily("nodeledger_card_memory_planned_bytes",
                                "The ledger's prediction for the card (plan / job).", labels=["card", "gpu"])  # fmt: skip
    head = GaugeMetricFamily("nodeledger_card_headroom_bytes",
                             "Bytes left before the card is above plan (to=plan), tight at 90 % (to=tight) or full (to=full).",
                             labels=["card", "gpu", "to"])  # fmt: skip
    proc = GaugeMetricFamily("nodeledger_process_card_memory_bytes",
                             "Card memory a process holds.", labels=["card", "gpu", "pid", "process"])  # fmt: skip
    nproc = GaugeMetricFamily(
        "nodeledger_card_processes", "Processes the card tool lists on the card.",
        labels=["card", "gpu"],
    )  # fmt: skip
    out = [f for f in (fb_used, fb_free, fb_total, util) if f is not None]
    out += [used_b, total_b, planned, head, proc]
    for c in (sample or {}).get("cards", []):
        i = c["index"]
        d = info.get(i, {})
        labels = _card_labels(names.labels, i, d, hostname, prefix)
        cg = [str(i), str(i)]  # card, gpu
        used, total = c.get("used_bytes"), c.get("total_bytes") or d.get("total_bytes")
        if used is not None:
            if fb_used is not None:
                fb_used.add_metric(labels, used // MiB)  # dcgm-exporter: whole MiB
            used_b.add_metric(cg, used)
        if used is not None and total and fb_free is not None:
            fb_free.add_metric(labels, (total - used) // MiB)
        if c.get("util_pct") is not None and util is not None:
            util.add_metric(labels, c["util_pct"])
        if c.get("processes") is not None:
            nproc.add_metric(cg, len(c["processes"]))
        if total:
            total_b.add_metric(cg, total)
            if fb_total is not None:
                fb_total.add_metric(labels, total // MiB)
        pred = an.predicted.get(i)
        if pred is not None:
            planned.add_metric(cg, pred)
        if used is not None:
            if pred is not None:
                head.add_metric(
                    [*cg, "plan"], pred * (1 + an.tolerance) + an.tolerance_bytes - used
                )
            if total:
                head.add_metric([*cg, "tight"], TIGHT["card memory"] * total - used)
                head.add_metric([*cg, "full"], total - used)
        for p in c.get("processes") or []:
            if p.get("used_bytes") is not None:
                proc.add_metric([*cg, str(p["pid"]), p.get("name") or ""], p["used_bytes"])
    h = (sample or {}).get("host") or {}
    for name, key, doc in (("nodeledger_host_memory_total_bytes", "mem_total", "Host RAM."),
                           ("nodeledger_host_memory_available_bytes", "mem_available", "MemAvailable."),
                           ("nodeledger_host_page_cache_bytes", "page_cache",
                            "Page cache: /proc/meminfo Cached + Buffers."),
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
        "nodeledger_finding", "1 per active verify / idle finding (cause: an idle card's likely "
        "cause, as a short class).", labels=["rule", "card", "gpu", "cause"]
    )  # fmt: skip
    ver = an.verify()
    for f in ver["findings"]:
        for c in f["cards"]:
            fnd.add_metric([f["rule"], str(c), str(c), ""], 1)
    for f in an.idle(active_only=True):
        fnd.add_metric([f"idle: {f['kind']}", str(f["card"]), str(f["card"]),
                        cause_class(f.get("likely_cause"))], 1)  # fmt: skip
    out.append(fnd)
    boat = GaugeMetricFamily(
        "nodeledger_lifeboat_card", "1 for each card the plan keeps free as the lifeboat.",
        labels=["card", "gpu"],
    )  # fmt: skip
    for c in (an.expect or {}).get("lifeboat") or []:
        boat.add_metric([str(c), str(c)], 1)
    out += [boat, nproc]
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
    """One request per connection; the request head is already read (``_Conn.buf``)."""

    def setup(self):
        super().setup()
        self.rfile = io.BytesIO(self.server.server_buf.get(id(self.request), b""))

    def log_message(self, format, *args):
        pass

    def get_stderr(self):
        # wsgiref prints a traceback for every client gone mid-answer: a client could flood
        # our stderr with them; such a client is simply dropped
        return io.StringIO()


# --- access control ----------------------------------------------------------------------------


def parse_allow(texts) -> list:
    """``--allow`` values -> networks; a malformed CIDR is an InputError (one line)."""
    nets = []
    for t in texts or ():
        try:
            nets.append(ipaddress.ip_network(t.strip(), strict=False))
        except ValueError:
            raise InputError(
                f"--allow {t!r}: expected an address or a CIDR network, e.g. 10.0.0.0/8 or fd00::/8"
            ) from None
    return nets


def allowed(addr: str, nets) -> bool:
    """Whether a client address is inside one of ``nets`` (no list: every client).  An IPv4
    client of a dual-stack socket (``::ffff:10.0.0.5``) is judged as its IPv4 address."""
    if not nets:
        return True
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == n.version and ip in n for n in nets)


def load_tls(cert: str | None, key: str | None):
    """``--tls-cert`` / ``--tls-key`` -> a server SSLContext (TLS 1.2+), as prometheus-client's
    own ``start_http_server(certfile=, keyfile=)`` builds it; None without them."""
    if not cert and not key:
        return None
    if not (cert and key):
        raise InputError("--tls-cert and --tls-key go together: give both")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certfile=cert, keyfile=key)
    except (OSError, ssl.SSLError) as exc:
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise InputError(f"--tls-cert {cert} / --tls-key {key}: cannot load ({why})") from None
    return ctx


def load_basic_auth(path: str | None) -> dict[str, str] | None:
    """``--basic-auth-file``: ``user:sha256hex`` lines (``#`` comments) -> {user: hex}."""
    if not path:
        return None
    try:
        check_user_file(path, "basic-auth file")
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise InputError(f"--basic-auth-file {path}: {exc.strerror or exc}") from None
    users: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, digest = line.rpartition(":")
        digest = digest.strip().lower()
        if not sep or not user or len(digest) != 64 or any(c not in HEX for c in digest):
            raise InputError(
                f"--basic-auth-file {path}:{n}: expected USER:SHA256HEX "
                "(64 hex digits: printf %s PASSWORD | sha256sum)"
            )
        users[user] = digest
    if not users:
        raise InputError(f"--basic-auth-file {path}: no USER:SHA256HEX line")
    return users


HEX = frozenset("0123456789abcdef")
_DUMMY = "0" * 64


def check_basic_auth(header: str | None, users: dict[str, str]) -> bool:
    """An ``Authorization: Basic ...`` header against the users (constant-time compare; an
    unknown user costs the same hash and compare as a known one)."""
    if not header or header[:6].lower() != "basic ":
        return False
    try:
        user, sep, pw = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return False
    got = hashlib.sha256(pw.encode()).hexdigest()
    want = users.get(user, _DUMMY)
    return bool(sep) and hmac.compare_digest(got, want) and user in users


def _plain(start_response, status: str, text: str, extra=()) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body))), *extra])  # fmt: skip
    return [body]


def route(app, users: dict[str, str] | None = None):
    """Only ``/metrics`` (GET or HEAD) reaches the metrics app: other paths are 404, other
    methods 405, a missing / wrong password (with --basic-auth-file) 401."""

    def wsgi(environ, start_response):
        method = environ.get("REQUEST_METHOD", "")
        if environ.get("PATH_INFO") != METRICS_PATH:
            return _plain(start_response, "404 Not Found", "not found: metrics are at /metrics\n")
        if method not in ("GET", "HEAD"):
            return _plain(start_response, "405 Method Not Allowed",
                          f"method {method} not allowed: use GET or HEAD\n",
                          [("Allow", "GET, HEAD")])  # fmt: skip
        if users is not None and not check_basic_auth(environ.get("HTTP_AUTHORIZATION"), users):
            return _plain(start_response, "401 Unauthorized", "unauthorized\n",
                          [("WWW-Authenticate", 'Basic realm="nodeledger", charset="UTF-8"')])  # fmt: skip
        if method == "GET":
            return app(environ, start_response)
        seen: list = []

        def keep(status, headers, exc_info=None):
            seen[:] = [status, headers]

        body = b"".join(app(dict(environ, REQUEST_METHOD="GET"), keep))
        status, headers = seen
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [b""]

    return wsgi


# --- the server ----------------------------------------------------------------------------------


class _Conn:
    __slots__ = ("addr", "buf", "deadline", "sock", "tls_pending")

    def __init__(self, sock, addr, deadline, tls):
        self.sock, self.addr, self.deadline = sock, addr, deadline
        self.buf = b""
        self.tls_pending = tls


def _has_data(sock) -> bool:
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(0))


def fd_soft_limit() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    except (ImportError, OSError, ValueError):
        return 1024


class MetricsServer:
    """An HTTP/1.0 server with bounded resources, for scrapes.

    One thread (``serve_forever``) accepts connections and waits, with a selector, for each
    request head (TLS handshake included); a fixed pool of ``workers`` threads answers complete
    requests, one request per connection.  So an idle or slow client holds one fd and no thread:
    it is dropped once ``client_timeout`` s have passed since it connected without a full request
    head (answering is bounded by the same timeout on each socket call).  At most
    ``max_connections`` connections are open (clamped to the fd limit, with a reserve for the
    card backend); past that the oldest waiting one is dropped for the new one, and when the
    process is out of fds the oldest waiting one is dropped too - so idle sockets never starve a
    scrape.  A client outside ``allow`` (networks) is closed at once, without a reply.
    """

    request_queue_size = 1024  # a burst of connects waits here, not in SYN retries
    fd_reserve = 32

    def __init__(self, host: str, port: int, app, *, workers: int = 8,
                 client_timeout: float = 5.0, max_connections: int = 1024, allow=(),
                 ssl_context=None):  # fmt: skip
        self.family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.client_timeout = client_timeout
        self.max_connections = max(8, min(max_connections, fd_soft_limit() - self.fd_reserve))
        self.allow = list(allow)
        self.ssl_context = ssl_context
        self.application = app
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(self.request_queue_size)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.socket = sock
        self.server_address = sock.getsockname()
        self.server_name, self.server_port = host, self.server_address[1]
        self.base_environ = {"SERVER_NAME": host, "GATEWAY_INTERFACE": "CGI/1.1",
                             "SERVER_PORT": str(self.server_port), "REMOTE_HOST": "",
                             "CONTENT_LENGTH": "", "SCRIPT_NAME": ""}  # fmt: skip
        if ssl_context is not None:
            self.base_environ["HTTPS"] = "on"
        self.server_buf: dict[int, bytes] = {}  # request head per socket, for the handler
        self.waiting: dict[socket.socket, _Conn] = {}  # accept order = deadline order
        self.lock = threading.Lock()
        self.open = 0  # waiting + queued + being answered
        self.dropped = 0  # idle / slow / evicted / refused, for tests and the benchmark
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = False
        self._is_shut_down = threading.Event()
        self._is_shut_down.set()
        self.workers = [threading.Thread(target=self._work, name=f"metrics-{i}", daemon=True)
                        for i in range(max(1, workers))]  # fmt: skip
        for t in self.workers:
            t.start()

    def get_app(self):
        return self.application

    # -- the accepting thread

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._is_shut_down.clear()
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ, None)
        try:
            while not self._stop:
                now = time.monotonic()
                wait = poll_interval
                if self.waiting:
                    first = next(iter(self.waiting.values()))
                    wait = max(0.0, min(wait, first.deadline - now))
                for key, _ev in sel.select(wait):
                    if key.data is None:
                        self._accept(sel)
                    elif key.fileobj in self.waiting:
                        self._readable(sel, key.data)
                self._expire(sel)
        finally:
            for c in list(self.waiting.values()):
                self._drop(sel, c)
            sel.close()
            self._stop = False
            self._is_shut_down.set()

    def _accept(self, sel) -> None:
        for _ in range(64):
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if self._evict(sel):  # out of fds: the oldest idle client makes room
                        continue
                    time.sleep(0.01)  # every fd is answering a request: they end soon
                return
            if not allowed(addr[0], self.allow):
                self.dropped += 1
                sock.close()
                continue
            with self.lock:
                full = self.open >= self.max_connections
            if full and not self._evict(sel):  # all answering or queued: refuse the new one
                self.dropped += 1
                sock.close()
                continue
            sock.setblocking(False)
            tls = self.ssl_context is not None
            if tls:
                try:
                    sock = self.ssl_context.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                except (OSError, ValueError):
                    self.dropped += 1
                    sock.close()
                    continue
            c = _Conn(sock, addr, time.monotonic() + self.client_timeout, tls)
            with self.lock:
                self.open += 1
            self.waiting[sock] = c
            sel.register(sock, selectors.EVENT_READ, c)

    def _evict(self, sel) -> bool:
        """Drop the oldest waiting connection that has sent nothing (a scrape whose request
        is already in the socket buffer is read instead); failing that, the oldest one."""
        for c in list(self.waiting.values())[:EVICT_SCAN]:
            if c.buf or _has_data(c.sock):
                self._readable(sel, c)  # non-blocking: reads it, queues it when complete
                continue
            self._drop(sel, c)
            return True
        if self.waiting:
            self._drop(sel, next(iter(self.waiting.values())))
            return True
        return False

    def _readable(self, sel, c: _Conn) -> None:
        if c.tls_pending:
            try:
                c.sock.do_handshake()
            except ssl.SSLWantReadError:
                sel.modify(c.sock, selectors.EVENT_READ, c)
                return
            except ssl.SSLWantWriteError:
                sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
                return
            except (OSError, ValueError):
                self._drop(sel, c)
                return
            c.tls_pending = False
            sel.modify(c.sock, selectors.EVENT_READ, c)
        while True:
            try:
                chunk = c.sock.recv(16384)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                break
            except ssl.SSLWantWriteError:
                sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
                return
            except (OSError, ValueError):
                self._drop(sel, c)
                return
            if not chunk:  # closed before a full request head
                self._drop(sel, c)
                return
            c.buf += chunk
            if b"\r\n\r\n" in c.buf or b"\n\n" in c.buf:
                sel.unregister(c.sock)
                del self.waiting[c.sock]
                self.queue.put(c)
                return
            if len(c.buf) > MAX_HEAD:
                self._drop(sel, c)
                return

    def _expire(self, sel) -> None:
        now = time.monotonic()
        while self.waiting:
            c = next(iter(self.waiting.values()))
            if c.deadline > now:
                return
            self._drop(sel, c)

    def _drop(self, sel, c: _Conn) -> None:
        self.waiting.pop(c.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(c.sock)
        self.dropped += 1
        self._close(c.sock)

    def _close(self, sock) -> None:
        with contextlib.suppress(OSError):
            sock.close()
        with self.lock:
            self.open -= 1

    # -- the workers

    def _work(self) -> None:
        while True:
            c = self.queue.get()
            if c is None:
                return
            try:
                # the answer is due within one more client_timeout of the request's own deadline:
                # a slow reader cannot hold a worker past it, and one that waited in the queue
                # longer is dropped unanswered
                left = c.deadline + self.client_timeout - time.monotonic()
                if left <= 0:
                    continue
                c.sock.setblocking(True)
                c.sock.settimeout(min(self.client_timeout, left))
                self.server_buf[id(c.sock)] = c.buf
                _Quiet(c.sock, c.addr, self)
            except Exception:  # a client gone mid-answer, a timeout: drop it, keep serving
                pass
            finally:
                self.server_buf.pop(id(c.sock), None)
                self._close(c.sock)

    # -- socketserver's interface (the CLI and the tests use it)

    def shutdown(self) -> None:
        self._stop = True
        self._is_shut_down.wait()

    def server_close(self) -> None:
        for _ in self.workers:
            self.queue.put(None)
        with contextlib.suppress(OSError):
            self.socket.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server_close()


class Exporter:
    """Samples in a thread; serves the latest families over HTTP."""

    def __init__(self, watcher, analyzer: Analyzer, header: dict, vendor_series: bool = True):
        self.w, self.an, self.header = watcher, analyzer, header
        self.vendor_series = vendor_series
        self.state = {"samples": 0, "errors": 0}
        self.cached: list = families(None, header, analyzer, self.state, vendor_series)
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
        self.cached = families(s, self.header, self.an, self.state, self.vendor_series)  # one swap

    def start_sampling(self) -> None:
        self.thread = threading.Thread(target=self.w.run, args=(self.update,),
                                       kwargs={"stop": self.stop}, name="sampler", daemon=True)  # fmt: skip
        self.thread.start()

    def serve(self, host: str, port: int, *, workers: int = DEFAULT_WORKERS,
              client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
              max_connections: int = DEFAULT_MAX_CONNECTIONS, allow=(), ssl_context=None,
              users: dict[str, str] | None = None) -> MetricsServer:  # fmt: skip
        """Bind (not yet serving: call ``serve_forever``); see MetricsServer for the limits."""
        try:
            self.server = MetricsServer(host, port, route(make_wsgi_app(self.registry), users),
                                        workers=workers, client_timeout=client_timeout,
                                        max_connections=max_connections, allow=allow,
                                        ssl_context=ssl_context)  # fmt: skip
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
