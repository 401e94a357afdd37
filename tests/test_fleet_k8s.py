"""Kubernetes: every manifest nodeledger writes — the exporter's DaemonSet and Service (every
vendor, both scrape modes), the Pods of `place --emit k8s` and their DRA ResourceClaims —
validates against the Kubernetes OpenAPI schema offline (kubernetes-validate, strict) for two
Kubernetes versions; command arguments YAML could read as something else stay strings; the NFD
feature file labels what the Pods select by; the DaemonSet carries the lifeboat, the node's
name and an explicit allow-list."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import yaml

from conftest import run_cli
from nodeledger.machine import resolve_machine
from nodeledger.machine.profile import to_json

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the test extra)")
K8S = ("1.31.0", "1.34.0")  # core objects (Pod, DaemonSet, Service): two versions
DRA = ("1.34.0", "1.35.0")  # resource.k8s.io/v1 (GA in 1.34): its first two versions
PREFIX = "nodeledger.feature.node.kubernetes.io/"
AMBIGUOUS = ["~", "+1", ".5", ".inf", "y", "n", "Y", "no", "on", "0o17", "1_000", "null", "",
             " lead", "a: b", "#x", "012", "-3", "1e3", "12:30"]  # fmt: skip


def _has_schema(version: str, kind: str, api: str) -> bool:
    try:
        kv.validate({"apiVersion": api, "kind": kind, "metadata": {"name": "x"}}, version, True)
    except kv.utils.SchemaNotFoundError:
        return False
    except kv.utils.ValidationError:
        pass
    return True


def _validate(text: str) -> list[dict]:
    """Every document against every version that knows its kind (each kind in two)."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        versions = DRA if d["apiVersion"].startswith("resource.k8s.io/") else K8S
        known = [v for v in versions if _has_schema(v, d["kind"], d["apiVersion"])]
        if len(known) < 2:
            pytest.skip(f"kubernetes-validate {kv.__version__} has no {d['apiVersion']} "
                        f"{d['kind']} schema for two of {versions}")  # fmt: skip
        for v in known:
            kv.validate(d, v, strict=True)  # raises ValidationError on any schema breach
    return docs


def _plan(tmp_path, command: list[str] | None = None, tp: int = 1, replicas: int = 2):
    plan = tmp_path / "plan.toml"
    text = (f'[[workloads]]\nid = "s"\nmodel = "qwen3-8b"\njob = "serve"\nreplicas = {replicas}\n'
            f"tp = {tp}\n")  # fmt: skip
    if command is not None:
        text += f"command = {json.dumps(command)}\n"
    plan.write_text(text)
    return plan


def _machine_with_ids(tmp_path, pci_only: tuple[int, ...] = ()) -> str:
    """dgx-h100 with GPU UUIDs and PCI bus ids, as a probe records them (nvidia-smi's
    00000000:18:00.0 form); cards in ``pci_only`` have no UUID."""
    m = resolve_machine("dgx-h100")
    accs = [replace(a, **{
        "uuid": None if a.index in pci_only else f"GPU-{a.index:08x}-1111-2222-3333-444455556666",
        "pci_bus_id": f"00000000:{0x18 + 16 * a.index:02X}:00.0"}) for a in m.accelerators]  # fmt: skip
    f = tmp_path / "h100-ids.json"
    f.write_text(json.dumps(to_json(replace(m, **{"accelerators": accs}))))
    return str(f)


