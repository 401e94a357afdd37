"""doctor: the checks on this machine (no accelerator here), on a fake box (fake /proc and /sys
tree, fake nvidia-smi and lspci) with planted problems — each reported exactly once, none on the
clean box — and the same findings replayed from a bundle of that box."""

from __future__ import annotations

import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from nodeledger.doctor import load_state, run_checks
from nodeledger.doctor.checks import CHECK_IDS, pcie_acs
from nodeledger.doctor.machine_state import MachineState
from nodeledger.machine.parsers.common import pci_address
from nodeledger.machine.parsers.lspci import parse_lspci
from nodeledger.machine.probe import Runner
from nodeledger.machine.probe.bundle import write_bundle
from nodeledger.machine.probe.facts import (
    ENV_KEYS,
    Facts,
    cpuset,
    hf_cache,
)
from nodeledger.machine.probe.probe import probe_with_facts
from nodeledger.machine.profile import Accelerator, MachineProfile

DOC = FIXTURES / "doctor"
GiB = 2**30
PROBLEMS = ("warning", "error")
# the five problems the issue plants, and the check that must report each
PLANTS = {
    "thp_always": "thp-enabled",
    "swap_used": "swap-in-use",
    "hf_other_mount": "hf-cache-mount",
    "dead_pid": "card-dead-pid",
    "numa_mismatch": "card-numa-binding",
}


def _w(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _status(name: str, rss_gib: float, cpus: str) -> str:
    return (f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t1\nVmRSS:\t{int(rss_gib * 2**20)} kB\n"
            f"Threads:\t12\nCpus_allowed:\tffffffff\nCpus_allowed_list:\t{cpus}\n")  # fmt: skip


def make_box(tmp: Path, *, thp_always=False, swap_used=False, hf_other_mount=False, dead_pid=False,
             numa_mismatch=False, card_procs=True, available_gib=100, lspci="lspci-D-vvv-two-switches.txt",
             iommu_type="identity", extra_procs=()) -> Runner:  # fmt: skip
    """A 2 x H200 box (card 0 on NUMA 0, card 1 on NUMA 1), 128 GiB RAM, 8 GiB swap, / and /data
    on NVMe, /datasets on NFS; pid 4242 on card 0 bound to NUMA 0, pid 4343 on card 1 bound to
    NUMA 1.  Each keyword plants one problem."""
    root, bindir = tmp / "root", tmp / "bin"
    bindir.mkdir(parents=True)
    swap_free = 6 if swap_used else 8
    _w(root, "proc/meminfo", f"MemTotal:       {128 * 2**20} kB\nMemFree:        {10 * 2**20} kB\n"
       f"MemAvailable:   {available_gib * 2**20} kB\nSwapTotal:      {8 * 2**20} kB\n"
       f"SwapFree:       {swap_free * 2**20} kB\n")  # fmt: skip
    thp = "[always] madvise never" if thp_always else "always [madvise] never"
    _w(root, "sys/kernel/mm/transparent_hugepage/enabled", thp + "\n")
    _w(
        root,
        "sys/kernel/mm/transparent_hugepage/defrag",
        "always defer defer+madvise [madvise] never\n",
    )
    _w(root, "proc/sys/kernel/numa_balancing", "0\n")
    _w(root, "proc/sys/vm/swappiness", "10\n")
    for n, cpus in ((0, "0-15"), (1, "16-31")):
        _w(root, f"sys/devices/system/node/node{n}/cpulist", cpus + "\n")
        _w(
            root,
            f"sys/devices/system/node/node{n}/meminfo",
            f"Node {n} MemTotal: {64 * 2**20} kB\n",
        )
    _w(root, "sys/devices/system/cpu/online", "0-31\n")
    _w(root, "proc/mounts", "/dev/nvme0n1p2 / ext4 rw 0 0\n/dev/nvme1n1 /data ext4 rw 0 0\n"
       "nas:/export/datasets /datasets nfs4 rw 0 0\nproc /proc proc rw 0 0\n")  # fmt: skip
    _w(root, "proc/self/mountinfo",
       "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
       "23 22 0:21 / /proc rw,nosuid shared:5 - proc proc rw\n"
       "40 22 259:3 / /data rw,relatime shared:30 - ext4 /dev/nvme1n1 rw\n"
       "41 22 0:52 / /datasets rw,relatime shared:31 - nfs4 nas:/export/datasets rw,vers=4.2\n")  # fmt: skip
    env = {"HOME": "/home/alice", "PWD": "/home/alice/work", "HF_TOKEN": "hf_secret_do_not_keep",
           "PATH": "/usr/bin"}  # fmt: skip
    if hf_other_mount:
        env["HF_HOME"] = "/data/hf"
    _w(root, "proc/self/environ", "\0".join(f"{k}={v}" for k, v in env.items()) + "\0")
    os.symlink("/home/alice/work", root / "proc/self/cwd")
    _w(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.8.0 root=/dev/nvme0n1p2 ro iommu=pt\n")
    for g, bus in (("17", "0000:18:00.0"), ("50", "0000:9a:00.0")):
        _w(root, f"sys/kernel/iommu_groups/{g}/devices/{bus}", "")
        _w(root, f"sys/kernel/iommu_groups/{g}/type", iommu_type + "\n")
    procs = {1: ("systemd", 0.01, "0-31"), 777: ("sshd", 0.01, "0-31")}
    if card_procs:
        procs[4242] = ("python3", 20, "0-15")
        procs[4343] = ("vllm", 3, "0-15" if numa_mismatch else "16-31")
    procs.update(dict(extra_procs))
    for pid, (name, rss, cpus) in procs.items():
        _w(root, f"proc/{pid}/status", _status(name, rss, cpus))
    apps = (DOC / "nvidia-smi-query-compute-apps.csv").read_text() if card_procs else ""
    if dead_pid:
        apps += "00000000:9A:00.0, 5151, python, 12000\n"  # no /proc/5151
    (tmp / "apps.csv").write_text(apps)
    query = (DOC / "nvidia-smi-query-gpu.csv").read_text()
    if not card_procs:  # idle cards: nothing used
        query = query.replace(", 20480,", ", 0,").replace(", 30720,", ", 0,")
    (tmp / "query.csv").write_text(query)
    smi = bindir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncase "$1" in\n--query-gpu=*) cat {tmp}/query.csv;;\n'
                   f'--query-compute-apps=*) cat {tmp}/apps.csv;;\ntopo) cat {DOC}/nvidia-smi-topo-m.txt;;\n'
                   "*) exit 9;;\nesac\n")  # fmt: skip
    if lspci:
        (bindir / "lspci").write_text(f"#!/bin/sh\ncat {DOC}/{lspci}\n")
    for tool in bindir.iterdir():
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return Runner(timeout=5, root=root, path=str(bindir))


