"""exporter: the metrics text passes prometheus-client's parser, names and labels follow
dcgm-exporter, scrapes never trigger samples, and a wider bind needs --expose."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nodeledger.cli import main
from nodeledger.errors import InputError
from nodeledger.watch.analyze import Analyzer
from nodeledger.watch.exporter import Exporter, _Collector, parse_listen
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
    assert free0.value == pytest.approx(64 * 1024 - s0.value)
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
    assert head[("0", "cannot")] == pytest.approx(64 * GiB - s0.value * MiB, abs=1)
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
    assert f"http://0.0.0.0:{port}/metrics" in err


def test_default_is_loopback(capsys):
    port = _free_port()
    code = main(["exporter", "--backend", "fake:fsdp-sharded", "--listen", f"127.0.0.1:{port}",
                 "--duration", "0.2"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "warning" not in err
