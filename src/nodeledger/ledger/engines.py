"""Serving engines as each release accounts memory at start-up (vLLM by version family, SGLang).

The data — families, defaults by card, runtime figures, driver-reserved memory — is in
``engines.toml`` beside this module, each entry with the vLLM file and function it mirrors.
Here are the small pure functions that turn it into per-card terms:

1. ``vllm_family(version)``: which accounting a release uses (baseline, what the budget covers,
   graphs in or out, printed concurrency).
2. ``runtime_total_bytes``: the card total as torch.cuda.mem_get_info reports it (vLLM's
   ``total_gpu_memory``): the FB total minus what the driver reserves.
3. ``resolve_serve_job``: the launch as the engine would run it — every option the user left
   out takes that release's default for that card (``vllm/engine/arg_utils.py``).
4. The profile-run terms (``sampler_peak_bytes``), CUDA-graph memory (``graph_capture_sizes``,
   ``cuda_graph_bytes``), and the paged pool (``kv_groups``, ``num_blocks``,
   ``max_concurrency``).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from math import ceil, gcd

from nodeledger.ledger import kv_cache as kv
from nodeledger.ledger.jobs import JobError, ServeJob
from nodeledger.machine.vendors import DEFAULT_VENDOR
from nodeledger.machine.vendors import spec as vendor_spec
from nodeledger.units import GiB, KiB, MiB

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@lru_cache(maxsize=1)
def data() -> dict:
    """engines.toml, parsed once."""
    text = resources.files("nodeledger.ledger").joinpath("engines.toml").read_text("utf-8")
    return tomllib.loads(text)


_VERSION = re.compile(r"^\s*v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.15.0rc2.dev46+gc4e744dbd' -> (0, 15, 0); a release needs major.minor at least."""
    m = _VERSION.match(text or "")
    if not m:
        raise JobError(f"--engine-version {text!r} is not a release number such as 0.11.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True)
class VllmFamily:
    id: str
    first: str
    last: str
    engine: str
    charges_context: bool
    charges_nccl: bool
    graphs: str
    util_default: float
    budget_round: str
    sampler: str
    sampler_rows: str
    concurrency: str
    graph_modes: int
    graph_sizes: str
    mirrors: str


def vllm_version(version: str | None) -> str:
    """The release a vLLM job assumes: the one given, else engines.toml's default."""
    return version or data()["vllm"]["default_version"]


_ENGINE_SUFFIX = re.compile(r"[-+ _]?(v[01])\s*$", re.IGNORECASE)


def engine_choice(version: str) -> str | None:
    """'0.7.1-v1' / '0.9.2 v0' -> 'V1' / 'V0' (the engine chosen with VLLM_USE_V1), else None."""
    m = _ENGINE_SUFFIX.search(version or "")
    return m.group(1).upper() if m and m.start() > 0 else None


_NEWEST = {  # the newest release of each engine whose accounting engines.toml was read from
    "vllm": lambda d: d["vllm"]["family"][-1]["last"],
    "sglang": lambda d: d["sglang"]["default_version"],
}


def newest_read(engine: str) -> str:
    """The newest release of ``engine`` whose accounting engines.toml was read from."""
    return _NEWEST[engine](data())


def beyond_newest(engine: str, version: str | None) -> str | None:
    """The assumption a release newer than any read forces, as the verdict names it; None for
    a release nodeledger has read (or no version given: the default is the newest read)."""
    if not version:
        return None
    newest = newest_read(engine)
    if parse_version(version) <= parse_version(newest):
        return None
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    return (
        f"{name} {version} is newer than the newest release nodeledger has read ({newest}): "
        f"modelled as {newest}"
    )


def vllm_family(version: str | None) -> VllmFamily:
    """The accounting family of a vLLM release (engines.toml ``[[vllm.family]]``); a release
    newer than the newest read falls in the last family, one older than 0.4 is refused.  A
    suffix -v0 / -v1 picks the engine chosen with VLLM_USE_V1 where a release ships both (V1
    opt-in 0.6.4-0.7.3 follows the V1 whole-card accounting; V0 opt-in 0.8.0-0.10.2 the V0
    snapshot)."""
    text = vllm_version(version)
    v = parse_version(text)
    fams = data()["vllm"]["family"]
    if v < parse_version(fams[0]["first"]):
        raise JobError(
            f"--engine-version {version}: vLLM releases before {fams[0]['first']} are not modelled"
        )
    # the last family begun at or before v (a build between two families, 0.7.4.dev, is main
    # after the earlier one's last release and behaves as it)
    fam = fams[0]
    for f in fams:
        if parse_version(f["first"]) <= v:
            fam = f
    want = engine_choice(text)
    if want and want != fam["engine"]:
        if want == "V1" and (0, 6, 4) <= v <= (0, 7, 3):
            fam = next(f for f in fams if f["id"] == "v1-whole-card")
        elif want == "V0" and (0, 8, 0) <= v <= (0, 10, 2):
            fam = next(f for f in fams if f["id"] == "v0-snapshot")
        else:
            raise JobError(
                f"--engine-version {text}: vLLM {v[0]}.{v[1]}.{v[2]} does not ship the {want} engine"
            )
    return VllmFamily(**fam)


# -- the card total as the runtime reports it --------------------------------------------------


def reserved_bytes(product: str) -> tuple[int | None, str]:
    """Driver-reserved memory of a card model (engines.toml ``[[reserved]]``), or None."""
    p = (product or "").upper()
    for r in data()["reserved"]:
        if r["match"].upper() in p:
            return r["mib"] * MiB, r["source"]
    return None, "driver-reserved memory of this card model not known"


def runtime_total_bytes(memory_bytes: int | None, product: str, reserved: int | None = None):
    """(total, source): what torch.cuda.mem_get_info reports as the card total, which vLLM
    budgets from (``MemorySnapshot.total_memory``): the FB total (nvidia-smi / NVML) minus the
    driver's reserved memory (nvidia-smi -q "Reserved").  ``reserved`` from the machine
    profile wins, then engines.toml by card model; unknown -> the FB total, said so."""
    if memory_bytes is None:
        return None, "card memory unknown"
    if reserved is None:
        reserved, where = reserved_bytes(product)
    else:
        where = "the profile's driver-reserved memory"
    if reserved is None:
        return memory_bytes, f"card total (driver-reserved memory unknown: {where})"
    return (
        memory_bytes - reserved,
        f"card total - driver-reserved {reserved / MiB:.0f} MiB ({where})",
    )


# -- the launch as the engine runs it ----------------------------------------------------------


def _in(version: tuple, entry: dict) -> bool:
    return parse_version(entry["first"]) <= version <= parse_version(entry["last"])


def v1_batch_defaults(version: str, product: str, total_bytes: int | None) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, source) of `vllm serve` on this card for a V1
    release (engines.toml ``[[vllm.defaults]]``); 0.10.1+ caps max_num_seqs at the tokens."""
    v = parse_version(version)
    entries = data()["vllm"]["defaults"]
    entry = next((e for e in entries if _in(v, e)), entries[-1] if v > (0, 8, 0) else entries[0])
    gib = (total_bytes or 0) / GiB
    name = (product or "").upper()
    pick = entry["otherwise"]
    for t in entry["tiers"]:
        if gib < t.get("min_total_gib", 0):
            continue
        if t.get("names") and not any(n.upper() in name for n in t["names"]):
            continue
        if any(x.upper() in name for x in t.get("exclude", ())):
            continue
        pick = t
        break
    return pick["max_num_batched_tokens"], pick["max_num_seqs"], entry["source"]


# MLA models (DeepSeek-V2/V3/R1) in V0: vLLM 0.7.1 forced chunked prefill off ("MLA is enabled;
# forcing chunked prefill and prefix caching to be disabled", vllm-project/vllm PR 12642, merged
# 2025-02-01 for the 0.7.1 release; a 0.7.1.dev100 log prints it, PR 12638); by 0.7.4.dev4 the
# rule applies on non-CUDA platforms only (a ROCm log: "MLA is enabled on a non-cuda platform",
# ROCm/vllm issue 457): CUDA support is taken from 0.7.3, the release between
MLA_NO_CHUNKED_PREFILL = ((0, 7, 1), (0, 7, 3))


def v0_max_num_batched_tokens(version: str, max_model_len: int, rocm: bool = False,
                              mla: bool = False) -> tuple[int, str]:  # fmt: skip
    """V0 scheduler budget: chunked prefill is on by default above 32,768 tokens of context
    (``use_long_context``) on CUDA cards, with a budget of 512 (to 0.6.4) or 2048 tokens
    (0.6.5+); without it one step holds a whole prompt: max(max_model_len, 2048)
    (``SchedulerConfig``).  ROCm keeps it off (``create_engine_config``: ``and not
    current_platform.is_rocm()``, vllm 0.7 engine/arg_utils.py), and so did 0.7.1-0.7.2 for
    an MLA model on any card (MLA_NO_CHUNKED_PREFILL)."""
    lo, hi = MLA_NO_CHUNKED_PREFILL
    mla_off = mla and lo <= parse_version(version) < hi
    if max_model_len > 32768 and not rocm and not mla_off:
        n = 512 if parse_version(version) <= (0, 6, 4) else 2048
        return n, "V0 chunked prefill (max_model_len > 32768): SchedulerConfig default"
    why = (
        " (MLA forces it off in 0.7.1-0.7.2, vLLM PR 12642)"
        if mla_off and max_model_len > 32768 and not rocm
        else ""
    )
    return max(max_model_len, 2048), f"V0 without chunked prefill{why}: max(max_model_len, 2048)"


def resolve_serve_job(job: ServeJob, product: str = "", total_bytes: int | None = None,
                      rocm: bool = False, mla: bool = False):  # fmt: skip
    """(job, settings): a vLLM job with every engine option it left out set to vLLM's own
    default for this release and card (SGLang's: ``resolve_sglang``; both reached through
    ledger/serve.py SERVE_ENGINES) (``rocm``: an AMD card, where vLLM V0 keeps chunked
    prefill off), and where each value came from."""
    version = vllm_version(job.engine_version)
    fam = vllm_family(version)
    src = {"engine_version": "given" if job.engine_version else "nodeledger's default release"}
    upd: dict = {"engine_version": version}
    if job.gpu_memory_utilization is None:
        upd["gpu_memory_utilization"] = fam.util_default
        src["gpu_memory_utilization"] = f"vLLM {version} default"
    if fam.engine == "V0":  # V0 (also VLLM_USE_V1=0 on 0.8-0.10)
        if job.max_num_seqs is None:
            upd["max_num_seqs"] = 256
            src["max_num_seqs"] = "V0 default (SchedulerConfig)"
        if job.max_num_batched_tokens is None:
            upd["max_num_batched_tokens"], src["max_num_batched_tokens"] = (
                v0_max_num_batched_tokens(version, job.context, rocm, mla)
            )
    else:
        mnbt, seqs, where = v1_batch_defaults(version, product, total_bytes)
        if job.max_num_batched_tokens is None:
            upd["max_num_batched_tokens"] = mnbt
            src["max_num_batched_tokens"] = f"`vllm serve` default on this card ({where})"
        if job.max_num_seqs is None:
            tokens = upd.get("max_num_batched_tokens", job.max_num_batched_tokens)
            capped = parse_version(version) >= (0, 10, 1)
            upd["max_num_seqs"] = min(seqs, tokens) if capped else seqs
            src["max_num_seqs"] = f"`vllm serve` default on this card ({where})"
    for k in upd:
        src.setdefault(k, "given")
    settings = {"family": fam.id, "sources": src}
    if assumed := beyond_newest("vllm", job.engine_version):
        settings["assumed"] = assumed
    return dataclasses.replace(job, **upd), settings


# -- profile-run terms -------------------------------------------------------------------------


def sampler_rows(family: VllmFamily, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Rows the profile run samples: V0 splits the dummy batch into max_num_seqs prompts and
    samples one row each (``ModelRunner._dummy_run``); V1 0.8+ samples
    min(max_num_seqs, max_num_batched_tokens) dummy requests (``_dummy_sampler_run``)."""
    if family.sampler_rows == "max_num_seqs":
        return max_num_seqs
    return min(max_num_seqs, max_num_batched_tokens)


