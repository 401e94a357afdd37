"""`nodeledger bench` end to end on this machine: the disk bench runs, the card parts are
unavailable (not failed) without torch or cards, exit 0; rendering; bad input exits 2."""

from __future__ import annotations

import io
import json

import pytest

from conftest import SHARED, run_cli
from nodeledger.golive import checklist as G

NCCL = (
    SHARED
    / "fixtures"
    / "real"
    / "nccl-tests"
    / "superbench-8x-a100-sxm4-40gb-allreduce-oldformat.txt"
)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    ds = tmp_path_factory.mktemp("dataset")
    args = ["bench", "--quick", "--dataset", str(ds), "--cache", str(ds)]
    if NCCL.is_file():
        args += ["--compare-nccl", str(NCCL)]
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), ds


def test_bench_quick_runs_the_disk_part(quick):
    d, ds = quick
    assert d["quick"] is True and d["sizes"]["disk"].startswith("128 MiB test file")
    first, second = d["disk"]
    assert (
        first["label"] == "dataset"
        and first["tested_in"] == str(ds)
        and first["how"] == "--dataset"
    )
    assert first["status"] == "measured" and first["raw"]["sequential_mbps"] > 0
    assert first["page_cache"].startswith(("bypassed", "dropped", "not bypassed"))
    assert first["kind"] in ("nvme", "ssd", "hdd", "network", "unknown") and first["kind_source"]
    assert second["label"] == "model cache" and second["shared_with"] == "dataset"
    disk = [f for f in d["figures"] if f["part"] == "disk"]
    assert len(disk) == 7  # 3 per folder + the cache beside the working directory
    assert all(f["verdict"] in ("ok", "low", "bad", "unknown") for f in disk)
    assert all(f["expected"] for f in disk)
    assert list(ds.iterdir()) == []  # the test file is gone
    assert d["seconds"] < 60


def test_bench_card_parts_unavailable_not_failed(quick):
    d, _ = quick
    c = d["cards"]
    if c["status"] == "measured":
        pytest.skip(f"torch sees cards here ({c['backend']})")
    assert c["reason"].startswith("needs")
    card = [f for f in d["figures"] if f["part"] in ("host_card", "peer", "memory")]
    assert card and all(f["verdict"] == "unavailable" for f in card)


def test_bench_compare_nccl_without_cards(quick):
    d, _ = quick
    if not NCCL.is_file():
        pytest.skip(f"../shared nccl-tests recordings not present at {NCCL}")
    n = d["nccl_tests"]
    assert n["collective"] == "all_reduce" and n["n"] == 8 and n["rows"] == 34
    assert n["peak"]["busbw_gbps"] == 235.26 and n["comparison"] == []
    figs = [f for f in d["figures"] if f["subject"].startswith("nccl-tests")]
    assert figs[0]["metric"].startswith("all_reduce peak busbw") and figs[0]["value"] == 235.26
    assert any("nothing of nodeledger's to compare" in f["evidence"] for f in figs)


def test_bench_renders_terminal_and_golive_bench_step(quick):
    from rich.console import Console

    from nodeledger.cli.bench import render_bench

    d, _ = quick
    buf = io.StringIO()
    render_bench(d, Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert "bench on" in out and "Figures" in out and "sequential read" in out
    assert "same filesystem as the dataset: measured once" in out
    assert "sources:" in out and "[1]" in out
    if d["cards"]["status"] == "unavailable":
        assert "unavailable: cards — Host <-> card copies" in out
    s = G.bench_step(d, "test")
    assert s["status"] in ("pass", "fail")


def test_bench_bad_input():
    for args, msg in ((["--cards", "a,b"], "--cards"), (["--cards", "3-1"], "--cards"),
                      (["--dataset", "/nonexistent/ds"], "--dataset"), (["--cache", "/nonexistent/c"], "--cache")):  # fmt: skip
        proc = run_cli("bench", "--quick", *args)
        assert proc.returncode == 2 and msg in proc.stderr and len(proc.stderr.splitlines()) == 1, (
            proc.stderr
        )


def test_doctor_step_on_this_host():
    from nodeledger.doctor import load_state

    s = G.doctor_step(load_state())
    assert s["status"] in ("pass", "fail") and s["evidence"]
    assert len(s["details"]["findings"]) >= 10


def test_bench_json_follows_its_types_and_shipped_schema(quick):
    """`bench --json` (here: disks measured, cards unavailable, nccl-tests compared where the
    recorded file is present) validates strictly against bench.usecase.BenchJSON and against the
    shipped schema (which test_schemas.py checks is the one the types generate)."""
    from importlib import resources

    from pydantic import TypeAdapter, ValidationError

    from nodeledger.bench.usecase import SCHEMA_VERSION, BenchJSON

    d, _ = quick
    assert d["schema_version"] == SCHEMA_VERSION
    TypeAdapter(BenchJSON).validate_json(json.dumps(d), strict=True)
    if NCCL.is_file():
        assert d["nccl_tests"]["avg_busbw_gbps"] is not None
    shipped = json.loads(
        resources.files("nodeledger.schemas").joinpath("bench.schema.json").read_text()
    )
    broken = dict(d, figures=[dict(d["figures"][0], verdict="great")])
    with pytest.raises(ValidationError):
        TypeAdapter(BenchJSON).validate_json(json.dumps(broken), strict=True)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(d, shipped)
