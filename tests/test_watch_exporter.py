"""exporter: the metrics text passes prometheus-client's parser, names and labels follow
dcgm-exporter, scrapes never trigger samples, and a wider bind needs --expose."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodeledger.cli import main
from nodeledger.errors import InputError
from nodeledger.watch.analyze import Analyzer
from nodeledger.watch.exporter import (
    Exporter,
    _Collector,
    allowed,
    check_basic_auth,
    load_tls,
    parse_allow,
    parse_listen,
)
from nodeledger.watch.fake import FakeBackend, scenario
from nodeledger.watch.watcher import Watcher

GiB, MiB = 2**30, 2**20
FSDP_EXPECT = {"groups": [{"name": "job", "shard": "fsdp", "cards": list(range(8)),
                           "predicted": {str(i): 50 * GiB for i in range(8)},
                           "unsharded_bytes": 383 * GiB}]}  # fmt: skip


def _exporter(name="dead-owner", expect=None, interval=1.0):
    b = FakeBackend(scenario(name))
    w = Watcher(b, b.host, interval)  # the scenario's clock: 1 s per sample
    header = w.header(expect)
    return Exporter(w, Analyzer(header, expect), header), w


def _parse(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_text_parses_and_follows_dcgm_names():
    exp, w = _exporter("fsdp-unsharded", FSDP_EXPECT)
    for _ in range(70):
        exp.update(w.sample())
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(exp))
    fams = _parse(generate_latest(reg).decode())
    used = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_FB_USED"].samples}
    assert set(used) == {str(i) for i in range(8)}
    s0 = used["0"]
    assert set(s0.labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
    assert s0.labels["UUID"] == "DCU-fake-0000" and s0.labels["modelName"] == "K100_AI"
    assert s0.labels["Hostname"] == "fake-k100" and s0.labels["device"] == "card0"
    assert 62 * 1024 < s0.value < 63 * 1024  # MiB, as dcgm-exporter
    free0 = next(s for s in fams["DCGM_FI_DEV_FB_FREE"].samples if s.labels["gpu"] == "0")
    assert free0.value == pytest.approx(64 * 1024 - s0.value, abs=1)  # each floored to whole MiB
    assert s0.value == int(s0.value) and free0.value == int(free0.value)
    assert fams["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    planned = {
        s.labels["card"]: s.value for s in fams["nodeledger_card_memory_planned_bytes"].samples
    }
    assert planned["0"] == 50 * GiB
    head = {
        (s.labels["card"], s.labels["to"]): s.value
        for s in fams["nodeledger_card_headroom_bytes"].samples
    }
    assert head[("0", "plan")] < 0 < head[("1", "plan")]  # card 0 is above plan
    assert head[("0", "full")] == pytest.approx(64 * GiB - s0.value * MiB, abs=MiB)
    procs = fams["nodeledger_process_card_memory_bytes"].samples
    assert {(s.labels["card"], s.labels["pid"], s.labels["process"]) for s in procs} >= {
        ("0", "1000", "python")
    }
    findings = {(s.labels["rule"], s.labels["card"]) for s in fams["nodeledger_finding"].samples}
    assert ("sharding not happening", "0") in findings and (
        "idle: held, low activity",
        "3",
    ) in findings
    assert fams["nodeledger_verify_failed"].samples[0].value == 1
    assert fams["nodeledger_host_swap_pages"].type == "counter"
    assert fams["nodeledger_samples"].samples[0].value == 70
    assert fams["nodeledger_host_memory_total_bytes"].samples[0].value == 125 * GiB


class Counting(FakeBackend):
    calls = 0

    def sample(self):
        Counting.calls += 1
        return super().sample()


def test_scrapes_read_the_cache_and_never_sample(tmp_path):
    b = Counting(scenario("dead-owner"))
    w = Watcher(b, b.host, 0.25, clock=time.time)
    header = w.header()
    exp = Exporter(w, Analyzer(header), header)
    server = exp.serve("127.0.0.1", 0)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    t0 = time.monotonic()
    exp.start_sampling()
    try:
        for _ in range(60):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                assert r.status == 200
                body = r.read().decode()
            assert "DCGM_FI_DEV_FB_USED" in body
        _parse(body)
    finally:
        exp.shutdown()
    elapsed = time.monotonic() - t0
    assert Counting.calls <= elapsed / 0.25 + 2  # 60 scrapes, a handful of samples


@pytest.mark.parametrize(
    ("text", "want"),
    [("127.0.0.1:9835", ("127.0.0.1", 9835, True)), ("localhost:1", ("localhost", 1, True)),
     ("[::1]:9835", ("::1", 9835, True)), ("0.0.0.0:9835", ("0.0.0.0", 9835, False)),
     (":9100", ("0.0.0.0", 9100, False))],
)  # fmt: skip
def test_parse_listen(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["9835", "host:", "host:99999", "127.0.0.1:x"])
def test_parse_listen_refuses(text):
    with pytest.raises(InputError):
        parse_listen(text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wider_bind_needs_expose_and_warns(capsys):
    assert main(["exporter", "--backend", "fake:dead-owner", "--listen", "0.0.0.0:9835"]) == 2
    assert "add --expose" in capsys.readouterr().err
    port = _free_port()
    code = main(["exporter", "--backend", "fake:dead-owner", "--listen", f"0.0.0.0:{port}",
                 "--expose", "--duration", "0.3", "--interval", "0.1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and err.startswith("warning: serving metrics on 0.0.0.0")
    assert "restrict them with --allow CIDR" in err
    assert f"http://0.0.0.0:{port}/metrics" in err


def test_default_is_loopback(capsys):
    port = _free_port()
    code = main(["exporter", "--backend", "fake:fsdp-sharded", "--listen", f"127.0.0.1:{port}",
                 "--duration", "0.2"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "warning" not in err


# --- issue 14: bounded connections, /metrics only, --allow, TLS, basic auth -------------------


@contextlib.contextmanager
def _serving(**kw):
    exp, _w = _exporter()
    server = exp.serve("127.0.0.1", 0, **kw)
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        yield server, server.server_address[1]
    finally:
        exp.shutdown()
        t.join(5)


def _request(port, method="GET", path="/metrics", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def _dropped_after(sock, limit=10.0) -> float:
    """Seconds until the server closes ``sock`` (EOF or reset)."""
    t0 = time.monotonic()
    sock.settimeout(limit)
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(1) == b""
    return time.monotonic() - t0


@pytest.mark.parametrize("path", ["/", "/foo", "/../../etc/passwd", "/metrics/", "/metricsx"])
def test_only_metrics_is_served(path):
    with _serving() as (_server, port):
        status, headers, body = _request(port, path=path)
        assert status == 404 and headers["Content-Type"].startswith("text/plain")
        assert b"DCGM" not in body and len(body) < 100
        status, _h, body = _request(port)
        assert status == 200 and b"DCGM_FI_DEV_FB_USED" in body


def test_metrics_methods():
    with _serving() as (_server, port):
        status, headers, body = _request(port, "HEAD")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 1000
        for method in ("POST", "PUT", "DELETE", "OPTIONS"):
            status, headers, body = _request(port, method)
            assert status == 405 and headers["Allow"] == "GET, HEAD" and b"DCGM" not in body
        status, _h, body = _request(port, path="/metrics?name[]=nodeledger_samples_total")
        assert status == 200


def test_idle_and_stalled_connections_are_dropped_after_the_timeout():
    with _serving(client_timeout=0.5) as (server, port):
        idle = socket.create_connection(("127.0.0.1", port))
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never ends its head
        with idle, stalled:
            assert 0.3 < _dropped_after(idle) < 3
            assert _dropped_after(stalled) < 3
        assert server.dropped >= 2


def test_scrapes_succeed_quickly_while_many_connections_idle():
    """The issue's case: idle sockets held one thread and one fd each and starved scrapes.
    Now they hold no thread, and past max_connections the oldest idle one makes room."""
    n_idle = 150
    with _serving(client_timeout=30, max_connections=40, workers=4) as (server, port):
        threads0 = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(n_idle)]
        try:
            assert threading.active_count() <= threads0  # no thread per connection (others may end)
            for _ in range(5):
                t0 = time.monotonic()
                status, _h, body = _request(port)
                assert status == 200 and b"DCGM_FI_DEV_FB_USED" in body
                assert time.monotonic() - t0 < 2
            handlers = [t for t in threading.enumerate() if t.name.startswith("metrics-")]
            assert len(handlers) == 4
            assert server.open <= server.max_connections == 40
        finally:
            for s in idle:
                s.close()


def test_allow_list_is_a_pure_check():
    nets = parse_allow(["10.0.0.0/8", "192.168.1.7", "fd00::/8"])
    assert allowed("10.0.0.5", nets) and allowed("192.168.1.7", nets)
    assert allowed("::ffff:10.0.0.5", nets)  # an IPv4 client of a dual-stack socket
    assert allowed("fd12::1", nets)
    assert not allowed("10.0.0.5", parse_allow(["127.0.0.0/8"]))
    assert not allowed("192.168.1.8", nets) and not allowed("127.0.0.1", nets)
    assert not allowed("not-an-address", nets)
    assert allowed("10.0.0.5", []) and allowed("203.0.113.9", None)  # no list: everyone


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "10.0.0", "banana", "::1/129", ""])
def test_parse_allow_refuses(bad):
    with pytest.raises(InputError, match="--allow"):
        parse_allow([bad])


def test_allow_end_to_end_on_loopback():
    with _serving(allow=parse_allow(["127.0.0.0/8"])) as (_server, port):
        assert _request(port)[0] == 200
    with _serving(allow=parse_allow(["10.0.0.0/8"])) as (server, port):
        with socket.create_connection(("127.0.0.1", port)) as s:  # loopback, not allowed
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert _dropped_after(s) < 3
        assert server.dropped == 1


def test_check_basic_auth():
    users = {"alice": hashlib.sha256(b"s3cret").hexdigest()}

    def hdr(text):
        return "Basic " + base64.b64encode(text.encode()).decode()

    assert check_basic_auth(hdr("alice:s3cret"), users)
    assert not check_basic_auth(hdr("alice:wrong"), users)
    assert not check_basic_auth(hdr("bob:s3cret"), users)
    assert not check_basic_auth(hdr("alice"), users)
    assert not check_basic_auth("Basic !!!", users) and not check_basic_auth(None, users)
    assert not check_basic_auth("Bearer x", users)


@pytest.mark.parametrize(
    ("args", "want"),
    [(["--allow", "10.0.0.0/33"], "--allow '10.0.0.0/33'"),
     (["--allow", "10.0.0.0/8", "--allow", "nope"], "--allow 'nope'"),
     (["--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"],
      "--tls-cert /nonexistent/cert.pem"),
     (["--tls-cert", "/nonexistent/cert.pem"], "go together"),
     (["--basic-auth-file", "/nonexistent/users"], "--basic-auth-file"),
     (["--client-timeout", "0"], "--client-timeout"),
     (["--handler-threads", "0"], "--handler-threads")],
)  # fmt: skip
def test_bad_access_options_exit_2(args, want, capsys):
    assert main(["exporter", "--backend", "fake:dead-owner", *args]) == 2
    err = capsys.readouterr().err
    assert want in err and len(err.strip().splitlines()) == 1


def test_bad_basic_auth_file_exit_2(tmp_path, capsys):
    f = tmp_path / "users"
    f.write_text("# comment\nalice:not-a-digest\n")
    assert main(["exporter", "--backend", "fake:dead-owner", "--basic-auth-file", str(f)]) == 2
    assert f"{f}:2" in capsys.readouterr().err


def _self_signed(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    return str(cert), str(key)


def test_tls_and_basic_auth_on_loopback(tmp_path):
    cert, key = _self_signed(tmp_path)
    users = {"prom": hashlib.sha256(b"pw").hexdigest()}
    with _serving(ssl_context=load_tls(cert, key), users=users, client_timeout=1) as (_s, port):
        ctx = ssl.create_default_context(cafile=cert)
        auth = {"Authorization": "Basic " + base64.b64encode(b"prom:pw").decode()}
        for headers, want in (({}, 401), (auth, 200)):
            c = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ctx)
            c.request("GET", "/metrics", headers=headers)
            r = c.getresponse()
            body = r.read()
            c.close()
            assert r.status == want
        assert b"DCGM_FI_DEV_FB_USED" in body
        assert r.getheader("WWW-Authenticate") is None
        with socket.create_connection(("127.0.0.1", port)) as s:  # plain HTTP to TLS: dropped
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert _dropped_after(s) < 3


def test_a_128_fd_exporter_still_scrapes_with_200_idle_sockets():
    """The issue verbatim: the exporter process limited to 128 fds, more idle sockets than
    that open against it (loopback), and a scrape still answers."""
    resource = pytest.importorskip("resource")
    port = _free_port()

    def limit():
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )

    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeledger", "exporter", "--backend", "fake:dead-owner",
         "--listen", f"127.0.0.1:{port}", "--client-timeout", "60", "--duration", "60"],
        stderr=subprocess.PIPE, text=True, preexec_fn=limit,
    )  # fmt: skip
    idle = []
    try:
        _wait_ready(port)
        for _ in range(200):
            with contextlib.suppress(OSError):
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        for _ in range(3):
            t0 = time.monotonic()
            status, _h, body = _request(port)
            assert status == 200 and b"DCGM_FI_DEV_FB_USED" in body
            assert time.monotonic() - t0 < 3
        status_text = Path(f"/proc/{proc.pid}/status").read_text()
        threads = int(
            next(x.split()[1] for x in status_text.splitlines() if x.startswith("Threads:"))
        )
        assert threads <= 8 + 4  # 8 handler threads, the accept loop, the sampler, a timer
    finally:
        for s in idle:
            s.close()
        proc.terminate()
        proc.wait(10)


def test_client_timeout_beyond_an_hour_is_refused():
    """`inf` or 1e10 passed the positive check, then made every scrape an empty reply."""
    from conftest import run_cli

    for v in ("inf", "1e10", "3601"):
        proc = run_cli("exporter", "--client-timeout", v, "--duration", "1")
        assert proc.returncode == 2 and "at most 3600" in proc.stderr, proc.stderr


def test_sigterm_is_a_clean_exit():
    """A service manager stops the exporter with SIGTERM: exit 0, not 143."""
    import signal

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeledger", "exporter", "--backend", "fake:dead-owner",
         "--listen", f"127.0.0.1:{port}", "--duration", "60"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_ready(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_ready(port: int) -> None:
    """Until the exporter on ``port`` answers /metrics (10 s at most)."""
    for _ in range(100):
        try:
            assert _request(port)[0] == 200
            return
        except OSError:
            time.sleep(0.1)


@pytest.mark.parametrize(
    ("spec", "used", "util", "labels"),
    [
        ("8x-ascend-910b2-vllmascend4661.toml", "npu_chip_info_hbm_used_memory",
         "npu_chip_info_utilization", {"id", "model_name", "vdie_id"}),
        ("8x-mi300x-rocmblogs.toml", None, "gpu_gfx_activity",
         {"gpu_id", "serial_number", "card_model", "hostname", "gpu_partition_id",
          "gpu_compute_partition_type"}),
    ],
)  # fmt: skip
def test_vendor_exporter_names_on_replayed_bundles(tmp_path, spec, used, util, labels):
    """On Ascend and AMD cards the exporter uses npu-exporter's and AMD device-metrics-
    exporter's names and labels (not dcgm's); nodeledger's own names stay."""
    sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "bundles"))
    from compose import compose

    from nodeledger.watch.from_bundle import open_from_bundle

    b, host, clock, _, step, _ = open_from_bundle(compose(Path(__file__).parent / "fixtures" /
                                                          "bundles" / spec, tmp_path / "b.tgz"))  # fmt: skip
    w = Watcher(b, host, step, clock=clock)
    header = w.header()
    exp = Exporter(w, Analyzer(header, None), header)
    exp.update(w.sample())
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(exp))
    fams = _parse(generate_latest(reg).decode())
    assert "DCGM_FI_DEV_FB_USED" not in fams and "DCGM_FI_DEV_GPU_UTIL" not in fams
    u = fams[util].samples
    assert len(u) == 8 and set(u[0].labels) == labels
    if used:  # npu-smi's HBM-Usage MB per NPU is the MiB figure the exporter serves
        import re

        text = (Path(__file__).parent / "fixtures" / "ascend" /
                "vllmascend4661-910b2-x8-npu-smi-info.txt").read_text()  # fmt: skip
        hbm = [float(x) for x in re.findall(r"([0-9]+)/ 65536", text)]
        assert sorted(s.value for s in fams[used].samples) == sorted(hbm) and len(hbm) == 8
        assert {s.value for s in fams["npu_chip_info_hbm_total_memory"].samples} == {65536.0}
    assert len(fams["nodeledger_process_card_memory_bytes"].samples) == 8


