"""A card of a vendor nodeledger has no module for.  Where a consumer needs a name it has none
for (the variable that pins a process to its cards, the device plugin's resource), CUDA's is
written, as for every card before vendors had modules: most CUDA-compatible runtimes honour it."""

from nodeledger.machine.vendors.base import VendorSpec, register

SPEC = register(
    VendorSpec(
        name="other",
        label="other",
        runtime="unknown",
        launch_visible="CUDA_VISIBLE_DEVICES",  # assumed (see above)
        device_file="/dev/nvidia{i}",  # assumed
        k8s_resource="nvidia.com/gpu",  # assumed
        exporter_env=(("NVIDIA_VISIBLE_DEVICES", "all"),),
    )
)