def state_of(r: Runner) -> MachineState:
    profile, facts = probe_with_facts(r)
    return MachineState(profile, facts, "fake box")


def problems(findings) -> list[str]:
    return [f.id for f in findings if f.severity in PROBLEMS]


def test_clean_box_reports_no_problem(tmp_path):
    st = state_of(make_box(tmp_path))
    assert len(st.profile.accelerators) == 2
    findings = run_checks(st, ("/datasets/../home/alice/data",))
    assert [f.id for f in findings] == list(CHECK_IDS)
    assert problems(findings) == [], [(f.id, f.message) for f in findings if f.severity in PROBLEMS]
    by = {f.id: f for f in findings}
    assert (
        by["card-numa-binding"].severity == "ok"
        and "2 card process(es)" in by["card-numa-binding"].message
    )
    assert by["card-dead-pid"].severity == "ok"
    assert by["hf-cache-mount"].severity == "ok"
    assert by["iommu-p2p"].severity == "ok" and "passthrough" in by["iommu-p2p"].message
    assert by["pcie-acs"].severity == "ok"
    assert by["persistence-mode"].severity == "ok" and by["card-memory-errors"].severity == "ok"
    assert all("could not judge" not in f.message for f in findings)


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_each_planted_problem_is_reported_exactly_once(tmp_path, plant):
    st = state_of(make_box(tmp_path, **{plant: True}))
    assert problems(run_checks(st)) == [PLANTS[plant]]


def test_all_plants_at_once_each_once_with_evidence_and_fix(tmp_path):
    st = state_of(make_box(tmp_path, **dict.fromkeys(PLANTS, True)))
    findings = run_checks(st)
    assert sorted(problems(findings)) == sorted(PLANTS.values())
    by = {f.id: f for f in findings}
    numa = by["card-numa-binding"]
    assert "card 1 (NUMA 1): pid 4343 (vllm) bound to CPUs 0-15 (NUMA 0)" in numa.message
    assert numa.fix.startswith("sudo taskset -a -cp 16-31 4343")
    assert {e.source for e in numa.evidence} >= {
        "/proc/4343/status",
        "nvidia-smi topo -m NUMA Affinity",
    }
    dead = by["card-dead-pid"]
    assert "card 1 pid 5151" in dead.message and "nvidia-smi --gpu-reset -i 1" in dead.fix
    assert any("No such file or directory" in str(e.value) for e in dead.evidence)
    hf = by["hf-cache-mount"]
    assert (
        "/data/hf/hub" in hf.message and "(dev 259:3)" in hf.message and "(dev 259:2)" in hf.message
    )
    assert hf.fix.startswith("export HF_HOME=/home/alice/work/.cache/huggingface")
    swap = by["swap-in-use"]
    assert "2.0 GiB of 8.0 GiB swap in use" in swap.message and "swapoff" in swap.fix
    assert (
        by["thp-enabled"].fix
        == "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled"
    )


