"""The fix list for an incident's side, each line naming the figure that motivates it.

Host (the host-RAM rules of field_notes.toml): stagger big loads; fewer DataLoader workers / smaller
prefetch; no CPU offload on a small host; no swap — cut workers instead; a memory cgroup's own
limit when that is what bound. Card: the request larger than the card; a per-process cap; other
processes on the card; fragmentation (reserved ≫ allocated → expandable_segments); smaller
micro-batch, activation checkpointing, more TP / sharding; for vLLM the KV cache, max_model_len
and gpu_memory_utilization; for NCCL its buffers.
"""

from __future__ import annotations

from typing import Any

from nodeledger.logs.incidents import Incident
from nodeledger.logs.units import human

_TOOL = {
    "torch-cuda-oom": "nvidia-smi",
    "hip-oom": "rocm-smi / amd-smi / hy-smi",
    "npu-oom": "npu-smi info",
    "xpu-oom": "xpu-smi",
}


def fixes_for(inc: Incident) -> list[str]:
    if inc.kind in ("kernel-oom-killer", "memcg-oom"):
        return _host(inc)
    if inc.kind == "job-killed":
        return _job_killed(inc)
    if inc.kind in ("torch-cuda-oom", "hip-oom", "npu-oom", "xpu-oom"):
        return _torch(inc)
    if inc.kind == "cublas-alloc":
        return _cublas(inc)
    if inc.kind == "nccl-oom":
        return _nccl(inc)
    if inc.kind == "vllm-kv-cache":
        return _vllm_kv(inc)
    if inc.kind == "vllm-free-memory":
        return _vllm_free(inc)
    return []


def _who(inc: Incident) -> str:
    if inc.process and inc.pid is not None:
        return f"{inc.process} (pid {inc.pid})"
    if inc.pid is not None:
        return f"pid {inc.pid}"
    return inc.process or "the killed process"


def _host_figure(inc: Incident) -> str:
    """The best memory figure a host-side report shows, as a phrase."""
    f, d = inc.figures, inc.details
    if f.get("anon_rss_bytes") is not None:
        return f"{_who(inc)} held anon-rss {human(f['anon_rss_bytes'])} when it was killed"
    if f.get("memcg_usage_bytes") is not None:
        return f"the cgroup used {human(f['memcg_usage_bytes'])}"
    if f.get("memcg_rss_bytes") is not None:
        return f"the cgroup's rss was {human(f['memcg_rss_bytes'])}"
    if f.get("tasks_rss_bytes") is not None:
        return f"the task table's processes held {human(f['tasks_rss_bytes'])} of RSS"
    if d.get("tasks_rss_pages"):
        return (
            f"the task table's {d['tasks_count']} processes held {d['tasks_rss_pages']:,} pages "
            "of RSS (page size not shown)"
        )
    mi = d.get("mem_info_pages") or {}
    if "free" in mi:
        return f"Mem-Info shows {mi['free']:,} free pages"
    return "no memory figures in this excerpt"


def _host(inc: Incident) -> list[str]:
    f, d = inc.figures, inc.details
    out: list[str] = []
    anon = f.get("anon_rss_bytes")
    held = _host_figure(inc)
    if inc.kind == "memcg-oom":
        limit, usage = f.get("memcg_limit_bytes"), f.get("memcg_usage_bytes")
        cg = d.get("oom_memcg") or d.get("cgroup") or d.get("task_memcg") or d.get("step")
        if limit is not None:
            out.append(
                f"the memory cgroup's limit binds, not the machine's RAM: limit {human(limit)}, "
                f"usage {human(usage)}"
                + (f", failcnt {d['memcg_failcnt']}" if d.get("memcg_failcnt") else "")
                + (f" ({cg})" if cg else "")
                + " — raise the job's memory limit (docker --memory, Kubernetes "
                "limits.memory, Slurm --mem) or shrink what runs inside it"
            )
        else:
            out.append(
                "a memory cgroup limit bound (" + (cg or "cgroup not named in this text") + "), "
                f"not the machine's RAM ({held}) — raise the job's memory limit (docker "
                "--memory, Kubernetes limits.memory, Slurm --mem) or shrink what runs inside it"
            )
    out.append(
        f"stagger big loads: {held} — load the weights first, then start the DataLoader "
        "workers, and never run two ~60 GB loads at once (a safetensors load passes through "
        "host RAM)"
    )
    same = d.get("same_name_tasks") or {}
    if same.get("count", 0) >= 2:
        size = (
            human(same["rss_bytes"])
            if same.get("rss_bytes") is not None
            else f"{same['rss_pages']:,} pages"
        )
        out.append(
            f"fewer DataLoader workers / smaller prefetch_factor: {same['count']} "
            f"'{same['name']}' processes in the task table hold {size} of RSS (each worker is "
            "its own process with its own memory)"
        )
    else:
        out.append(
            "fewer DataLoader workers / smaller prefetch_factor: each worker is its own "
            f"process with its own memory ({held})"
        )
    out.append(
        "no CPU offload on this host (ZeRO-Offload / FSDP cpu_offload keep ~16 B per parameter "
        f"in host RAM): it moves the OOM from the card to the host, which already ran out ({held})"
    )
    st, sf = f.get("swap_total_bytes"), f.get("swap_free_bytes")
    if st is not None:
        out.append(
            f"no more swap: swap total {human(st)}, free {human(sf)} — paging a training job "
            "stalls it; cut workers instead"
        )
    elif anon is not None:
        out.append(
            f"no swap as a cure: paging {human(anon)} of anonymous memory stalls training — "
            "cut workers instead"
        )
    else:
        out.append(f"no swap as a cure: paging stalls training — cut workers instead ({held})")
    inv = d.get("invoked_by") or {}
    order = inv.get("order")
    if order is not None and 3 < order <= 20:  # MAX_ORDER is at most ~18: a larger one is noise
        out.append(
            f"the trigger was an order-{order} allocation ({2**order} contiguous pages): host "
            "memory fragmentation, not only its size — transparent_hugepage=madvise and "
            "/proc/sys/vm/compact_memory help"
        )
    return out


