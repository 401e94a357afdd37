"""Linux host backend: /proc and /sys (through the Runner, so tests can point at a fake tree)."""

from __future__ import annotations

import re

from nodeledger.machine.parsers.common import cpulist_count, to_int
from nodeledger.machine.parsers.proc import meminfo as parse_meminfo
from nodeledger.machine.probe.runner import Runner
from nodeledger.machine.profile import Host, Mount, Network, Nic, NumaNode, Storage

NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
              "fuse.sshfs", "fuse.juicefs", "9p", "virtiofs"}  # fmt: skip


def host(r: Runner, notes: list[str]) -> Host:
    src: dict[str, str] = {}
    meminfo = r.read("/proc/meminfo")
    if meminfo is None:
        notes.append(
            f"host RAM unknown: /proc/meminfo unreadable ({r.problems.get('/proc/meminfo')})"
        )
    mem = parse_meminfo(meminfo)
    ram = mem.get("MemTotal")
    swap = mem.get("SwapTotal")
    swap_free = mem.get("SwapFree")
    swap_used = (
        swap - swap_free
        if swap is not None and swap_free is not None and swap >= swap_free
        else None
    )
    available = mem.get("MemAvailable")
    if ram:
        src["ram_bytes"] = "/proc/meminfo MemTotal"
    nodes = []
    seen: set[int] = set()
    for d in r.glob("/sys/devices/system/node/node[0-9]*"):
        m = re.search(r"/node(\d+)$", d)
        if not m or int(m.group(1)) in seen:
            continue
        nid = int(m.group(1))
        seen.add(nid)
        cpus = (r.read(f"{d}/cpulist") or "").strip() or None
        node_mem = parse_meminfo(r.read(f"{d}/meminfo")).get("MemTotal")
        nodes.append(NumaNode(id=nid, cpus=cpus, memory_bytes=node_mem or None))
    if nodes:
        src["numa_nodes"] = "/sys/devices/system/node/node*/{cpulist,meminfo}"
    else:
        notes.append("NUMA layout unknown: /sys/devices/system/node not readable")
    thp_text = r.read("/sys/kernel/mm/transparent_hugepage/enabled")
    thp = None
    if thp_text:
        m = re.search(r"\[(\w+)\]", thp_text)
        thp = m.group(1) if m and m.group(1) in ("always", "madvise", "never") else None
        src["thp_enabled"] = "/sys/kernel/mm/transparent_hugepage/enabled"
    defrag = None
    dtext = r.read("/sys/kernel/mm/transparent_hugepage/defrag")
    if dtext:
        m = re.search(r"\[([\w+]+)\]", dtext)
        allowed = ("always", "defer", "defer+madvise", "madvise", "never")
        defrag = m.group(1) if m and m.group(1) in allowed else None
        src["thp_defrag"] = "/sys/kernel/mm/transparent_hugepage/defrag"
    knobs = {}
    for key, path, hi in (("numa_balancing", "/proc/sys/kernel/numa_balancing", 10),
                          ("swappiness", "/proc/sys/vm/swappiness", 200)):  # fmt: skip
        v = (r.read(path) or "").strip()
        if to_int(v) is not None and int(v) <= hi:
            knobs[key] = int(v)
            src[key] = path
    threads = cores = sockets = None
    online = (r.read("/sys/devices/system/cpu/online") or "").strip()
    threads = cpulist_count(online) if online else None
    pkgs, core_ids = set(), set()
    for cpu in r.glob("/sys/devices/system/cpu/cpu[0-9]*/topology"):
        pkg = (r.read(f"{cpu}/physical_package_id") or "").strip()
        core = (r.read(f"{cpu}/core_id") or "").strip()
        if pkg.lstrip("-").isdigit():
            pkgs.add(pkg)
            if core.isdigit():
                core_ids.add((pkg, core))
    if pkgs:
        sockets, cores = len(pkgs), len(core_ids) or None
        src["cores"] = "/sys/devices/system/cpu/cpu*/topology"
    if threads:
        src["threads"] = "/sys/devices/system/cpu/online"
    if cores and threads and threads < cores:
        cores = None  # inconsistent sysfs (containers): keep unknown rather than invent
    if available is not None:
        src["available_bytes"] = "/proc/meminfo MemAvailable (at probe time)"
    return Host(sockets=sockets, cores=cores, threads=threads, numa_nodes=nodes, ram_bytes=ram,
                swap_bytes=swap, swap_used_bytes=swap_used, available_bytes=available, thp_enabled=thp,
                thp_defrag=defrag, sources=src, **knobs)  # fmt: skip