def samples_on_rank(family: VllmFamily, rank: int) -> bool:
    """V0 gathers logits to the driver rank only; V1 all-gathers, every rank samples."""
    return family.sampler == "every" or rank == 0


def _match(product: str, table: str):
    p = (product or "").upper()
    for r in data()[table]:
        pats = r["match"] if isinstance(r["match"], list) else [r["match"]]
        if any(x.upper() in p for x in pats):
            return r
    return None


def sampler_model(version: str, moe_or_hybrid: bool) -> tuple[float, bool, str]:
    """(bytes per rows x vocab element, Triton buffer, source) of the release's profile-run
    sampler (engines.toml ``[[vllm.sampler]]``)."""
    v = parse_version(version)
    entries = data()["vllm"]["sampler"]
    e = next((x for x in entries if _in(v, x)), entries[-1])
    beta = e["beta"] if moe_or_hybrid or "dense_beta" not in e else e["dense_beta"]
    return beta, e["triton_buffer"], e["source"]


def card_sms(product: str) -> tuple[int, bool]:
    """(streaming multiprocessors, known) of a card model; 128 when the model is not listed."""
    r = _match(product, "sms")
    return (r["sms"], True) if r else (128, False)


def sampler_peak_bytes(
    rows: int, vocab: int, bytes_per_element: float, sms: int = 0, hidden_live: int = 0
) -> int:
    """Peak of the profile run's sampler: rows x vocab x the bytes of the [rows, vocab]
    tensors alive together at its widest moment, + the Triton sampler's fp32 buffer of
    S x vocab (S = min(next power of two of min(SMs, rows), SMs); ``sms`` 0 = none), + the
    hidden states the forward leaves alive (``hidden_live``)."""
    buf = 0
    if sms:
        s = 1 << max(0, (min(sms, rows) - 1).bit_length())
        buf = 4 * min(s, sms) * vocab
    return ceil(rows * vocab * bytes_per_element) + buf + hidden_live