def _job_killed(inc: Incident) -> list[str]:
    pid = f"pid {inc.pid}" if inc.pid is not None else "a process"
    kernel = [lk for lk in inc.links if lk.get("kind") in ("kernel-oom-killer", "memcg-oom")]
    by_pid = [lk for lk in kernel if lk["by"] == "pid"]
    if by_pid:
        lk = by_pid[0]
        return [
            f"{pid} was killed by the kernel oom-killer (incident #{lk['to']}, {lk['kind']}): "
            "host RAM ran out — apply the host fixes listed there, not a smaller batch"
        ]
    if kernel:
        lk = kernel[0]
        victim = " ".join(
            x for x in (lk.get("process"), f"(pid {lk['pid']})" if lk.get("pid") else None) if x
        )
        return [
            f"{pid} died {lk['detail']} from the kernel oom-killer's kill of "
            f"{victim or 'a process'} (incident #{lk['to']}): host RAM ran out — apply the host "
            "fixes listed there, not a smaller batch"
        ]
    return [
        f"{pid} got SIGKILL, what the kernel oom-killer sends: read the kernel log around "
        f"{inc.time.text if inc.time else 'that time'} (dmesg as root, or journalctl -k) to "
        "confirm; if it is the oom-killer, stagger loads and cut DataLoader workers / prefetch "
        "(host RAM), not the batch size"
    ]


