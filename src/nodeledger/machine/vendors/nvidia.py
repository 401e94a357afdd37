"""NVIDIA: CUDA cards (NVML, nvidia-smi)."""

from nodeledger.machine.vendors.base import Sampler, VendorSpec, register

SPEC = register(
    VendorSpec(
        name="nvidia",
        label="NVIDIA",
        runtime="CUDA",
        launch_visible="CUDA_VISIBLE_DEVICES",
        visible_filters=("CUDA_VISIBLE_DEVICES",),
        index_name="CUDA index",
        device_order_env="CUDA_DEVICE_ORDER",
        # CUDA's default order is FASTEST_FIRST; PCI order makes the index the smi's (CUDA docs)
        launch_env=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
        device_file="/dev/nvidia{i}",
        k8s_resource="nvidia.com/gpu",  # NVIDIA device plugin
        # NVIDIA's DRA driver (k8s-dra-driver-gpu): DeviceClass and attribute domain
        dra_class="gpu.nvidia.com",
        share_note="shares its card: run under MPS (nvidia-cuda-mps-control -d) or give each "
        "replica a MIG slice (A100/H100/H200 class)",
        exporter_env=(("NVIDIA_VISIBLE_DEVICES", "all"),),  # NVIDIA's container runtime
        device_label_prefix="nvidia",  # dcgm-exporter's device label: nvidia0 ...
        samplers=(
            Sampler("nvml", "nodeledger.watch.backends:open_nvml", 10, library="nvidia-ml-py"),
            Sampler("nvidia-smi", "nodeledger.watch.backends:open_nvidia_smi", 20),
        ),
        vllm_marlin=True,
        nvidia_settings=True,
        card_probe="nodeledger.machine.probe.nvidia:probe_cards",
    )
)
