"""The Prometheus rules and the Grafana dashboard: `promtool check rules` and `promtool test
rules` on series recorded from the exporter's own output (fake scenarios played through it),
every dashboard query checked against the exporter's metric names and parsed by promtool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from conftest import run_cli
from nodeledger.fleet import prometheus as P
from nodeledger.watch.analyze import Analyzer
from nodeledger.watch.exporter import Exporter, _Collector
from nodeledger.watch.fake import FakeBackend, scenario
from nodeledger.watch.watcher import Watcher

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (.ci/run installs Debian's prometheus)"
)


def _for_s(alert: str) -> int:
    """The alert's `for`, in seconds, from the shipped rules."""
    for g in yaml.safe_load(P.rules_text())["groups"]:
        for r in g["rules"]:
            if r.get("alert") == alert:
                v = r.get("for", "0s")
                return int(v[:-1]) * {"s": 1, "m": 60, "h": 3600}[v[-1]]
    raise KeyError(alert)


def _scrapes(name: str, expect: dict | None = None, steps: int = 400) -> list[str]:
    """One exposition text per sample of the scenario (its frames go on past its own length),
    as a scraper 1 s apart would read them."""
    b = FakeBackend(scenario(name))
    w = Watcher(b, b.host, b.sc.interval)
    header = w.header(expect)
    exp = Exporter(w, Analyzer(header, expect), header)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(exp))
    out = []
    for _ in range(steps):
        exp.update(w.sample())
        out.append(generate_latest(reg).decode())
    return out


def _firing(series: list[dict], metric: str, at: int, hold: int) -> list[dict]:
    """Label sets of ``metric`` series that are 1 in every scrape of the last ``hold`` s
    before ``at`` (what a `for: hold` alert on `metric == 1` must fire for)."""
    out = []
    for s in series:
        if not s["series"].startswith(metric + "{"):
            continue
        vals = s["values"].split()
        window = vals[max(0, at - hold) : at + 1]
        if window and all(v == "1.0" for v in window):
            body = s["series"][len(metric) + 1 : -1]
            out.append(dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body)))
    return out


def test_rules_reference_only_served_metrics():
    served = P.metric_names() | P.recorded_names() | {"up"}
    for expr in P.rule_expressions() + P.dashboard_expressions():
        unknown = P.names_in(expr) - served
        assert not unknown, f"{expr}: {unknown} not served by the exporter"


def test_names_in_reads_metric_names():
    e = 'sum by (instance) (rate(nodeledger_host_swap_pages_total{job="x"}[5m])) > 100'
    assert P.names_in(e) == {"nodeledger_host_swap_pages_total"}
    assert P.names_in("up == 0 or time() - nodeledger_sample_timestamp_seconds > 1e2") == {
        "up", "nodeledger_sample_timestamp_seconds"}  # fmt: skip


