"""Recorded outputs against recorded parses (the jc habit).

Every real tool output we keep — ``../shared/fixtures/real`` (vendor tools, OOM logs,
nccl-tests) and the project's own ``tests/fixtures`` — is mapped, in ``FIXTURE_KINDS`` below,
to the kind it is; ``tests/expected/<root>/<folder>/<file>.json`` holds
``{"kind": KIND, "parsed": <the parse>}`` as the parsers produced it when the file was last
reviewed (or ``{"kind": KIND, "error": {"type", "message"}}`` when the parser rejects the file).
Each test parses the file again and compares exactly, so any change in any parser's output on
real data shows up as a failing test and, after ``tests/regen_expected.py``, as a diff to review.

Parsers: ``nodeledger.machine.parsers.parse_kind`` for the tool kinds; two kinds of our own
here: ``oom-log`` (``nodeledger.triage.report.parse_text``, incidents via ``to_dict()``, no
fixes attached) and ``nccl-tests`` (``parse_nccl_tests``, from the parsers package when it has
moved there, else ``nodeledger.bench.nccl``).

``../shared`` is not part of the repository: its fixtures skip when it is absent
(``NODELEDGER_SHARED`` points elsewhere, see ``conftest.py``).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, SHARED
from nodeledger.errors import NodeledgerError

REAL = SHARED / "fixtures" / "real"
EXPECTED = Path(__file__).resolve().parent / "expected"
ENGINE_LOGS = Path(__file__).resolve().parents[1] / "benchmarks" / "engines" / "logs"
ROOTS = {"shared": REAL, "local": FIXTURES, "engines": ENGINE_LOGS}

OOM = "oom-log"  # nodeledger.triage.report.parse_text
NCCL = "nccl-tests"  # parse_nccl_tests

# files recorded as "$ command" ... "[exit N]": those two lines are the recorder's, not the tool's
FRAMED = ("local/h200/",)

_TOPO = "nvidia-smi-topo"
_SMI = "nvidia-smi"
_Q = "nvidia-smi-q"
_XML = "nvidia-smi-q-xml"
_CSV = "nvidia-smi-csv"

# relative path ("shared/..." = ../shared/fixtures/real/..., "local/..." = tests/fixtures/...) -> kind
FIXTURE_KINDS: dict[str, str] = {
    # -- ../shared/fixtures/real ------------------------------------------------------------
    "shared/nvidia-topo/autodl-2x-2080ti-pix.txt": _TOPO,
    "shared/nvidia-topo/gengwg-dgx-a100-12mlx5-nps4.txt": _TOPO,
    "shared/nvidia-topo/gengwg-dgx1-topo-mp-pcie-only.txt": _TOPO,
    "shared/nvidia-topo/glm52-8x-h200-10nic.txt": _TOPO,
    "shared/nvidia-topo/gpuallocator17-8x-rtx4090-sys.txt": _TOPO,
    "shared/nvidia-topo/gpuexporter-h100-1gpu-ansi-escape.txt": _TOPO,
    "shared/nvidia-topo/jdh4-della-2x-a100-mlx5-old.txt": _TOPO,
    "shared/nvidia-topo/jdh4-traverse-4x-v100-power9.txt": _TOPO,
    "shared/nvidia-topo/llmaction-8x-a800-nv8-4nic.txt": _TOPO,
    "shared/nvidia-topo/mlengineering-8x-a100-nv12-compact.txt": _TOPO,
    "shared/nvidia-topo/mlengineering-8x-h100-nv18-compact.txt": _TOPO,
    "shared/nvidia-topo/stelline-asus-esc8000a-4x-rtx6000ada.txt": _TOPO,
    "shared/nvidia-topo/stelline-puget-wrx90-2x-rtx6000ada.txt": _TOPO,
    "shared/nvidia-smi-table/gengwg-10x-quadro-rtx8000-drv470-legacy.txt": _SMI,
    "shared/nvidia-smi-table/gls-h100-sxm-x8.txt": _SMI,
    "shared/nvidia-smi-table/gls-rtx4090-x8.txt": _SMI,
    "shared/nvidia-smi-table/gpuexporter-h100-drv590-load-processes.txt": _SMI,
    "shared/nvidia-smi-table/gpuexporter-h200-mig-drv590-load.txt": _SMI,
    "shared/nvidia-smi-table/gpuexporter-rtx2080super-linux-drv610-kmd-umd.txt": _SMI,
    "shared/nvidia-smi-table/gpuexporter-rtx4080super-drv595-desktop-mixed-procs.txt": _SMI,
    "shared/nvidia-smi-table/gpuexporter-windows-rtx2080super-drv610-wddm-processes.txt": _SMI,
    "shared/nvidia-smi-table/stelline-asus-esc8000a-4x-rtx6000ada.txt": _SMI,
    "shared/nvidia-query/gls-a100-sxm4-x4-q.txt": _Q,
    "shared/nvidia-query/gls-gh200-q.txt": _Q,
    "shared/nvidia-query/gpuexporter-h200-mig-load-q.txt": _Q,
    "shared/nvidia-query/jdh4-della-h100-q.txt": _Q,
    "shared/nvidia-query/netdata-a100-sxm4-40gb-mig-q-x.xml.txt": _XML,
    "shared/nvidia-query/netdata-rtx3060-laptop-q-x-processes.xml.txt": _XML,
    "shared/nvidia-query/netdata-rtx4090-drv535-q-x.xml.txt": _XML,
    "shared/nvidia-query/gpuexporter-h100-load-query-compute-apps.csv.txt": _CSV,
    "shared/nvidia-query/gpuexporter-h100-load-query-gpu-all-fields.csv.txt": _CSV,
    "shared/nvidia-query/netdata-tesla-p100-query-gpu.csv.txt": _CSV,
    "shared/numa/awscs3-403-c5n18xlarge-2node.txt": "numactl",
    "shared/numa/numactl165-threadripper3960x-nps4-memoryless.txt": "numactl",
    "shared/numa/stelline-asus-esc8000a-numactl-H.txt": "numactl",
    "shared/numa/stelline-puget-wrx90-numactl-H-1node.txt": "numactl",
    "shared/numa/jdh4-della-h100-xeon8468-interleaved-lscpu.txt": "lscpu",
    "shared/numa/jdh4-stellar-4socket-xeon8268-lscpu.txt": "lscpu",
    "shared/numa/jdh4-stellar-epyc7h12-nps4-lscpu.txt": "lscpu",
    "shared/numa/jdh4-traverse-power9-lscpu.txt": "lscpu",
    "shared/numa/vllm-ascend-4930-kunpeng920-4socket-lscpu.txt": "lscpu",
    "shared/rocm/gls-mi300x-x4-rocm-smi-a.txt": "rocm-smi-all",
    "shared/rocm/gls-mi300x-x4-rocm-smi.txt": "rocm-smi",
    "shared/rocm/legacyrocm4740-8gpu-showtoponuma.txt": "rocm-smi-showtopo",
    "shared/rocm/marimo9237-rx7900xt-rocm-smi-csv.txt": "rocm-smi-csv",
    "shared/rocm/marimo9237-rx7900xt-rocm-smi-json.txt": "rocm-smi-json",
    "shared/rocm/mlengineering-8x-mi300x-rocm-smi.txt": "rocm-smi",
    "shared/rocm/rocmsmilib108-4gpu-pcie-showtopo.txt": "rocm-smi-showtopo",
    "shared/rocm/rocmsmilib120-2x-rx6800-showmemuse-json.txt": "rocm-smi-json",
    "shared/rocm/rocmsystems2987-mi350x-amd-smi-static-gpu0.txt": "amd-smi-static",
    "shared/rocm/rocsmi90-rocm33-legacy-concise-vega10.txt": "rocm-smi",
    "shared/dcu/flyaibox-k100ai-8x-rocm-smi-showtopo.txt": "rocm-smi-showtopo",
    "shared/dcu/flyaibox-k100ai-8x-rocm-smi.txt": "rocm-smi",
    "shared/dcu/paddlenlp-k100ai-hy-smi.txt": "hy-smi",
    "shared/dcu/wangjunjian-8dcu-hy-smi-manual.txt": "hy-smi",
    "shared/ascend/llmaction-910prob-1npu-python-process.txt": "npu-smi",
    "shared/ascend/vllm-ascend-4930-a3-npu-smi-info.txt": "npu-smi",
    "shared/ascend/vllm-ascend-6512-910b3-x8-npu-smi-info.txt": "npu-smi",
    "shared/oom-kernel/docker1001-memcg-python3-syslog.txt": OOM,
    "shared/oom-kernel/ert-7797-perl-iso-timestamps.txt": OOM,
    "shared/oom-kernel/htop-1408-rustc-killed-modern-trace.txt": OOM,
    "shared/oom-kernel/istio42734-cgroupv1-limit-syslog.txt": OOM,
    "shared/oom-kernel/k8s56891-memcg-java-dmesgT-rhel7.txt": OOM,
    "shared/oom-kernel/photon1535-vmware-guest-memcg-tasks.txt": OOM,
    "shared/oom-kernel/qaconv-19-python-killed-then-trace.txt": OOM,
    "shared/oom-kernel/rlswarm-463-arm64-p2pd-trace.txt": OOM,
    "shared/oom-kernel/rpi-3872-arm32-meminfo-continuation.txt": OOM,
    "shared/oom-accel/cublas-alloc-failed-c10-frames-densematching20.txt": OOM,
    "shared/oom-accel/cublas-alloc-failed-qwen873.txt": OOM,
    "shared/oom-accel/hip-oom-mi355-ci-allowed-fraction-therock2118.txt": OOM,
    "shared/oom-accel/hip-oom-strix-halo-therock1054.txt": OOM,
    "shared/oom-accel/nccl-warn-alloc-oom-calloc-nccl1235.txt": OOM,
    "shared/oom-accel/nccl-warn-enqueue-oom-trtllm1670.txt": OOM,
    "shared/oom-accel/torch-legacy-cached-neurosim28.txt": OOM,
    "shared/oom-accel/torch-legacy-cached-structureflow35.txt": OOM,
    "shared/oom-accel/torch110-maxsplit-hint-gpu1-stripformer21.txt": OOM,
    "shared/oom-accel/torch112-zero-bytes-free-easydiffusion104.txt": OOM,
    "shared/oom-accel/torch15-reserved-mmseg944.txt": OOM,
    "shared/oom-accel/torch21-capacty-process-has-generateu10.txt": OOM,
    "shared/oom-accel/torch21-capacty-this-process-mygirlgpt11.txt": OOM,
    "shared/oom-accel/torch21-no-process-clause-mgfn35.txt": OOM,
    "shared/oom-accel/torch22-expandable-segments-pytorch16417.txt": OOM,
    "shared/oom-accel/vllm-v0-kv-cache-maxseqlen-qwen295.txt": OOM,
    "shared/oom-accel/vllm-v1-kv-cache-needed-vllm16118.txt": OOM,
    "shared/nccl-tests/autodl-2x-2080ti-pcie-allreduce.txt": NCCL,
    "shared/nccl-tests/gcp-a3mega-2node-16x-h100-allreduce.txt": NCCL,
    "shared/nccl-tests/superbench-8x-a100-sxm4-40gb-allreduce-oldformat.txt": NCCL,
    # -- tests/fixtures ---------------------------------------------------------------------
    "local/h200/nvidia_smi_topo__m_.txt": _TOPO,
    "local/h200/nvidia_smi_.txt": _SMI,
    "local/h200/nvidia_smi__q_.txt": _Q,
    "local/h200/nvidia_smi__q__x_.txt": _XML,
    "local/h200/nvidia_smi___query_gpu_index_name_pci_bus_id_uuid_memory_tot.txt": "nvidia-smi-query-csv",
    # header only (no compute processes): the parser currently rejects it, recorded as an error
    "local/h200/nvidia_smi___query_compute_apps_pid_process_name_used_memory.txt": _CSV,
    "local/h200/numactl__H_.txt": "numactl",
    "local/h200/lscpu_.txt": "lscpu",
    "local/amd/amdsmichangelog610-amd-smi-metric-p-json.txt": "amd-smi-metric",
    "local/amd/rocmblogs-mi300x-amd-smi-metric.txt": "amd-smi-metric",
    "local/amd/rocsmi60-showpids.txt": "rocm-smi-pids",
    "local/amd/rocmsystems4405-mi50-showpids-details.txt": "rocm-smi-pids",
    "local/amd/rocmsmilib166-4gpu-showpids-unknown.txt": "rocm-smi-pids",
    "local/amd/legacyrocm4411-mi300-showpids-kfd-open.txt": "rocm-smi-pids",
    "local/amd/oci-mi355x-x8-amd-smi-topology.txt": "amd-smi-topology",
    "local/amd/rocm6074-2x-rx7900xtx-amd-smi-topology.txt": "amd-smi-topology",
    "local/amd/rdme-mi210-amd-smi-static-json.txt": "amd-smi-static-json",
    "local/amd/rocmsystems-doc-mi300a-amd-smi-static.txt": "amd-smi-static",
    "local/ascend/huaweidoc-950-pcie-x8-npu-smi-info-t-topo.txt": "npu-smi-topo",
    "local/ascend/huaweidoc-950-ub-pairs-x8-npu-smi-info-t-topo.txt": "npu-smi-topo",
    "local/ascend/msswift-910b3-x8-npu-smi-info-t-topo.txt": "npu-smi-topo",
    "local/ascend/sglang30453-a3-2chip-sio-npu-smi-info-t-topo.txt": "npu-smi-topo",
    "local/ascend/msswift-910b3-x8-npu-smi-info.txt": "npu-smi",
    "local/amd/amdsmi130-mi300x-amd-smi-monitor.txt": "amd-smi-monitor",
    "local/amd/amdsmi130-mi300x-amd-smi-monitor-process.txt": "amd-smi-monitor",
    "local/amd/rocmblogs-8x-mi300x-amd-smi-monitor-putm.txt": "amd-smi-monitor",
    "local/amd/amdsmichangelog610-8x-amd-smi-monitor-ptumv.txt": "amd-smi-monitor",
    "local/amd/amdsmichangelog630-cpx32-amd-smi-monitor-ptv.txt": "amd-smi-monitor",
    "local/amd/amdsmichangelog620-amd-smi-monitor-q.txt": "amd-smi-monitor",
    "local/amd/rocmsystemsdoc-mi300x-cpx-amd-smi-monitor.txt": "amd-smi-monitor",
    "local/amd/rocmsystemsdoc-mi300a-amd-smi-monitor.txt": "amd-smi-monitor",
    "local/amd/amdsmi130-mi300x-amd-smi-process.txt": "amd-smi-process",
    "local/amd/rocmblogs-8x-mi300x-amd-smi-process.txt": "amd-smi-process",
    "local/amd/rocmblogs-8x-mi300x-amd-smi-process-csv.txt": "amd-smi-process",
    "local/amd/rocm5706-2x-r9700-amd-smi-process-json.txt": "amd-smi-process",
    "local/amd/amdsmichangelog620-amd-smi-process.txt": "amd-smi-process",
    "local/ascend/vllmascend5021-910b2-x8-npu-smi-info.txt": "npu-smi",
    "local/ascend/vllmascend4661-910b2-x8-npu-smi-info.txt": "npu-smi",
    "local/ascend/vllmascend2523-910-x8x2-npu-smi-info.txt": "npu-smi",
    "local/doctor/nvidia-smi-topo-m.txt": _TOPO,
    "local/doctor/nvidia-smi-query-gpu.csv": "nvidia-smi-query-csv",
    "local/oom/job-batch-markers.log": OOM,
    "local/oom/job-dataloader-worker-killed.log": OOM,
    "local/oom/job-torch-card-oom.log": OOM,
    "local/oom/job-torchrun-sigkill.log": OOM,
    "local/oom/job-vendors-hip-npu-blas-nccl.log": OOM,
    "local/oom/job-vllm-serve.log": OOM,
    "local/oom/kernel-dmesg-iso-global-dataloader.txt": OOM,
    "local/oom/kernel-plain-dmesg-memcg-v2.txt": OOM,
    "local/oom/kernel-truncated-half-report.txt": OOM,
}  # fmt: skip

# the folders whose every file must be in FIXTURE_KINDS or excluded below, by name; all of
# ../shared/fixtures/real is covered (its top-level files and every folder), of tests/fixtures
# only the folders of tool outputs (not configs/, watch/ recordings or reference values)
WHOLE_ROOT = {"shared"}
COVERED = {
    "shared": ["nvidia-topo", "nvidia-smi-table", "nvidia-query", "numa", "rocm", "dcu", "ascend",
               "oom-kernel", "oom-accel", "nccl-tests"],
    "local": ["h200", "amd", "ascend", "doctor", "oom"],
    "engines": [],  # benchmarks/engines/logs: every file, each named <engine>-...txt
}  # fmt: skip
WHOLE_ROOT_FLAT = {"engines"}

# serving-engine start-up logs (benchmarks/engines/cases.toml gives each one's source)
FIXTURE_KINDS.update({
    f"engines/{p.name}": ("sglang-log" if p.name.startswith("sglang") else "vllm-log")
    for p in sorted(ENGINE_LOGS.glob("*.txt"))
})  # fmt: skip

# not tool outputs: where the fixtures come from
NOT_TOOL_OUTPUT = {
    "shared/PROVENANCE.tsv",
    "local/h200/PROVENANCE.md",
    "local/amd/PROVENANCE.md",
    "local/ascend/PROVENANCE.md",
    "local/doctor/PROVENANCE.md",
    "local/oom/PROVENANCE.md",
}

# tool outputs that no parse kind reads (yet): give a kind in FIXTURE_KINDS once one does
NO_PARSER = {
    "local/h200/cat__proc_meminfo_.txt": "/proc/meminfo: read by the probe, no parse kind",
    "local/h200/cat__proc_sys_kernel_numa_balancing_.txt": "one number, no parse kind",
    "local/h200/cat__sys_kernel_mm_transparent_hugepage_defrag_.txt": "one sysfs line, no parse kind",
    "local/h200/cat__sys_kernel_mm_transparent_hugepage_enabled_.txt": "one sysfs line, no parse kind",
    "local/h200/uname__a_.txt": "uname -a, no parse kind",
    "local/h200/nvidia_smi_nvlink__s_.txt": "nvidia-smi nvlink -s (empty on one card), no parse kind",
    "local/h200/pynvml.txt": "a JSON read-out of pynvml, not a tool's text",
    "local/doctor/lspci-D-vvv-nonroot.txt": "lspci -D -vvv, no parse kind",
    "local/doctor/lspci-D-vvv-one-switch-acs-redirect.txt": "lspci -D -vvv, no parse kind",
    "local/doctor/lspci-D-vvv-two-switches.txt": "lspci -D -vvv, no parse kind",
    "local/doctor/nvidia-smi-query-compute-apps.csv": (
        "--format=csv,noheader compute apps: no parse kind (nvidia_smi.parse_compute_apps is not "
        "registered; nvidia-smi-csv takes its first row for a header)"
    ),
}


def fixture_path(rel: str) -> Path:
    root, _, rest = rel.partition("/")
    return ROOTS[root] / rest


def expected_path(rel: str) -> Path:
    return EXPECTED / f"{rel}.json"


def root_present(rel: str) -> bool:
    return ROOTS[rel.partition("/")[0]].is_dir()


def read_fixture(rel: str) -> str:
    text = fixture_path(rel).read_text(encoding="utf-8", errors="replace")
    if rel.startswith(FRAMED):
        lines = text.split("\n")
        text = "\n".join(ln for ln in lines if not ln.startswith(("$ ", "[exit ")))
    return text


def _nccl_parse():
    new_home = "nodeledger.machine.parsers.nccl_tests"
    try:
        mod = importlib.import_module(new_home)
    except ModuleNotFoundError as exc:
        if exc.name != new_home:
            raise  # it exists but something it imports does not
        mod = importlib.import_module("nodeledger.bench.nccl")
    return getattr(mod, "parse_nccl_tests", None) or mod.parse


def _parse(kind: str, text: str, label: str) -> Any:
    if kind == OOM:
        from nodeledger.triage.report import parse_text

        return [inc.to_dict() for inc in parse_text(text, label)]
    if kind == NCCL:
        return _nccl_parse()(text, label)
    from nodeledger.machine.parsers import parse_kind

    return parse_kind(kind, text)


def parse_fixture(rel: str) -> dict[str, Any]:
    """``{"kind", "parsed"}`` (or ``{"kind", "error"}``) for one mapped fixture, as plain JSON."""
    kind = FIXTURE_KINDS[rel]
    label = rel.partition("/")[2]  # path inside its root: the same on every machine
    try:
        out: dict[str, Any] = {"kind": kind, "parsed": _parse(kind, read_fixture(rel), label)}
    except NodeledgerError as exc:  # the parser's own refusal; anything else is a bug
        out = {"kind": kind, "error": {"type": type(exc).__name__, "message": str(exc)}}
    return json.loads(json.dumps(out))


def _param(rel: str):
    marks = [pytest.mark.shared] if rel.startswith("shared/") else []
    return pytest.param(rel, id=rel, marks=marks)


@pytest.mark.parametrize("rel", [_param(r) for r in sorted(FIXTURE_KINDS)])
def test_parse_matches_expected(rel):
    path = fixture_path(rel)
    if not root_present(rel):
        pytest.skip(f"../shared fixtures absent at {REAL}: {path} not checked")
    if not path.is_file():
        pytest.skip(f"fixture {path} absent")
    exp_file = expected_path(rel)
    assert exp_file.is_file(), f"no {exp_file}: run tests/regen_expected.py and review it"
    want = json.loads(exp_file.read_text(encoding="utf-8"))
    got = parse_fixture(rel)
    assert got["kind"] == want["kind"], (
        f"{rel}: mapped to {got['kind']}, recorded as {want['kind']}"
    )
    assert got == want, f"{rel}: parse differs from {exp_file} (regen after a deliberate change)"


@pytest.mark.parametrize("root", sorted(COVERED))
def test_every_fixture_is_mapped(root):
    base = ROOTS[root]
    if not base.is_dir():
        pytest.skip(f"{root} fixtures absent at {base}")
    known = set(FIXTURE_KINDS) | NOT_TOOL_OUTPUT | set(NO_PARSER)
    present: set[str] = set()
    if root in WHOLE_ROOT_FLAT:
        present = {f"{root}/{p.name}" for p in base.iterdir() if p.is_file()}
    if root in WHOLE_ROOT:
        present = {f"{root}/{p.name}" for p in base.iterdir() if p.is_file()}
        folders = sorted(p.name for p in base.iterdir() if p.is_dir())
        assert folders == sorted(COVERED[root]), f"folders of {base} vs COVERED[{root!r}]"
    for folder in COVERED[root]:
        assert (base / folder).is_dir(), f"covered folder {base / folder} missing"
        present |= {
            f"{root}/{p.relative_to(base).as_posix()}"
            for p in (base / folder).rglob("*")
            if p.is_file()
        }
    unmapped = sorted(present - known)
    assert not unmapped, f"fixtures with no kind in FIXTURE_KINDS (nor excluded): {unmapped}"
    gone = sorted(r for r in known if r.startswith(f"{root}/") and r not in present)
    assert not gone, f"mapped or excluded fixtures that no longer exist: {gone}"


def test_no_stale_expected():
    recorded = {
        p.relative_to(EXPECTED).as_posix().removesuffix(".json") for p in EXPECTED.rglob("*.json")
    }
    stale = sorted(recorded - set(FIXTURE_KINDS))
    assert not stale, f"tests/expected files for unmapped fixtures: {stale}"
    assert not set(FIXTURE_KINDS) & (NOT_TOOL_OUTPUT | set(NO_PARSER))