def _pods(tmp_path, *args: str):
    out = tmp_path / "k8s"
    r = run_cli("place", *args, "--emit", "k8s", "--image", "registry.example/serve:1",
                "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    files = sorted(out.glob("*.yaml"))
    return r, [(f, f.read_text()) for f in files]


# -- the DaemonSet ---------------------------------------------------------------------------


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "hygon", "huawei"])
@pytest.mark.parametrize("host_network", [False, True])
def test_daemonset_validates(vendor, host_network):
    args = ["k8s", "daemonset", "--image", "registry.example/nodeledger:0.1", "--vendor", vendor,
            "--lifeboat", "7"]  # fmt: skip
    args += ["--host-network"] if host_network else ["--allow-cidr", "10.244.0.0/16",
                                                     "--allow-cidr", "fd00::/8"]  # fmt: skip
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert "&id" not in r.stdout and "*id" not in r.stdout  # no YAML anchors / aliases
    docs = _validate(r.stdout)
    ds = docs[0]
    spec = ds["spec"]["template"]["spec"]
    assert ds["kind"] == "DaemonSet" and spec["hostPID"] is True
    c = spec["containers"][0]
    assert c["command"] == ["nodeledger"] and c["args"][0] == "exporter"
    # the lifeboat reaches the exporter (LifeboatCardTaken) and the node label
    assert c["args"][c["args"].index("--lifeboat") + 1] == "7"
    assert "--lifeboat-cards 7" in spec["initContainers"][0]["command"][-1]
    # the node's name for the Hostname label, through the downward API
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert c["ports"][0]["containerPort"] == 19835
    if host_network:
        assert len(docs) == 1 and "127.0.0.1:19835" in c["args"] and "--allow" not in c["args"]
        assert "node's loopback only" in r.stdout.splitlines()[1]
    else:
        assert docs[1]["kind"] == "Service" and "--expose" in c["args"]
        allow = [c["args"][i + 1] for i, a in enumerate(c["args"]) if a == "--allow"]
        assert allow == ["10.244.0.0/16", "fd00::/8"]
        assert "only clients in 10.244.0.0/16, fd00::/8 may scrape" in r.stdout