def _torch(inc: Incident) -> list[str]:
    # long: one fix per rule the OOM's figures meet, in the order they are printed
    f, d = inc.figures, inc.details
    req, total, free = f.get("requested_bytes"), f.get("total_bytes"), f.get("free_bytes")
    alloc, unalloc = f.get("allocated_bytes"), f.get("reserved_unallocated_bytes")
    card = f"card {inc.card}" if inc.card is not None else "the card"
    tool = _TOOL.get(inc.kind, "the vendor tool")
    out: list[str] = []
    if d.get("form") == "cuda-error":
        return [
            f"a {d.get('device') or 'CUDA'} call outside PyTorch's allocator found the card full "
            "(the message carries no figures): see what holds its memory with "
            f"{tool}, then leave headroom — smaller micro-batch, or a lower "
            "gpu_memory_utilization for vLLM"
        ]
    if req is not None and total is not None and req > total:
        out.append(
            f"one allocation of {human(req)} is larger than the whole {card} "
            f"({human(total)}): no allocator setting helps — split that tensor (more TP / "
            "sharding), a smaller micro-batch or sequence, or lower precision"
        )
    allowed = f.get("allowed_bytes")
    if allowed is not None and free is not None and req is not None and free >= req:
        out.append(
            f"a per-process cap binds: {human(allowed)} allowed "
            "(torch.cuda.set_per_process_memory_fraction) while the card has "
            f"{human(free)} free — raise the fraction or drop the cap"
        )
    others = f.get("other_processes_bytes")
    if others:
        names = ", ".join(f"pid {p['pid']}: {human(p['used_bytes'])}" for p in d["processes"])
        if d.get("process_may_be_self"):
            out.append(
                f"{names} on {card} — at least the {human(f.get('reserved_bytes'))} PyTorch "
                "reserved, so probably this job itself seen under another pid (a container); "
                f"if {tool} shows another process there, free the card or move the job"
            )
        else:
            out.append(
                f"other processes hold {human(others)} of {card} ({names}): free the card or "
                f"move this job to an idle one (check with {tool})"
            )
    outside = f.get("outside_pytorch_bytes")
    if outside is not None and total and outside > 0.10 * total:
        out.append(
            f"{human(outside)} of {card} is held outside this process's PyTorch cache (other "
            f"processes, the CUDA context, non-PyTorch buffers): check {tool}"
        )
    nonpt = f.get("non_pytorch_bytes")
    if nonpt is not None and total and nonpt > 0.10 * total:
        out.append(
            f"{human(nonpt)} of this process is outside PyTorch's allocator (CUDA context, "
            "cuBLAS/cuDNN workspaces, NCCL buffers): budget it, e.g. fewer NCCL channels / a "
            "smaller NCCL_BUFFSIZE"
        )
    if unalloc is not None and req is not None and unalloc > 0 and unalloc >= req:
        var = d.get("alloc_conf_var") or "PYTORCH_CUDA_ALLOC_CONF"
        why = (
            f"{human(unalloc)} is reserved by PyTorch but unallocated, more than the "
            f"{human(req)} requested — fragmentation (reserved ≫ allocated)"
        )
        if d.get("hint") == "expandable_segments" or d.get("form") == "torch>=2.1":
            out.append(f"{var}=expandable_segments:True: {why}")
        elif inc.kind == "npu-oom":
            out.append(
                f"{var}=expandable_segments:True (torch_npu ≥ 2.1; older: max_split_size_mb:128): "
                f"{why}"
            )
        elif d.get("hint") == "max_split_size_mb":
            out.append(
                f"{var}=max_split_size_mb:128 (this PyTorch predates expandable_segments, "
                f"≥ 2.1): {why}"
            )
        else:
            out.append(
                "upgrade PyTorch — this version has no allocator setting against "
                f"fragmentation (max_split_size_mb from 1.10, expandable_segments from 2.1): {why}"
            )
    if alloc is not None and total and alloc >= 0.5 * total:
        pct = 100 * alloc / total
        out.append(
            f"smaller micro-batch (gradient accumulation keeps the global batch): PyTorch holds "
            f"{human(alloc)} of the {human(total)} card ({pct:.0f} %) and asked for "
            f"{human(req)} more"
        )
        out.append(
            f"activation checkpointing (training): recompute activations instead of keeping "
            f"them in the {human(alloc)} allocated"
        )
        out.append(
            f"more tensor parallel / sharding (FSDP, ZeRO-3): spread the {human(alloc)} over "
            "more cards"
        )
    elif req is not None and total and req >= 0.25 * total and req <= total:
        out.append(
            f"the request alone is {human(req)}, {100 * req / total:.0f} % of the "
            f"{human(total)} card: a smaller micro-batch or sequence, or split it (more TP / "
            "sharding)"
        )
    if not out:
        out.append(
            f"the card was full when {human(req)} was requested"
            + (f" ({human(free)} free of {human(total)})" if total is not None else "")
            + ": smaller micro-batch, activation checkpointing, or more TP / sharding"
        )
    return out


def _cublas(inc: Incident) -> list[str]:
    lib = {"CUBLAS": "cuBLAS", "HIPBLAS": "hipBLAS", "ROCBLAS": "rocBLAS"}.get(
        inc.details.get("library") or "", "cuBLAS"
    )
    return [
        f"{lib} could not allocate its handle/workspace: the card was already full when the "
        "first matmul ran (the message carries no figures) — look for an earlier 'out of "
        "memory' or another process on the card, then leave headroom: smaller micro-batch, or "
        "a lower gpu_memory_utilization for vLLM"
    ]


def _nccl(inc: Incident) -> list[str]:
    req = inc.figures.get("requested_bytes")
    card = f"card {inc.card}" if inc.card is not None else "the card"
    what = f"{human(req)}" if req is not None else "its buffers (size not printed)"
    return [
        f"leave card memory for NCCL: it could not allocate {what} on {card} "
        f"({inc.occurrences} out-of-memory warning(s)); NCCL allocates its buffers at the first "
        "collective on each connection, after the model filled the card — lower "
        "gpu_memory_utilization / the micro-batch, or shrink NCCL_BUFFSIZE (default 4 MiB per "
        "connection)"
    ]


