"""One device identity per card: smi index, the runtime index under the environment, PCI bus,
/dev node and minor, NUMA node (machine/identity.py)."""

from __future__ import annotations

from nodeledger.machine.identity import device_identity, read_dev_nodes
from nodeledger.machine.profile import Accelerator, MachineProfile

BUS = ["0000:c1:00.0", "0000:17:00.0", "0000:5a:00.0", "0000:9c:00.0"]


def _box(vendor="nvidia", products=("H100",) * 4):
    return MachineProfile(name="t", accelerators=[
        Accelerator(index=i, vendor=vendor, product=products[i], pci_bus_id=BUS[i], numa_node=i // 2,
                    uuid=f"GPU-{i}aaa-{i}") for i in range(4)])  # fmt: skip


def _runtime(ident):
    return {r["smi_index"]: r["runtime_index"] for r in ident["rows"]}


def test_cuda_pci_order_and_visible_devices():
    # PCI order of the four cards: 17 (smi 1), 5a (smi 2), 9c (smi 3), c1 (smi 0)
    ident = device_identity(_box(), env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert _runtime(ident) == {1: 0, 2: 1, 3: 2, 0: 3}
    vis = device_identity(
        _box(), env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3,0"}
    )
    # indices into that order, in the listed order: 3 -> smi 0, 0 -> smi 1
    assert _runtime(vis) == {0: 0, 1: 1, 2: None, 3: None}
    assert [r["visible"] for r in vis["rows"]] == [True, True, False, False]


def test_visible_devices_by_uuid_and_stopping_at_a_bad_entry():
    ident = device_identity(_box(), env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                         "CUDA_VISIBLE_DEVICES": "GPU-2aaa,7,0"})  # fmt: skip
    assert _runtime(ident)[2] == 0 and sum(r["visible"] for r in ident["rows"]) == 1
    assert any("stops at '7'" in n for n in ident["notes"])


def test_fastest_first_is_said_to_be_assumed_or_unknown():
    same = device_identity(_box(), env={})
    assert any("not guaranteed" in n for n in same["notes"]) and _runtime(same)[1] == 0
    mixed = device_identity(_box(products=("H100", "A100", "H100", "A100")), env={})
    assert all(r["runtime_index"] is None for r in mixed["rows"])
    assert any("order is unknown" in n for n in mixed["notes"])


def test_rocr_filters_before_hip():
    ident = device_identity(_box("amd", ("MI300X",) * 4),
                            env={"ROCR_VISIBLE_DEVICES": "0,1,2", "HIP_VISIBLE_DEVICES": "2"})  # fmt: skip
    # PCI order: smi 1, 2, 3, 0; ROCR keeps 1, 2, 3; HIP's 2 of those is smi 3
    assert [r["smi_index"] for r in ident["rows"] if r["visible"]] == [3]
    assert ident["index_name"] == "HIP index"


def test_dev_nodes_from_procfs_and_sysfs(tmp_path):
    nv = tmp_path / "proc/driver/nvidia/gpus/0000:17:00.0"
    nv.mkdir(parents=True)
    (nv / "information").write_text("Model: NVIDIA H100\nDevice Minor: 	 5\n")
    drm = tmp_path / "sys/bus/pci/devices/0000:C1:00.0/drm/renderD130"
    drm.mkdir(parents=True)
    nodes = read_dev_nodes(str(tmp_path))
    assert nodes == {
        "0000:17:00.0": ("/dev/nvidia5", 5),
        "0000:c1:00.0": ("/dev/dri/renderD130", 130),
    }
    ident = device_identity(_box(), env={}, dev_nodes=nodes)
    rows = {r["smi_index"]: r for r in ident["rows"]}
    assert rows[1]["dev_node"] == "/dev/nvidia5" and rows[1]["dev_minor"] == 5
    assert rows[3]["dev_node"] is None  # not found: unknown, not guessed
    assert read_dev_nodes(str(tmp_path / "absent")) == {}
    # nvidia-smi and NVML spell the bus with an 8-digit domain: the same card
    smi = _box()
    smi.accelerators[1].pci_bus_id = "00000000:17:00.0"
    row = {r["smi_index"]: r for r in device_identity(smi, env={}, dev_nodes=nodes)["rows"]}[1]
    assert row["dev_node"] == "/dev/nvidia5"


def test_machine_show_json_carries_the_identity_table():
    from conftest import cli_json

    d = cli_json("machine", "show", "dgx-h100")
    ident = d["device_identity"]
    assert len(ident["rows"]) == 8 and ident["index_name"] == "CUDA index"
    assert {"smi_index", "runtime_index", "pci_bus_id", "dev_node", "dev_minor", "numa_node",
            "uuid"} <= set(ident["rows"][0])  # fmt: skip
