"""`nodeledger oom` parsers on the always-run fixtures in tests/fixtures/oom (see PROVENANCE.md):
each kind, bytes from every unit, line prefixes, wrapped messages, linking a kernel kill to a job
log by pid and by time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conftest import FIXTURES
from nodeledger.logs.accel import parse_accel_log
from nodeledger.logs.jobs import parse_job_log
from nodeledger.logs.kernel import kernel_message, parse_kernel_log
from nodeledger.logs.logtime import find_time, seconds_apart
from nodeledger.logs.units import human, kernel_kb, parse_size, to_bytes
from nodeledger.triage.report import Source, build_report

OOM = FIXTURES / "oom"
GiB, MiB = 2**30, 2**20


def src(name: str) -> Source:
    return Source(name, (OOM / name).read_text())


def report(*names: str, **kw):
    return build_report([src(n) for n in names], **kw)


# --- units and times ----------------------------------------------------------------------


def test_sizes_as_printed():
    assert parse_size("8.13 GiB") == 8729521029  # 8.13 × 2**30, rounded to the byte
    assert parse_size("1006.00 MiB") == 1006 * MiB
    assert parse_size("0 bytes") == 0
    assert parse_size("6291456 bytes") == 6291456
    assert parse_size("512.00 KiB") == 512 * 1024
    assert parse_size("12.0 GB") == 12 * 10**9  # MB/GB as printed: powers of 1000
    assert parse_size("3 MB") == 3_000_000
    assert parse_size("not a size") is None and parse_size(None) is None
    assert kernel_kb("4288") == 4288 * 1024  # the kernel's kB is 1024 B
    assert to_bytes("0.10", "GiB") == 107374182
    with pytest.raises(ValueError):
        to_bytes("1", "parsecs")
    assert human(None) == "unknown" and human(1536) == "1.50 KiB" and human(12) == "12 B"


@pytest.mark.parametrize(
    "line, text, iso, up",
    [
        ("2024-04-29T14:55:41,678628+02:00 pool invoked oom-killer", "2024-04-29T14:55:41,678628+02:00", "2024-04-29T14:55:41.678628+02:00", None),
        ("2024-04-29T14:55:41+0200 host kernel: Out of memory", "2024-04-29T14:55:41+0200", "2024-04-29T14:55:41+02:00", None),
        ("[Thu Dec  7 00:05:15 2017] Killed process 1", "Thu Dec  7 00:05:15 2017", "2017-12-07T00:05:15", None),
        ("May 15 23:01:53 host-with-a-long-name-01 kernel: [  152.700479] Memory cgroup", "May 15 23:01:53", None, 152.700479),
        ("ERROR 04-05 01:12:55 [core.py:390] ValueError", "04-05 01:12:55", None, None),
        ("E0314 09:26:58.402000 40998 torch/distributed/x.py:869] failed", "03-14 09:26:58", None, None),
        ("2025-03-14 09:26:41,112 - INFO - step", "2025-03-14 09:26:41,112", "2025-03-14T09:26:41.112000", None),
        ("[  497.738639]  oom_kill_process from out_of_memory", "[  497.738639]", None, 497.738639),
    ],
)  # fmt: skip
def test_find_time(line, text, iso, up):
    t = find_time(line)
    assert t is not None and t.text == text and t.iso == iso and t.uptime_s == up


def test_seconds_apart_borrows_year_and_zone():
    a = find_time("2025-03-14T09:26:53,101630+08:00 x")
    b = find_time("E0314 09:26:58.402000 40998 f.py:1] y")  # no year, no zone
    assert seconds_apart(a, b) == pytest.approx(5, abs=1)
    assert seconds_apart(a, None) is None
    assert seconds_apart(find_time("[  1.5] a"), find_time("[  3.0] b")) == 1.5
    assert seconds_apart(find_time("[  1.5] a"), a) is None  # uptime vs wall clock: unknown


def test_kernel_prefixes_are_stripped():
    for raw in (
        "2023-12-04T10:49:30.127Z In(05) vcpu-5 - Guest: <6>[39291577.009363] Mem-Info:",
        "Jan  5 02:12:02 host kernel: Mem-Info:",
        "[Thu Dec  7 00:05:15 2017] Mem-Info:",
        "2024-04-29T14:55:41+0200 host kernel: [ 12.5] Mem-Info:",
        "<4>[   12.000001] Mem-Info:",
    ):
        assert kernel_message(raw) == "Mem-Info:"
    assert kernel_message("[  22921]     0 22921  pause") == "[  22921]     0 22921  pause"


# --- kernel --------------------------------------------------------------------------------


def test_kernel_global_report_every_figure():
    (inc,) = parse_kernel_log(src("kernel-dmesg-iso-global-dataloader.txt").text, "k")
    assert (inc.kind, inc.side, inc.pid, inc.process, inc.complete) == (
        "kernel-oom-killer", "host", 41230, "python", True,
    )  # fmt: skip
    assert inc.time.iso == "2025-03-14T09:26:53.101630+08:00"  # the kill line's time
    f = inc.figures
    assert f["total_vm_bytes"] == 52428800 * 1024 == 50 * GiB
    assert f["anon_rss_bytes"] == 40 * GiB
    assert f["file_rss_bytes"] == 20 * MiB and f["shmem_rss_bytes"] == 4 * MiB
    assert f["pgtables_bytes"] == 83000 * 1024
    assert f["swap_total_bytes"] == 0 and f["swap_free_bytes"] == 0
    assert f["memcg_usage_bytes"] is None and f["memcg_limit_bytes"] is None
    d = inc.details
    assert d["page_size_bytes"] == 4096 and "13107200 pages" in d["page_size_from"]
    assert d["tasks_count"] == 10 and d["ram_pages"] == 32636514
    assert d["same_name_tasks"] == {
        "name": "python", "count": 8, "rss_pages": 10491904 + 7 * 2883584,
        "rss_bytes": (10491904 + 7 * 2883584) * 4096,
    }  # fmt: skip
    assert f["tasks_rss_bytes"] == (1650 + 1190 + 10491904 + 7 * 2883584) * 4096
    assert d["tasks_top"][0]["pid"] == 41230 and d["tasks_top"][0]["rss_anon"] == 10485760
    assert d["invoked_by"] == {
        "process": "python", "pid": 41233, "gfp_mask": "0x140cca",
        "gfp_flags": "GFP_HIGHUSER_MOVABLE|__GFP_COMP", "order": 0, "oom_score_adj": 0,
    }  # fmt: skip
    assert d["mem_info_pages"]["free"] == 98304 and d["mem_info_pages"]["pagetables"] == 61540
    assert d["constraint"] == "CONSTRAINT_NONE" and d["global_oom"] is True
    assert d["mems_allowed"] == "0-1" and d["reaped"] is True and d["uid"] == 1000


def test_kernel_memcg_v2_plain_dmesg():
    (inc,) = parse_kernel_log(src("kernel-plain-dmesg-memcg-v2.txt").text, "k")
    assert (inc.kind, inc.pid, inc.process) == ("memcg-oom", 5120, "python3")
    assert inc.time.dt is None and inc.time.uptime_s == 8123.45699
    f = inc.figures
    assert f["memcg_usage_bytes"] == f["memcg_limit_bytes"] == 16 * GiB
    assert f["memcg_swap_usage_bytes"] == 0 and f["memcg_swap_limit_bytes"] == 0
    assert f["anon_rss_bytes"] == 16760000 * 1024 and f["total_vm_bytes"] == 18092032 * 1024
    assert inc.details["mems_allowed"] == "0,2"  # a value with a comma in the oom-kill line
    assert inc.details["oom_memcg"] == "/system.slice/docker-ab12cd34ef56.scope"
    assert inc.details["memcg_failcnt"] == 4821 and inc.details["page_size_bytes"] == 4096
    (inc,) = report("kernel-plain-dmesg-memcg-v2.txt").incidents
    assert "limit 16.00 GiB, usage 16.00 GiB, failcnt 4821" in inc.fixes[0]


def test_kernel_boot_time_places_uptime():
    boot = datetime(2025, 3, 14, 7, 0, 0, tzinfo=timezone.utc)
    (inc,) = parse_kernel_log(src("kernel-plain-dmesg-memcg-v2.txt").text, "dmesg", boot=boot)
    assert inc.time.dt == boot + timedelta(seconds=8123.45699)


def test_kernel_truncated_half_report():
    (inc,) = parse_kernel_log(src("kernel-truncated-half-report.txt").text, "k")
    assert inc.kind == "kernel-oom-killer" and inc.complete is False and inc.pid is None
    assert inc.details["invoked_by"]["process"] == "pt_main_thread"
    assert inc.details["invoked_by"]["pid"] == 90211
    assert inc.details["mem_info_pages"]["inactive_anon"] == 31002411
    assert all(v is None for v in inc.figures.values())
    assert any("cut before its kill line" in n for n in inc.notes)


def test_kernel_empty_and_unrelated_text():
    assert parse_kernel_log("", "k") == []
    assert parse_kernel_log("Mem-Info:\nactive_anon:1 free:2\n", "k") == []  # alloc-failure dump
    text = "python3: vmalloc: allocation failure, allocated 12288 of 20480 bytes\nMem-Info:\n"
    assert parse_kernel_log(text, "k") == []
    text = "def handle_out_of_memory(e):\n    if out_of_memory(e): oom_kill_process = 1\n"
    assert parse_kernel_log(text, "job.py") == []  # code that names the functions is no report


# --- card side ------------------------------------------------------------------------------


def test_torch_card_oom_log():
    incs = parse_accel_log(src("job-torch-card-oom.log").text, "j")
    assert [(i.kind, i.card, i.line) for i in incs] == [
        ("torch-cuda-oom", 3, 2), ("torch-cuda-oom", 0, 5), ("torch-cuda-oom", None, 10),
        ("torch-cuda-oom", 1, 12),
    ]  # fmt: skip
    a, wrapped, cuda_err, capped = incs
    assert a.occurrences == 2 and a.also_at == ["j:4"]
    f = a.figures
    assert f["requested_bytes"] == int(4.5 * GiB) and f["total_bytes"] == parse_size("79.25 GiB")
    assert f["free_bytes"] == parse_size("3.06 GiB")
    assert f["other_processes_bytes"] == 12 * GiB + parse_size("2.50 MiB")
    assert a.details["processes"] == [
        {"pid": 7731, "used_bytes": 12 * GiB}, {"pid": 7902, "used_bytes": parse_size("2.50 MiB")},
    ]  # fmt: skip
    assert a.details["process_may_be_self"] is False
    assert f["this_process_bytes"] == parse_size("64.18 GiB")
    assert f["allocated_bytes"] == parse_size("50.12 GiB")
    assert f["private_pools_bytes"] == parse_size("1.50 GiB")
    assert f["reserved_unallocated_bytes"] == parse_size("12.06 GiB")
    assert f["reserved_bytes"] == parse_size("50.12 GiB") + parse_size("12.06 GiB")
    assert f["non_pytorch_bytes"] == f["this_process_bytes"] - f["reserved_bytes"]
    assert a.time.iso == "2025-03-14T09:26:50.917000+08:00"
    # a message wrapped over four lines is one incident with every figure
    assert (wrapped.line, wrapped.last_line) == (5, 8)
    assert wrapped.figures["requested_bytes"] == 2 * GiB
    assert wrapped.figures["reserved_unallocated_bytes"] == 812 * MiB
    assert wrapped.details["form"] == "torch>=2.1"
    assert cuda_err.details["form"] == "cuda-error"
    assert all(v is None for v in cuda_err.figures.values())
    assert capped.figures["allowed_bytes"] == parse_size("1.50 GiB")
    assert capped.figures["outside_pytorch_bytes"] == (
        parse_size("31.75 GiB") - parse_size("6.50 MiB") - parse_size("1.25 GiB")
    )


def test_vendor_kinds():
    incs = parse_accel_log(src("job-vendors-hip-npu-blas-nccl.log").text, "j")
    assert [(i.kind, i.card, i.pid) for i in incs] == [
        ("hip-oom", 5, None), ("npu-oom", 6, None), ("cublas-alloc", None, None),
        ("nccl-oom", 4, 51002), ("nccl-oom", None, None),
    ]  # fmt: skip
    hip, npu, blas, nccl, nccl2 = incs
    assert hip.figures["reserved_bytes"] == parse_size("61.10 GiB")
    assert hip.details["alloc_conf_var"] == "PYTORCH_HIP_ALLOC_CONF"
    assert npu.figures["active_bytes"] == parse_size("57.36 GiB")
    assert npu.figures["free_bytes"] == parse_size("812.65 MiB")
    assert npu.details["alloc_conf_var"] == "PYTORCH_NPU_ALLOC_CONF"
    assert blas.details["library"] == "HIPBLAS"
    assert nccl.figures["requested_bytes"] == 33554432 and nccl.details["host"] == "node1"
    assert (nccl.line, nccl.last_line, nccl.occurrences) == (4, 5, 1)
    assert nccl2.line == 11


def test_vllm_kinds():
    incs = parse_accel_log(src("job-vllm-serve.log").text, "j")
    assert [i.kind for i in incs] == ["vllm-kv-cache", "vllm-free-memory", "vllm-kv-cache"]
    v1, free, blocks = incs
    assert (v1.line, v1.last_line) == (2, 4)  # three logger records joined
    assert v1.figures == {
        "kv_cache_needed_bytes": parse_size("8.18 GiB"),
        "kv_cache_available_bytes": parse_size("6.66 GiB"),
    }
    assert v1.details["max_model_len_tokens"] == 262144
    assert v1.details["estimated_max_model_len"] == 213248
    assert "--max-model-len 213248 or less" in report("job-vllm-serve.log").incidents[0].fixes[0]
    assert free.card == 2 and free.details["gpu_memory_utilization"] == 0.9
    assert free.figures == {
        "free_bytes": parse_size("21.40 GiB"),
        "total_bytes": parse_size("63.98 GiB"),
        "requested_bytes": parse_size("57.58 GiB"),
    }
    assert blocks.details["form"] == "no-cache-blocks"


def test_no_card_oom_in_plain_text():
    text = "Out of memory: Killed process 1 (x)\nall good\nmemory usage 3 GiB\n"
    assert parse_accel_log(text, "j") == []


# --- job-side host traces -------------------------------------------------------------------


def test_job_markers():
    incs = parse_job_log(src("job-batch-markers.log").text, "j")
    assert [(i.kind, i.pid, i.details["how"]) for i in incs] == [
        ("job-killed", 61877, "shell"), ("job-killed", None, "shell"),
        ("memcg-oom", None, "slurm"), ("memcg-oom", None, "container-runtime"),
    ]  # fmt: skip
    assert incs[0].details["command"] == "python prepare_shards.py --workers 32"
    assert incs[2].details["step"] == "StepId=48213.batch"
    incs = parse_job_log(src("job-torchrun-sigkill.log").text, "j")
    assert [(i.pid, i.line) for i in incs] == [(41230, 4)]  # the summary block repeats the pid
    assert incs[0].time.text == "03-14 09:26:58"


# --- the report: linking, verdict, fixes ----------------------------------------------------


def test_link_by_pid_and_time():
    rep = report(
        "kernel-dmesg-iso-global-dataloader.txt",
        "job-torchrun-sigkill.log",
        "job-dataloader-worker-killed.log",
    )
    k, torchrun, worker, late = rep.incidents
    assert k.kind == "kernel-oom-killer" and k.id == 1
    assert [(lk["to"], lk["by"]) for lk in k.links] == [(2, "pid"), (3, "time")]
    assert torchrun.links[0]["by"] == "pid" and torchrun.links[0]["detail"] == "pid 41230"
    assert worker.links[0]["by"] == "time" and worker.links[0]["seconds"] == pytest.approx(
        26.9, 0.01
    )
    assert late.links == []  # 09:41, 14 minutes later: outside the 60 s window
    assert "killed by the kernel oom-killer (incident #1" in torchrun.fixes[0]
    assert "from the kernel oom-killer's kill of python (pid 41230)" in worker.fixes[0]
    assert "read the kernel log around 2025-03-14T09:41:05+08:00" in late.fixes[0]
    assert rep.verdict["side"] == "host"
    assert "the kernel killed python (pid 41230), anon-rss 40.00 GiB" in rep.verdict["summary"]
    fixes = " | ".join(k.fixes)
    assert "anon-rss 40.00 GiB" in fixes
    assert "8 'python' processes in the task table hold 117.02 GiB" in fixes
    assert "no CPU offload" in fixes and "swap total 0 B" in fixes
    # a narrower window drops the time link, never the pid link
    rep = report(
        "kernel-dmesg-iso-global-dataloader.txt",
        "job-torchrun-sigkill.log",
        "job-dataloader-worker-killed.log",
        window_s=10,
    )
    assert [lk["by"] for lk in rep.incidents[0].links] == ["pid"]


def test_both_sides():
    rep = report("kernel-dmesg-iso-global-dataloader.txt", "job-vllm-serve.log")
    assert rep.verdict["side"] == "both"
    assert {i.side for i in rep.incidents} == {"host", "card"}
    d = rep.to_dict()
    assert [s["source"] for s in d["sources_read"]] == [
        "kernel-dmesg-iso-global-dataloader.txt", "job-vllm-serve.log",
    ]  # fmt: skip
    assert d["incidents"][0]["source"] == "kernel-dmesg-iso-global-dataloader.txt:1"


def test_every_fix_names_a_figure():
    names = [p.name for p in OOM.iterdir() if p.suffix in (".txt", ".log")]
    rep = report(*names)
    assert len(rep.incidents) >= 20
    for inc in rep.incidents:
        assert inc.fixes, inc.where
        has_figures = any(v is not None for v in inc.figures.values()) or inc.details.get(
            "kv_cache_tokens"
        )
        if has_figures:
            for fix in inc.fixes:
                assert any(c.isdigit() for c in fix), (inc.where, fix)


def test_since_filters_dated_incidents_and_keeps_undated():
    now = datetime(2025, 3, 14, 9, 30, 0, tzinfo=timezone(timedelta(hours=8)))
    names = ("kernel-dmesg-iso-global-dataloader.txt", "job-dataloader-worker-killed.log",
             "kernel-plain-dmesg-memcg-v2.txt")  # fmt: skip
    rep = report(*names, since_s=600, since_text="10m", now=now)
    kinds = [(i.kind, i.source) for i in rep.incidents]
    assert ("job-killed", "job-dataloader-worker-killed.log") in kinds
    assert ("memcg-oom", "kernel-plain-dmesg-memcg-v2.txt") in kinds  # uptime only: kept
    assert len([k for k in kinds if k[0] == "job-killed"]) == 2  # 09:41 is after "now": kept
    assert any("carry no full date" in n for n in rep.notes)
    rep = report(*names, since_s=60, now=now)
    assert all(i.source != "kernel-dmesg-iso-global-dataloader.txt" for i in rep.incidents)
    assert any("older than the window left out" in n for n in rep.notes)


def test_empty_report():
    rep = build_report([], notes=["dmesg: not found on PATH"])
    d = rep.to_dict()
    assert d["incidents"] == [] and d["verdict"]["side"] == "none"
    assert "nothing was read" in d["verdict"]["summary"]
    assert d["notes"] == ["dmesg: not found on PATH"]


def test_kernel_old_wordings():
    text = (
        "[  100.000001] Out of memory: Kill process 1234 (java) score 901 or sacrifice child\n"
        "[  100.000002] Killed process 1234, UID 0, (java) total-vm:2048kB, anon-rss:1024kB, "
        "file-rss:4kB\n"
        "[  200.000001] Out of memory (oom_kill_allocating_task): Killed process 77 (dd) "
        "total-vm:10kB, anon-rss:8kB, file-rss:0kB, shmem-rss:0kB\n"
    )
    a, b = parse_kernel_log(text, "k")
    assert (a.kind, a.pid, a.process, a.details["uid"]) == ("kernel-oom-killer", 1234, "java", 0)
    assert a.details["chosen"] == {"pid": 1234, "process": "java", "score": 901}
    assert a.figures["anon_rss_bytes"] == 1024 * 1024 and a.figures["shmem_rss_bytes"] is None
    assert (b.pid, b.process, b.figures["total_vm_bytes"]) == (77, "dd", 10 * 1024)
