"""Kubernetes: node labels through Node Feature Discovery's local feature files, and a DaemonSet
that runs the exporter (and writes those labels) on every card node.

1. **Labels.** NFD's `local` source reads ``/etc/kubernetes/node-feature-discovery/features.d/``:
   each line ``name=value`` becomes the node label ``name=value`` when the name carries an
   allowed prefix; sub-domains of ``feature.node.kubernetes.io`` are allowed by default
   (NFD docs, "Feature files").  nodeledger writes, under
   ``nodeledger.feature.node.kubernetes.io/``: ``card-kind``, ``card-vendor``, ``card-count``,
   ``card-memory-gib`` (the smallest card's, whole GiB), ``numa-nodes``, ``host-ram-gib`` and,
   with a plan, ``lifeboat-card``.  Values are label values (``[A-Za-z0-9._-]``, at most 63).
2. **Pods.** ``place --emit k8s`` selects nodes by ``card-kind`` (and ``card-memory-gib``).
3. **DaemonSet.** One exporter Pod per node with a card label; ``hostPID: true`` (the exporter
   reads each card owner's /proc entry: alive, NUMA binding, children), ``/sys`` read-only,
   the card devices (``/dev/kfd`` + ``/dev/dri`` for AMD and Hygon, ``/dev/davinci*`` and
   the driver tools for Ascend; NVIDIA through its container runtime), an init container
   writing the feature file into the host's ``features.d``.  Scraping: the exporter listens on
   the Pod IP with ``--expose --allow`` the networks given as ``--allow-cidr`` (required: no
   default network, which would silently shut out a Prometheus elsewhere) and a headless
   Service names the Pods; with ``--host-network`` it listens on each node's loopback only, for
   a node-local Prometheus agent.  ``--lifeboat CARDS`` reaches the exporter and the node
   label; ``NODE_NAME`` (downward API) is the exporter's Hostname label.
"""

from __future__ import annotations

import ipaddress
import re

from nodeledger.errors import InputError
from nodeledger.machine.profile import MachineProfile
from nodeledger.machine.vendors import names as vendor_names
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.placement.emit import NFD_PREFIX as PREFIX
from nodeledger.placement.emit import check_image, label_value, node_selector, to_yaml_docs
from nodeledger.watch.exporter import DEFAULT_PORT

FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
_NS = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def node_features(machine: MachineProfile, lifeboat: list[int] | None = None) -> dict[str, str]:
    """Label name -> value for the node ``machine`` describes."""
    accs = machine.accelerators
    out: dict[str, str] = {}
    if accs:
        sel = node_selector(machine)  # the same values the Pods select by
        out[f"{PREFIX}/card-kind"] = sel[f"{PREFIX}/card-kind"]
        out[f"{PREFIX}/card-vendor"] = label_value(str(accs[0].vendor.value))
        out[f"{PREFIX}/card-count"] = str(len(accs))
        if f"{PREFIX}/card-memory-gib" in sel:
            out[f"{PREFIX}/card-memory-gib"] = sel[f"{PREFIX}/card-memory-gib"]
    numa = machine.host.numa_nodes
    if numa:
        out[f"{PREFIX}/numa-nodes"] = str(len(numa))
    ram = machine.host.ram_bytes
    if isinstance(ram, int):
        out[f"{PREFIX}/host-ram-gib"] = str(ram // 2**30)
    if lifeboat:
        out[f"{PREFIX}/lifeboat-card"] = label_value("-".join(str(c) for c in lifeboat))
    return out


def features_file(machine: MachineProfile, lifeboat: list[int] | None = None) -> str:
    lines = [
        f"# NFD local feature file, written by nodeledger from machine {machine.name!r}.",
        f"# Install as {FEATURES_DIR}/nodeledger on the node; NFD labels the node with each line.",
    ]
    if lifeboat is None:
        lines.append(
            "# lifeboat-card: not set (give --plan: the plan names the card kept free, or "
            "--lifeboat-cards CARDS)"
        )
    else:
        have = {a.index for a in machine.accelerators}
        gone = [c for c in lifeboat if c not in have]
        if gone:  # a DaemonSet gives every node the same cards: label only what this one has
            lines.append(f"# lifeboat-card: card(s) {','.join(map(str, gone))} not on this "
                         f"machine ({len(have)} cards): left out")  # fmt: skip
        lifeboat = [c for c in lifeboat if c in have]
    lines += [f"{k}={v}" for k, v in node_features(machine, lifeboat).items()]
    return "\n".join(lines) + "\n"


def daemonset(image: str, vendor: str = "nvidia", namespace: str = "nodeledger",
              port: int = DEFAULT_PORT, host_network: bool = False,
              allow_cidrs: list[str] | tuple[str, ...] = (),
              node_selector: dict[str, str] | None = None,
              lifeboat: list[int] | None = None) -> list[dict]:  # fmt: skip
    # long: the option checks, then the DaemonSet (and Service) as literal dicts shaped as the YAML
    """The manifests (DaemonSet, and a headless Service unless ``host_network``).  Without
    ``node_selector`` the DaemonSet runs on every node (a node without cards is watched for
    its host alone); e.g. NFD's ``feature.node.kubernetes.io/pci-0302_10de.present=true``
    keeps it to NVIDIA nodes.

    On the Pod IP (not ``host_network``) the exporter serves only ``allow_cidrs`` (its
    ``--allow``: other clients are closed unanswered), so they are required: a default network
    would silently shut out a Prometheus on another Pod network.  ``lifeboat`` (card indices)
    goes to the exporter (``--lifeboat``: nodeledger_lifeboat_card, which LifeboatCardTaken
    watches) and to the node's ``lifeboat-card`` label; the Pod's ``NODE_NAME`` (downward API,
    spec.nodeName) becomes the exporter's Hostname label."""
    check_image(image)
    if not _NS.match(namespace):
        raise InputError(f"--namespace {namespace!r} is not a Kubernetes namespace name")
    if not 1 <= port <= 65535:
        raise InputError(f"--port {port}: not a TCP port")
    if vendor not in vendor_names():
        raise InputError(f"--vendor {vendor!r} is not one of {', '.join(vendor_names())}")
    vs = vendor_spec(vendor)
    for k, val in (node_selector or {}).items():
        if not re.fullmatch(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9._-]{1,63}", k) or (
            val and label_value(val) != val
        ):
            raise InputError(f"--node-selector {k}={val}: not a label key=value")
    nets = [check_cidr(c) for c in allow_cidrs]
    if not host_network and not nets:
        raise InputError(
            "give --allow-cidr CIDR (repeatable): the exporter listens on the Pod IP and closes "
            "every client outside it - your Prometheus Pods' network (e.g. the cluster's Pod "
            "CIDR), 0.0.0.0/0 to let any client scrape, or --host-network for a node-local agent"
        )
    if host_network and nets:
        raise InputError("--allow-cidr applies to the Pod IP; with --host-network the exporter "
                         "listens on each node's loopback only")  # fmt: skip
    boats = sorted(set(lifeboat or []))
    if any(not isinstance(c, int) or not 0 <= c <= 4095 for c in boats):
        raise InputError(f"--lifeboat {lifeboat}: card indices 0-4095")
    labels = {"app.kubernetes.io/name": "nodeledger-exporter",
              "app.kubernetes.io/managed-by": "nodeledger"}  # fmt: skip
    listen = f"127.0.0.1:{port}" if host_network else f"0.0.0.0:{port}"
    args = ["exporter", "--listen", listen]
    if not host_network:
        args.append("--expose")
        for n in nets:
            args += ["--allow", n]
    boat_arg = ",".join(map(str, boats))
    if boats:
        args += ["--lifeboat", boat_arg]
    mounts = [{"name": "sys", "mountPath": "/sys", "readOnly": True},
              {"name": "features", "mountPath": "/features.d"}]  # fmt: skip
    volumes = [
        {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
        {"name": "features", "hostPath": {"path": FEATURES_DIR, "type": "DirectoryOrCreate"}},
    ]
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    security: dict = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    for hp in vs.exporter_host_paths:  # the device nodes and tools the vendor's sampler opens
        volumes.append({"name": hp.name, "hostPath": {"path": hp.path}})
        ro = {} if hp.read_only is None else {"readOnly": hp.read_only}
        mounts.append({"name": hp.name, "mountPath": hp.path, **ro})
    if vs.exporter_privileged:
        security = {"privileged": True}
    env += [{"name": k, "value": val} for k, val in vs.exporter_env]
    container = {
        "name": "exporter", "image": image, "command": ["nodeledger"], "args": args,
        "env": env, "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                      "limits": {"cpu": "500m", "memory": "512Mi"}},
        "securityContext": security, "volumeMounts": mounts,
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 30},
    }  # fmt: skip
    init = {
        "name": "node-features", "image": image,
        "command": ["sh", "-c", "nodeledger k8s features"
                    + (f" --lifeboat-cards {boat_arg}" if boats else "")
                    + " > /features.d/nodeledger.tmp && "
                    "mv /features.d/nodeledger.tmp /features.d/nodeledger"],
        "securityContext": security, "volumeMounts": mounts, "env": env,
    }  # fmt: skip
    ds = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "nodeledger-exporter", "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "nodeledger-exporter"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels,
                             "annotations": {"prometheus.io/scrape": "true",
                                             "prometheus.io/port": str(port)}},
                "spec": {
                    "hostPID": True, "hostNetwork": host_network,
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                    "initContainers": [init],
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }  # fmt: skip
    out = [ds]
    if not host_network:
        out.append({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "nodeledger-exporter", "namespace": namespace, "labels": labels},
            "spec": {"clusterIP": "None", "selector": {"app.kubernetes.io/name": "nodeledger-exporter"},
                     "ports": [{"name": "metrics", "port": port, "targetPort": port}]},
        })  # fmt: skip
    return out


