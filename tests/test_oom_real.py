"""`nodeledger oom` parsers against every recorded file in ../shared/fixtures/real/oom-kernel and
oom-accel. Expectations are read off each file (and its PROVENANCE.tsv row) field by field; sizes
are written as printed and converted here: the kernel's kB = 1024 B, PyTorch's / vLLM's MiB/GiB
= 2**20 / 2**30, rounded to the byte as the log is exact to its two decimals."""

from __future__ import annotations

from decimal import Decimal

import pytest

from conftest import SHARED
from nodeledger.triage.report import Source, build_report

REAL = SHARED / "fixtures" / "real"


def KB(n: int) -> int:  # the kernel's kB
    return n * 1024


def MiB(s: str) -> int:
    return int((Decimal(s) * 2**20).to_integral_value())


def GiB(s: str) -> int:
    return int((Decimal(s) * 2**30).to_integral_value())


def _report(rel: str):
    p = REAL / rel
    if not p.is_file():
        pytest.skip(f"../shared fixture {rel} absent (looked in {REAL})")
    return build_report([Source(rel, p.read_text(errors="replace"))])


def _check(inc, exp: dict) -> None:
    """Every key in ``exp`` is checked: top-level fields, figures (``f_``) and details (``d_``)."""
    d = inc.to_dict()
    for key, want in exp.items():
        if key.startswith("f_"):
            got = d["figures"][key[2:] + "_bytes"]
        elif key.startswith("d_"):
            got = d["details"][key[2:]]
        elif key.startswith("inv_"):
            got = d["details"]["invoked_by"][key[4:]]
        elif key == "line":
            got = d["lines"][0]
        else:
            got = d[key]
        assert got == want, f"{inc.source}: {key}: got {got!r}, want {want!r}"


