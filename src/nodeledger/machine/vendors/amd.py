"""AMD: ROCm cards (amdsmi library, amd-smi, rocm-smi)."""

from nodeledger.machine.vendors.base import ExporterNames, HostPath, Sampler, VendorSpec, register

SPEC = register(
    VendorSpec(
        name="amd",
        label="AMD",
        runtime="ROCm",
        launch_visible="HIP_VISIBLE_DEVICES",
        # ROCR_VISIBLE_DEVICES filters first, then HIP_VISIBLE_DEVICES (ROCm docs, "GPU
        # isolation techniques")
        visible_filters=("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
        index_name="HIP index",
        device_file="/dev/dri/renderD{r}",
        k8s_resource="amd.com/gpu",  # ROCm k8s-device-plugin
        share_note="shares its card: ROCm time-slices processes (no MPS); or a compute partition "
        "(MI300 CPX) where the card has one",
        # the render nodes' access, as AMD's device-metrics-exporter runs
        exporter_host_paths=(HostPath("kfd", "/dev/kfd"), HostPath("dri", "/dev/dri")),
        exporter_privileged=True,
        # ROCm/device-metrics-exporter docs/configuration/metricslist.md and configmap.md @
        # afd0fe81 (GPU_USED_VRAM / GPU_TOTAL_VRAM / GPU_FREE_VRAM "in MB" = MiB,
        # GPU_GFX_ACTIVITY %; labels that "are always set", as its example series print them)
        exporter_names=ExporterNames(
            used="gpu_used_vram",
            total="gpu_total_vram",
            free="gpu_free_vram",
            util="gpu_gfx_activity",
            labels=(
                ("gpu_id", "index"),
                ("serial_number", ""),
                ("card_model", "name"),
                ("hostname", "hostname"),
                ("gpu_partition_id", ""),
                ("gpu_compute_partition_type", ""),
            ),
        ),
        samplers=(
            Sampler("amdsmi", "nodeledger.watch.backends:open_amdsmi", 30, library="amdsmi"),
            Sampler("amd-smi", "nodeledger.watch.backends:open_amd_smi", 40),
            # after Hygon's hy-smi: DTK ships a rocm-smi too, and hy-smi reads DCUs better
            Sampler("rocm-smi", "nodeledger.watch.backends:open_rocm_smi", 60),
        ),
        rocm_runtime=True,
        vllm_rocm_figures=True,
        default_card_class="datacenter",
        card_probe="nodeledger.machine.probe.others:probe_amd_cards",
        probe_tools=("amd-smi", "rocm-smi"),
    )
)
