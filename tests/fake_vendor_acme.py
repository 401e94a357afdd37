"""A vendor nodeledger has never heard of, added the way a real one is: this one module.

Nothing else in the package is touched: the profile accepts ``vendor = "acme"``, and place,
its Slurm and Kubernetes files, doctor's pre-flight, the device identity table, the live probe,
``watch --backend acme-smi`` (and ``auto``), the exporter and its DaemonSet all take Acme's names
and code from here.  (A real vendor adds its probe, parsers and data
beside it.)  ``tests/test_vendors.py`` imports it and removes it again."""

from nodeledger.machine.profile import Accelerator
from nodeledger.machine.vendors import ExporterNames, HostPath, Sampler, VendorSpec, register


def probe_cards(r, notes, ctx):
    """Acme's card probe: a real one would run acme-smi through ``r`` and parse its output; this
    one reports two cards when the runner's root holds the fake tool's answer."""
    text = r.read("/opt/acme/cards")
    if not text:
        return None
    cards = [Accelerator(index=i, vendor="acme", product=name.strip(), sources={"product": "acme-smi"})
             for i, name in enumerate(text.splitlines()) if name.strip()]  # fmt: skip
    return cards, None, None


class AcmeSmiBackend:
    """Acme's watch sampler (the interface of nodeledger.watch.base.Backend): a real one would
    run acme-smi through the runner; this one reads the fake tool's answer under its root."""

    name = "acme-smi"
    describe_note = None

    def __init__(self, r):
        self.r = r

    def describe(self) -> list[dict]:
        text = self.r.read("/opt/acme/cards") or ""
        return [{"index": i, "name": n.strip(), "uuid": None, "pci_bus_id": None,
                 "total_bytes": 64 * 2**30, "numa_node": None}
                for i, n in enumerate(text.splitlines()) if n.strip()]  # fmt: skip

    def sample(self) -> list[dict]:
        return [{"index": c["index"], "used_bytes": 2**30, "total_bytes": c["total_bytes"],
                 "util_pct": 50.0, "processes": []} for c in self.describe()]  # fmt: skip

    def close(self) -> None:
        pass


def open_acme_smi(name, r, timeout):
    return AcmeSmiBackend(r)


SPEC = register(
    VendorSpec(
        name="acme",
        label="Acme",
        runtime="AcmeRT",
        launch_visible="ACME_VISIBLE_DEVICES",
        visible_filters=("ACME_VISIBLE_DEVICES",),
        index_name="ACME index",
        launch_env=(("ACME_DEVICE_ORDER", "PCI"),),
        device_file="/dev/acme{i}",
        k8s_resource="acme.example/npu",
        share_note="shares its card: carve an Acme slice (acme-smi slice create)",
        sbatch_env_lines=(
            'ACME_VISIBLE_DEVICES="${SLURM_JOB_GPUS:-}"',
            "export ACME_VISIBLE_DEVICES",
        ),
        exporter_host_paths=(HostPath("acme", "/dev/acme", True),),
        exporter_privileged=True,
        exporter_names=ExporterNames(
            used="acme_mem_used_mib",
            total="acme_mem_total_mib",
            free=None,
            util="acme_busy_pct",
            labels=(("chip", "index"), ("model", "name")),
        ),
        device_label_prefix="acme",
        samplers=(Sampler("acme-smi", "fake_vendor_acme:open_acme_smi", 80),),
        default_card_class="datacenter",
        card_probe="fake_vendor_acme:probe_cards",
        probe_tools=("acme-smi",),
    )
)