# one list per file: the incidents in line order; every kernel figure not listed must be None
KERNEL = {
    "ert-7797-perl-iso-timestamps.txt": [
        dict(kind="kernel-oom-killer", side="host", source="oom-kernel/ert-7797-perl-iso-timestamps.txt:1",
             pid=1440763, process="perl", complete=True, card=None,
             time_iso="2024-04-29T14:55:41.679700+02:00",
             f_total_vm=KB(87033376), f_anon_rss=KB(60356340), f_file_rss=0, f_shmem_rss=0,
             f_pgtables=KB(169956), d_constraint="CONSTRAINT_NONE", d_global_oom=True, d_uid=21417,
             d_task_memcg="/user.slice/user-21417.slice/user@21417.service", d_reaped=True,
             d_oom_score_adj=0, inv_process="pool", inv_gfp_mask="0x6200ca",
             inv_gfp_flags="GFP_HIGHUSER_MOVABLE", inv_order=0, inv_oom_score_adj=0),
    ],
    "qaconv-19-python-killed-then-trace.txt": [
        dict(kind="kernel-oom-killer", pid=698405, process="python", complete=True,
             uptime_s=441280.839852, time_iso=None,
             f_total_vm=KB(49978204), f_anon_rss=KB(12918388), f_file_rss=KB(68668),
             f_shmem_rss=KB(53352), f_pgtables=KB(49772), d_uid=1000, d_reaped=True,
             d_task_memcg="/user.slice/user-1000.slice/user@1000.service", d_global_oom=True),
        dict(kind="kernel-oom-killer", pid=None, process=None, complete=False,
             uptime_s=448212.100902, inv_process="sunloginclient", inv_pid=940,
             inv_gfp_mask="0x100cca", inv_order=0),
    ],
    "rlswarm-463-arm64-p2pd-trace.txt": [
        dict(kind="kernel-oom-killer", pid=None, complete=False, uptime_s=597411.19631,
             inv_process="p2pd", inv_pid=116521, inv_gfp_mask="0x140cca",
             inv_gfp_flags="GFP_HIGHUSER_MOVABLE|__GFP_COMP", inv_order=0, inv_oom_score_adj=0),
    ],
    "htop-1408-rustc-killed-modern-trace.txt": [
        dict(kind="kernel-oom-killer", pid=2467259, process="rustc", complete=True,
             uptime_s=240333.375691, f_total_vm=KB(2351628), f_anon_rss=KB(1788928),
             f_file_rss=KB(256), f_shmem_rss=0, f_pgtables=KB(4240), d_uid=1000,
             d_constraint="CONSTRAINT_NONE",
             d_task_memcg="/user.slice/user-1000.slice/session-2.scope"),
        dict(kind="kernel-oom-killer", pid=None, complete=False, uptime_s=240334.464703,
             inv_process="htop", inv_pid=173079, inv_gfp_mask="0x140cca"),
    ],
    "rpi-3872-arm32-meminfo-continuation.txt": [
        dict(kind="kernel-oom-killer", pid=None, complete=False, uptime_s=497.738639,
             d_invoked_by=None),
    ],
    "k8s56891-memcg-java-dmesgT-rhel7.txt": [
        dict(kind="memcg-oom", side="host", pid=28438, process="java", complete=True,
             time="Thu Dec  7 00:05:15 2017", time_iso="2017-12-07T00:05:15",
             f_total_vm=KB(20255636), f_anon_rss=KB(466160), f_file_rss=KB(13684),
             f_shmem_rss=None, f_pgtables=None, f_memcg_rss=KB(524188), f_memcg_cache=KB(32),
             f_tasks_rss=119961 * 4096, d_page_size_bytes=4096, d_tasks_count=1,
             d_chosen={"pid": 24572, "process": "java", "score": 0},
             d_cgroup="/kubepods/pod95387fa4-da9c-11e7-9d36-5254b24cbf5e/"
                      "6895a3e13439535852d3184ac2aadd26d7363cc035f171545ec7d4ce74073b0b"),
        dict(kind="kernel-oom-killer", pid=None, complete=False,
             time="Thu Dec  7 00:13:22 2017", inv_process="java", inv_pid=14881,
             inv_gfp_mask="0xd0", inv_gfp_flags=None, inv_order=0, inv_oom_score_adj=-998,
             d_cpuset="1e479e759020fa0b6c72def90973540a2d33982fea2ad67a96373b4da751a820",
             d_mems_allowed="0"),
    ],
    "docker1001-memcg-python3-syslog.txt": [
        dict(kind="memcg-oom", pid=4254, process="python3", complete=True,
             time="May 15 23:01:53", time_iso=None, uptime_s=152.701942,
             f_total_vm=KB(11968), f_anon_rss=KB(4288), f_file_rss=KB(3972), f_shmem_rss=0,
             d_chosen={"pid": 4142, "process": "python3", "score": 68}, d_reaped=True),
        dict(kind="memcg-oom", pid=4255, process="python3", complete=True,
             time="May 15 23:01:53", uptime_s=152.823388,
             f_total_vm=KB(11968), f_anon_rss=KB(4288), f_file_rss=KB(3972), f_shmem_rss=0,
             d_chosen={"pid": 4142, "process": "python3", "score": 68}, d_reaped=True),
    ],
    "istio42734-cgroupv1-limit-syslog.txt": [
        dict(kind="memcg-oom", pid=None, complete=False, time="Jan  5 02:12:02",
             f_memcg_usage=KB(1048576), f_memcg_limit=KB(1048576),
             f_memcg_swap_usage=KB(1048576), f_memcg_swap_limit=KB(1048576),
             f_memcg_rss=KB(1048552), f_memcg_cache=KB(24), d_memcg_failcnt=189,
             d_oom_memcg="/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0330b2c1_"
                         "a15b_4cdd_b5e5_72d4a90bee82.slice/docker-b27201334a41cd0749d053b18378d7"
                         "ea65617b8e26277197ea25c974da1a5a8a.scope"),
    ],
    "photon1535-vmware-guest-memcg-tasks.txt": [
        dict(kind="memcg-oom", pid=None, complete=False,
             time_iso="2023-12-04T10:49:30.127000+00:00", f_memcg_rss=KB(613460),
             f_memcg_cache=0, f_tasks_rss=None, d_page_size_bytes=None, d_tasks_count=4,
             d_tasks_rss_pages=1 + 29603 + 36 + 138005,
             d_cgroup="/kubepods/burstable/podfe3f7a38-b3f7-48aa-8997-a697ae3d0741/"
                      "c7ebf4d756b284f6226cce820771afcf706a4e37afb77f052c61ece86d3b61f0"),
    ],
}  # fmt: skip