def test_bundle_of_the_box_replays_the_same_findings(tmp_path):
    r = make_box(tmp_path, **dict.fromkeys(PLANTS, True))
    profile, facts = probe_with_facts(r)
    live = [
        f.to_json() for f in run_checks(MachineState(profile, facts, "x"), ("/datasets/train",))
    ]
    b = write_bundle(r, tmp_path / "box.tar.gz")
    replay = [f.to_json() for f in run_checks(load_state(str(b)), ("/datasets/train",))]
    assert replay == live
    with tarfile.open(b) as tar:
        m = json.load(tar.extractfile("manifest.json"))
        env = tar.extractfile(m["files"]["/proc/self/environ"]["file"]).read().decode()
    assert "/proc/cmdline" in m["files"] and "/proc/self/mountinfo" in m["files"]
    assert m["files"]["/proc/self/cwd"]["file"] and "/proc/4242/status" in m["files"]
    assert m["files"]["/proc/5151/status"] == {"file": None, "problem": "No such file or directory"}
    assert "/proc/[0-9]*/status" in m["globs"] and any(
        c["argv"][0] == "lspci" for c in m["commands"]
    )
    # the environment is kept for the variables doctor reads only: no token leaves the box
    assert "hf_secret" not in env and "PATH=" not in env
    assert {kv.split("=")[0] for kv in env.split("\0") if kv} <= set(ENV_KEYS)
    # the CLI on the bundle: the same worst severity and exit code 1 (warnings)
    proc = run_cli("doctor", "--from", str(b), "--json", "--dataset", "/datasets/train")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["worst"] == "warning" and data["exit_code"] == 1
    assert sorted(c["id"] for c in data["checks"] if c["severity"] in PROBLEMS) == sorted(
        [*PLANTS.values(), "dataset-network"]
    )
    term = run_cli("doctor", "--from", str(b))
    assert term.returncode == 1 and "Traceback" not in term.stderr
    assert "Fixes" in term.stdout and "sudo taskset -a -cp 16-31 4343" in term.stdout


def test_dataset_on_nfs_and_local(tmp_path):
    st = state_of(make_box(tmp_path))
    by = {f.id: f for f in run_checks(st, ("/datasets/imagenet", "data/local"))}
    d = by["dataset-network"]
    assert d.severity == "warning" and "/datasets/imagenet (nfs4 nas:/export/datasets)" in d.message
    assert "data/local" not in d.message
    assert by["dataset-network"].fix.startswith(
        "rsync -a /datasets/imagenet/ /local/nvme/imagenet/"
    )
    assert run_checks(st, ("/data/x",))[-1].severity == "ok"


