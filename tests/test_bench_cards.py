"""Card parts of the bench: without torch or cards they are unavailable (not failed); the host
facts they use (NUMA CPU sets, PCIe links from sysfs, bus ids); with CPU torch the code paths
run (copies, collectives over gloo, allocation) — no card figures are claimed from them."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from nodeledger.bench import cards as C
from nodeledger.bench import disk as D
from nodeledger.bench.suite import run_bench
from nodeledger.machine import resolve_machine
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import (
    Accelerator,
    Host,
    Interconnect,
    Link,
    LinkKind,
    MachineProfile,
    NumaNode,
)

HAS_TORCH = importlib.util.find_spec("torch") is not None
TINY_DISK = D.DiskSizes(2 * D.MiB, 0.05, threads=2)
TINY_CARDS = C.CardSizes(1 * C.MiB, 2, (1 * C.MiB,), 2, 1, 60.0)


def test_card_parts_unavailable_without_torch_or_cards(tmp_path):
    rep = run_bench(quick=True, dataset=tmp_path, cache=tmp_path, disk_sizes=TINY_DISK,
                    profile=resolve_machine("k100-ai-8x64g"))  # fmt: skip
    c = rep["cards"]
    be, why = C.load_backend()
    if be is not None:
        pytest.skip(f"torch sees cards here ({be.label}): the card parts run for real")
    assert c["status"] == "unavailable" and c["reason"] == why
    assert why.startswith("needs torch") or why.startswith("needs a card visible to torch")
    card_figs = [f for f in rep["figures"] if f["part"] != "disk"]
    assert {f["part"] for f in card_figs} == {"host_card", "peer", "collective", "memory"}
    assert all(
        f["verdict"] == "unavailable" and f["evidence"].startswith("unavailable: needs")
        for f in card_figs
    )
    assert rep["counts"]["unavailable"] == 4 and rep["counts"]["bad"] == 0


def test_cpulist_and_binding_sets(tmp_path):
    assert C.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert C.parse_cpulist("") == set()
    nodes = {0: {0, 1}, 1: {2, 3}, 2: {4, 5}}
    root = Runner(root=tmp_path)
    d = tmp_path / "sys/devices/system/node/node0"
    d.mkdir(parents=True)
    (d / "distance").write_text("10 21 32\n")
    local, remote, rnode, why = C.binding_sets(0, nodes, {0, 1, 2, 3, 4, 5}, root)
    assert (local, remote, rnode, why) == ({0, 1}, {4, 5}, 2, "")  # the farthest node
    local, remote, rnode, why = C.binding_sets(0, nodes, {0, 1, 2}, root)
    assert rnode == 1 and remote == {2}  # node 2's CPUs are not ours
    assert C.binding_sets(None, nodes, {0}, root)[3] == "the card's NUMA node is unknown"
    assert "no CPU of NUMA node 1" in C.binding_sets(1, nodes, {0}, root)[3]
    assert "one NUMA node only" in C.binding_sets(0, {0: {0}}, {0}, root)[3]


def test_numa_cpus_from_profile_else_sysfs(tmp_path):
    p = MachineProfile(
        name="x", host=Host(numa_nodes=[NumaNode(id=0, cpus="0-1"), NumaNode(id=1, cpus="2-3")])
    )
    assert C.numa_cpus(p) == {0: {0, 1}, 1: {2, 3}}
    d = tmp_path / "sys/devices/system/node/node3"
    d.mkdir(parents=True)
    (d / "cpulist").write_text("4-5\n")
    assert C.numa_cpus(MachineProfile(name="y"), Runner(root=tmp_path)) == {3: {4, 5}}


def test_bus_ids_and_pcie_link_from_sysfs(tmp_path):
    assert pci_address("00000000:04:00.0") == "0000:04:00.0"
    assert pci_address("04:00.0") == "0000:04:00.0"
    assert pci_address("0000:B5:00") == "0000:b5:00.0"
    assert pci_address(None) is None
    port = tmp_path / "sys/devices/pci0000:00/0000:00:01.0"
    dev = port / "0000:04:00.0"
    dev.mkdir(parents=True)
    for name, text in (("max_link_speed", "16.0 GT/s PCIe"), ("max_link_width", "16"),
                       ("current_link_speed", "2.5 GT/s PCIe"), ("current_link_width", "16")):  # fmt: skip
        (dev / name).write_text(text + "\n")
    (port / "max_link_speed").write_text("8.0 GT/s PCIe\n")  # a Gen3 slot
    (port / "max_link_width").write_text("16\n")
    bus = tmp_path / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    os.symlink(dev, bus / "0000:04:00.0")
    link = C.pcie_link("00000000:04:00.0", Runner(root=tmp_path))
    assert (link["max_gts"], link["max_width"], link["cur_gts"], link["cur_width"]) == (
        8.0,
        16,
        2.5,
        16,
    )
    assert "port above" in link["source"]
    assert C.pcie_link("0000:99:00.0", Runner(root=tmp_path))["max_gts"] is None


def _two_node_box() -> MachineProfile:
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    a, b = cpus[:half], cpus[half:] or cpus[:half]
    return MachineProfile(
        name="test-box",
        accelerators=[Accelerator(index=0, vendor="nvidia", product="NVIDIA H100 80GB HBM3", numa_node=0),
                      Accelerator(index=1, vendor="nvidia", product="NVIDIA H100 80GB HBM3", numa_node=1)],
        interconnect=Interconnect(default=Link(kind=LinkKind.nvlink, lanes=18, label="NV18")),
        host=Host(numa_nodes=[NumaNode(id=0, cpus=",".join(map(str, a))),
                              NumaNode(id=1, cpus=",".join(map(str, b)))]),
    )  # fmt: skip


@pytest.mark.skipif(
    not HAS_TORCH, reason="torch not installed (the bench extra): CPU code paths not run"
)
def test_card_code_paths_on_cpu_torch(tmp_path):
    """CPU tensors stand in for cards: every card code path runs (binding, copies, peer matrix,
    gloo collectives in two worker processes, allocation); the figures are not card figures."""
    rep = run_bench(quick=True, dataset=tmp_path, cache=tmp_path, disk_sizes=TINY_DISK,
                    card_sizes=TINY_CARDS, profile=_two_node_box(), backend_kind="cpu")  # fmt: skip
    from pydantic import TypeAdapter

    from nodeledger.bench.usecase import BenchJSON

    TypeAdapter(BenchJSON).validate_json(json.dumps({"schema_version": 1, **rep}), strict=True)
    c = rep["cards"]
    assert c["status"] == "measured" and c["backend"].endswith("cpu")
    hc = c["host_card"][0]
    assert {"pinned_local", "pageable_local"} <= set(hc) and hc["numa_node"] == 0
    if len(os.sched_getaffinity(0)) >= 2:
        assert hc["remote_node"] == 1 and "pinned_remote" in hc
    assert [(p["src"], p["dst"], p["link"], p["link_gbps"]) for p in c["peer"]] == [
        (0, 1, "nvlink", 450.0), (1, 0, "nvlink", 450.0)]  # fmt: skip
    ops = {(r["op"], r["n"]) for r in c["collectives"]}
    assert ops == {("all_reduce", 2), ("all_gather", 2)}
    for r in c["collectives"]:
        assert r["busbw_gbps"] == pytest.approx(
            r["algbw_gbps"] * (1.0 if r["op"] == "all_reduce" else 0.5)
        )
    parts = {f["part"] for f in rep["figures"]}
    assert {"host_card", "peer", "collective", "memory"} <= parts
    coll = [f for f in rep["figures"] if f["part"] == "collective"]
    assert all("NV18" in f["source"] for f in coll)  # judged against the weakest link, 450 GB/s


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed (the bench extra)")
def test_collective_worker_failure_is_reported(monkeypatch):
    res, err = C.run_collectives("cpu", [0, 1], C.CardSizes(1024, 1, (1024,), 1, 0, 0.01))
    assert res == [] and "timed out" in err
