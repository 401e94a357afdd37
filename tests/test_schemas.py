"""Every JSON Schema shipped in nodeledger/schemas is the one its types generate, and real
outputs validate against those types (a key renamed or retyped fails here).  After a deliberate
change to a type, rewrite the shipped files with ``python tests/test_schemas.py --write``."""

from __future__ import annotations

import importlib
import json
import sys
from importlib import resources
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from conftest import cli_json
from nodeledger.verdict.assess import SCHEMA_VERSION, FitJSON

SCHEMAS = Path(__file__).resolve().parents[1] / "src" / "nodeledger" / "schemas"
# shipped file's stem -> "module:function" that generates it (a function returning several
# schemas by stem: "module:function[stem]")
GENERATORS = {
    "fit": "nodeledger.verdict.assess:fit_json_schema",
    "doctor": "nodeledger.doctor.usecase:doctor_json_schemas[doctor]",
    "doctor-preflight": "nodeledger.doctor.usecase:doctor_json_schemas[doctor-preflight]",
    "report": "nodeledger.report.usecase:capacity_json_schema",
    "place": "nodeledger.placement.usecase:place_json_schema",
    "model": "nodeledger.report.model_summary:model_json_schema",
    "machine": "nodeledger.report.machines:machine_json_schema",
    "compare": "nodeledger.report.compare:compare_json_schema",
    "oom": "nodeledger.triage.report:oom_json_schema",
    "watch": "nodeledger.watch.session:watch_json_schema",
    "golive": "nodeledger.golive.checklist:golive_json_schema",
    "bench": "nodeledger.bench.usecase:bench_json_schema",
    "collective": "nodeledger.report.machines:collective_json_schema",
    "fleet": "nodeledger.fleet.table:fleet_json_schema",
    "catalogue": "nodeledger.verdict.catalogue:catalogue_json_schema",
    "machine-list": "nodeledger.report.machines:list_json_schemas[machine-list]",
    "model-list": "nodeledger.report.machines:list_json_schemas[model-list]",
    "run-list": "nodeledger.placement.reserve:run_json_schemas[run-list]",
    "run-release": "nodeledger.placement.reserve:run_json_schemas[run-release]",
}


def generated(stem: str) -> dict:
    where, _, key = GENERATORS[stem].partition("[")
    module, fn = where.split(":")
    out = getattr(importlib.import_module(module), fn)()
    return json.loads(json.dumps(out[key.rstrip("]")] if key else out))


def shipped_schema(stem: str) -> dict:
    return json.loads(
        resources.files("nodeledger.schemas").joinpath(f"{stem}.schema.json").read_text()
    )


@pytest.mark.parametrize("stem", sorted(GENERATORS))
def test_the_shipped_schema_is_generated_from_the_types(stem):
    assert shipped_schema(stem) == generated(stem), (
        f"{stem}.schema.json differs from its types: python tests/test_schemas.py --write"
    )


def test_every_shipped_schema_has_its_generator():
    assert sorted(p.name[: -len(".schema.json")] for p in SCHEMAS.glob("*.schema.json")) == sorted(
        GENERATORS
    )


@pytest.mark.parametrize("args", [
    ("llama-3.1-8b", "--job", "serve", "--machine", "dgx-h100", "--engine", "vllm"),
    ("llama-3.1-70b", "--job", "lora", "--machine", "hgx-h200", "--search"),
    ("qwen3-8b", "--job", "train", "--machine", "k100-ai-8x64g"),
    ("llama-3.1-8b", "--job", "load", "--machine", "8x-rtx4090"),
])  # fmt: skip
def test_fit_json_validates_against_its_types(args):
    d = cli_json("fit", *args, "--no-fail")
    assert d["schema_version"] == SCHEMA_VERSION
    TypeAdapter(FitJSON).validate_json(json.dumps(d), strict=True)  # no coercion: types as printed


def test_a_changed_key_fails_validation():
    d = cli_json("fit", "llama-3.1-8b", "--machine", "dgx-h100", "--no-fail")
    for key, bad in (("peak_bytes", "a lot"), ("peak_bytes", "123"), ("capacity_bytes", 1.5)):
        broken = json.loads(json.dumps(d))
        broken["host"][key] = bad
        with pytest.raises(ValidationError):
            TypeAdapter(FitJSON).validate_json(json.dumps(broken), strict=True)
    renamed = json.loads(json.dumps(d))
    renamed["host"]["peak"] = renamed["host"].pop("peak_bytes")
    with pytest.raises(ValidationError):
        TypeAdapter(FitJSON).validate_json(json.dumps(renamed), strict=True)