def test_unreadable_facts_are_unknown_never_a_crash(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    st = state_of(Runner(timeout=1, root=root, path=str(tmp_path / "nobin")))
    findings = run_checks(st, ("/x",))
    sev = {f.id: f.severity for f in findings}
    assert sev["thp-enabled"] == "unknown" and "unreadable" in findings[0].message
    assert sev["host-ram-free"] == sev["swap-in-use"] == sev["hf-cache-mount"] == "unknown"
    assert sev["dataset-network"] == "unknown" and sev["persistence-mode"] == "skip"
    assert all("could not judge" not in f.message for f in findings)


def test_card_process_status_unreadable_is_unknown(tmp_path):
    r = make_box(tmp_path)
    status = r.root / "proc/4343/status"
    status.unlink()
    status.mkdir()  # unreadable as a file, even for root (EISDIR): neither alive nor gone
    by = {f.id: f for f in run_checks(state_of(r))}
    assert (
        by["card-dead-pid"].severity == "unknown"
        and "Is a directory" in by["card-dead-pid"].message
    )
    assert by["card-numa-binding"].severity == "ok"  # 4242 judged, 4343 named as not judged
    assert "not judged: card 1 pid 4343" in by["card-numa-binding"].message


def test_iommu_translating_dma_is_a_warning(tmp_path):
    r = make_box(tmp_path, iommu_type="DMA-FQ")
    (r.root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on\n")
    f = {x.id: x for x in run_checks(state_of(r))}["iommu-p2p"]
    assert f.severity == "warning" and "cards 0-1" in f.message and "iommu=pt" in f.fix
    assert any(e.value == "intel_iommu=on" for e in f.evidence)


def test_lspci_nonroot_and_absent(tmp_path):
    st = state_of(make_box(tmp_path, lspci="lspci-D-vvv-nonroot.txt"))
    f = pcie_acs(st)
    assert f.severity == "unknown" and "only to root" in f.message
    st = state_of(make_box(tmp_path / "b", lspci=None))
    f = pcie_acs(st)
    assert f.severity == "unknown" and "lspci absent" in f.message


def test_acs_redirect_on_a_switch_above_two_cards():
    bridges, denied = parse_lspci((DOC / "lspci-D-vvv-one-switch-acs-redirect.txt").read_text())
    assert not denied and [b.bdf for b in bridges] == [
        "0000:15:01.0",
        "0000:16:00.0",
        "0000:17:08.0",
        "0000:17:10.0",
    ]
    assert bridges[2].acs_ctl["ReqRedir"] and (bridges[2].secondary, bridges[2].subordinate) == (
        0x18,
        0x18,
    )
    cards = [Accelerator(index=i, vendor="nvidia", product="H200", pci_bus_id=b)
             for i, b in enumerate(("00000000:18:00.0", "00000000:19:00.0"))]  # fmt: skip
    st = MachineState(MachineProfile(name="x", accelerators=cards), Facts(bridges=bridges), "t")
    f = pcie_acs(st)
    assert f.severity == "warning" and "2 PCIe switch port(s)" in f.message
    assert f.fix.startswith(
        "sudo setpci -s 0000:17:08.0 ECAP_ACS+0x6.w=0000; sudo setpci -s 0000:17:10.0"
    )
    assert "0000:15:01.0" not in f.fix  # a root port's ACS is not between the cards


def test_small_helpers():
    assert cpuset("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11} and cpuset("x") is None
    assert pci_address("00000000:9A:00.0") == pci_address("9a:00.0") == "0000:9a:00.0"
    assert hf_cache({"HOME": "/h"}) == (
        "/h/.cache/huggingface/hub",
        "~/.cache/huggingface/hub (HOME)",
    )
    assert hf_cache({"HOME": "/h", "HF_HOME": "~/hf"})[0] == "/h/hf/hub"
    assert hf_cache({"HF_HUB_CACHE": "/c", "HF_HOME": "/x"}) == ("/c", "HF_HUB_CACHE")
    f = Facts(mounts=None)
    assert f.mount_of("/x") is None


# -- the CLI on this machine ---------------------------------------------------------------------


def test_doctor_on_this_machine_runs_clean():
    proc = run_cli("doctor", "--json")
    assert proc.returncode in (0, 1, 3), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr == ""
    data = json.loads(proc.stdout)
    assert [c["id"] for c in data["checks"]] == list(CHECK_IDS)
    assert all(
        c["severity"] in ("ok", "skip", "unknown", "info", "warning", "error")
        for c in data["checks"]
    )
    assert all("could not judge" not in c["message"] for c in data["checks"])
    term = run_cli("doctor")
    assert term.returncode == data["exit_code"] and "Traceback" not in term.stderr
    assert "thp-enabled" in term.stdout and "worst:" in term.stdout


def test_doctor_on_a_live_bundle_matches_live(tmp_path):
    b = tmp_path / "me.tar.gz"
    assert run_cli("bundle", "-o", str(b)).returncode == 0
    live = json.loads(run_cli("doctor", "--json").stdout)
    replay = json.loads(run_cli("doctor", "--from", str(b), "--json").stdout)
    moving = {"host-ram-free", "swap-in-use"}  # MemAvailable and swap move from second to second
    key = lambda d: [(c["id"], c["severity"]) for c in d["checks"] if c["id"] not in moving]  # noqa: E731
    assert key(replay) == key(live)


@pytest.mark.parametrize("args, says", [
    (["--tp", "2"], "--tp applies to a pre-flight"),
    (["--machine", "k100-ai-8x64g"], "--machine applies to --job"),
    (["--job", "load"], "needs a MODEL"),
    (["qwen3-32b", "--job", "load", "--dataset", "/x"], "--dataset applies to the checks"),
    (["qwen3-32b", "--job", "load", "--tp", "2"], "--tp does not apply to --job load"),
    (["--from", "/nonexistent.tar.gz"], "not a readable bundle"),
    (["--timeout", "0"], "--timeout must be > 0"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2(args, says):
    proc = run_cli("doctor", *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
