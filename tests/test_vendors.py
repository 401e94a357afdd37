"""The vendor axis: one module per vendor (machine/vendors), and no consumer that branches on a
vendor's name.  A fake vendor (tests/fake_vendor_acme.py) is added by that one module and every
consumer that needs a vendor's names takes them from it."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nodeledger.errors import InputError
from nodeledger.fleet.kubernetes import daemonset
from nodeledger.machine import resolve_machine
from nodeledger.machine.identity import device_identity
from nodeledger.machine.profile import Accelerator, MachineProfile, to_json, validate
from nodeledger.machine.vendors import Vendor, names, of_backend, spec, unregister
from nodeledger.model import load_model
from nodeledger.placement import emit
from nodeledger.placement.planner import plan
from nodeledger.verdict.catalogue import parse_catalogue

SRC = Path(__file__).resolve().parents[1] / "src" / "nodeledger"
HERE = Path(__file__).resolve().parent

PLAN = """
[[workloads]]
id = "chat"
model = "qwen3-8b"
job = "serve"
replicas = 3
context = 4096
concurrency = 4
"""


@pytest.fixture
def acme():
    """Register the fake vendor (its module's import) and remove it afterwards."""
    sys.path.insert(0, str(HERE))
    try:
        mod = importlib.import_module("fake_vendor_acme")
        importlib.reload(mod)  # registered again if an earlier test removed it
        yield mod.SPEC
    finally:
        unregister("acme")
        sys.path.remove(str(HERE))


def _acme_box() -> MachineProfile:
    m = resolve_machine("dgx-h100")
    cards = [
        validate(Accelerator, {**dataclasses.asdict(a), "vendor": "acme", "product": "Acme X1"})
        for a in m.accelerators
    ]
    return replace(m, **{"accelerators": cards})


def _plan(machine, share=False):
    ws = parse_catalogue(PLAN, "test plan")
    return plan(machine, ws, {w.model: load_model(w.model)[0] for w in ws}, share=share)


def test_builtin_vendors_in_their_order():
    assert names() == ("nvidia", "amd", "hygon", "huawei", "other")
    assert Vendor.nvidia == "nvidia" and Vendor("amd").value == "amd"
    assert spec("no-such-vendor").name == "other" and spec(None).name == "other"
    assert of_backend("npu-smi").name == "huawei" and of_backend("fake:dead-owner") is None


def test_a_vendor_that_is_not_a_name_gets_the_same_words():
    for bad in (3, None, "NVIDIA"):
        with pytest.raises(
            ValueError, match="Input should be 'nvidia', 'amd', 'hygon', 'huawei' or"
        ):
            validate(Accelerator, {"index": 0, "vendor": bad, "product": "x"})


def test_a_vendor_name_cannot_shadow_str():
    from nodeledger.machine.vendors import VendorSpec, register

    for name in ("value", "title", "Acme", "a b"):
        with pytest.raises(ValueError, match="lower-case identifier"):
            register(VendorSpec(name=name, label="x", runtime="x", launch_visible="X",
                                device_file="/dev/x{i}", k8s_resource="x/y"))  # fmt: skip
    assert Vendor.nvidia.value == "nvidia"


def test_unknown_vendor_refused_until_its_module_registers_it(acme):
    unregister("acme")
    with pytest.raises(ValueError, match="Input should be 'nvidia', 'amd'"):
        validate(Accelerator, {"index": 0, "vendor": "acme", "product": "Acme X1"})
    with pytest.raises(ValueError, match="not a vendor nodeledger knows"):
        Vendor("acme")
    importlib.reload(sys.modules["fake_vendor_acme"])
    a = validate(Accelerator, {"index": 0, "vendor": "acme", "product": "Acme X1"})
    assert a.vendor == Vendor.acme and to_json(a)["vendor"] == "acme"


def test_place_and_its_exports_take_the_vendors_names(acme):
    m = _acme_box()
    res = _plan(m)
    r = res["replicas"][0]
    assert r["env"] == {"ACME_VISIBLE_DEVICES": str(r["cards"][0]), "ACME_DEVICE_ORDER": "PCI"}
    assert r["launch"].startswith(f"ACME_VISIBLE_DEVICES={r['cards'][0]} ACME_DEVICE_ORDER=PCI ")
    assert "File=/dev/acme0" in emit.gres_conf(m, "node1")
    script = emit.sbatch_scripts(m, res, {})["chat"]
    assert 'ACME_VISIBLE_DEVICES="${SLURM_JOB_GPUS:-}"\nexport ACME_VISIBLE_DEVICES' in script
    assert "CUDA_DEVICE_ORDER" not in script
    pod = next(iter(emit.k8s_pods(m, res, {}, image="reg/x:1").values()))
    assert "acme.example/npu: 1" in pod and "no DRA driver is modelled for acme cards" in pod
    assert "CUDA_DEVICE_ORDER" not in pod and "ACME_DEVICE_ORDER" in pod
    with pytest.raises(InputError, match="no DRA driver is modelled for acme"):
        emit.k8s_devices(m, res, "dra")


def test_shared_card_note_is_the_vendors(acme):
    # 10 small replicas on 7 business cards: three share a card
    ws = parse_catalogue(PLAN.replace("qwen3-8b", "qwen3-0.6b").replace("replicas = 3",
                                                                          "replicas = 10"), "t")  # fmt: skip
    res = plan(_acme_box(), ws, {w.model: load_model(w.model)[0] for w in ws}, share=True)
    shared = [r for r in res["replicas"] if r["shared"]]
    assert len(shared) >= 1
    assert {r["note"] for r in shared} == {acme.share_note}


def test_preflight_identity_daemonset_and_exporter(acme):
    pf = importlib.import_module("nodeledger.doctor.preflight")
    m = _acme_box()
    lines = pf._binding_lines(m.accelerators[:2], None)
    assert lines and all(ln.startswith("ACME_VISIBLE_DEVICES=0,1 ") for ln in lines)
    ident = device_identity(m, env={"ACME_VISIBLE_DEVICES": "3,1"})
    assert ident["index_name"] == "ACME index"
    assert [r["smi_index"] for r in ident["rows"] if r["runtime_index"] is not None] == [1, 3]
    docs = daemonset("reg/x:1", vendor="acme", host_network=True)
    pod = docs[0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert {"name": "acme", "mountPath": "/dev/acme", "readOnly": True} in c["volumeMounts"]
    assert c["securityContext"] == {"privileged": True}
    assert not any(e["name"] == "NVIDIA_VISIBLE_DEVICES" for e in c["env"])
    with pytest.raises(InputError, match="is not one of nvidia, amd, hygon, huawei, other, acme"):
        daemonset("reg/x:1", vendor="bogus", host_network=True)
    # the exporter serves Acme's own metric names, labelled as Acme's exporter labels a chip
    from nodeledger.watch.analyze import Analyzer
    from nodeledger.watch.exporter import families

    header = {"backend": "acme-smi", "machine": {"cards": [{"index": 0, "name": "Acme X1"}]}}
    sample = {"t": 1.0, "cards": [{"index": 0, "used_bytes": 3 * 2**30, "total_bytes": 2**36,
                                   "util_pct": 40.0}], "host": {}}  # fmt: skip
    fams = {f.name: f for f in families(sample, header, Analyzer(header, None), {})}
    (used,) = fams["acme_mem_used_mib"].samples
    assert used.value == 3 * 1024 and used.labels == {"chip": "0", "model": "Acme X1"}
    assert fams["acme_busy_pct"].samples[0].value == 40.0
    assert "DCGM_FI_DEV_FB_USED" not in fams


def test_the_live_probe_runs_the_vendors_card_probe(acme, tmp_path):
    from nodeledger.machine.probe.probe import probe_machine
    from nodeledger.machine.probe.runner import Runner

    (tmp_path / "opt" / "acme").mkdir(parents=True)
    (tmp_path / "opt" / "acme" / "cards").write_text("Acme X1\nAcme X1\n")
    prof = probe_machine(Runner(root=tmp_path))
    assert [(a.index, a.vendor, a.product) for a in prof.accelerators] == [
        (0, "acme", "Acme X1"), (1, "acme", "Acme X1")]  # fmt: skip
    assert "acme-smi: absent (not on PATH)" in prof.notes
    unregister("acme")
    assert probe_machine(Runner(root=tmp_path)).accelerators == []


def test_watch_samples_the_vendors_cards_through_its_sampler(acme, tmp_path):
    from nodeledger.machine.probe.runner import Runner
    from nodeledger.watch.backends import backend_names, open_backend

    (tmp_path / "opt" / "acme").mkdir(parents=True)
    (tmp_path / "opt" / "acme" / "cards").write_text("Acme X1\nAcme X1\n")
    assert backend_names()[-1] == "acme-smi"
    for name in ("acme-smi", "auto"):  # auto: every other sampler finds nothing here
        b = open_backend(name, runner=Runner(root=tmp_path))
        assert b.name == "acme-smi" and [c["index"] for c in b.cards] == [0, 1]
        assert [s["used_bytes"] for s in b.sample()] == [2**30, 2**30]


# -- no vendor branches outside machine/vendors ------------------------------------------------

VENDOR_WORDS = {"nvidia", "amd", "hygon", "huawei", "ascend"}
# where a vendor's name is the subject: its module, its tool parsers, its probes and samplers
# (the probes and samplers are the next to move into machine/vendors)
VENDOR_HOMES = ("machine/vendors/", "machine/parsers/", "machine/probe/", "watch/backends.py")


def _vendor_branches(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "Vendor" and node.attr in VENDOR_WORDS):  # fmt: skip
            found.append(f"{node.lineno}: Vendor.{node.attr}")
        consts = []
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                consts += side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        elif isinstance(node, ast.Dict):
            consts = [k for k in node.keys if k is not None]
        for c in consts:
            if (isinstance(c, ast.Constant) and isinstance(c.value, str)
                    and c.value.lower() in VENDOR_WORDS):  # fmt: skip
                found.append(f"{node.lineno}: {c.value!r}")
    return found


def test_no_consumer_branches_on_a_vendor_name():
    bad = {}
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC).as_posix()
        if rel.startswith(VENDOR_HOMES):
            continue
        hits = _vendor_branches(p)
        if hits:
            bad[rel] = hits
    assert not bad, f"vendor names compared or keyed outside machine/vendors: {bad}"


def test_the_scan_finds_a_branch():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.py"
        p.write_text('if a.vendor.value == "nvidia":\n    pass\nX = {Vendor.amd: 1}\n')
        assert _vendor_branches(p) == ["1: 'nvidia'", "3: Vendor.amd"]