def check_cidr(text: str) -> str:
    """A network as the exporter's --allow takes it (10.244.0.0/16, fd00::/8)."""
    try:
        return str(ipaddress.ip_network(str(text).strip(), strict=False))
    except ValueError:
        raise InputError(f"--allow-cidr {text!r} is not a CIDR (e.g. 10.244.0.0/16)") from None


def daemonset_header(allow_cidrs, host_network: bool, lifeboat: list[int] | None) -> str:
    """The comment lines above the manifests: who may scrape, and the lifeboat."""
    who = ("each node's loopback only (--host-network): a node-local Prometheus agent scrapes it"
           if host_network else
           "the Pod IP; only clients in " + ", ".join(check_cidr(c) for c in allow_cidrs)
           + " may scrape (others are closed unanswered)")  # fmt: skip
    boat = (f"card {','.join(map(str, sorted(set(lifeboat))))} on every node (exporter "
            "--lifeboat and the node label lifeboat-card): LifeboatCardTaken watches it"
            if lifeboat else
            "none given (--lifeboat CARDS): nodeledger_lifeboat_card is not served and the "
            "LifeboatCardTaken alert cannot fire")  # fmt: skip
    return (
        f"# nodeledger exporter DaemonSet, generated by nodeledger.\n# Scraping: {who}.\n"
        f"# Lifeboat: {boat}.\n# Hostname label: the node's name (NODE_NAME from "
        "spec.nodeName), as dcgm-exporter's.\n"
    )


def to_yaml(docs: list[dict]) -> str:
    """The manifests as YAML (PyYAML's safe dumper, no anchors: placement/emit.to_yaml_docs)."""
    return to_yaml_docs(docs)


def features_for(machine: str, plan: str | None, lifeboat: int,
                 boats: list[int] | None) -> str:  # fmt: skip
    """``k8s features``: the feature file of the machine ``machine`` (a preset, profile, bundle
    or ``probe``), its lifeboat the plan's (``plan`` with ``lifeboat`` cards kept free) or the
    cards ``boats`` name."""
    from nodeledger.machine import resolve_machine

    profile = resolve_machine(machine)
    if plan:
        from nodeledger.placement import reserve as rs

        workloads, specs = rs.load_plan_inputs(plan)
        boats = list(rs.make_plan(profile, workloads, specs, lifeboat, set()).get("lifeboat") or [])
    return features_file(profile, boats)