def _vllm_kv(inc: Incident) -> list[str]:
    f, d = inc.figures, inc.details
    out: list[str] = []
    mx = d.get("max_model_len_tokens")
    if d.get("form") == "v0":
        kv = d["kv_cache_tokens"]
        out.append(
            f"--max-model-len {kv} or less: the KV cache holds {kv:,} tokens and max_model_len "
            f"is {mx:,}"
        )
        out.append(
            f"a higher --gpu-memory-utilization (if nothing else shares the card): the KV cache "
            f"needs {mx / kv:.1f}× its {kv:,}-token room"
            if kv
            else "a higher --gpu-memory-utilization"
        )
    elif d.get("form") == "v1":
        need, avail = f.get("kv_cache_needed_bytes"), f.get("kv_cache_available_bytes")
        est = d.get("estimated_max_model_len")
        if est:
            out.append(
                f"--max-model-len {est} or less (vLLM's own estimate): one {mx:,}-token request "
                f"needs {human(need)} of KV cache, {human(avail)} is available"
            )
        elif need and avail is not None:
            lin = mx * avail // need
            out.append(
                f"--max-model-len about {lin:,} or less (linear estimate {mx:,} × "
                f"{human(avail)} / {human(need)}): one {mx:,}-token request needs "
                f"{human(need)} of KV cache, {human(avail)} is available"
            )
        out.append(
            f"a higher --gpu-memory-utilization (if nothing else shares the card): "
            f"{human(need - avail) if need is not None and avail is not None else 'the gap'} "
            "more KV cache is needed"
        )
    else:
        out.append(
            "no room left for KV cache blocks (0 bytes available) after the weights and the "
            "profiling run: a higher --gpu-memory-utilization, a smaller "
            "--max-num-batched-tokens (the profiling run's activations), quantized weights"
        )
    out.append(
        "--kv-cache-dtype fp8 halves the KV bytes per token of a 16-bit cache"
        + (
            f" (needed {human(f.get('kv_cache_needed_bytes'))})"
            if f.get("kv_cache_needed_bytes")
            else ""
        )
    )
    out.append(
        "more tensor parallel (--tensor-parallel-size): the weights and the KV cache split over "
        "more cards, leaving each card more room for KV cache"
        + (f" ({mx:,}-token max_model_len)" if mx else " (0 bytes available now)")
    )
    return out


def _vllm_free(inc: Incident) -> list[str]:
    f, d = inc.figures, inc.details
    free, total, want = f["free_bytes"], f["total_bytes"], f["requested_bytes"]
    util = d.get("gpu_memory_utilization")
    card = f"card {inc.card}" if inc.card is not None else "the card"
    used = total - free if total is not None and free is not None else None
    frac = free / total if free is not None and total else None
    return [
        f"another process holds {human(used)} of {card} at start ({human(free)} free of "
        f"{human(total)}): free the card or pick an idle one",
        f"--gpu-memory-utilization below {frac:.2f} (free ÷ total); {util} asks for {human(want)}"
        if frac is not None
        else f"a lower --gpu-memory-utilization than {util}",
    ]


def verdict_line(incidents: list[Incident], notes: list[str]) -> dict[str, Any]:
    sides = {i.side for i in incidents}
    if not sides:
        side = "none"
    elif sides == {"host", "card"}:
        side = "both"
    else:
        side = sides.pop()
    host = [i for i in incidents if i.side == "host"]
    card = [i for i in incidents if i.side == "card"]
    parts = []
    kills = [i for i in host if i.kind in ("kernel-oom-killer", "memcg-oom") and i.pid is not None]
    if kills:
        k = kills[-1]
        parts.append(
            f"host RAM: the kernel killed {_who(k)}"
            + (
                f", anon-rss {human(k.figures['anon_rss_bytes'])}"
                if k.figures.get("anon_rss_bytes") is not None
                else ""
            )
            + (" (memory cgroup limit)" if k.kind == "memcg-oom" else "")
        )
    elif host:
        parts.append(f"host RAM: {len(host)} host-side incident(s)")
    if card:
        cards = sorted({i.card for i in card if i.card is not None})
        parts.append(
            f"card memory: {len(card)} card-side incident(s)"
            + (f" on card(s) {', '.join(map(str, cards))}" if cards else "")
        )
    summary = {
        "none": "no out-of-memory incident found",
        "host": "host-side: fix host RAM (loads, workers, offload), not the batch size",
        "card": "card-side: fix card memory (batch, checkpointing, sharding, allocator), not "
        "host RAM",
        "both": "both sides ran out: apply each incident's own fixes (the two sides' fixes are "
        "opposite)",
    }[side]
    if parts:
        summary += " — " + "; ".join(parts)
    return {"side": side, "summary": summary}