ACCEL = {
    "torch-legacy-cached-structureflow35.txt": dict(
        kind="torch-cuda-oom", card=0, d_form="legacy-cached", f_requested=GiB("8.13"),
        f_total=GiB("10.76"), f_allocated=MiB("643.57"), f_free=GiB("8.20"),
        f_reserved_unallocated=MiB("32.43"), f_reserved=MiB("643.57") + MiB("32.43"),
        f_allowed=None, f_this_process=None),
    "torch-legacy-cached-neurosim28.txt": dict(
        kind="torch-cuda-oom", card=0, d_form="legacy-cached", f_requested=MiB("1.12"),
        f_total=GiB("22.37"), f_allocated=GiB("15.87"), f_free=MiB("3.56"),
        f_reserved_unallocated=MiB("787.74"), f_reserved=GiB("15.87") + MiB("787.74")),
    "torch15-reserved-mmseg944.txt": dict(
        kind="torch-cuda-oom", card=0, d_form="legacy-reserved", d_hint=None,
        f_requested=MiB("1006.00"), f_total=GiB("10.91"), f_allocated=GiB("9.18"),
        f_free=MiB("569.81"), f_reserved=GiB("9.49"),
        f_reserved_unallocated=GiB("9.49") - GiB("9.18")),
    "torch110-maxsplit-hint-gpu1-stripformer21.txt": dict(
        kind="torch-cuda-oom", card=1, d_form="legacy-reserved", d_hint="max_split_size_mb",
        f_requested=GiB("1.65"), f_total=GiB("7.79"), f_allocated=GiB("3.53"),
        f_free=GiB("1.40"), f_reserved=GiB("5.28")),
    "torch112-zero-bytes-free-easydiffusion104.txt": dict(
        kind="torch-cuda-oom", card=0, d_form="legacy-reserved", f_requested=MiB("64.00"),
        f_total=GiB("4.00"), f_allocated=GiB("3.35"), f_free=0, f_reserved=GiB("3.41")),
    "torch21-capacty-process-has-generateu10.txt": dict(
        kind="torch-cuda-oom", card=0, line=3, d_form="torch>=2.1", f_requested=MiB("496.00"),
        f_total=GiB("14.75"), f_free=MiB("235.06"), f_allocated=GiB("14.06"),
        f_reserved_unallocated=MiB("330.42"), f_reserved=GiB("14.06") + MiB("330.42"),
        f_this_process=None, f_other_processes=GiB("14.52"),
        d_processes=[{"pid": 20398, "used_bytes": GiB("14.52")}], d_process_may_be_self=True,
        d_hint="max_split_size_mb", d_exception="torch.cuda.OutOfMemoryError"),
    "torch21-capacty-this-process-mygirlgpt11.txt": dict(
        kind="torch-cuda-oom", card=0, d_form="torch>=2.1", f_requested=MiB("32.00"),
        f_total=GiB("4.00"), f_free=MiB("41.56"), f_this_process=GiB("3.44"),
        f_allocated=GiB("2.58"), f_reserved_unallocated=MiB("1.90"),
        f_non_pytorch=GiB("3.44") - GiB("2.58") - MiB("1.90"), f_other_processes=None),
    "torch21-no-process-clause-mgfn35.txt": dict(
        kind="torch-cuda-oom", card=0, d_form="torch>=2.1", f_requested=GiB("1.70"),
        f_total=GiB("6.00"), f_free=0, f_allocated=GiB("2.93"),
        f_reserved_unallocated=GiB("2.30"), f_this_process=None, f_other_processes=None,
        d_processes=[]),
    "torch22-expandable-segments-pytorch16417.txt": dict(
        kind="torch-cuda-oom", card=0, d_form="torch>=2.1", f_requested=MiB("22.00"),
        f_total=GiB("23.65"), f_free=MiB("11.06"), f_this_process=GiB("23.60"),
        f_allocated=GiB("22.90"), f_reserved_unallocated=MiB("194.87"),
        d_hint="expandable_segments", d_alloc_conf_var="PYTORCH_CUDA_ALLOC_CONF"),
    "hip-oom-strix-halo-therock1054.txt": dict(
        kind="hip-oom", card=0, d_device="HIP", f_requested=GiB("16.00"),
        f_total=GiB("15.24"), f_free=GiB("15.09"), f_allocated=0, f_reserved_unallocated=0,
        d_alloc_conf_var="PYTORCH_HIP_ALLOC_CONF", d_exception="torch.OutOfMemoryError"),
    "hip-oom-mi355-ci-allowed-fraction-therock2118.txt": dict(
        kind="hip-oom", card=0, time_iso="2025-11-14T08:52:38.374621+00:00",
        f_requested=MiB("2.00"), f_total=GiB("287.98"), f_free=GiB("275.86"),
        f_allowed=GiB("1.05"), f_allocated=MiB("1017.01"), f_private_pools=MiB("17.00"),
        f_reserved_unallocated=MiB("54.99"), d_alloc_conf_var="PYTORCH_CUDA_ALLOC_CONF"),
    "cublas-alloc-failed-qwen873.txt": dict(
        kind="cublas-alloc", side="card", card=None, line=3, d_library="CUBLAS",
        d_call="cublasCreate(handle)"),
    "cublas-alloc-failed-c10-frames-densematching20.txt": dict(
        kind="cublas-alloc", side="card", card=None, line=1, d_library="CUBLAS"),
    "nccl-warn-alloc-oom-calloc-nccl1235.txt": dict(
        kind="nccl-oom", pid=3063028, card=3, occurrences=1, f_requested=6291456,
        d_host="ng30903", d_location="include/alloc.h:178"),
    "nccl-warn-enqueue-oom-trtllm1670.txt": dict(
        kind="nccl-oom", pid=392, card=2, occurrences=2, f_requested=None,
        d_host="VM-0-16-ubuntu", d_location="enqueue.cc:43"),
    "vllm-v0-kv-cache-maxseqlen-qwen295.txt": dict(
        kind="vllm-kv-cache", card=None, line=2, d_form="v0", d_max_model_len_tokens=32768,
        d_kv_cache_tokens=7344, f_kv_cache_needed=None, f_kv_cache_available=None),
    "vllm-v1-kv-cache-needed-vllm16118.txt": dict(
        kind="vllm-kv-cache", card=None, d_form="v1", d_max_model_len_tokens=1048576,
        f_kv_cache_needed=GiB("24.00"), f_kv_cache_available=GiB("9.97"),
        d_estimated_max_model_len=None, time="04-05 01:12:55", time_iso=None),
}  # fmt: skip