# -- doctor --------------------------------------------------------------------------------------


def test_doctor_json_validates_against_its_types():
    from conftest import run_cli
    from nodeledger.doctor.usecase import SCHEMA_VERSION as V
    from nodeledger.doctor.usecase import DoctorChecksJSON, PreflightJSON

    checks = json.loads(run_cli("doctor", "--json").stdout)  # this host, read-only
    assert checks["schema_version"] == V and checks["checks"]
    TypeAdapter(DoctorChecksJSON).validate_json(json.dumps(checks), strict=True)
    for args in (("llama-3.1-8b", "--job", "serve", "--machine", "dgx-h100"),
                 ("qwen3-8b", "--job", "train", "--machine", "k100-ai-8x64g")):  # fmt: skip
        pre = json.loads(run_cli("doctor", *args, "--json", "--no-fail").stdout)
        assert pre["schema_version"] == V
        TypeAdapter(PreflightJSON).validate_json(json.dumps(pre), strict=True)
    broken = dict(checks, worst="fine")  # a severity doctor never prints
    with pytest.raises(ValidationError):
        TypeAdapter(DoctorChecksJSON).validate_json(json.dumps(broken), strict=True)


# -- report --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "machine", ["k100-ai-8x64g", "dgx-h100", "8x-rtx4090", "4x-a100-80g-pcie", "8x-ascend-910b"]
)
def test_report_json_validates_against_its_types(machine):
    from conftest import run_cli
    from nodeledger.report.usecase import SCHEMA_VERSION as V
    from nodeledger.report.usecase import CapacityJSON

    d = json.loads(run_cli("report", "--machine", machine, "--format", "json", "--no-fail").stdout)
    assert d["schema_version"] == V
    TypeAdapter(CapacityJSON).validate_json(json.dumps(d), strict=True)
    broken = json.loads(json.dumps(d))
    broken["workloads"][0]["tier_name"] = "maybe"
    with pytest.raises(ValidationError):
        TypeAdapter(CapacityJSON).validate_json(json.dumps(broken), strict=True)


# -- place ---------------------------------------------------------------------------------------

PLAN = """[[workloads]]
id = "chat"
model = "qwen3-8b"
job = "serve"
replicas = 2
context = 4096
concurrency = 4

[[workloads]]
id = "big"
model = "llama-3.1-70b"
job = "serve"
tp = 8
"""


@pytest.mark.parametrize("extra", [(), ("--emit", "k8s", "--image", "registry/x:1")])
def test_place_json_validates_against_its_types(tmp_path, extra):
    from conftest import run_cli
    from nodeledger.placement.usecase import SCHEMA_VERSION as V
    from nodeledger.placement.usecase import PlaceJSON

    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    out = ("-o", str(tmp_path / "k8s")) if extra else ()
    p = run_cli("place", str(plan), "--machine", "dgx-h100", "--json", *extra, *out)
    d = json.loads(p.stdout)
    assert d["schema_version"] == V and d["replicas"], p.stderr
    assert d["not_placed"], "the 70B at TP8 does not fit beside the lifeboat: a not-placed row"
    TypeAdapter(PlaceJSON).validate_json(json.dumps(d), strict=True)


# -- model show, machine show ----------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("qwen3-8b",), ("deepseek-v3", "--dtype", "fp8"), ("qwen3-30b-a3b",),
    ("tests/fixtures/models/Nemotron-H-8B-Base-8K",),
])  # fmt: skip
def test_model_show_json_validates_against_its_types(args):
    from nodeledger.report.model_summary import SCHEMA_VERSION as MODEL_VERSION
    from nodeledger.report.model_summary import ModelJSON

    d = cli_json("model", "show", *args)
    assert d["schema_version"] == MODEL_VERSION
    TypeAdapter(ModelJSON).validate_json(json.dumps(d), strict=True)
    broken = json.loads(json.dumps(d))
    broken["params"]["total"] = str(broken["params"]["total"])
    with pytest.raises(ValidationError):
        TypeAdapter(ModelJSON).validate_json(json.dumps(broken), strict=True)


