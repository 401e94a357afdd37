"""`nodeledger fleet`: a table over several boxes' support bundles (free cards, lifeboat,
host-RAM headroom, findings), and the same read-only from a Prometheus HTTP API."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse

from conftest import run_cli
from nodeledger.machine.probe.bundle import write_bundle
from nodeledger.machine.probe.probe import probe_with_facts
from test_doctor import make_box

GiB = 2**30


def _bundle(tmp, name, **plants):
    r = make_box(tmp / name, **plants)
    probe_with_facts(r)
    return write_bundle(r, tmp / f"{name}.tar.gz")


def _follows_its_schema(d: dict) -> None:
    """fleet --json against its types (fleet.table.FleetJSON, strict)."""
    from pydantic import TypeAdapter

    from nodeledger.fleet.table import FLEET_SCHEMA_VERSION, FleetJSON

    assert d["schema_version"] == FLEET_SCHEMA_VERSION
    TypeAdapter(FleetJSON).validate_json(json.dumps(d), strict=True)


def test_fleet_over_bundles(tmp_path):
    a = _bundle(tmp_path, "a")  # 2 x H200, both cards with an owner
    b = _bundle(tmp_path, "b", swap_used=True, card_procs=False, available_gib=20)
    r = run_cli("fleet", str(a), str(b), "--json")
    assert r.returncode == 0, r.stderr
    _follows_its_schema(json.loads(r.stdout))
    boxes = json.loads(r.stdout)["boxes"]
    assert [x["source"] for x in boxes] == [str(a), str(b)]
    assert boxes[0]["cards"] == 2 and boxes[0]["free_cards"] == []
    assert boxes[0]["lifeboat"] == "none free"
    assert boxes[1]["free_cards"] == [0, 1] and boxes[1]["lifeboat"].startswith("ok")
    assert boxes[1]["mem_available_bytes"] == 20 * GiB and boxes[1]["mem_total_bytes"] == 128 * GiB
    assert "swap-in-use" in boxes[1]["findings"] and "swap-in-use" not in boxes[0]["findings"]
    text = run_cli("fleet", str(a), str(b)).stdout
    assert "20.0 of 128.0" in text and "none free" in text


def test_fleet_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "x.tar.gz"
    bad.write_text("nope")
    for args, words in ((["fleet"], "one of the two"), (["fleet", str(bad)], "not a readable"),
                        (["fleet", "--prometheus", "ftp://x"], "http:// or https://")):  # fmt: skip
        r = run_cli(*args)
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


SERIES = {
    "nodeledger_card_memory_total_bytes": [({"instance": "a:9835", "card": str(c)}, 64 * GiB) for c in range(2)],
    "nodeledger_card_memory_used_bytes": [({"instance": "a:9835", "card": "0"}, 40 * GiB),
                                          ({"instance": "a:9835", "card": "1"}, 0.3 * GiB)],
    "nodeledger_card_processes": [({"instance": "a:9835", "card": "0"}, 1), ({"instance": "a:9835", "card": "1"}, 0)],
    "nodeledger_lifeboat_card == 1": [({"instance": "a:9835", "card": "1"}, 1)],
    "nodeledger_host_memory_available_bytes": [({"instance": "a:9835"}, 60 * GiB)],
    "nodeledger_host_memory_total_bytes": [({"instance": "a:9835"}, 125 * GiB)],
    "nodeledger_finding == 1": [({"instance": "a:9835", "rule": "above plan", "card": "0"}, 1)],
}  # fmt: skip


class _Prom(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
        res = [{"metric": m, "value": [1.0, str(v)]} for m, v in SERIES.get(q, [])]
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": res}})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *a):
        pass


def test_fleet_from_prometheus():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Prom)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        r = run_cli("fleet", "--prometheus", f"http://127.0.0.1:{srv.server_port}", "--json")
    finally:
        srv.shutdown()
    assert r.returncode == 0, r.stderr
    _follows_its_schema(json.loads(r.stdout))
    (box,) = json.loads(r.stdout)["boxes"]
    assert box["name"] == "a:9835" and box["cards"] == 2 and box["free_cards"] == [1]
    assert box["lifeboat"] == "1 (free)" and box["mem_available_bytes"] == 60 * GiB
    assert box["findings"] == ["above plan (card 0)"]