@pytest.mark.shared
def test_every_real_oom_file_has_expectations():
    if not REAL.is_dir():
        pytest.skip(f"../shared/fixtures/real absent at {REAL}")
    assert {p.name for p in (REAL / "oom-kernel").iterdir()} == set(KERNEL)
    assert {p.name for p in (REAL / "oom-accel").iterdir()} == set(ACCEL)
    prov = (REAL / "PROVENANCE.tsv").read_text()
    for name in [*KERNEL, *ACCEL]:
        assert name in prov, f"{name} has no PROVENANCE.tsv row"


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(KERNEL))
def test_real_kernel(name):
    rep = _report(f"oom-kernel/{name}")
    want = KERNEL[name]
    assert [i.kind for i in rep.incidents] == [w["kind"] for w in want]
    for inc, exp in zip(rep.incidents, want, strict=True):
        _check(inc, exp)
        assert inc.side == "host" and inc.card is None
        # any figure the expectation does not name is absent from the text: None, never a guess
        named = {k[2:] + "_bytes" for k in exp if k.startswith("f_")}
        for key, val in inc.figures.items():
            if key not in named:
                assert val is None, f"{name}: {key} = {val} not in the text"
        assert inc.fixes, f"{name}: no fixes"
        if not inc.complete:
            assert any("cut before its kill line" in n for n in inc.notes)
    assert rep.verdict["side"] == "host"


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(ACCEL))
def test_real_accel(name):
    rep = _report(f"oom-accel/{name}")
    assert len(rep.incidents) == 1, [i.kind for i in rep.incidents]
    (inc,) = rep.incidents
    exp = dict(ACCEL[name])
    exp.setdefault("side", "card")
    exp.setdefault("complete", True)
    _check(inc, exp)
    assert inc.fixes
    if any(v for k, v in inc.figures.items()):
        for fix in inc.fixes:  # each fix names the figure that motivates it
            assert any(ch.isdigit() for ch in fix), fix
    assert rep.verdict["side"] == "card"


@pytest.mark.shared
def test_real_fix_choices():
    """The fix list follows the figures: the cap, the oversize request, fragmentation, others."""

    def fixes(name):
        return " | ".join(_report(f"oom-accel/{name}").incidents[0].fixes)

    f = fixes("hip-oom-mi355-ci-allowed-fraction-therock2118.txt")
    assert "1.05 GiB allowed" in f and "275.86 GiB free" in f
    f = fixes("hip-oom-strix-halo-therock1054.txt")
    assert "16.00 GiB is larger than the whole card 0 (15.24 GiB)" in f
    f = fixes("torch21-no-process-clause-mgfn35.txt")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 2.30 GiB" in f
    f = fixes("torch110-maxsplit-hint-gpu1-stripformer21.txt")
    assert "max_split_size_mb" in f and "1.75 GiB is reserved" in f
    f = fixes("torch21-capacty-process-has-generateu10.txt")
    assert "pid 20398: 14.52 GiB" in f and "smaller micro-batch" in f
    assert "activation checkpointing" in f and "more tensor parallel" in f
    f = fixes("vllm-v0-kv-cache-maxseqlen-qwen295.txt")
    assert "--max-model-len 7344" in f and "32,768" in f
    f = fixes("vllm-v1-kv-cache-needed-vllm16118.txt")
    assert "24.00 GiB" in f and "9.97 GiB" in f and "--gpu-memory-utilization" in f
    f = fixes("nccl-warn-alloc-oom-calloc-nccl1235.txt")
    assert "6.00 MiB on card 3" in f and "NCCL_BUFFSIZE" in f
    f = " | ".join(_report("oom-kernel/istio42734-cgroupv1-limit-syslog.txt").incidents[0].fixes)
    assert "limit 1.00 GiB, usage 1.00 GiB, failcnt 189" in f