@pytest.mark.parametrize("name", ["k100-ai-8x64g", "dgx-h100", "8x-ascend-910b"])
def test_machine_show_json_follows_its_schema_and_its_profile_reads_back(name):
    jsonschema = pytest.importorskip("jsonschema")
    from nodeledger.machine.profile import MachineProfile, validate
    from nodeledger.report.machines import machine_json_schema

    d = cli_json("machine", "show", name, "--json")
    jsonschema.validate(d, machine_json_schema())
    profile = {k: v for k, v in d.items() if k not in ("device_identity", "card_figures")}
    assert validate(MachineProfile, profile).name == name
    broken = dict(d, accelerators=[dict(d["accelerators"][0], memory_bytes="64 GB")])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, machine_json_schema())


# -- compare -------------------------------------------------------------------------------------


def test_compare_json_follows_its_shipped_schema_and_each_report_its_body_type():
    jsonschema = pytest.importorskip("jsonschema")
    from nodeledger.report.compare import SCHEMA_VERSION as COMPARE_VERSION
    from nodeledger.report.compare import CompareJSON
    from nodeledger.report.usecase import ReportBodyJSON

    shipped = shipped_schema("compare")
    d = cli_json("compare", "4x-a100-80g-pcie", "8x-a40-48g-pcie", "--price",
                 "4x-a100-80g-pcie=60000", "--format", "json")  # fmt: skip
    assert d["schema_version"] == COMPARE_VERSION
    jsonschema.validate(d, shipped)
    TypeAdapter(CompareJSON).validate_json(json.dumps(d), strict=True)
    for rep in d["reports"].values():
        TypeAdapter(ReportBodyJSON).validate_json(json.dumps(rep), strict=True)
    broken = json.loads(json.dumps(d))
    broken["machines"][0]["cards"] = "4"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, shipped)


# -- oom -----------------------------------------------------------------------------------------


def _oom_logs() -> list[str]:
    from conftest import SHARED

    here = sorted(str(p) for p in (Path(__file__).parent / "fixtures" / "oom").iterdir())
    real = SHARED / "fixtures" / "real"
    there = sorted(str(p) for d in ("oom-kernel", "oom-accel") if (real / d).is_dir()
                   for p in (real / d).iterdir() if p.suffix in (".txt", ".log"))  # fmt: skip
    return here + there


def test_oom_json_follows_its_shipped_schema_on_every_recorded_log():
    from conftest import run_cli
    from nodeledger.triage.report import SCHEMA_VERSION as OOM_VERSION
    from nodeledger.triage.report import OomJSON

    logs = _oom_logs()
    assert len(logs) >= 10
    kinds = set()
    for log in logs:
        proc = run_cli("oom", "--no-kernel-log", log, "--json")
        assert proc.returncode in (0, 1, 3), (log, proc.stderr)
        d = json.loads(proc.stdout)
        assert d["schema_version"] == OOM_VERSION
        TypeAdapter(OomJSON).validate_json(proc.stdout, strict=True)
        kinds |= {i["kind"] for i in d["incidents"]}
    assert len(kinds) >= 3, kinds  # host- and card-side kinds among them


# -- watch ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["fsdp-sharded", "fsdp-unsharded", "dead-owner",
                                      "remote-numa", "extra-contexts", "two-loads"])  # fmt: skip
def test_watch_json_follows_its_types_and_its_shipped_schema(scenario):
    from conftest import run_cli
    from nodeledger.watch.session import SCHEMA_VERSION as WATCH_VERSION
    from nodeledger.watch.session import WatchJSON

    proc = run_cli("watch", "--backend", f"fake:{scenario}", "--json")
    assert proc.returncode in (0, 1, 3), proc.stderr
    d = json.loads(proc.stdout)
    assert d["schema_version"] == WATCH_VERSION and d["exit_code"] == proc.returncode
    TypeAdapter(WatchJSON).validate_json(proc.stdout, strict=True)
    host = d["host"]
    assert host["mem_total_bytes"] > 0 and "mem_total" not in host  # units in the key names


# -- golive --------------------------------------------------------------------------------------


