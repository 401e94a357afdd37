"""Readers of logs: the kernel's OOM-killer and memory-cgroup reports (``kernel``), accelerator
runtimes' and frameworks' out-of-memory errors of every wording (``accel``: PyTorch CUDA / HIP /
NPU, cuBLAS, NCCL), serving engines' and job launchers' lines (``jobs``), each into
``incidents.Incident``; ``lines`` bounds every read, ``logtime`` and ``units`` read times and
sizes as the logs print them.  Below ``triage`` (which links and explains the incidents) and
beside ``machine.parsers``: text in, incidents out."""