def test_lifeboat_option_is_served():
    """--lifeboat 7 serves nodeledger_lifeboat_card{card="7"} (what LifeboatCardTaken
    watches); a card list that is not one is one line, exit 2."""
    from conftest import run_cli

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeledger", "exporter", "--backend", "fake:dead-owner",
         "--listen", f"127.0.0.1:{port}", "--duration", "60", "--lifeboat", "7"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_ready(port)
        status, _h, body = _request(port)
        fams = _parse(body.decode())
        assert status == 200
        assert [s.labels["card"] for s in fams["nodeledger_lifeboat_card"].samples] == ["7"]
    finally:
        proc.terminate()
        proc.wait(10)
    r = run_cli("exporter", "--lifeboat", "seven", "--duration", "1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


# --- issue 27: beside the vendor's own exporter, in a Kubernetes Pod -----------------------------


def _scrape_cli(*args: str, env: dict | None = None) -> dict:
    """Start `nodeledger exporter` as a user would, scrape /metrics once, stop it."""
    import os

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeledger", "exporter", "--backend", "fake:dead-owner",
         "--listen", f"127.0.0.1:{port}", "--duration", "60", *args],
        stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    try:
        _wait_ready(port)
        status, _h, body = _request(port)
        assert status == 200
        return _parse(body.decode())
    finally:
        proc.terminate()
        proc.wait(10)


