"""A vendor nodeledger has never heard of, added the way a real one is: this one module.

Nothing else in the package is touched: the profile accepts ``vendor = "acme"``, and place,
its Slurm and Kubernetes files, doctor's pre-flight, the device identity table, the exporter and
its DaemonSet all take Acme's names from here.  (A real vendor adds its probe, parsers and data
beside it.)  ``tests/test_vendors.py`` imports it and removes it again."""

from nodeledger.machine.profile import Accelerator
from nodeledger.machine.vendors import ExporterNames, HostPath, VendorSpec, register


def probe_cards(r, notes, ctx):
    """Acme's card probe: a real one would run acme-smi through ``r`` and parse its output; this
    one reports two cards when the runner's root holds the fake tool's answer."""
    text = r.read("/opt/acme/cards")
    if not text:
        return None
    cards = [Accelerator(index=i, vendor="acme", product=name.strip(), sources={"product": "acme-smi"})
             for i, name in enumerate(text.splitlines()) if name.strip()]  # fmt: skip
    return cards, None, None


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
        watch_backends=("acme-smi",),
        default_card_class="datacenter",
        card_probe="fake_vendor_acme:probe_cards",
        probe_tools=("acme-smi",),
    )
)