@needs_promtool
def test_promtool_check_rules_and_dashboard_queries(tmp_path):
    proc = subprocess.run([PROMTOOL, "check", "rules", str(P.RULES_FILE)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every dashboard query parsed by promtool (as a recording rule's expression)
    exprs = [e.replace("$instance", ".*") for e in P.dashboard_expressions()]
    f = tmp_path / "dash.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{k}", "expr": e} for k, e in enumerate(exprs)]}]}))  # fmt: skip
    proc = subprocess.run([PROMTOOL, "check", "rules", str(f)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_test_rules_on_recorded_series(tmp_path):
    """Series recorded from the exporter on four scenarios, as four hosts; each alert's
    expected firing comes from the recorded finding series (held for its `for`) or, for the
    host-side alerts, from the scenario's known mechanism."""
    fsdp = {"source": "test", "groups": [{"name": "job", "shard": "fsdp", "cards": list(range(8)),
             "predicted": {str(i): 50 * 2**30 for i in range(8)},
             "unsharded_bytes": 383 * 2**30}]}  # fmt: skip
    inst = {"fsdp-unsharded": ("box-a", fsdp), "dead-owner": ("box-b", None),
            "extra-contexts": ("box-c", None),
            "two-loads": ("box-d", {"source": "test", "groups": [], "lifeboat": [7]})}  # fmt: skip
    series: list[dict] = []
    for name, (host, expect) in inst.items():
        recorded = P.record_series(_scrapes(name, expect), {"instance": host, "job": "nodeledger"})
        series += recorded
        n = len(recorded[0]["values"].split())
        series.append({"series": f'up{{instance="{host}",job="nodeledger"}}',
                       "values": " ".join(["1"] * n)})  # fmt: skip
    series.append({"series": 'up{instance="box-e",job="nodeledger"}', "values": "0x400"})
    # box-f answered for 5 s, then service discovery lost it: no `up` series at all after
    series.append({"series": 'up{instance="box-f",job="nodeledger"}', "values": "1x5"})
    # the shipped rules without their annotations: promtool compares an alert's annotations
    # too, and their templates are checked by `promtool check rules` above; this test is
    # about when each alert fires and with which labels
    shipped = yaml.safe_load(P.rules_text())
    for g in shipped["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(shipped))

    def case(alert: str, at: int, expected: list[dict]) -> dict:
        return {"eval_time": f"{at}s", "alertname": alert,
                "exp_alerts": [{"exp_labels": lab} for lab in expected]}  # fmt: skip

    def finding_alerts(alert, rule, at, severity, hosts):
        hold = _for_s(alert)
        hits = [s for s in _firing(series, "nodeledger_finding", at, hold)
                if s["rule"] == rule and s["instance"] in hosts]  # fmt: skip
        assert hits, f"no recorded {rule!r} finding held {hold} s at {at} s"
        # an empty label is no label to Prometheus (cause="" on verify findings)
        return case(alert, at, [{k: v for k, v in dict(h, severity=severity).items() if v}
                                for h in hits])  # fmt: skip

    tests = [
        finding_alerts("NodeledgerShardingNotHappening", "sharding not happening", 399, "critical",
                       {"box-a"}),
        finding_alerts("NodeledgerCardAbovePlan", "above plan", 399, "warning", {"box-a"}),
        finding_alerts("NodeledgerExtraContexts", "extra contexts", 399, "warning", {"box-c"}),
        finding_alerts("NodeledgerDeadOwnerMemory", "idle: owner dead", 399, "critical", {"box-b"}),
        case("NodeledgerHostRamTight", 300, [{"instance": "box-d", "job": "nodeledger",
                                              "severity": "warning"}]),
        case("NodeledgerSwapInUse", 399, [{"instance": "box-d", "job": "nodeledger",
                                           "severity": "warning"}]),
        case("NodeledgerLifeboatCardTaken", 399, [{"instance": "box-d", "job": "nodeledger",
                                                   "card": "7", "severity": "warning"}]),
        case("NodeledgerLifeboatCardTaken", 100, []),  # on it since 10 s: not yet 5 min
        case("NodeledgerShardingNotHappening", 60, []),  # not yet 1 min
        case("NodeledgerHostRamTight", 60, []),  # tight since 30 s: not yet 2 min
    ]  # fmt: skip
    down = {"job": "nodeledger", "severity": "critical"}
    tests.append(case("NodeledgerExporterDown", 300, [{"instance": "box-e", **down}]))
    # box-f's last sample leaves the 5 min lookback at 306 s; held 2 min: firing from 426 s
    # (the recorded boxes' last samples, at 399 s, are still within the lookback at 460 s)
    tests.append(case("NodeledgerExporterDown", 420, [{"instance": "box-e", **down}]))
    tests.append(case("NodeledgerExporterDown", 460, [{"instance": "box-e", **down},
                                                      {"instance": "box-f", **down}]))  # fmt: skip
    tests.append(case("NodeledgerExportersAbsent", 460, []))
    # no nodeledger target at all (the scrape job is missing): absent(up{job=~"nodeledger.*"})
    none = [{"series": 'up{instance="n1:9100",job="node"}', "values": "1x400"}]
    absent = [case("NodeledgerExportersAbsent", 200, []),  # 5 min not yet held
              case("NodeledgerExportersAbsent", 399, [{"severity": "critical"}])]  # fmt: skip
    spec = {"rule_files": [str(rules)], "evaluation_interval": "1s",
            "tests": [{"interval": "1s", "input_series": series, "alert_rule_test": tests},
                      {"interval": "1s", "input_series": none, "alert_rule_test": absent}]}  # fmt: skip
    f = tmp_path / "test.yml"
    f.write_text(yaml.safe_dump(spec, width=10**9))
    proc = subprocess.run([PROMTOOL, "test", "rules", str(f)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def test_cli_prints_rules_and_dashboard():
    proc = run_cli("exporter", "--rules")
    assert proc.returncode == 0 and proc.stdout == P.rules_text()
    proc = run_cli("exporter", "--dashboard")
    assert proc.returncode == 0
    d = json.loads(proc.stdout)
    assert d["uid"] == "nodeledger-overview" and len(d["panels"]) == len(P.PANELS)


def test_rules_file_ships_with_the_package():
    assert Path(P.RULES_FILE).is_file()


def test_every_alert_has_a_runbook_url_into_the_reference():
    readme = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", readme, re.M)
    }  # GitHub's heading anchors
    alerts = [r for r in P._rules() if "alert" in r]
    assert len(alerts) >= 10
    for r in alerts:
        url = r["annotations"].get("runbook_url", "")
        path, _, anchor = url.partition("#")
        assert path == "docs/reference.md" and anchor in anchors, (r["alert"], url)


def test_dashboard_filters_by_host_and_says_what_it_needs():
    """Each per-host panel follows $instance (the card utilisation one did not); panels that
    plot recording rules say they need them; host RAM plots the page cache the exporter serves."""
    d = P.dashboard()
    panels = {p["title"]: p for p in d["panels"]}
    util = panels["Card utilisation"]["targets"]
    assert {t["expr"].split("{")[0] for t in util} == {
        "DCGM_FI_DEV_GPU_UTIL", "gpu_gfx_activity", "npu_chip_info_utilization"}  # fmt: skip
    for p in d["panels"]:
        if p["title"].startswith("Across hosts"):
            continue
        for t in p["targets"]:
            assert 'instance=~"$instance"' in t["expr"], (p["title"], t["expr"])
    recorded = P.recorded_names()
    for p in d["panels"]:
        uses = {n for t in p["targets"] for n in P.names_in(t["expr"])} & recorded
        if uses:
            assert "Empty unless the recording rules are loaded" in p.get("description", ""), p[
                "title"
            ]
            assert all(n in p["description"] for n in uses), p["title"]
    ram = [t["expr"] for t in panels["Host RAM and page cache"]["targets"]]
    assert 'nodeledger_host_page_cache_bytes{instance=~"$instance"}' in ram
    assert "nodeledger_host_page_cache_bytes" in P.metric_names()