def test_no_vendor_series_leaves_the_vendor_names_out_and_the_gpu_label_joins():
    """--no-vendor-series: no DCGM_FI_DEV_* (dcgm-exporter serves them on such a box); the
    nodeledger series stay, each card labelled gpu as dcgm-exporter labels it."""
    both = _scrape_cli()
    mine = _scrape_cli("--no-vendor-series")
    vendor = {n for n in both if n.startswith("DCGM_FI_DEV_")}
    assert vendor == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL"}
    assert not {n for n in mine if n.startswith("DCGM_")}
    used = mine["nodeledger_card_memory_used_bytes"].samples
    assert len(used) == 8 and all(s.labels["gpu"] == s.labels["card"] for s in used)
    # the join dcgm-exporter's series need: the same gpu value for the same card
    dcgm = {s.labels["gpu"]: s.value for s in both["DCGM_FI_DEV_FB_USED"].samples}
    for s in both["nodeledger_card_memory_used_bytes"].samples:
        assert dcgm[s.labels["gpu"]] == s.value // MiB


def test_hostname_label_is_the_node_name_in_a_pod():
    """In a Pod the host name is the Pod's; the DaemonSet passes NODE_NAME (spec.nodeName),
    which becomes the Hostname label, as dcgm-exporter's."""
    fams = _scrape_cli(env={"NODE_NAME": "gpu-node-7"})
    assert {s.labels["Hostname"] for s in fams["DCGM_FI_DEV_FB_USED"].samples} == {"gpu-node-7"}
    fams = _scrape_cli(env={"NODE_NAME": ""})
    assert {s.labels["Hostname"] for s in fams["DCGM_FI_DEV_FB_USED"].samples} == {"fake-k100"}


