"""Hygon: DCU cards under DTK (hy-smi; DTK's rocm-smi)."""

from nodeledger.machine.vendors.base import HostPath, Sampler, VendorSpec, register

SPEC = register(
    VendorSpec(
        name="hygon",
        label="Hygon",
        runtime="DTK",
        launch_visible="HIP_VISIBLE_DEVICES",
        visible_filters=("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),  # DTK is ROCm's fork
        index_name="HIP index",
        device_file="/dev/dri/renderD{r}",
        k8s_resource="hygon.com/dcu",  # Hygon DCU device plugin
        share_note="shares its card: the DCU time-slices processes (no MPS equivalent)",
        exporter_host_paths=(HostPath("kfd", "/dev/kfd"), HostPath("dri", "/dev/dri")),
        exporter_privileged=True,
        # Hygon's DCU exporter names are not documented in a public source found: hy-smi keeps
        # dcgm-exporter's
        samplers=(Sampler("hy-smi", "nodeledger.watch.backends:open_rocm_smi", 50),),
        rocm_runtime=True,
        # vLLM's ROCm fp8 padding and graph memory were measured on AMD cards, not on DTK
        vllm_rocm_figures=False,
        default_card_class="datacenter",
        # found by the AMD-family probe (hy-smi first, then amd-smi, rocm-smi)
        probe_tools=("hy-smi",),
    )
)