def test_daemonset_without_a_lifeboat_says_the_alert_cannot_fire():
    r = run_cli("k8s", "daemonset", "--image", "a/b:1", "--allow-cidr", "0.0.0.0/0")
    assert r.returncode == 0, r.stderr
    assert "LifeboatCardTaken alert cannot fire" in r.stdout
    c = _validate(r.stdout)[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--lifeboat" not in c["args"]


def test_daemonset_bad_input_is_one_line():
    for args, words in ((["--image", "bad image"], "not an image reference"),
                        (["--image", "a/b:1", "--vendor", "intel"], "--vendor"),
                        (["--image", "a/b:1", "--namespace", "Bad_NS"], "namespace"),
                        (["--image", "a/b:1", "--node-selector", "x"], "KEY=VALUE"),
                        # no silent default network: the Pod-IP mode needs the allow-list
                        (["--image", "a/b:1"], "give --allow-cidr CIDR"),
                        (["--image", "a/b:1", "--allow-cidr", "10.0.0.0/33"], "not a CIDR"),
                        (["--image", "a/b:1", "--host-network", "--allow-cidr", "10.0.0.0/8"],
                         "--allow-cidr applies to the Pod IP"),
                        (["--image", "a/b:1", "--allow-cidr", "10.0.0.0/8", "--lifeboat", "x"],
                         "--lifeboat")):  # fmt: skip
        r = run_cli("k8s", "daemonset", *args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


# -- NFD feature file ------------------------------------------------------------------------


def _labels(text: str) -> dict[str, str]:
    labels = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        k, _, v = line.partition("=")  # NFD local feature file: name=value
        assert re.fullmatch(r"nodeledger\.feature\.node\.kubernetes\.io/[a-z-]+", k), k
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", v), v
        labels[k] = v
    return labels


def test_features_file_labels_what_the_pods_select(tmp_path):
    plan = _plan(tmp_path)
    r = run_cli("k8s", "features", "--machine", "k100-ai-8x64g", "--plan", str(plan))
    assert r.returncode == 0, r.stderr
    labels = _labels(r.stdout)
    assert labels[PREFIX + "card-kind"] == "K100_AI" and labels[PREFIX + "card-count"] == "8"
    assert labels[PREFIX + "card-memory-gib"] == "64" and labels[PREFIX + "host-ram-gib"] == "125"
    assert labels[PREFIX + "lifeboat-card"] == "7" and labels[PREFIX + "numa-nodes"] == "8"
    _r, files = _pods(tmp_path, str(plan), "--machine", "k100-ai-8x64g")
    pods = [d for _f, t in files for d in _validate(t)]
    assert len(pods) == 2
    for pod in pods:
        assert all(labels.get(k) == v for k, v in pod["spec"]["nodeSelector"].items())


def test_features_lifeboat_cards_as_the_daemonset_passes_them():
    r = run_cli("k8s", "features", "--machine", "k100-ai-8x64g", "--lifeboat-cards", "7")
    assert r.returncode == 0 and _labels(r.stdout)[PREFIX + "lifeboat-card"] == "7", r.stderr
    # a node with fewer cards than the DaemonSet's lifeboat index: left out, and said
    r = run_cli("k8s", "features", "--machine", "4x-a100-80g-pcie", "--lifeboat-cards", "7")
    assert r.returncode == 0 and PREFIX + "lifeboat-card" not in _labels(r.stdout)
    assert "card(s) 7 not on this machine (4 cards): left out" in r.stdout
    r = run_cli("k8s", "features", "--machine", "k100-ai-8x64g", "--lifeboat-cards", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


# -- Pods: YAML that reads back as written -----------------------------------------------------


@pytest.mark.parametrize("devices", ["device-plugin", "dra"])
def test_pod_command_arguments_round_trip_as_strings(tmp_path, devices):
    """Arguments YAML 1.1 / go-yaml would read as null, numbers or booleans come back as the
    same strings, and each Pod (with its ResourceClaim) validates."""
    cmd = ["python", "serve.py", *AMBIGUOUS, 'quote"s', "back\\slash"]
    plan = _plan(tmp_path, cmd)
    _r, files = _pods(tmp_path, str(plan), "--machine", _machine_with_ids(tmp_path),
                      "--k8s-devices", devices)  # fmt: skip
    assert len(files) == 2
    for _f, text in files:
        assert "&id" not in text and "*id" not in text
        docs = _validate(text)
        (pod,) = [d for d in docs if d["kind"] == "Pod"]
        assert pod["spec"]["containers"][0]["command"] == cmd
        # go-yaml (kubectl) reads y / n / on / 0o17 as booleans and numbers: they are quoted
        for word in ("y", "n", "Y", "no", "on", "0o17", "1_000"):
            assert f'    - "{word}"' in text, word


def test_sbatch_and_pod_share_cpus_and_memory(tmp_path):
    """The sbatch file asks what the Pod of the same replica asks: CPUs and memory (host peak
    + the /dev/shm share)."""
    plan = _plan(tmp_path, ["python", "serve.py"], tp=2, replicas=1)
    _r, files = _pods(tmp_path, str(plan), "--machine", "dgx-h100")
    (pod,) = [d for _f, t in files for d in _validate(t) if d["kind"] == "Pod"]
    lim = pod["spec"]["containers"][0]["resources"]["limits"]
    out = tmp_path / "slurm"
    r = run_cli("place", str(plan), "--machine", "dgx-h100", "--emit", "slurm", "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = (out / "s.sbatch").read_text()
    assert f"#SBATCH --cpus-per-task={lim['cpu']}\n" in text and int(lim["cpu"]) == 3
    assert f"#SBATCH --mem={lim['memory'][:-2]}M\n" in text
    assert f"srun --cpu-bind=cores --cpus-per-task={lim['cpu']} python serve.py" in text


# -- which cards a Pod gets ----------------------------------------------------------------------


def test_dra_claims_pin_the_planned_cards(tmp_path):
    """With card UUIDs / PCI bus ids in the profile, auto chooses DRA: one ResourceClaim per Pod
    selects exactly the planned cards (by UUID, else PCI bus id) in NVIDIA's DRA driver's
    DeviceClass; the lifeboat card is in no claim; the Pod uses the claim, not nvidia.com/gpu."""
    plan = _plan(tmp_path, ["python", "serve.py"], tp=2, replicas=2)
    r, files = _pods(tmp_path, str(plan), "--machine", _machine_with_ids(tmp_path, (1,)))
    assert "Kubernetes cards: a ResourceClaim per Pod selects the planned cards" in r.stdout
    d = json.loads(run_cli("place", str(plan), "--machine", _machine_with_ids(tmp_path, (1,)),
                           "--json").stdout)  # fmt: skip
    planned = {x["replica"]: x["cards"] for x in d["replicas"]}
    selected = []
    for _f, text in files:
        docs = _validate(text)
        claim, pod = docs
        assert claim["kind"] == "ResourceClaim" and claim["apiVersion"] == "resource.k8s.io/v1"
        cards = planned[claim["metadata"]["annotations"]["nodeledger/replica"]]
        reqs = claim["spec"]["devices"]["requests"]
        assert [q["name"] for q in reqs] == [f"card-{c}" for c in cards]
        for q, c in zip(reqs, cards, strict=True):
            ex = q["exactly"]
            assert ex["deviceClassName"] == "gpu.nvidia.com" and ex["count"] == 1
            expr = ex["selectors"][0]["cel"]["expression"]
            want = (f'device.attributes["resource.kubernetes.io"].pciBusID == '
                    f'"0000:{0x18 + 16 * c:02x}:00.0"' if c == 1 else
                    f'device.attributes["gpu.nvidia.com"].uuid == '
                    f'"GPU-{c:08x}-1111-2222-3333-444455556666"')  # fmt: skip
            assert expr == want
            selected.append(c)
        spec = pod["spec"]
        assert spec["resourceClaims"] == [{"name": "cards",
                                           "resourceClaimName": claim["metadata"]["name"]}]  # fmt: skip
        res = spec["containers"][0]["resources"]
        assert res["claims"] == [{"name": "cards"}] and "nvidia.com/gpu" not in res["limits"]
        assert pod["metadata"]["annotations"]["nodeledger/devices"] == "dra"
    assert sorted(selected) == sorted(c for cs in planned.values() for c in cs)
    assert not set(selected) & set(d["lifeboat"])


def test_device_plugin_says_the_plan_is_not_enforced(tmp_path):
    """No card ids in the profile (a preset): the device plugin chooses, and the Pod, its
    header and the report say the planned cards and the lifeboat are not enforced; asking for
    DRA there, or on cards nodeledger knows no DRA driver for, is one line, exit 2."""
    plan = _plan(tmp_path, ["python", "serve.py"])
    r, files = _pods(tmp_path, str(plan), "--machine", "dgx-h100")
    assert "the planned cards and the lifeboat are not enforced" in " ".join(r.stdout.split())
    for _f, text in files:
        (pod,) = _validate(text)
        ann = pod["metadata"]["annotations"]
        assert ann["nodeledger/devices"] == "device-plugin"
        assert (
            "the device plugin (nvidia.com/gpu) chooses the cards" in ann["nodeledger/card-choice"]
        )
        assert "the lifeboat (7) are not enforced" in ann["nodeledger/card-choice"]
        assert "the lifeboat (7) included" in text.splitlines()[1]
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    for machine, words in (("dgx-h100", "have no UUID or PCI bus id in the profile"),
                           ("k100-ai-8x64g", "no DRA driver is modelled for hygon cards")):  # fmt: skip
        r = run_cli("place", str(plan), "--machine", machine, "--emit", "k8s", "--image", "a/b:1",
                    "--k8s-devices", "dra", "-o", str(tmp_path / "no"))  # fmt: skip
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "no").exists()
    r = run_cli("place", str(plan), "--machine", "dgx-h100", "--k8s-devices", "dra")
    assert r.returncode == 2 and "--k8s-devices applies to --emit k8s" in r.stderr