def test_golive_json_follows_its_types_and_its_shipped_schema(tmp_path):
    from conftest import run_cli
    from nodeledger.golive.checklist import SCHEMA_VERSION as GOLIVE_VERSION
    from nodeledger.golive.checklist import GoLiveJSON
    from test_golive import PLAN7, _bench_json

    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN7)
    ok = [{"part": "disk", "subject": "d", "metric": "sequential read", "value": 900.0,
           "unit": "MB/s", "verdict": "ok", "expected": "e", "source": "s", "evidence": ""}]  # fmt: skip
    proc = run_cli("golive", "--machine", "dgx-h100", "--plan", str(plan), "--allow-unavailable",
                   "doctor", "--allow-unavailable", "cards", "--allow-unavailable", "drill",
                   "--bench-json", str(_bench_json(tmp_path, ok)), "--json",
                   env={"NODELEDGER_STATE": str(tmp_path / "state.sqlite")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["schema_version"] == GOLIVE_VERSION and [s["id"] for s in d["steps"]] == [
        "doctor", "cards", "bench", "plan", "drill"]  # fmt: skip
    TypeAdapter(GoLiveJSON).validate_json(proc.stdout, strict=True)


def test_the_catalogue_schema_is_shipped_and_the_default_catalogue_follows_it():
    """A workload catalogue's types (verdict.catalogue.CatalogueFile) give editors a JSON Schema;
    the bundled default, read without pydantic at a cold start, validates against both."""
    import tomllib

    from nodeledger.verdict.catalogue import (
        default_catalogue_text,
        parse_catalogue,
    )

    shipped = shipped_schema("catalogue")
    text = default_catalogue_text()
    assert parse_catalogue(text, "d", trusted=True) == parse_catalogue(text, "d")
    jsonschema = pytest.importorskip("jsonschema")
    data = tomllib.loads(text)
    jsonschema.validate(data, shipped)
    entry = data["workloads"][0]
    for broken in ({**entry, "tp": "2"}, {**entry, "contxt": 4096}, {**entry, "job": "fly"},
                   {**entry, "machines": 0}):  # fmt: skip
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"workloads": [broken]}, shipped)


@pytest.mark.parametrize("args", [
    ("collective", "--machine", "dgx-h100"),  # every figure known
    ("collective", "--machine", "k100-ai-8x64g"),  # link bandwidth unknown: null and the reason
    ("collective", "--machine", "hgx-h200", "--machines", "2", "--op", "all_gather"),
    ("collective", "--machine", "dgx-h100", "--cards", "0"),  # one rank
])  # fmt: skip
def test_collective_json_follows_its_types_and_shipped_schema(args):
    from nodeledger.report.machines import (
        COLLECTIVE_SCHEMA_VERSION,
        CollectiveJSON,
    )

    d = cli_json(*args, "--json")
    assert d["schema_version"] == COLLECTIVE_SCHEMA_VERSION
    TypeAdapter(CollectiveJSON).validate_json(json.dumps(d), strict=True)
    with pytest.raises(ValidationError):
        TypeAdapter(CollectiveJSON).validate_json(json.dumps({**d, "ranks": "8"}), strict=True)


def test_machine_list_and_model_list_json_follow_their_types():
    from nodeledger.report.machines import LIST_SCHEMA_VERSION, MachineListJSON, ModelListJSON

    for args, tp in ((("machine", "list"), MachineListJSON), (("model", "list"), ModelListJSON)):
        d = cli_json(*args, "--json")
        assert d["schema_version"] == LIST_SCHEMA_VERSION
        TypeAdapter(tp).validate_json(json.dumps(d), strict=True)
    machines = cli_json("machine", "list", "--json")["machines"]
    assert [m["name"] for m in machines if m["default"]] == ["k100-ai-8x64g"]


def test_run_list_and_release_json_follow_their_types(tmp_path):
    import subprocess
    import sys

    from conftest import run_cli
    from nodeledger.placement.reserve import (
        RUN_SCHEMA_VERSION,
        RunListJSON,
        RunReleaseJSON,
        Store,
    )

    state = tmp_path / "state.sqlite"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        store = Store(str(state))
        with store.transaction() as cur:
            cur.execute(
                "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?, ?)",
                (3, "box", "chat#1", holder.pid, None, 1.7e9, 2**30),
            )
        store.close()
        listed = json.loads(run_cli("run", "--state", str(state), "--list", "--json").stdout)
        assert listed["schema_version"] == RUN_SCHEMA_VERSION
        TypeAdapter(RunListJSON).validate_json(json.dumps(listed), strict=True)
        assert [r["replica"] for r in listed["reservations"]] == ["chat#1"]
        out = run_cli("run", "--state", str(state), "--release", "chat#1", "--json").stdout
        released = json.loads(out)
        TypeAdapter(RunReleaseJSON).validate_json(json.dumps(released), strict=True)
        assert released["still_running_pids"] == [holder.pid]
    finally:
        holder.kill()
        holder.wait()


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    for stem in sorted(GENERATORS):
        text = json.dumps(generated(stem), indent=2, sort_keys=True) + "\n"
        (SCHEMAS / f"{stem}.schema.json").write_text(text, encoding="utf-8")
        print(f"wrote {stem}.schema.json")
