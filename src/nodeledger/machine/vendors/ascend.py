"""Huawei Ascend: NPUs under CANN (npu-smi)."""

from nodeledger.machine.vendors.base import ExporterNames, HostPath, Sampler, VendorSpec, register

SPEC = register(
    VendorSpec(
        name="huawei",
        label="Ascend",
        runtime="CANN",
        launch_visible="ASCEND_RT_VISIBLE_DEVICES",
        # ASCEND_RT_VISIBLE_DEVICES lists the logical devices a process sees (CANN docs)
        visible_filters=("ASCEND_RT_VISIBLE_DEVICES",),
        index_name="ASCEND_RT index",
        device_file="/dev/davinci{i}",
        k8s_resource="huawei.com/Ascend910",  # Ascend device plugin (910 family)
        share_note="shares its card: split it into vNPUs (npu-smi set -t create-vnpu) where "
        "the chip supports it",
        # Slurm names the job's cards in SLURM_JOB_GPUS (gres.conf order = /dev/davinciN);
        # Ascend's runtime reads ASCEND_RT_VISIBLE_DEVICES, which Slurm does not set
        sbatch_env_lines=(
            'ASCEND_RT_VISIBLE_DEVICES="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"',
            "export ASCEND_RT_VISIBLE_DEVICES",
        ),
        exporter_host_paths=(
            HostPath("dev", "/dev", True),
            HostPath("ascend-driver", "/usr/local/Ascend/driver", True),
            HostPath("npu-smi", "/usr/local/sbin/npu-smi", True),
        ),
        exporter_privileged=True,  # npu-smi opens /dev/davinci_manager
        # MindX DL npu-exporter (npu_chip_info_hbm_used_memory / _hbm_total_memory in MB = MiB,
        # npu_chip_info_utilization %, labels id, model_name, vdie_id), as queried by public
        # dashboards and HAMi's metrics generator
        exporter_names=ExporterNames(
            used="npu_chip_info_hbm_used_memory",
            total="npu_chip_info_hbm_total_memory",
            free=None,
            util="npu_chip_info_utilization",
            labels=(("id", "index"), ("model_name", "name"), ("vdie_id", "uuid")),
        ),
        device_label_prefix="davinci",
        samplers=(Sampler("npu-smi", "nodeledger.watch.backends:open_npu_smi", 70),),
        default_card_class="datacenter",
        card_probe="nodeledger.machine.probe.others:probe_ascend_cards",
        probe_tools=("npu-smi",),
    )
)
