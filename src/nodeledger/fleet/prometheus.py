"""Prometheus rules and a Grafana dashboard over the metrics `nodeledger exporter` serves, and
the recording of the exporter's own output as `promtool test rules` input series.

1. The rules are a data file (rules.yml beside this module, with the sources of its
   thresholds); `nodeledger exporter --rules` prints it.
2. The dashboard is built here from a list of panels; each panel's PromQL uses only the
   exporter's metric names (``metric_names``), the rules' recorded names and ``up``; a test
   checks that and `promtool` parses every expression.
3. ``record_series`` turns the exporter's scrapes (its text exposition, sample after sample)
   into promtool's ``input_series`` notation, so the rules are tested on what the exporter
   really writes, not on series typed by hand.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

RULES_FILE = Path(__file__).with_name("rules.yml")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# PromQL words that look like metric names in an expression
_KEYWORDS = {
    "sum", "count", "avg", "min", "max", "by", "without", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "rate", "irate", "increase", "time", "topk",
    "bottomk", "label_replace", "clamp_min", "clamp_max", "absent", "offset", "bool",
    "max_over_time", "min_over_time", "avg_over_time", "changes", "count_over_time", "vector",
    "scalar", "instance", "job", "card", "rule", "cause", "to", "node", "pid", "process",
    "direction", "e", "inf", "nan", "le", "group", "gpu",
}  # fmt: skip


def rules_text() -> str:
    return RULES_FILE.read_text(encoding="utf-8")


def metric_names() -> set[str]:
    """Every series name the exporter can serve (counters with their ``_total``), for every
    vendor's names; from the exporter's own families, not a list kept by hand."""
    from nodeledger.watch.analyze import Analyzer
    from nodeledger.watch.exporter import families

    names: set[str] = set()
    for backend in ("nvidia-smi", "amd-smi", "npu-smi"):  # dcgm's, AMD's and Ascend's names
        header = {"backend": backend, "machine": {"cards": []}}
        for fam in families(None, header, Analyzer(header, None), {}):
            names.add(fam.name + ("_total" if fam.type == "counter" else ""))
    return names


@functools.lru_cache(maxsize=1)
def _rules() -> tuple[dict, ...]:
    """The shipped rules, parsed once: every rule of every group."""
    import yaml

    return tuple(r for g in yaml.safe_load(rules_text())["groups"] for r in g["rules"])


def recorded_names() -> set[str]:
    return {r["record"] for r in _rules() if "record" in r}


def rule_expressions() -> list[str]:
    return [r["expr"] for r in _rules()]


def names_in(expr: str) -> set[str]:
    """The metric names an expression reads: identifiers outside label matchers, strings,
    range selectors and Grafana ``$variables``."""
    text = re.sub(r'"[^"]*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\$\w+", "", text)
    text = re.sub(r"\bby\s*\([^)]*\)|\bon\s*\([^)]*\)|\bwithout\s*\([^)]*\)", "", text)
    found = set()
    for m in _NAME.finditer(text):
        word = m.group(0)
        prev = text[m.start() - 1] if m.start() else " "
        if word.lower() in _KEYWORDS or prev.isdigit() or word.isdigit():
            continue
        found.add(word)
    return found


# -- Grafana -----------------------------------------------------------------------------------


def _panel(pid: int, title: str, exprs: list[tuple[str, str]], unit: str, x: int, y: int,
           description: str = "", kind: str = "timeseries", w: int = 12, h: int = 8) -> dict:  # fmt: skip
    return {
        "id": pid, "type": kind, "title": title,
        **({"description": description} if description else {}),
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(65 + k), "expr": e, "legendFormat": leg}
                    for k, (e, leg) in enumerate(exprs)],
    }  # fmt: skip


NEEDS_RULES = ("Empty unless the recording rules are loaded into Prometheus "
               "(`nodeledger exporter --rules`): it plots {records}.")  # fmt: skip

# (title, [(PromQL, legend)], unit[, description])
PANELS = [
    ("Card memory: actual vs planned", [
        ('nodeledger_card_memory_used_bytes{instance=~"$instance"}', "{{instance}} card {{card}} used"),
        ('nodeledger_card_memory_planned_bytes{instance=~"$instance"}', "{{instance}} card {{card}} planned"),
    ], "bytes"),
    ("Card memory over plan", [
        ('nodeledger:card_memory_over_plan:bytes{instance=~"$instance"}', "{{instance}} card {{card}}"),
    ], "bytes", NEEDS_RULES.format(records="nodeledger:card_memory_over_plan:bytes")),
    ("Headroom before the card is above plan / tight / full", [
        ('nodeledger_card_headroom_bytes{instance=~"$instance"}', "{{instance}} card {{card}} to {{to}}"),
    ], "bytes"),
    ("Host RAM and page cache", [
        ('nodeledger_host_memory_total_bytes{instance=~"$instance"}', "{{instance}} total"),
        ('nodeledger_host_memory_available_bytes{instance=~"$instance"}', "{{instance}} available (incl. reclaimable page cache)"),
        ('nodeledger_host_page_cache_bytes{instance=~"$instance"}', "{{instance}} page cache (Cached + Buffers)"),
        ('nodeledger_host_swap_used_bytes{instance=~"$instance"}', "{{instance}} swap used"),
    ], "bytes", "/proc/meminfo: MemTotal, MemAvailable, Cached + Buffers, SwapTotal - SwapFree."),
    ("NUMA free", [
        ('nodeledger_host_numa_free_bytes{instance=~"$instance"}', "{{instance}} node {{node}}"),
    ], "bytes"),
    ("Card utilisation", [
        ('DCGM_FI_DEV_GPU_UTIL{instance=~"$instance"}', "{{instance}} gpu {{gpu}}"),
        ('gpu_gfx_activity{instance=~"$instance"}', "{{instance}} gpu {{gpu_id}}"),
        ('npu_chip_info_utilization{instance=~"$instance"}', "{{instance}} npu {{id}}"),
    ], "percent", "The vendor-named series as nodeledger serves them (dcgm-exporter's on NVIDIA "
     "and Hygon, AMD device-metrics-exporter's, Ascend npu-exporter's). Empty for a host whose "
     "exporter runs with --no-vendor-series: there the vendor's own exporter serves them, as "
     "another scrape target."),
    ("Memory per process", [
        ('nodeledger_process_card_memory_bytes{instance=~"$instance"}', "{{instance}} card {{card}} pid {{pid}} {{process}}"),
    ], "bytes"),
    ("Swap paging", [
        ('nodeledger:host_swap_pages:rate5m{instance=~"$instance"}', "{{instance}}"),
    ], "short", NEEDS_RULES.format(records="nodeledger:host_swap_pages:rate5m")),
    ("Findings (per box)", [
        ('nodeledger_finding{instance=~"$instance"} == 1', "{{instance}} card {{card}}: {{rule}} {{cause}}"),
    ], "short"),
    ("Across hosts: free cards, findings, host RAM available", [
        ("nodeledger:box_free_cards:count", "{{instance}} free cards"),
        ("nodeledger:box_findings:count", "{{instance}} findings"),
        ("nodeledger:host_memory_available:ratio", "{{instance}} host RAM available"),
    ], "short", NEEDS_RULES.format(records="nodeledger:box_free_cards:count, "
                                   "nodeledger:box_findings:count and "
                                   "nodeledger:host_memory_available:ratio")),
    ("Lifeboat cards", [
        ('nodeledger_lifeboat_card{instance=~"$instance"} * on (instance, job, card) group_left () nodeledger_card_memory_used_bytes',
         "{{instance}} lifeboat card {{card}} used"),
    ], "bytes", "Card memory in use on each lifeboat card (exporter --plan or --lifeboat); "
     "empty where no lifeboat is given."),
    ("Exporter up and sampling", [
        ('up{job=~"nodeledger.*", instance=~"$instance"}', "{{instance}} up"),
        ('time() - nodeledger_sample_timestamp_seconds{instance=~"$instance"}', "{{instance}} sample age"),
    ], "short"),
]  # fmt: skip


def dashboard() -> dict:
    """A Grafana dashboard (JSON model, schemaVersion 39) over the exporter's metrics: per host
    (the ``$instance`` variable) and across hosts."""
    panels = []
    for k, (title, exprs, unit, *desc) in enumerate(PANELS):
        panels.append(_panel(k + 1, title, exprs, unit, x=(k % 2) * 12, y=(k // 2) * 8,
                             description=desc[0] if desc else ""))  # fmt: skip
    return {
        "title": "nodeledger: card memory planned vs actual, host RAM, findings",
        "uid": "nodeledger-overview",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "tags": ["nodeledger"],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                },
                {
                    "name": "instance",
                    "type": "query",
                    "label": "host",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(nodeledger_samples_total, instance)",
                    "definition": "label_values(nodeledger_samples_total, instance)",
                    "includeAll": True,
                    "multi": True,
                    "refresh": 1,
                },
            ]
        },
        "panels": panels,
    }


def dashboard_text() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def dashboard_expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


# -- recorded series for promtool ------------------------------------------------------------


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def record_series(scrapes: list[str], labels: dict[str, str]) -> list[dict]:
    """Exposition texts, one per scrape interval -> promtool ``input_series`` items (each
    series' values in scrape order, ``_`` where a scrape lacks it), with ``labels`` (instance,
    job) added as Prometheus adds them at scrape time."""
    from prometheus_client.parser import text_string_to_metric_families

    rows: dict[str, list[str]] = {}
    for k, text in enumerate(scrapes):
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                lab = {**s.labels, **labels}
                key = s.name + "{" + ",".join(
                    f'{n}="{_escape(v)}"' for n, v in sorted(lab.items())
                ) + "}"  # fmt: skip
                vals = rows.setdefault(key, ["_"] * k)
                vals += ["_"] * (k - len(vals))
                vals.append(repr(float(s.value)) if s.value == s.value else "NaN")
    n = len(scrapes)
    return [{"series": key, "values": " ".join(v + ["_"] * (n - len(v)))}
            for key, v in sorted(rows.items())]  # fmt: skip
