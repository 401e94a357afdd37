"""Kubernetes: the exporter's DaemonSet (every vendor, both scrape modes), the Pods `place
--emit k8s` writes and the Service validate against the Kubernetes OpenAPI schema offline
(kubernetes-validate, strict); the NFD feature file labels what the Pods select by."""

from __future__ import annotations

import re

import pytest
import yaml

from conftest import run_cli

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the test extra)")
K8S = "1.31.0"


def _validate(text: str) -> list[dict]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        kv.validate(d, K8S, strict=True)  # raises ValidationError on any schema breach
    return docs


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "hygon", "huawei"])
@pytest.mark.parametrize("host_network", [False, True])
def test_daemonset_validates(vendor, host_network):
    args = ["k8s", "daemonset", "--image", "registry.example/nodeledger:0.1", "--vendor", vendor]
    if host_network:
        args.append("--host-network")
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    docs = _validate(r.stdout)
    ds = docs[0]
    assert ds["kind"] == "DaemonSet" and ds["spec"]["template"]["spec"]["hostPID"] is True
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["nodeledger"] and c["args"][0] == "exporter"
    if host_network:
        assert len(docs) == 1 and "127.0.0.1:9835" in c["args"]
    else:
        assert docs[1]["kind"] == "Service" and "--expose" in c["args"]


def test_daemonset_bad_input_is_one_line():
    for args, words in ((["--image", "bad image"], "not an image reference"),
                        (["--image", "a/b:1", "--vendor", "intel"], "--vendor"),
                        (["--image", "a/b:1", "--namespace", "Bad_NS"], "namespace"),
                        (["--image", "a/b:1", "--node-selector", "x"], "KEY=VALUE")):  # fmt: skip
        r = run_cli("k8s", "daemonset", *args)
        assert r.returncode == 2 and words in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_features_file_labels_what_the_pods_select(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text('[[workloads]]\nid = "s"\nmodel = "qwen3-8b"\njob = "serve"\nreplicas = 2\n')
    r = run_cli("k8s", "features", "--machine", "k100-ai-8x64g", "--plan", str(plan))
    assert r.returncode == 0, r.stderr
    labels = {}
    for line in r.stdout.splitlines():
        if line.startswith("#"):
            continue
        k, _, v = line.partition("=")  # NFD local feature file: name=value
        assert re.fullmatch(r"nodeledger\.feature\.node\.kubernetes\.io/[a-z-]+", k), k
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", v), v
        labels[k] = v
    p = "nodeledger.feature.node.kubernetes.io/"
    assert labels[p + "card-kind"] == "K100_AI" and labels[p + "card-count"] == "8"
    assert labels[p + "card-memory-gib"] == "64" and labels[p + "host-ram-gib"] == "125"
    assert labels[p + "lifeboat-card"] == "7" and labels[p + "numa-nodes"] == "8"
    out = tmp_path / "k8s"
    r = run_cli("place", str(plan), "--machine", "k100-ai-8x64g", "--emit", "k8s", "--image",
                "registry.example/serve:1", "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    pods = [d for f in sorted(out.glob("*.yaml")) for d in _validate(f.read_text())]
    assert len(pods) == 2
    for pod in pods:
        assert all(labels.get(k) == v for k, v in pod["spec"]["nodeSelector"].items())
