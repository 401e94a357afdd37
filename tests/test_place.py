"""Placement: lifeboat, link-aware groups, NUMA binding, sharing, exports (exact text)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import replace

import pytest

from conftest import cli_json, run_cli
from nodeledger.machine import resolve_machine
from nodeledger.machine.profile import Interconnect, Link, LinkKind, LinkPair, NumaNode
from nodeledger.model import load_model
from nodeledger.placement import emit
from nodeledger.placement.planner import plan
from nodeledger.verdict.catalogue import parse_catalogue


def _plan(text: str, machine, **kw) -> dict:
    ws = parse_catalogue(text, "test plan")
    specs = {w.model: load_model(w.model)[0] for w in ws}
    return plan(machine, ws, specs, **kw)


EIGHT_TP1 = """
[[workloads]]
id = "chat"
model = "qwen3-8b"
job = "serve"
replicas = 8
context = 4096
concurrency = 4
"""


def sys_4090():
    m = resolve_machine("8x-rtx4090")
    return replace(
        m, **{"interconnect": Interconnect(default=Link(kind=LinkKind.sys, label="SYS"))}
    )


def numa_box(pairs: list[tuple[int, int]] | None = None, quads: bool = False):
    """8 x H100 with 2 NUMA nodes (cards 0-3 on node 0, 4-7 on node 1); links as asked."""
    m = resolve_machine("dgx-h100")
    cards = [replace(a, **{"numa_node": 0 if a.index < 4 else 1}) for a in m.accelerators]
    nodes = [
        NumaNode(id=0, cpus="0-15", memory_bytes=2**40),
        NumaNode(id=1, cpus="16-31", memory_bytes=2**40),
    ]
    host = replace(m.host, **{"numa_nodes": nodes})
    if quads:  # two fully linked quads, SYS between them
        lp = [
            LinkPair(a=a, b=b, kind=LinkKind.nvlink, lanes=4, label="NV4")
            for q in ((0, 1, 2, 3), (4, 5, 6, 7))
            for i, a in enumerate(q)
            for b in q[i + 1 :]
        ]
    else:
        lp = [
            LinkPair(a=a, b=b, kind=LinkKind.nvlink, lanes=4, label="NV4") for a, b in pairs or []
        ]
    inter = Interconnect(default=Link(kind=LinkKind.sys, label="SYS"), pairs=lp)
    return replace(m, **{"accelerators": cards, "host": host, "interconnect": inter})


@pytest.mark.parametrize("machine", ["dgx-h100", "k100-ai-8x64g", "sys-4090"])
def test_eight_tp1_become_seven_and_a_lifeboat(machine):
    m = sys_4090() if machine == "sys-4090" else resolve_machine(machine)
    text = EIGHT_TP1.replace('"qwen3-8b"', '"qwen3-0.6b"') if machine == "sys-4090" else EIGHT_TP1
    p = _plan(text, m)
    assert len(p["replicas"]) == 7 and len(p["lifeboat"]) == 1
    used = sorted(c for r in p["replicas"] for c in r["cards"])
    assert used == sorted(set(range(8)) - set(p["lifeboat"]))
    (left,) = p["not_placed"]
    assert left["binding"] == "cards" and left["replica"] == "chat#7"
    assert p["lifeboat_reason"].startswith(f"card {p['lifeboat'][0]}:")


TP4 = """
[[workloads]]
id = "big"
model = "qwen3-32b"
job = "serve"
tp = 4
context = 4096
concurrency = 4
"""


def test_tp4_lands_on_a_fully_linked_quad():
    p = _plan(TP4, numa_box(quads=True))
    (r,) = p["replicas"]
    assert sorted(r["cards"]) in ([0, 1, 2, 3], [4, 5, 6, 7])
    assert r["links"] == "6 pair(s) NV4"


def test_tp2_lands_on_an_nvlink_pair_and_lifeboat_breaks_no_pair():
    text = TP4.replace("tp = 4", "tp = 2").replace('id = "big"', 'id = "pair"') + "replicas = 3\n"
    text += '\n[[workloads]]\nid = "small"\nmodel = "qwen3-0.6b"\njob = "serve"\ncontext = 2048\n'
    p = _plan(text, numa_box(pairs=[(0, 1), (2, 3), (4, 5), (6, 7)]))
    pairs = [sorted(r["cards"]) for r in p["replicas"] if r["workload"] == "pair"]
    assert len(pairs) == 3 and all(c in ([0, 1], [2, 3], [4, 5], [6, 7]) for c in pairs)
    (small,) = [r for r in p["replicas"] if r["workload"] == "small"]
    # the small job and the lifeboat split the fourth pair: no NVLink pair is broken for TP2
    assert sorted([small["cards"][0], p["lifeboat"][0]]) in ([0, 1], [2, 3], [4, 5], [6, 7])
    assert "breaks no TP group" in p["lifeboat_reason"]


def test_cpu_list_is_on_the_cards_numa_node():
    p = _plan(EIGHT_TP1, numa_box())
    for r in p["replicas"]:
        node = 0 if r["cards"][0] < 4 else 1
        assert r["numa_node"] == node
        lo, hi = (0, 15) if node == 0 else (16, 31)
        ids = [int(x) for part in r["cpus"].split(",") for x in _expand(part)]
        assert ids and all(lo <= i <= hi for i in ids)
        assert f"--membind={node}" in r["launch"] and r["workers"] == len(ids) - 1
    # replicas on one node get disjoint CPU slices
    slices = [r["cpus"] for r in p["replicas"] if r["numa_node"] == 0]
    assert len(set(slices)) == len(slices)


def _expand(part: str) -> list[int]:
    lo, _, hi = part.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def test_what_does_not_fit_is_listed_with_its_binding():
    text = TP4.replace("tp = 4", "tp = 1")  # 32B bf16 on one 80 GB card with 4 x 4k: too big?
    p = _plan(text.replace('"qwen3-32b"', '"llama-3.1-70b"'), resolve_machine("dgx-h100"))
    (x,) = p["not_placed"]
    assert x["binding"] == "card memory" and "GiB" in x["reason"]


def test_share_puts_small_replicas_together():
    m = resolve_machine("4x-a100-80g-pcie")
    text = EIGHT_TP1.replace('"qwen3-8b"', '"qwen3-0.6b"')
    alone = _plan(text, m)
    assert len(alone["replicas"]) == 3 and len(alone["not_placed"]) == 5
    shared = _plan(text, m, share=True)
    assert len(shared["replicas"]) > 3 and any(r["shared"] for r in shared["replicas"])
    assert all(r["note"] and "MPS" in r["note"] for r in shared["replicas"] if r["shared"])


def test_lifeboat_zero_warns():
    p = _plan(EIGHT_TP1, resolve_machine("dgx-h100"), lifeboat=0)
    assert len(p["replicas"]) == 8 and p["lifeboat"] == [] and "no card kept free" in p["notes"][0]


# -- exports: exact content ------------------------------------------------------------------


def test_gres_conf_exact():
    m = numa_box(pairs=[(0, 1)])
    m = replace(m, **{"accelerators": m.accelerators[:2],
                             "interconnect": replace(m.interconnect, **{"pairs": m.interconnect.pairs[:1]})})  # fmt: skip
    text = emit.gres_conf(m, "gpu01")
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines == [
        "AutoDetect=off",
        "NodeName=gpu01 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia0 Cores=0-15 Links=-1,4",
        "NodeName=gpu01 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia1 Cores=0-15 Links=4,-1",
    ]


def test_sbatch_and_pod_exact():
    text = TP4.replace("tp = 4", "tp = 2") + 'command = ["python", "serve.py", "--port", "8000"]\n'
    m = numa_box(pairs=[(0, 1), (2, 3), (4, 5), (6, 7)])
    ws = parse_catalogue(text, "t")
    p = plan(m, ws, {w.model: load_model(w.model)[0] for w in ws})
    (r,) = p["replicas"]
    mem = -(-r["host_bytes"] // 2**20)  # the ledger's host peak, MiB
    script = emit.sbatch_scripts(m, p, {"big": ws[0].command})["big"]
    # --mem: the host peak + the /dev/shm share the Pod counts too (1 GiB for 2 cards)
    assert script.splitlines() == [
        "#!/bin/bash",
        "# big: 1 replica(s), planned by nodeledger on 'dgx-h100'",
        f"# CPUs: its CPU slice 0-15 of NUMA node 0 (the plan's); --mem: host peak "
        f"{r['host_bytes'] / 2**30:,.1f} GiB (nodeledger ledger) + /dev/shm 1.0 GiB (charged "
        "to the job's memory)",
        "#SBATCH --job-name=big",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --gres-flags=enforce-binding",
        "#SBATCH --cpus-per-task=16",
        f"#SBATCH --mem={mem + 1024}M",
        "#SBATCH --export=ALL,NODELEDGER_REPLICA=big",
        "",
        "# card, CPU and memory binding come from Slurm (gres.conf Cores=, enforce-binding)",
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "srun --cpu-bind=cores --cpus-per-task=16 python serve.py --port 8000",
    ]
    (pod,) = emit.k8s_pods(m, p, {"big": ws[0].command}, "registry.example/serve:1").values()
    body = [ln for ln in pod.splitlines() if not ln.startswith("#")]
    assert body[:4] == ["apiVersion: v1", "kind: Pod", "metadata:", "  name: big-0"]
    assert "  - name: main" in body and "        nvidia.com/gpu: 2" in body
    assert "    image: registry.example/serve:1" in body
    # memory: the ledger's host peak + the memory-backed /dev/shm (1 GiB for 2 cards)
    assert '        cpu: "16"' in body and f'        memory: "{mem + 1024}Mi"' in body
    assert "      mountPath: /dev/shm" in body
    assert '      sizeLimit: "1024Mi"' in body
    assert "    - python" in body and '    - "8000"' in body


def test_place_cli_emit_and_errors(tmp_path):
    f = tmp_path / "plan.toml"
    f.write_text(EIGHT_TP1)
    d = cli_json("place", str(f), "--machine", "dgx-h100")
    assert len(d["replicas"]) == 7 and d["lifeboat"] == [7]
    out = tmp_path / "slurm"
    proc = run_cli("place", str(f), "--machine", "dgx-h100", "--emit", "slurm", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "gres.conf").is_file() and (out / "chat.sbatch").is_file()
    for args, msg in (
        (["--emit", "nomad"], "--emit 'nomad'"),
        (["--lifeboat", "8"], "--lifeboat 8"),
    ):
        proc = run_cli("place", str(f), "--machine", "dgx-h100", *args)
        assert proc.returncode == 2 and msg in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = run_cli("place", str(tmp_path / "none.toml"))
    assert proc.returncode == 2 and "not found" in proc.stderr


SLURMD = shutil.which("slurmd") or next(
    (p for p in ("/usr/sbin/slurmd",) if os.access(p, os.X_OK)), None
)


@pytest.mark.skipif(
    SLURMD is None, reason="slurmd not installed (.ci/run installs Debian's slurmd)"
)
def test_gres_conf_accepted_by_slurmd(tmp_path):
    """`slurmd -G` parses the generated gres.conf: Cores and Links as written.  The device
    files are swapped for /dev/null and /dev/zero (this machine has no /dev/nvidia*), and the
    NUMA CPU lists are this machine's CPUs so slurmd can map them."""
    host = socket.gethostname()
    m = numa_box(pairs=[(0, 1)])
    nodes = [NumaNode(id=0, cpus="0"), NumaNode(id=1, cpus=str(min(1, os.cpu_count() - 1)))]
    m = replace(m, **{
        "accelerators": [replace(a, **{"numa_node": i}) for i, a in enumerate(m.accelerators[:2])],
        "host": replace(m.host, **{"numa_nodes": nodes}),
        "interconnect": replace(m.interconnect, **{"pairs": m.interconnect.pairs[:1]}),
    })  # fmt: skip
    gres = (
        emit.gres_conf(m, host)
        .replace("/dev/nvidia0", "/dev/null")
        .replace("/dev/nvidia1", "/dev/zero")
    )
    (tmp_path / "gres.conf").write_text(gres)
    n = os.cpu_count()
    (tmp_path / "slurm.conf").write_text(
        f"ClusterName=t\nSlurmctldHost={host}\nGresTypes=gpu\n"
        f"NodeName={host} Gres=gpu:nvidia_h100_80gb_hbm3:2 CPUs={n} Boards=1 SocketsPerBoard=1 "
        f"CoresPerSocket={n} ThreadsPerCore=1 State=UNKNOWN\nPartitionName=main Nodes={host} Default=YES\n"
    )
    proc = subprocess.run([SLURMD, "-G"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")})  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "error" not in out.lower(), out
    assert "File=/dev/null Cores=0 " in out and "Links=-1,4" in out
    assert "File=/dev/zero" in out and "Links=4,-1" in out


def test_launch_line_uses_the_plans_command():
    text = EIGHT_TP1.replace(
        "replicas = 8", 'replicas = 1\ncommand = ["python", "serve.py", "--name", "a b"]'
    )
    (r,) = _plan(text, resolve_machine("dgx-h100"))["replicas"]
    assert r["launch"].endswith("python serve.py --name 'a b'")


def test_k8s_pods_need_a_real_image(tmp_path):
    f = tmp_path / "plan.toml"
    f.write_text(EIGHT_TP1)
    p = run_cli(
        "place", str(f), "--machine", "dgx-h100", "--emit", "k8s", "-o", str(tmp_path / "o")
    )
    assert p.returncode == 2 and "--emit k8s needs --image IMAGE" in p.stderr
    p = run_cli("place", str(f), "--machine", "dgx-h100", "--emit", "k8s", "--image", "a b\nc",
                "-o", str(tmp_path / "o"))  # fmt: skip
    assert p.returncode == 2 and "is not an image reference" in p.stderr
    assert not (tmp_path / "o").exists()
