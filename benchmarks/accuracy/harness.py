"""Ground-truth memory measurement for LLM jobs (serve / full fine-tune / LoRA).

Measures the peak of PyTorch-allocated memory -- the figure ``torch.cuda.max_memory_allocated()``
reports -- for one job described by a *case* dict (see ``cases.json``).

Devices
-------
``fake``  (default) the model is built and run under
          ``torch._subclasses.fake_tensor.FakeTensorMode`` on the **cpu** device: no real weights,
          no real compute, only shapes/dtypes/strides.  Every storage the job creates is tracked by
          :class:`PeakTracker` (a trimmed ``torch.distributed._tools.mem_tracker.MemTracker``) with
          sizes rounded up to 512 bytes like the CUDA caching allocator rounds block sizes.
``cpu``   the same job with real CPU tensors (random weights) and the same tracker; used by
          ``validate_fake.py`` to show the fake run is byte-identical to a real one.
``cuda``  real tensors on the GPU; records ``torch.cuda.max_memory_allocated`` /
          ``max_memory_reserved`` / driver-used memory, plus (unless ``track=False``) the tracker's
          own figure so the two can be compared.

This module imports only torch, transformers and (for LoRA) peft -- never nodeledger.

What the tracker does NOT see (by construction): memory allocated *inside* a kernel by direct C++
``at::empty`` calls (e.g. the CPU flash-attention per-thread buffers, cuBLAS/cuDNN workspaces,
flash-attention backward's fp32 ``dq_accum``), and the CUDA caching allocator's "no split" slack
(a block served from a larger free block whose remainder is too small to split counts whole in
``allocated_bytes``).  Those are visible only in a ``--device cuda`` run.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import math
import subprocess
import time
import typing
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.distributed._tools.mem_tracker as _mt
from torch.distributed._tools.mem_tracker import MemTracker

HERE = Path(__file__).resolve().parent
DEFAULT_FIXTURES = HERE.parent.parent.parent / "shared" / "fixtures" / "models"

# validate_fake.py sets RECORD_MARKS to line the tracker up with the CPU allocator's own trace:
# every peak reset appends (time.time_ns(), tracker current bytes) to MARKS.
RECORD_MARKS = False
MARKS: list[tuple[int, int]] = []
# oplog.py sets OP_LOG to a list: the tracker then logs every op that changed the tracked total
OP_LOG: list | None = None

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# --------------------------------------------------------------------------------------------
# Allocation rounding (CUDA caching allocator: kMinBlockSize = 512, sizes rounded up to 512).
# MemTracker only rounds for device.type == "cuda"; our fake tensors live on "cpu", so the
# size computation is replaced for every device.  ROUND_BYTES = 1 gives raw storage sizes.
# --------------------------------------------------------------------------------------------
ROUND_BYTES = 512


def round_up(nbytes: int, to: int | None = None) -> int:
    to = ROUND_BYTES if to is None else to
    if to <= 1:
        return int(nbytes)
    return int(math.ceil(nbytes / to) * to)


class _RoundedWeakRefInfo(_mt._WeakRefInfo):
    def _calculate_mem_consumed(self) -> int:
        return round_up(self.size * self.element_size)


# MemTracker refers to the module global ``_WeakRefInfo`` at call time.
_mt._WeakRefInfo = _RoundedWeakRefInfo


class _NoModTracker:
    """Stand-in for MemTracker's ModTracker: no per-module hooks, no per-module snapshots.

    ``is_bw`` is answered from the autograd engine (inside backward a graph task is running), so
    the ACT/TEMP split of the breakdown still works.
    """

    parents: typing.ClassVar[set[str]] = {"Global"}

    @property
    def is_bw(self) -> bool:
        return torch._C._current_graph_task_id() != -1

    def register_user_hooks(self, *args, **kwargs):
        pass

    def clear_user_hooks(self):
        pass

    def get_known_fqn(self, module):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *args):
        pass


class PeakTracker(MemTracker):
    """MemTracker that only keeps the global current/peak (no per-module bookkeeping).

    Stock MemTracker walks every tracked module on every op (``_update_peak_stats``) and deep-copies
    snapshots in module hooks; for an 8B model that makes one step 10x slower.  Here:
      * module hooks are gone (``_NoModTracker``); params/buffers/grads are registered with
        :meth:`track_model` (installs the grad hooks so grads are categorised as ``Grad``);
      * ``_update_peak_stats`` compares one integer per device;
      * :meth:`reset_peak` is the equivalent of ``torch.cuda.reset_peak_memory_stats``;
      * every dispatched op name is recorded in ``ops_seen`` (used to report the SDPA kernel).
    """

    def __init__(self) -> None:
        super().__init__()
        self._mod_tracker = _NoModTracker()
        self.ops_seen: set[str] = set()
        # set to a list to log every op that changed the total: (op, delta, total, outputs, in_backward)
        self.op_log: list | None = None

    # -- hot path ---------------------------------------------------------------------------
    def _update_peak_stats(self, peak_state) -> None:
        for dev, dev_snap in self._curr_mem_snap.items():
            tot = dev_snap[_mt._TOTAL_KEY]
            if self._peak_mem.get(dev, 0) < tot:
                self._peak_mem[dev] = tot
                self._peak_mem_snap[dev] = dict(dev_snap)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops_seen.add(str(func.overloadpacket))
        if self.op_log is None:
            return super().__torch_dispatch__(func, types, args, kwargs)
        before = self.current()
        res = super().__torch_dispatch__(func, types, args, kwargs)
        after = self.current()
        if after != before:
            outs = [
                (tuple(t.shape), str(t.dtype).replace("torch.", ""), str(t.device))
                for t in (res if isinstance(res, (tuple, list)) else [res])
                if isinstance(t, torch.Tensor)
            ]
            self.op_log.append((str(func), after - before, after, outs, self._mod_tracker.is_bw))
        return res

    # no per-module bookkeeping
    def _pre_fw_hook(self, module, inputs):
        pass

    def _post_fw_hook(self, module, inputs, outputs):
        pass

    def _pre_bw_hook(self, module, args):
        pass

    def _post_bw_hook(self, module, args):
        pass

    # -- API ----------------------------------------------------------------------------------
    def track_model(self, model: torch.nn.Module) -> None:
        """Register params/buffers (and existing grads); grad hooks only on trainable params."""
        self._track_module_params_and_buffers(model, install_grad_hooks=False)

        def _grad_hook(grad: torch.Tensor) -> None:
            self._update_and_maybe_create_winfos(grad, _mt._MemRefType.GRAD)

        for param in model.parameters():
            if not param.requires_grad or self._param_to_grad_hook_handles.get(param) is not None:
                continue
            self._param_to_grad_hook_handles[param] = (
                param.register_hook(_grad_hook),
                param.register_post_accumulate_grad_hook(lambda p: _grad_hook(p.grad)),
            )

    # device_type: count only storages on this device type (cuda runs: the optimizer's CPU "step"
    # scalars are not GPU memory).  None: all devices (fake / cpu runs live on "cpu" anyway).
    device_type: str | None = None

    def _mine(self, dev) -> bool:
        return self.device_type is None or torch.device(dev).type == self.device_type

    def current(self) -> int:
        return sum(s[_mt._TOTAL_KEY] for d, s in self._curr_mem_snap.items() if self._mine(d))

    def peak(self) -> int:
        return sum(v for d, v in self._peak_mem.items() if self._mine(d))

    def reset_peak(self) -> None:
        self._peak_mem = {d: s[_mt._TOTAL_KEY] for d, s in self._curr_mem_snap.items()}
        self._peak_mem_snap = {d: dict(s) for d, s in self._curr_mem_snap.items()}

    @staticmethod
    def _breakdown(snap) -> dict[str, int]:
        out: dict[str, int] = {}
        for dev_snap in snap.values():
            for k, v in dev_snap.items():
                name = k.value if hasattr(k, "value") else str(k)
                out[name] = out.get(name, 0) + int(v)
        return out

    def peak_breakdown(self) -> dict[str, int]:
        return self._breakdown(self._peak_mem_snap)

    def current_breakdown(self) -> dict[str, int]:
        return self._breakdown(self._curr_mem_snap)


# --------------------------------------------------------------------------------------------
# transformers patches
# --------------------------------------------------------------------------------------------
_PATCHED = False


def patch_transformers_for_fake() -> None:
    """Make FakeTensors take the same code paths as real tensors in transformers.

    ``transformers.utils.import_utils.is_tracing(t)`` returns True for FakeTensors (via
    ``is_fake_tensor``); masking_utils then refuses the no-padding fast path
    (``_ignore_causal_mask_sdpa`` / ``_ignore_bidirectional_mask_sdpa``) and builds a full 4D mask,
    which changes both memory and the SDPA kernel.  Every caller goes through the module global
    ``is_fake_tensor``, so replacing it is enough.
    """
    global _PATCHED
    if _PATCHED:
        return
    import transformers.masking_utils as mu
    import transformers.utils.import_utils as iu
    from torch._subclasses.fake_tensor import FakeTensor

    if hasattr(iu, "is_fake_tensor"):
        iu.is_fake_tensor = lambda x: False

    # With no cache (use_cache=False, e.g. under gradient checkpointing) and no attention_mask,
    # masking_utils looks for packed sequences in position_ids and reads the answer back with
    # ``bool(tensor.all())`` -- data-dependent, impossible under fake mode.  Our position_ids are
    # always arange (one sequence per row), for which the real answer is "not packed" (None).
    # Run the same ops (same small temporaries) and return that answer.
    orig = getattr(mu, "find_packed_sequence_indices", None)
    if orig is None:  # other transformers versions
        _PATCHED = True
        return

    def find_packed_sequence_indices(position_ids):
        if not isinstance(position_ids, FakeTensor):
            return orig(position_ids)
        first_dummy_value = position_ids[:, :1] - 1
        position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)
        packed_sequence_mask = (position_diff != 1).cumsum(-1)
        (packed_sequence_mask[:, -1] == 0).all()
        return None

    mu.find_packed_sequence_indices = find_packed_sequence_indices
    _PATCHED = True


# --------------------------------------------------------------------------------------------
# optional: emulate CUDA's SDPA kernel choice on the fake-cpu device
# --------------------------------------------------------------------------------------------
_ORIG_SDPA = torch.nn.functional.scaled_dot_product_attention
SDPA_EMULATION_LOG: list[str] = []


def _cuda_like_sdpa(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    """Pick the kernel CUDA (sm80+, torch>=2.5) would pick and call that aten op directly.

    On the CPU, torch 2.13 runs ``_scaled_dot_product_flash_attention_for_cpu`` whenever it can, but
    falls back to the *math* path (fp32 upcast of q/k/v, full [B,H,Sq,Sk] fp32 scores + softmax) when
    q/k and v head dims differ (MLA: DeepSeek-V3) or dropout_p > 0 in training (GPT-2).  CUDA would run
    flash (same head dims <= 256, no mask, fp16/bf16; GQA allowed) or mem-efficient (mask allowed,
    Dv != Dqk allowed, no GQA) there.  The CUDA ops have meta kernels, so under FakeTensorMode this
    gives CUDA's output/logsumexp/saved-tensor shapes.  Unverified rules: check against a cuda run.
    """
    q_heads, k_heads = query.size(-3), key.size(-3)
    d, dk, dv = query.size(-1), key.size(-1), value.size(-1)
    low = query.dtype in (torch.float16, torch.bfloat16)
    need_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    square_or_not_causal = (not is_causal) or query.size(-2) == key.size(-2)
    if (
        query.dim() == 4
        and attn_mask is None
        and low
        and d == dk == dv
        and d <= 256
        and square_or_not_causal
        and (q_heads == k_heads or (enable_gqa and q_heads % k_heads == 0))
    ):
        SDPA_EMULATION_LOG.append("flash")
        return torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale
        )[0]
    if query.dim() == 4 and q_heads == k_heads and d == dk:
        SDPA_EMULATION_LOG.append("efficient")
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(
                ~attn_mask, float("-inf")
            )
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, need_lse, dropout_p, is_causal, scale=scale
        )[0]
    SDPA_EMULATION_LOG.append("math")
    return _ORIG_SDPA(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


@contextlib.contextmanager
def sdpa_emulation(mode: str | None):
    if mode in (None, "", "native"):
        yield
        return
    if mode != "cuda":
        raise ValueError(f"sdpa_emulation {mode!r} (None|'native'|'cuda')")
    torch.nn.functional.scaled_dot_product_attention = _cuda_like_sdpa
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = _ORIG_SDPA


# --------------------------------------------------------------------------------------------
# config / model
# --------------------------------------------------------------------------------------------
PROJECT_FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "models"


def load_config(model: str, overrides: dict | None = None, fixtures: str | Path | None = None):
    """Real HF config from ``fixtures/model/config.json`` with ``overrides`` applied *before* the
    config class is instantiated (so derived fields such as ``layer_types`` follow
    ``num_hidden_layers``).  ``quantization_config`` is dropped (bf16 weights are built)."""
    from transformers import AutoConfig

    folder = Path(fixtures or DEFAULT_FIXTURES) / model
    raw = json.loads((folder / "config.json").read_text())
    raw.pop("quantization_config", None)
    overrides = dict(overrides or {})
    for key, val in overrides.items():
        if "." in key:  # nested, e.g. "text_config.num_hidden_layers"
            node = raw
            parts = key.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = val
        else:
            raw[key] = val
    n = raw.get("num_hidden_layers")
    for list_key in ("layer_types", "mlp_layer_types"):
        if (
            isinstance(raw.get(list_key), list)
            and n is not None
            and len(raw[list_key]) != n
            and list_key not in overrides
        ):
            raw[list_key] = raw[list_key][:n]
    model_type = raw.pop("model_type")
    raw.pop("transformers_version", None)
    raw.pop("architectures", None)
    cfg = AutoConfig.for_model(model_type, **raw)
    return cfg


def build_model(config, dtype: torch.dtype, attention: str | None, experts: str | None = None):
    from transformers import AutoModelForCausalLM

    kw: dict[str, Any] = {"dtype": dtype}
    if attention:
        kw["attn_implementation"] = attention
    if experts:  # transformers 5's MoE experts path: eager | grouped_mm | batched_mm
        kw["experts_implementation"] = experts
    return AutoModelForCausalLM.from_config(config, **kw)


def storage_bytes(tensors, rounding: int | None = None) -> int:
    seen = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        st = t.untyped_storage()
        key = id(st)
        if key in seen:
            continue
        seen.add(key)
        total += round_up(st.nbytes(), rounding)
    return total


def cache_tensors(cache) -> list[torch.Tensor]:
    out = []
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer in layers:
            for name in (
                "keys",
                "values",
                "compressed_kv",
                "k_pe",
                "conv_states",
                "recurrent_states",
            ):
                t = getattr(layer, name, None)
                if isinstance(t, torch.Tensor):
                    out.append(t)
    else:  # legacy tuple cache
        for item in cache:
            out.extend(x for x in item if isinstance(x, torch.Tensor))
    return out


# --------------------------------------------------------------------------------------------
# device contexts
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _fake_swappable(fake_mode):
    """``Module.to()`` / ``Module._apply`` on FakeTensor parameters always goes through
    ``torch.utils.swap_tensors``, which refuses a tensor that has a weakref -- and FakeTensorMode's
    converter memo holds one to every new fake Parameter.  peft calls ``.to()`` on each new LoRA
    module.  Dropping the memo entries (a cache only) before the swap makes it work; the result is
    the same module state as on real tensors."""
    import torch.utils as tu

    orig = tu.swap_tensors

    def swap_tensors(t1, t2):
        memo = fake_mode.fake_tensor_converter.meta_converter.tensor_memo
        for t in (t1, t2):
            if weakref.getweakrefs(t):
                for k in [k for k, v in list(memo.items()) if v is t]:
                    del memo[k]
        return orig(t1, t2)

    tu.swap_tensors = swap_tensors
    try:
        yield
    finally:
        tu.swap_tensors = orig


class _Env:
    """Holds the device-specific pieces for one case."""

    def __init__(self, device: str, track: bool):
        self.device = device
        self.track = track or device in ("fake", "cpu")
        self.fake_mode = None
        if device == "fake":
            from torch._subclasses.fake_tensor import FakeTensorMode

            self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
        self.tracker: PeakTracker | None = None
        self.torch_device = "cuda" if device == "cuda" else "cpu"
        self.autocast_device = "cuda" if device == "cuda" else "cpu"

    # model construction context
    @contextlib.contextmanager
    def build(self):
        if self.fake_mode is not None:
            with self.fake_mode, _fake_swappable(self.fake_mode):
                yield
        elif self.device == "cuda":
            with torch.device("cuda"):
                yield
        else:
            yield

    @contextlib.contextmanager
    def run(self):
        stack = contextlib.ExitStack()
        with stack:
            if self.fake_mode is not None:
                stack.enter_context(self.fake_mode)
            if self.device == "cuda":
                stack.enter_context(torch.device("cuda"))
            if self.tracker is not None:
                stack.enter_context(self.tracker)
            yield

    # statistics ---------------------------------------------------------------------------
    def current(self) -> dict[str, int]:
        d = {}
        if self.tracker is not None:
            d["tracker"] = self.tracker.current()
        if self.device == "cuda":
            d["cuda"] = int(torch.cuda.memory_allocated())
        return d

    def reset_peak(self) -> None:
        if self.tracker is not None:
            self.tracker.reset_peak()
            if RECORD_MARKS:
                MARKS.append((time.time_ns(), self.tracker.current()))
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def peak(self) -> dict[str, int]:
        d = {}
        if self.tracker is not None:
            d["tracker"] = self.tracker.peak()
        if self.device == "cuda":
            torch.cuda.synchronize()
            d["cuda"] = int(torch.cuda.max_memory_allocated())
            d["cuda_reserved"] = int(torch.cuda.max_memory_reserved())
        return d

    def primary(self, d: dict[str, int]) -> int:
        return d["cuda"] if self.device == "cuda" else d["tracker"]


def driver_used_bytes() -> int | None:
    try:
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        idx = torch.cuda.current_device()
        h = pynvml.nvmlDeviceGetHandleByIndex(idx)
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
    except Exception:
        pass
    try:
        idx = torch.cuda.current_device()
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=memory.used",
                "--format=csv,noheader,nounits",
                "-i",
                str(idx),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        return int(float(out.splitlines()[0])) * 1024 * 1024
    except Exception:
        return None


def versions() -> dict[str, str | None]:
    import transformers

    try:
        import peft

        pv = peft.__version__
    except Exception:
        pv = None
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": pv}


ATTN_OP_KEYS = (
    "scaled_dot_product",
    "flash_attention",
    "efficient_attention",
    "cudnn_attention",
    "_softmax",
    "bmm",
)
EXTRA_OP_KEYS = ("grouped_mm", "_fused_adam", "_foreach_", "native_dropout")


def _op_notes(ops: set[str]) -> dict[str, list[str]]:
    attn = sorted(o for o in ops if any(k in o for k in ATTN_OP_KEYS))
    extra = sorted(o for o in ops if any(k in o for k in EXTRA_OP_KEYS))
    return {"attention_ops": attn, "other_ops": extra}


def _sdpa_backend(ops: set[str], attn_impl: str | None = None) -> str:
    names = [
        o
        for o in ops
        if "scaled_dot_product" in o or "_flash_attention" in o or "efficient_attention" in o
    ]
    fwd = sorted(o for o in names if not o.endswith("_backward"))
    if fwd:
        return ",".join(fwd)
    if any("_softmax" in o for o in ops):
        if attn_impl == "sdpa":
            return "math (sdpa's composite fallback: fp32 q/k/v upcast, full [B,H,Sq,Sk] fp32 scores+softmax)"
        return "none: explicit matmul+softmax (eager attention, or sdpa's composite math fallback)"
    return "none"


# --------------------------------------------------------------------------------------------
# jobs
# --------------------------------------------------------------------------------------------
def _make_ids(env: _Env, vocab: int, shape: tuple[int, ...]) -> torch.Tensor:
    # Under fake mode randint only produces metadata; on real devices random token ids.
    return torch.randint(0, vocab, shape, dtype=torch.long)


def _out_cache(out):
    cache = out.get("cache") if hasattr(out, "get") else None
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    return cache


def _serve(env: _Env, model, config, case: dict, res: dict) -> None:
    B = int(case.get("concurrency", 1))
    S = int(case["context"])
    T = int(case.get("new_tokens", 0))
    vocab = config.get_text_config().vocab_size
    # transformers 5.x renamed the forward argument past_key_values -> cache
    cache_kw = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )
    model.eval()
    with torch.no_grad(), env.run():
        ids = _make_ids(env, vocab, (B, S))
        env.reset_peak()
        start = env.current()
        # ---- prefill (generate(): logits_to_keep=1, logits copied to fp32) ----
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = _out_cache(out)
        logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
        del out
        nxt = torch.argmax(logits, dim=-1)
        ids = torch.cat([ids, nxt[:, None]], dim=-1)
        p_prefill = env.peak()
        after_prefill = env.current()
        cache_after_prefill = storage_bytes(cache_tensors(cache))
        env.reset_peak()
        # ---- decode ----
        for _ in range(T):
            out = model(
                input_ids=nxt[:, None], use_cache=True, logits_to_keep=1, **{cache_kw: cache}
            )
            cache = _out_cache(out)
            logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
            del out
            nxt = torch.argmax(logits, dim=-1)
            ids = torch.cat([ids, nxt[:, None]], dim=-1)
        p_decode = env.peak()
        end = env.current()
        cache_end = storage_bytes(cache_tensors(cache))
        res["cache_type"] = type(cache).__name__
        del cache, logits, nxt, ids
    res["prefill_peak_bytes"] = env.primary(p_prefill)
    res["decode_peak_bytes"] = env.primary(p_decode) if T > 0 else None
    res["torch_peak_bytes"] = max(env.primary(p_prefill), env.primary(p_decode) if T > 0 else 0)
    res["held_bytes"] = env.primary(end)
    res["held_after_prefill_bytes"] = env.primary(after_prefill)
    res["start_bytes"] = env.primary(start)
    res["cache_bytes_after_prefill"] = cache_after_prefill
    res["cache_bytes_end"] = cache_end
    if env.device == "cuda":
        res["max_memory_reserved"] = max(
            p_prefill["cuda_reserved"], p_decode.get("cuda_reserved", 0)
        )
        if env.tracker is not None:
            res["tracker_peak_bytes"] = max(
                p_prefill["tracker"], p_decode["tracker"] if T > 0 else 0
            )
            res["tracker_prefill_peak_bytes"] = p_prefill["tracker"]
            res["tracker_decode_peak_bytes"] = p_decode["tracker"] if T > 0 else None
            res["tracker_held_bytes"] = end["tracker"]


def _optimizer(case: dict, params):
    impl = case.get("optimizer_impl", "foreach")
    opt = case.get("optimizer", "adamw").lower()
    if opt != "adamw":
        raise ValueError(f"optimizer {opt!r} not supported (adamw only)")
    kw = {"lr": float(case.get("lr", 1e-5))}
    if impl == "foreach":
        kw.update(foreach=True)
    elif impl == "fused":
        kw.update(fused=True)
    elif impl == "forloop":
        kw.update(foreach=False)
    else:
        raise ValueError(f"optimizer_impl {impl!r}")
    return torch.optim.AdamW(params, **kw)


def _op_sac_save_list() -> set:
    """torchtitan's op-level SAC save list (models/llama/parallelize_llama.py, Dec 2024):
    aten.mm, the fused SDPA kernels and reduce_scatter; here with every fused SDPA aten op this
    torch has (the CPU flash kernel stands for CUDA's flash in fake runs)."""
    ops = torch.ops.aten
    names = (
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    out = {ops.mm.default}
    for n in names:
        if hasattr(ops, n):
            out.add(getattr(ops, n).default)
    return out


def _op_sac_context():
    """A fresh op-SAC context per checkpointed layer: save the outputs of the save list except
    every second aten.mm (the count restarts per layer, forward and recompute apart), as
    torchtitan's _get_custom_policy does."""
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = _op_sac_save_list()
    meta: dict = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _train(env: _Env, model, config, case: dict, res: dict, lora: bool) -> None:
    B = int(case["micro_batch"])
    S = int(case["seq"])
    vocab = config.get_text_config().vocab_size
    precision = case.get("precision", "bf16")
    ckpt = case.get("checkpointing", "none")
    if ckpt not in ("none", "full", "selective_op"):
        raise ValueError(f"checkpointing {ckpt!r}")

    if lora:
        from peft import LoraConfig, get_peft_model

        lcfg = LoraConfig(
            r=int(case.get("rank", 16)),
            lora_alpha=int(case.get("lora_alpha", 32)),
            target_modules=list(
                case.get("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])
            ),
            lora_dropout=float(case.get("lora_dropout", 0.0)),
            task_type="CAUSAL_LM",
        )
        with env.build():
            model = get_peft_model(model, lcfg)
        if ckpt == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    elif ckpt == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif ckpt == "selective_op":
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False, "context_fn": _op_sac_context}
        )
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    res["trainable_params"] = int(sum(p.numel() for p in params))
    res["trainable_param_dtypes"] = sorted({str(p.dtype).replace("torch.", "") for p in params})
    with env.build():
        opt = _optimizer(case, params)
    if env.tracker is not None:
        env.tracker.track_model(model)

    use_cache = case.get("use_cache")  # None: model default (config.use_cache), as a plain call
    fwd_kw = {} if use_cache is None else {"use_cache": bool(use_cache)}
    if precision == "mixed":
        amp = lambda: torch.autocast(env.autocast_device, dtype=torch.bfloat16)  # noqa: E731
    elif precision in ("bf16", "fp32", "fp16", None):
        amp = contextlib.nullcontext
    else:
        raise ValueError(f"precision {precision!r}")

    phases: dict[str, Any] = {}

    def note(key: str, d: dict[str, int]) -> None:
        phases[key] = env.primary(d)
        if env.device == "cuda" and "tracker" in d:
            phases["tracker_" + key] = d["tracker"]

    with env.run():
        x = _make_ids(env, vocab, (B, S))
        for step in range(2):
            last = step == 1
            if last:
                held_before = env.current()
                env.reset_peak()
                note("start", held_before)
            with amp():
                loss = model(input_ids=x, labels=x, **fwd_kw).loss
            if last:
                fwd_peak = env.peak()
                note("forward_peak", fwd_peak)
                note("after_forward", env.current())
                if env.tracker is not None:
                    phases["forward_peak_breakdown"] = env.tracker.peak_breakdown()
                env.reset_peak()
            loss.backward()
            if last:
                bwd_peak = env.peak()
                note("backward_peak", bwd_peak)
                note("after_backward", env.current())
                if env.tracker is not None:
                    phases["backward_peak_breakdown"] = env.tracker.peak_breakdown()
                    phases["after_backward_breakdown"] = env.tracker.current_breakdown()
                env.reset_peak()
            opt.step()
            if last:
                opt_peak = env.peak()
                note("optimizer_peak", opt_peak)
                if env.tracker is not None:
                    phases["optimizer_peak_breakdown"] = env.tracker.peak_breakdown()
            opt.zero_grad(set_to_none=True)
            del loss
        end = env.current()
        if env.tracker is not None:
            res["held_breakdown"] = env.tracker.current_breakdown()
        # optimizer "step" scalars: on CUDA with foreach/forloop (capturable=False) they live on the
        # CPU and are NOT in cuda allocated memory; in the fake-cpu run they are counted (512 B each).
        step_tensors = [
            s["step"] for s in opt.state.values() if isinstance(s.get("step"), torch.Tensor)
        ]
        res["optimizer_step_scalar_bytes"] = storage_bytes(step_tensors)
        res["optimizer_state_bytes"] = storage_bytes(
            [
                v
                for s in opt.state.values()
                for k, v in s.items()
                if isinstance(v, torch.Tensor) and k != "step"
            ]
        )
        del x
    peaks = [fwd_peak, bwd_peak, opt_peak]
    res["torch_peak_bytes"] = max(env.primary(p) for p in peaks)
    res["peak_phase"] = ["forward", "backward", "optimizer"][
        max(range(3), key=lambda i: env.primary(peaks[i]))
    ]
    res["held_bytes"] = env.primary(held_before)
    res["held_end_bytes"] = env.primary(end)
    res["phases"] = phases
    if env.device == "cuda":
        res["max_memory_reserved"] = max(p["cuda_reserved"] for p in peaks)
        if env.tracker is not None:
            res["tracker_peak_bytes"] = max(p["tracker"] for p in peaks)
            res["tracker_held_bytes"] = held_before["tracker"]
    del opt


def measure_case(
    case: dict,
    device: str = "fake",
    fixtures: str | Path | None = None,
    track: bool = True,
    seed: int = 0,
) -> dict:
    """Run one case; returns the result record (raises on failure)."""
    if device not in ("fake", "cpu", "cuda"):
        raise ValueError(f"device {device!r}")
    patch_transformers_for_fake()
    torch.manual_seed(seed)
    t0 = time.time()
    job = case["job"]
    dtype_name = case.get("dtype", "bf16")
    if job == "train" and case.get("precision") == "mixed":
        dtype_name = "fp32"  # master weights in fp32, compute under autocast(bf16)
    dtype = DTYPES[dtype_name]
    env = _Env(device, track)
    res: dict[str, Any] = {
        "case": case,
        "device": {"fake": "fake-cpu", "cpu": "real-cpu", "cuda": "cuda"}[device],
        "versions": versions(),
        "round_bytes": ROUND_BYTES,
    }
    if device == "cuda":
        torch.cuda.empty_cache()
        res["cuda_device_name"] = torch.cuda.get_device_name()
        res["driver_used_bytes_before"] = driver_used_bytes()
    if case.get("fixtures") == "project":  # a config kept in the project (tests/fixtures/models)
        fixtures = PROJECT_FIXTURES
    config = load_config(case["model"], case.get("config_overrides"), fixtures)
    with env.build():
        model = build_model(config, dtype, case.get("attention"), case.get("experts"))
    res["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    res["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
    res["model_class"] = type(model).__name__
    res["num_params"] = int(sum(p.numel() for p in model.parameters()))
    res["param_bytes"] = storage_bytes(list(model.parameters()))
    res["buffer_bytes"] = storage_bytes(list(model.buffers()))
    res["param_dtype"] = str(next(model.parameters()).dtype).replace("torch.", "")
    if env.track:
        env.tracker = PeakTracker()
        env.tracker.op_log = OP_LOG
        if device == "cuda":
            env.tracker.device_type = "cuda"
        if job != "lora":  # lora: the peft-wrapped model is registered inside _train
            env.tracker.track_model(model)
    emu = case.get("sdpa_emulation")
    if emu and device != "fake":
        emu = None  # real devices run their own kernels
    SDPA_EMULATION_LOG.clear()
    with sdpa_emulation(emu):
        if job == "serve":
            if case.get("engine", "hf") != "hf":
                raise ValueError(f"engine {case.get('engine')!r} not supported (hf only)")
            _serve(env, model, config, case, res)
        elif job == "train":
            _train(env, model, config, case, res, lora=False)
        elif job == "lora":
            _train(env, model, config, case, res, lora=True)
        else:
            raise ValueError(f"job {job!r}")
    if emu:
        res["sdpa_emulation"] = {
            k: SDPA_EMULATION_LOG.count(k) for k in sorted(set(SDPA_EMULATION_LOG))
        }
    if env.tracker is not None:
        ops = env.tracker.ops_seen
        res["sdpa_backend"] = _sdpa_backend(ops, res.get("attn_implementation"))
        res.update(_op_notes(ops))
    if device == "cuda":
        torch.cuda.synchronize()
        res["driver_used_bytes"] = (
            driver_used_bytes()
        )  # before freeing: model + cache + allocator pool
        res["cuda_memory_stats"] = {
            k: int(v)
            for k, v in torch.cuda.memory_stats().items()
            if k
            in (
                "allocated_bytes.all.peak",
                "reserved_bytes.all.peak",
                "num_alloc_retries",
                "num_ooms",
                "active_bytes.all.peak",
                "inactive_split_bytes.all.peak",
            )
        }
    del model
    env.tracker = None
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    res["seconds"] = round(time.time() - t0, 3)
    return res