def card_sm(product: str) -> int | None:
    """Compute capability (x10, bucketed) of a card model from engines.toml ``[[arch]]``."""
    r = _match(product, "arch")
    return r["sm"] if r else None


def _ru(x: int, m: int) -> int:
    return -(-x // m) * m


def mxfp4_backend(version: str, product: str) -> tuple[str, str]:
    """(backend, why) vLLM's MXFP4 MoE path picks (``mxfp4.py:get_mxfp4_backend``): Marlin on
    sm80-89 and on sm12x from 0.12; on sm90 Marlin up to 0.10 (torch 2.7.1 pinned), Triton
    from 0.12 (bundled triton_kernels); FlashInfer TRT-LLM on sm100."""
    sm = card_sm(product)
    v = parse_version(version)
    if sm is None:
        return "marlin", "card model not known: Marlin layout assumed"
    if sm == 90:
        if v < (0, 12, 0):  # 0.11 uses Triton only where triton_kernels is installed (not by pip)
            return (
                "marlin",
                "sm90 with vLLM <= 0.11 (Marlin; 0.11 + triton_kernels installed: Triton)",
            )
        return "triton", "sm90, vLLM >= 0.12 (triton_kernels bundled)"
    if sm == 100:
        return "flashinfer", "sm100 (FlashInfer TRT-LLM)"
    return "marlin", f"sm{sm} (Marlin)"


_ROW_PARALLEL = ("o_proj", "down_proj", "out_proj", "dense", "fc2", "c_proj", "w2", "wo")


def vllm_linear_delta_bytes(
    scheme, name: str, out: int, inp: int, tp: int, sm: int | None, vendor: str, version: str
) -> int:
    """Bytes one card holds for one dense quantised linear [out, inp] beyond what its share of
    the checkpoint holds, after vLLM's process_weights_after_loading (engines.toml
    ``[vllm.quant]``; per card: column-parallel linears split ``out`` by tp, row-parallel
    ones -- o_proj, down_proj ... -- split ``inp``):

    1. fp8, NVIDIA below sm89 (Marlin W8A16): scales become the model dtype (2 B), per output
       channel for a per-tensor checkpoint (2 N - 4) or group-wise [K / block_k, N] for a block
       checkpoint (2 N ceil(K / bk) - 4 ceil(N / bn) ceil(K / bk)).
    2. fp8 on ROCm: a row of K fp8 values with K a multiple of 512 keeps 256 more (N x 256).
    3. GPTQ int4 through Marlin (not sm90 Machete): the packed zero points are dropped
       (- groups x N x bits / 8) and, without desc_act, g_idx too (- 4 K / tp); with desc_act
       the card keeps the sorted g_idx and its sort indices (int32 [K] each).
    4. AWQ, int8, nf4, mxfp4 dense and sm90 Machete: as the checkpoint (0).
    A card whose compute capability is not known is taken as the checkpoint (0)."""
    q = data()["vllm"]["quant"]
    row = name.rsplit(".", 2)[-2] in _ROW_PARALLEL if "." in name else False
    n, k = (out, inp // tp) if row else (out // tp, inp)
    vs = vendor_spec(vendor)
    if scheme.name == "fp8":
        if vs.vllm_rocm_figures:
            return n * q["rocm_fp8_pad_values"] if k % q["rocm_fp8_pad_row_multiple"] == 0 else 0
        if sm is None or sm >= q["fp8_marlin_below_sm"]:
            return 0
        if scheme.block:
            bn, bk = scheme.block
            return 2 * n * ceil(k / bk) - 4 * ceil(n / bn) * ceil(k / bk)
        return 2 * n - 4
    if scheme.name == "int4" and scheme.g_idx and vs.vllm_marlin and sm is not None:
        machete = (
            sm == q["machete_sm"]
            and scheme.bits == 4
            and scheme.group_size in q["machete_groups"]
            and parse_version(version) >= parse_version(q["machete_first"])
        )
        if machete:
            return 0
        groups = 1 if scheme.group_size <= 0 else ceil(k / scheme.group_size)
        zeros = groups * n * scheme.bits // 8
        gidx_share = 4 * inp // tp  # what the checkpoint share already counts
        return -zeros + (8 * k - gidx_share if scheme.act_order else -gidx_share)
    return 0


def mxfp4_expert_bytes(
    backend: str, version: str, experts: int, hidden: int, inter: int, tp: int, layers: int
) -> int:
    """MXFP4 MoE experts as vLLM holds them after process_weights_after_loading, per card:
    marlin      Ip = ru(I/tp, 128), Hp = ru(H, 256): E x (3 Ip Hp / 2 [4-bit] + 3 Ip Hp / 32
                [e8m0] + 2 (2 Ip + Hp) [bf16 bias]) (``prepare_moe_fp4_layer_for_marlin``)
    triton      Ip = ru(I/tp, 64): values E (2 Ip H / 2 + H Ip / 2) (0.19: both dims to 64),
                swizzled scales E (ru(2Ip, 256) ru(H/32, 2) + ru(H, 256) ru(Ip/32, 2)), the
                original scales kept E (2 Ip H / 32 + H Ip / 32), fp32 bias 4 E (2 Ip + H)
    flashinfer  Ip = ru(I/tp, 256), Hp = ru(H, 256): E (3 Ip Hp / 2 + 3 Ip Hp / 32 + 4 (2 Ip + Hp) + 12)
    Per-layer sums x MoE layers; read from the wheels 0.10.1-0.19.0, within 0.2 % of five logs."""
    E, H = experts, hidden
    if backend == "marlin":
        ip, hp = _ru(inter // tp, 128), _ru(H, 256)
        per = E * (3 * ip * hp // 2 + 3 * ip * hp // 32 + 2 * (2 * ip + hp))
    elif backend == "flashinfer":
        ip, hp = _ru(inter // tp, 256), _ru(H, 256)
        per = E * (3 * ip * hp // 2 + 3 * ip * hp // 32 + 4 * (2 * ip + hp) + 12)
    else:
        ip = _ru(inter // tp, 64)
        if parse_version(version) >= (0, 19, 0):
            vals = E * (_ru(2 * ip, 64) * _ru(H // 2, 64) + _ru(H, 64) * _ru(ip // 2, 64))
        else:
            vals = E * (2 * ip * H // 2 + H * ip // 2)
        swz = E * (_ru(2 * ip, 256) * _ru(H // 32, 2) + _ru(H, 256) * _ru(ip // 32, 2))
        orig = E * (2 * ip * (H // 32) + H * (ip // 32))
        per = vals + swz + orig + 4 * E * (2 * ip + H)
    return per * layers


# -- CUDA graphs ------------------------------------------------------------------------------


def graph_capture_sizes(rule: str, max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """Decode batch sizes vLLM captures by default.
    v0:      [1, 2, 4] + 8k up to the smallest >= max_num_seqs (worker/model_runner.py
             _BATCH_SIZES_TO_CAPTURE; config.py _set_cudagraph_sizes)
    v1_8:    [1, 2, 4] + range(8, N + 1, 8), N = min(2 x max_num_seqs, 512) (0.10.0+; 512 in
             0.8-0.9), <= max_num_batched_tokens
    v1_8_16: [1, 2, 4] + range(8, 256, 8) + range(256, N + 1, 16) (0.11.1+), same N."""
    if rule == "v0":
        top = max(1, max_num_seqs)
        sizes = [s for s in [1, 2, 4, *list(range(8, 8193, 8))] if s < top]
        nxt = next((s for s in [1, 2, 4, *list(range(8, 8193, 8))] if s >= top), None)
        return sizes + ([nxt] if nxt else [])
    n = min(2 * max_num_seqs, 512)
    if rule == "v1_8":
        sizes = [1, 2, 4, *list(range(8, n + 1, 8))]
    else:
        sizes = [1, 2, 4, *list(range(8, min(n + 1, 256), 8)), *list(range(256, n + 1, 16))]
    return [s for s in sizes if s <= n and s <= max_num_batched_tokens]


def cuda_graph_bytes(graphs: int, layers: int, vendor: str = DEFAULT_VENDOR) -> int:
    """Graph memory: graphs x decoder layers x memory per graph per layer (each graph holds
    one launch of every kernel of every layer); engines.toml ``graph_kib_per_graph_layer``
    from real start-up logs' "Graph capturing finished ... took X GiB"."""
    rt = data()["vllm"]["runtime"]
    rocm = vendor_spec(vendor).vllm_rocm_figures
    per = rt["graph_kib_per_graph_layer_rocm" if rocm else "graph_kib_per_graph_layer"]
    return int(graphs * layers * per * KiB)


# -- the paged pool ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KvGroup:
    kind: str  # "full", "sliding", or "state" (Mamba-2 / Gated DeltaNet layers)
    layers: int
    window: int | None


def state_layers(spec) -> list:
    """The layers vLLM keeps a Mamba-style state for (Mamba-2, Gated DeltaNet): one page per
    sequence each (MambaSpec)."""
    return [a for a in spec.attention if a.kind == "linear" and a.ssm in ("mamba2", "gdn")]


def kv_groups(spec, with_state: bool = False) -> list[KvGroup]:
    """The KV groups vLLM V1's hybrid allocator forms (``kv_cache_utils``): layers with the
    same spec share a group; with several kinds together (full and sliding attention, or
    attention and Mamba-style state layers when ``with_state``), groups hold min(layers per
    kind) layers each (``_get_kv_cache_groups_uniform_page_size``)."""
    full = [a for a in spec.attention if a.kind in ("full", "mla")]
    slide = [a for a in spec.attention if a.kind == "sliding"]
    state = state_layers(spec) if with_state else []
    kinds = [(k, n, w) for k, n, w in (("full", len(full), None),
                                       ("sliding", len(slide), slide[0].window if slide else None),
                                       ("state", len(state), None)) if n]  # fmt: skip
    if len(kinds) <= 1:
        if not kinds:
            return [KvGroup("full", 0, None)]
        k, n, w = kinds[0]
        return [KvGroup(k, n, w)]
    size = min(n for _, n, _ in kinds)
    return [KvGroup(k, size, w) for k, n, w in kinds for _ in range(ceil(n / size))]


@dataclass(frozen=True)
class HybridPages:
    """A hybrid model's uniform page in vLLM V1 (``HybridAttentionMambaModelConfig``): the
    attention block raised until one block of one attention layer holds one sequence's state of
    one Mamba-style layer; the state page padded to it."""

    block_size: int  # tokens per attention block after the raise
    state_page_bytes: int  # one state layer, one sequence, one TP rank (before padding)
    page_bytes: float  # the uniform page: block_size x attention bytes per token per layer
    conv_dtype_bytes: int
    ssm_dtype_bytes: int
    source: str


_DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}


def vllm_state_dtypes(spec, version: str | None) -> tuple[int, int, str]:
    """(conv state bytes, SSM state bytes, how) per element as a vLLM release keeps a hybrid's
    state (engines.toml ``[[vllm.ssm_cache_dtype]]``): both in the model dtype (bf16) unless a
    release's per-model hook sets the SSM state's (Nemotron-H: the config's
    mamba_ssm_cache_dtype, else the release's default)."""
    v = parse_version(vllm_version(version))
    for r in data()["vllm"]["ssm_cache_dtype"]:
        if spec.family not in r["model_types"]:
            continue
        if parse_version(r["first"]) <= v and (
            r.get("last") is None or v <= parse_version(r["last"])
        ):
            name = spec.ssm_cache_dtype or r["default"]
            how = ("the config's mamba_ssm_cache_dtype" if spec.ssm_cache_dtype
                   else f"the release's default for {spec.family}")  # fmt: skip
            return (
                2,
                _DTYPE_BYTES.get(str(name).lower(), 2),
                f"SSM state {name} ({how}; {r['source']})",
            )
    return (
        2,
        2,
        "conv and SSM state in the model dtype (mamba_cache_dtype / mamba_ssm_cache_dtype 'auto')",
    )


def vllm_hybrid_modelled(spec, version: str | None) -> bool:
    """Whether the release's hybrid pool is modelled for ``spec``: Mamba-2 / Gated DeltaNet
    layers beside attention, a V1 release from engines.toml ``[vllm.hybrid]`` first."""
    if not state_layers(spec) or not any(a.kind != "linear" for a in spec.attention):
        return False
    first = parse_version(data()["vllm"]["hybrid"]["first"])
    if parse_version(vllm_version(version)) < first:
        return False
    return vllm_family(version).engine != "V0"  # VLLM_USE_V1=0: V0's own mamba cache, not read


@dataclass(frozen=True)
class StateBlocks:
    """How many Mamba-style state blocks a hybrid's running sequence takes in a vLLM release
    (engines.toml ``[[vllm.hybrid_prefix]]``): ``mode`` is the release's mamba_cache_mode."""

    mode: str  # "none" | "align" | "all"
    align_blocks: int
    source: str

    def budget(self, max_model_len: int, block: int) -> int:
        """Blocks per sequence in MambaSpec.max_memory_usage_bytes (the printed concurrency)."""
        if self.mode == "all":
            return -(-max(1, max_model_len) // max(1, block))
        return self.resident

    @property
    def resident(self) -> int:
        """Blocks a running sequence holds ("all": the latest state; the older ones are
        evictable cache)."""
        return self.align_blocks if self.mode == "align" else 1


def vllm_state_blocks(spec, version: str | None, prefix_caching: bool | None) -> StateBlocks:
    """The release's state blocks per sequence for a hybrid, prefix caching at the release's
    default (``prefix_caching`` None) or as asked (False: --no-enable-prefix-caching)."""
    rows = data()["vllm"].get("hybrid_prefix", [])
    v = parse_version(vllm_version(version))
    row = next((r for r in reversed(rows) if parse_version(r["first"]) <= v), None)
    if row is None or prefix_caching is False:
        how = "--no-prefix-caching" if prefix_caching is False else "prefix caching off"
        return StateBlocks("none", 1, f"{how}: one state block per sequence")
    mode = row["mode"]
    if mode == "all" and spec.family not in row.get("all_models", []):
        mode = "align"
    return StateBlocks(
        mode, int(row.get("align_blocks", 2)), f"mamba_cache_mode '{mode}': {row['source']}"
    )


def vllm_hybrid_pages(spec, version: str | None, block_size: int, kv_dtype_bytes: int,
                      kv_split: float, tp: int, mode: str = "none") -> HybridPages | None:  # fmt: skip
    """The release's hybrid page for a model with Mamba-2 / Gated DeltaNet layers beside
    attention (None for any other model, or a release before engines.toml ``[vllm.hybrid]``
    first): attention block = max(block_size, 16 x ceil(state page / (16 x attention bytes per
    token per layer))); page = that block's bytes (``HybridAttentionMambaModelConfig
    .verify_and_update_config``)."""
    if not vllm_hybrid_modelled(spec, version):
        return None
    hy = data()["vllm"]["hybrid"]
    conv_b, ssm_b, how = vllm_state_dtypes(spec, version)
    pages = []
    for a in state_layers(spec):
        conv, ssm = kv.vllm_state_elements(a, tp)
        pages.append(conv * conv_b + ssm * ssm_b)
    state_page = max(pages)
    per_token = kv.paged_page_bytes_per_layer(spec, 1, kv_dtype_bytes, kv_split)
    # "all": the block is a multiple of the scan's chunk (lcm(chunk, 16)), else of 16
    unit = 16
    if mode == "all":
        chunk = max((a.chunk for a in state_layers(spec) if a.chunk), default=16)
        unit = chunk * 16 // gcd(chunk, 16)
    aligned = unit * ceil(state_page / (unit * per_token)) if per_token else block_size
    block = (
        max(block_size, aligned) if mode != "all" else max(aligned, unit * ceil(block_size / unit))
    )
    return HybridPages(block, state_page, per_token * block, conv_b, ssm_b,
                       f"{hy['source']}; {how}")  # fmt: skip


def hybrid_sim_pool_tokens(blocks: int, attn_groups: int, state_groups: int, block: int,
                           request_tokens: int, max_num_seqs: int,
                           state_blocks: int = 1) -> int:  # fmt: skip
    """The attention tokens a hybrid's pool leaves the simulator once the state pages of the
    sequences that run at once are set aside: with requests of ``request_tokens`` each holds
    attn_groups x ceil(tokens / block) + state_groups blocks, so min(max_num_seqs, blocks //
    that) run, each holding state_groups blocks (a steady-state reservation: the simulator does
    not charge the state per admitted sequence)."""
    per_seq = attn_groups * -(-max(1, request_tokens) // block) + state_groups * state_blocks
    running = min(max_num_seqs, blocks // max(1, per_seq))
    return max(blocks - state_groups * state_blocks * running, 0) // max(1, attn_groups) * block


def num_blocks(available: int, page_bytes_per_layer: float, layers_per_block: int) -> int:
    """``get_num_blocks``: int(available // page_size // num_layers), at least 0; a page is one
    block of one layer; hybrid models share each block across groups of equal size."""
    if available <= 0 or page_bytes_per_layer <= 0:
        return 0
    return int(available // page_bytes_per_layer // layers_per_block)


def blocks_per_request(
    groups: list[KvGroup],
    max_model_len: int,
    block: int,
    max_num_batched_tokens: int,
    state_blocks: int = 1,
) -> int:
    """Blocks one max_model_len request holds, summed over groups (``max_memory_usage_bytes``):
    full attention cdiv(len, block); sliding window cdiv(min(window - 1 + max_num_batched_tokens,
    len), block) + 1 (``SlidingWindowSpec``)."""
    total = 0
    for g in groups:
        if g.kind == "state":  # StateBlocks.budget: 1 with mamba_cache_mode "none"
            total += state_blocks
        elif g.kind == "sliding" and g.window:
            total += -(-min(g.window - 1 + max_num_batched_tokens, max_model_len) // block) + 1
        else:
            total += -(-max_model_len // block)
    return total


def printed_pool(
    family: VllmFamily,
    blocks: int,
    groups: list[KvGroup],
    block: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    state_blocks: int = 1,
) -> tuple[int, float]:
    """(tokens, max concurrency) as vLLM prints them ("GPU KV cache size: N tokens", "Maximum
    concurrency for L tokens per request: Xx").  tokens: blocks // groups x block
    (``_report_kv_cache_config``), from 0.20.2 int(concurrency x max_model_len); concurrency:
    tokens / L before 0.9.1, blocks / blocks per request after."""
    tokens = blocks // len(groups) * block
    if family.concurrency == "tokens":
        return tokens, tokens / max_model_len
    conc = blocks / max(1, blocks_per_request(groups, max_model_len, block, max_num_batched_tokens,
                                              state_blocks))  # fmt: skip
    if family.concurrency == "blocks_tokens":
        tokens = int(conc * max_model_len)
    return tokens, conc


# -- SGLang ---------------------------------------------------------------------------------


def sglang_tier(gpu_mem_bytes: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for the card (engines.toml
    ``[sglang] tiers`` by nvidia-smi's memory.total; the tp >= 4 figure at tp >= 4)."""
    gib = gpu_mem_bytes / GiB
    for t in data()["sglang"]["tiers"]:
        if gib < t["below_gib"]:
            return t["chunked_prefill_size"], t[
                "cuda_graph_max_bs_tp4" if tp >= 4 else "cuda_graph_max_bs"
            ]
    raise AssertionError("unreachable")  # pragma: no cover


def sglang_decode_graph_sizes(max_bs: int) -> list[int]:
    """Decode batch sizes SGLang captures (``cuda_graph_runner.get_batch_sizes_to_capture``,
    0.5.x): [1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512, 1025, 32),
    cut at cuda_graph_max_bs."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, 1025, 32)]
    return [b for b in sizes if b <= max_bs]


def sglang_piecewise_graph_tokens(max_tokens: int) -> list[int]:
    """Token sizes of SGLang's piecewise prefill graphs (0.5.10+): range(4,33,4) +
    range(48,257,16) + range(288,513,32) + range(576,1025,64) + range(1280,4097,256) +
    range(4608, max+1, 512), cut at max_tokens (chunked_prefill_size)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))  # fmt: skip
    return [s for s in sizes if s <= max_tokens]


def sglang_mem_fraction_static(
    version: str, gpu_mem_bytes: int, tp: int, pp: int = 1, mla: bool = False
) -> tuple[float, str]:
    """SGLang's default --mem-fraction-static: round((gpu_mem - reserved) / gpu_mem, 3), with
    gpu_mem = nvidia-smi memory.total (MiB).  0.5.x: reserved = 512 + max(chunked, 2048) x 1.5
    + cuda_graph_max_bs x 2 + tp x pp / 8 x 1024 (+ piecewise prefill graphs: 8 MiB per size,
    1.5 GiB for MLA, from 0.5.10), at least 10 GiB above 60 GiB of card
    (``_handle_gpu_memory_settings``); 0.4.x: the reserved table (``__post_init__``)."""
    mib = gpu_mem_bytes / MiB
    sg = data()["sglang"]
    v = parse_version(version)
    if v <= parse_version(sg["legacy_last"]):
        t = next(t for t in sg["legacy_tiers"] if mib / 1024 < t["below_gib"])
        reserved = (t["a"] + tp * pp * t["b"]) * 1024
        how = f"0.4.x table: ({t['a']:g} + {tp * pp} x {t['b']:g}) x 1024 MiB reserved"
    else:
        chunk, max_bs = sglang_tier(gpu_mem_bytes, tp)
        reserved = 512 + max(chunk, 2048) * 1.5 + max_bs * 2 + tp * pp / 8 * 1024
        if v >= (0, 5, 10):
            reserved += 1536 if mla else 8 * len(sglang_piecewise_graph_tokens(chunk))
        if mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        how = f"reserved {reserved:,.0f} MiB (chunked {chunk}, graph max bs {max_bs}, tp {tp})"
    return round((mib - reserved) / mib, 3), f"SGLang {version} default: {how} of {mib:,.0f} MiB"


def sglang_kv_bytes(
    free_before_weights: int, weights_loaded: int, mem_fraction_static: float
) -> int:
    """SGLang's pool (``profile_max_num_token``): rest = free after the weights - free before
    the weights x (1 - mem_fraction_static) = free_before x mfs - weights as loaded."""
    return int(free_before_weights * mem_fraction_static) - weights_loaded


def resolve_sglang(job: ServeJob, gpu_mem_bytes: int | None, mla: bool = False):
    """(job, settings) with SGLang's defaults for the card filled in."""
    version = job.engine_version or data()["sglang"]["default_version"]
    upd: dict = {"engine_version": version}
    src = {"engine_version": "given" if job.engine_version else "nodeledger's default release"}
    if gpu_mem_bytes:
        chunk, _ = sglang_tier(gpu_mem_bytes, job.parallel.tp)
        if job.max_num_batched_tokens is None:
            upd["max_num_batched_tokens"], src["max_num_batched_tokens"] = (
                chunk,
                "SGLang chunked_prefill_size for the card",
            )
        if job.mem_fraction_static is None:
            upd["mem_fraction_static"], src["mem_fraction_static"] = sglang_mem_fraction_static(
                version, gpu_mem_bytes, job.parallel.tp, job.parallel.pp, mla
            )
    elif job.max_num_batched_tokens is None:
        upd["max_num_batched_tokens"], src["max_num_batched_tokens"] = (
            8192,
            "SGLang default (card unknown)",
        )
    if job.mem_fraction_static is None and "mem_fraction_static" not in upd:
        fallback = 0.88 if parse_version(version) < (0, 5, 23) else 0.95
        upd["mem_fraction_static"], src["mem_fraction_static"] = (
            fallback,
            "SGLang default when the card memory is unknown",
        )
    for k in upd:
        src.setdefault(k, "given")
    settings = {"family": "sglang", "sources": src}
    if assumed := beyond_newest("sglang", job.engine_version):
        settings["assumed"] = assumed
    return dataclasses.replace(job, **upd), settings