def _pci_of(r: Runner, dev_dir: str) -> tuple[int | None, str | None]:
    """(NUMA node, PCI bus id) of the PCI device behind a sysfs class entry (``<dir>/device``);
    None where the kernel does not say (numa_node -1, no PCI_SLOT_NAME: virtual devices)."""
    v = (r.read(f"{dev_dir}/device/numa_node") or "").strip()
    numa = to_int(v, hi=2**20)
    m = re.search(r"^PCI_SLOT_NAME=(\S+)", r.read(f"{dev_dir}/device/uevent") or "", flags=re.M)
    return numa, (m.group(1) if m else None)


def rdma_devices(r: Runner) -> dict[str, dict]:
    """RDMA devices under /sys/class/infiniband: name -> link layer ("infiniband", "ethernet"
    (RoCE) or None), port-1 rate in Gbit/s, the netdevs on it, NUMA node and PCI bus id."""
    out: dict[str, dict] = {}
    for ib in r.glob("/sys/class/infiniband/*"):
        layer = (r.read(f"{ib}/ports/1/link_layer") or "").strip().lower() or None
        rate = (r.read(f"{ib}/ports/1/rate") or "").strip()
        m = re.match(r"(\d+)", rate)
        numa, bus = _pci_of(r, ib)
        out[ib.rsplit("/", 1)[1]] = {
            "dir": ib,
            "layer": layer if layer in ("infiniband", "ethernet") else None,
            "rate_gbit": float(m.group(1)) if m and int(m.group(1)) > 0 else None,
            "netdevs": [n.rsplit("/", 1)[1] for n in r.glob(f"{ib}/device/net/*")],
            "numa_node": numa,
            "pci_bus_id": bus,
        }
    return out


def network(r: Runner, notes: list[str], rdma: dict[str, dict] | None = None) -> Network:
    nics = []
    rdma = rdma_devices(r) if rdma is None else rdma
    roce_nets: set[str] = set()
    for name, d in rdma.items():
        if d["layer"] == "ethernet":
            roce_nets.update(d["netdevs"])
        if d["layer"] == "infiniband":
            nics.append(Nic(name=name, kind="infiniband", speed_gbit=d["rate_gbit"],
                            numa_node=d["numa_node"], pci_bus_id=d["pci_bus_id"],
                            source=f"{d['dir']}/ports/1/{{link_layer,rate}}"))  # fmt: skip
    for d in r.glob("/sys/class/net/*"):
        name = d.rsplit("/", 1)[1]
        if name == "lo" or not r.glob(f"{d}/device"):
            continue  # loopback and virtual interfaces (bridges, veth, docker) have no device
        typ = (r.read(f"{d}/type") or "").strip()
        speed_txt = (r.read(f"{d}/speed") or "").strip()
        speed = int(speed_txt) / 1000 if (to_int(speed_txt, hi=10**9) or 0) > 0 else None
        kind = (
            "roce"
            if name in roce_nets
            else ("infiniband" if typ == "32" else "ethernet" if typ == "1" else "unknown")
        )
        numa, bus = _pci_of(r, d)
        nics.append(Nic(name=name, kind=kind, speed_gbit=speed, numa_node=numa, pci_bus_id=bus,
                        source=f"{d}/{{type,speed}}"))  # fmt: skip
    if not nics:
        notes.append("no physical NIC found under /sys/class/net (virtual interfaces only)")
    return Network(nics=nics)


def storage(r: Runner, notes: list[str]) -> Storage:
    text = r.read("/proc/mounts")
    if text is None:
        notes.append("storage unknown: /proc/mounts unreadable")
        return Storage()
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        dev, path, fs = parts[0], parts[1].replace("\\040", " "), parts[2]
        if fs in NETWORK_FS or (fs.startswith("fuse.") and fs != "fuse.lxcfs"):
            kind = "network"
        elif dev.startswith("/dev/"):
            kind = _block_kind(r, dev)
        else:
            continue  # proc, sysfs, tmpfs, overlay internals ...
        if path.startswith(("/proc", "/sys", "/dev", "/run")):
            continue
        mounts.append(
            Mount(
                path=path,
                kind=kind,
                filesystem=fs,
                source="/proc/mounts + /sys/block/*/queue/rotational",
            )
        )
    return Storage(mounts=mounts)


def _block_kind(r: Runner, dev: str) -> str:
    name = dev.rsplit("/", 1)[1]
    if name.startswith("nvme"):
        return "nvme"
    base = re.sub(r"p?\d+$", "", name) if not name.startswith(("dm-", "md")) else name
    rot = (r.read(f"/sys/block/{base}/queue/rotational") or "").strip()
    return {"0": "ssd", "1": "hdd"}.get(rot, "unknown")