def test_default_port_is_no_other_exporters():
    """9835 is nvidia_gpu_exporter's; nodeledger's default is 19835 (exporter and DaemonSet)."""
    import re

    from conftest import run_cli

    r = run_cli("exporter", "--help")
    assert r.returncode == 0 and "127.0.0.1:19835" in r.stdout
    assert not re.search(r"(?<!1)9835", r.stdout)
    r = run_cli("k8s", "daemonset", "--image", "a/b:1", "--allow-cidr", "10.0.0.0/8")
    assert r.returncode == 0 and "containerPort: 19835" in r.stdout


def test_page_cache_is_served(tmp_path):
    """/proc/meminfo Cached + Buffers -> nodeledger_host_page_cache_bytes (the dashboard's
    "Host RAM and page cache" panel)."""
    from nodeledger.machine.probe.runner import Runner
    from nodeledger.watch.exporter import families
    from nodeledger.watch.host import HostSampler

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(
        "MemTotal: 131072000 kB\nMemFree: 1000 kB\nMemAvailable: 90000000 kB\n"
        "Buffers: 2048 kB\nCached: 40960000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"
    )
    host, _ = HostSampler(Runner(root=tmp_path)).sample([])
    assert host["page_cache"] == (40960000 + 2048) * 1024
    header = {"backend": "nvml", "machine": {"cards": []}}
    fams = {f.name: f for f in families({"t": 1.0, "cards": [], "host": host}, header,
                                        Analyzer(header, None), {})}  # fmt: skip
    (s,) = fams["nodeledger_host_page_cache_bytes"].samples
    assert s.value == (40960000 + 2048) * 1024


def test_watch_help_lists_every_fake_scenario():
    from conftest import run_cli
    from nodeledger.watch.fake import SCENARIOS

    flat = " ".join(run_cli("watch", "--help").stdout.split())
    flat = flat.replace("- ", "-")  # click wraps a line after a hyphen (two- loads)
    for name in SCENARIOS:
        assert name in flat


def test_a_fake_demo_cut_short_says_where_its_finding_is():
    from conftest import run_cli

    p = run_cli("watch", "--backend", "fake:fsdp-unsharded", "--samples", "5")
    flat = " ".join(p.stdout.split())
    assert p.returncode == 0 and "holds 90 steps; 5 played show its start only" in flat, p.stdout
    assert "play it to its finding" in flat
