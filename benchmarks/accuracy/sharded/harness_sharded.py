"""Ground-truth per-rank memory of SHARDED training steps (FSDP2 / DTensor TP) on a fake process group.

Measures, for ONE rank of an N-rank job, the peak of PyTorch-allocated bytes (the figure
``torch.cuda.max_memory_allocated()`` reports) of a training step, with phase peaks
(forward / backward / optimizer), the resident bytes after the step, and the largest live tensors
at each peak.  No GPU, no real ranks, no real weights:

* the process group is torch's FAKE backend
  (``dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=N)``): every
  collective is a no-op that "hallucinates" its result, but the output buffers are allocated by
  the same Python code (FSDP2 / DTensor) as on a real job;
* the model is built from the real ``config.json`` under ``FakeTensorMode`` on the cpu device
  (shapes / dtypes / strides only), then LoRA (peft) / activation checkpointing (HF) / DTensor TP
  (``parallelize_module``) / FSDP2 (``fully_shard`` per decoder layer, then the root) are applied,
  still under fake mode, so a 32B model costs no RAM;
* every storage is tracked by :class:`PeakTracker` (rounded up to 512 B like the CUDA caching
  allocator); FSDP2 frees / re-allocates its unsharded parameters with
  ``UntypedStorage.resize_``, which MemTracker already intercepts.

``mode="real"`` runs the same job with real CPU tensors inside an already initialised process
group (``validate_sharded.py`` spawns 2 gloo processes) -- the check that the fake-PG figures are
the real ones.

Imports only torch / transformers / peft, never nodeledger.

CREDIT: ``PeakTracker``, ``_NoModTracker``, the 512-B rounding, ``patch_transformers_for_fake``,
``_fake_swappable``, ``load_config``, ``build_model`` and ``storage_bytes`` are copied (lightly
extended: top-tensor capture at the peak, labels) from nodeledger's
``benchmarks/accuracy/harness.py``, which itself trims
``torch.distributed._tools.mem_tracker.MemTracker`` (PyTorch, BSD licence).

CLI::

    python harness_sharded.py [--cases cases_sharded.json] [--out measured_sharded.json]
                              [--only ID ...] [--timeout 1500]

runs every case in its own subprocess (bounded by ``--timeout``), records errors instead of
dropping them, and rewrites ``--out`` after every case.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import heapq
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
import typing
import warnings
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._tools.mem_tracker as _mt
from torch.distributed._tools.mem_tracker import MemTracker

HERE = Path(__file__).resolve().parent
DEFAULT_FIXTURES = Path(
    os.environ.get(
        "NL_FIXTURES", Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "models"
    )
)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
GiB = 1024**3

# --------------------------------------------------------------------------------------------
# Allocation rounding (CUDA caching allocator: kMinBlockSize = 512).  [copied from harness.py]
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


_mt._WeakRefInfo = _RoundedWeakRefInfo  # MemTracker looks the class up at call time


class _NoModTracker:
    """Stand-in for MemTracker's ModTracker (no per-module hooks).  [copied from harness.py]"""

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


def _short_dtype(dt) -> str:
    return str(dt).replace("torch.", "")


class PeakTracker(MemTracker):
    """MemTracker keeping only the global current / peak, plus the largest live storages at the peak.

    Copied from nodeledger's benchmarks/accuracy/harness.py (which trims PyTorch's MemTracker), and
    extended here:

    * every new storage remembers the op, shape and dtype of the tensor it was first seen with
      (``winfo.desc``) and an optional label (parameter shard / FSDP unsharded parameter name);
    * ``top_k`` > 0: when the running peak is followed by the first decrease of the total, the
      live storages are listed (that state *is* the peak state); :meth:`take_top` returns the
      ``top_k`` largest and a per-kind aggregate for the current phase.
    """

    def __init__(self, top_k: int = 10) -> None:
        super().__init__()
        self._mod_tracker = _NoModTracker()
        self.ops_seen: set[str] = set()
        self.top_k = top_k
        self._cur_func = "untracked"
        self._peak_pending = False
        self._peak_capture: dict | None = None
        self.n_captures = 0
        self._suspended = 0  # > 0: ops run untracked (see untracked_backend_waits)
        self.n_untracked_ops = 0

    # -- hot path ---------------------------------------------------------------------------
    def _update_peak_stats(self, peak_state) -> None:
        for dev, dev_snap in self._curr_mem_snap.items():
            tot = dev_snap[_mt._TOTAL_KEY]
            if self._peak_mem.get(dev, 0) < tot:
                self._peak_mem[dev] = tot
                self._peak_mem_snap[dev] = dict(dev_snap)
                self._peak_pending = True

    def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None) -> None:
        if self._peak_pending and self.top_k:
            shrink = u_type == _mt._UpdateType.DEL or (
                u_type == _mt._UpdateType.SIZE
                and old_mem_consumed is not None
                and winfo.mem_consumed < old_mem_consumed
            )
            if shrink:
                self._peak_pending = False
                if self.current() == self.peak():
                    self._capture(
                        winfo,
                        old_mem_consumed if u_type == _mt._UpdateType.SIZE else winfo.mem_consumed,
                    )
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)

    def _track(self, reftype, t: torch.Tensor) -> None:
        sts = _mt.get_untyped_storages(t)
        new = [st for st in sts if st not in self._WINFO]
        super()._track(reftype, t)
        for st in new:
            ent = self._WINFO.get(st)
            if ent is not None:
                ent[0].desc = (self._cur_func, tuple(t.shape), _short_dtype(t.dtype))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops_seen.add(str(func.overloadpacket))
        if self._suspended:
            self.n_untracked_ops += 1
            return func(*args, **(kwargs or {}))
        self._cur_func = str(func)
        return super().__torch_dispatch__(func, types, args, kwargs)

    # no per-module bookkeeping
    def _pre_fw_hook(self, module, inputs):
        pass

    def _post_fw_hook(self, module, inputs, outputs):
        pass

    def _pre_bw_hook(self, module, args):
        pass

    def _post_bw_hook(self, module, args):
        pass

    # -- top tensors --------------------------------------------------------------------------
    def _live(self, changing=None, changing_bytes=None):
        out = []
        seen = set()
        for winfo, _w in list(self._WINFO.values()):
            seen.add(id(winfo))
            b = changing_bytes if winfo is changing else winfo.mem_consumed
            if b > 0:
                out.append((b, winfo))
        if changing is not None and id(changing) not in seen and changing_bytes:
            out.append((changing_bytes, changing))  # storage being finalised
        return out

    @staticmethod
    def _kind(winfo) -> str:
        label = getattr(winfo, "label", None)
        ref = winfo.reftype.value if hasattr(winfo.reftype, "value") else str(winfo.reftype)
        if label:
            return label.split(":", 1)[0]
        return ref

    def _capture(self, changing=None, changing_bytes=None) -> None:
        self.n_captures += 1
        live = self._live(changing, changing_bytes)
        top = heapq.nlargest(self.top_k, live, key=lambda e: e[0])
        agg: dict[str, list[int]] = {}
        for b, w in live:
            a = agg.setdefault(self._kind(w), [0, 0])
            a[0] += b
            a[1] += 1
        self._peak_capture = {
            "total_bytes": sum(b for b, _ in live),
            "n_live_storages": len(live),
            "top": [self._describe(b, w) for b, w in top],
            "by_kind": {
                k: {"bytes": v[0], "count": v[1]}
                for k, v in sorted(agg.items(), key=lambda kv: -kv[1][0])
            },
        }

    @staticmethod
    def _describe(b: int, w) -> dict:
        op, shape, dtype = getattr(w, "desc", ("untracked", None, None))
        ref = w.reftype.value if hasattr(w.reftype, "value") else str(w.reftype)
        d = {
            "bytes": int(b),
            "GiB": round(b / GiB, 4),
            "reftype": ref,
            "op": op,
            "shape": list(shape) if shape is not None else None,
            "dtype": dtype,
        }
        if getattr(w, "label", None):
            d["label"] = w.label
        return d

    def take_top(self) -> dict | None:
        """Top live storages at the peak of the phase that ends now."""
        if self.top_k and self._peak_pending and self.current() == self.peak():
            self._capture()
        self._peak_pending = False
        cap, self._peak_capture = self._peak_capture, None
        return cap

    def label(self, t: torch.Tensor, label: str) -> None:
        for st in _mt.get_untyped_storages(t):
            ent = self._WINFO.get(st)
            if ent is not None:
                ent[0].label = label

    # -- API ----------------------------------------------------------------------------------
    def track_model(self, model: torch.nn.Module) -> None:
        self._track_module_params_and_buffers(model, install_grad_hooks=False)

        def _grad_hook(grad: torch.Tensor) -> None:
            self._update_and_maybe_create_winfos(grad, _mt._MemRefType.GRAD)

        for name, param in model.named_parameters():
            self.label(param, f"param_local:{name}")
            loc = param.to_local() if hasattr(param, "to_local") else param
            for st in _mt.get_untyped_storages(param):
                ent = self._WINFO.get(st)
                if ent is not None and not hasattr(ent[0], "desc"):
                    ent[0].desc = ("parameter (local)", tuple(loc.shape), _short_dtype(loc.dtype))
            if not param.requires_grad or self._param_to_grad_hook_handles.get(param) is not None:
                continue
            self._param_to_grad_hook_handles[param] = (
                param.register_hook(_grad_hook),
                param.register_post_accumulate_grad_hook(lambda p: _grad_hook(p.grad)),
            )

    def current(self) -> int:
        return sum(s[_mt._TOTAL_KEY] for s in self._curr_mem_snap.values())

    def peak(self) -> int:
        return sum(self._peak_mem.values())

    def reset_peak(self) -> None:
        self._peak_mem = {d: s[_mt._TOTAL_KEY] for d, s in self._curr_mem_snap.items()}
        self._peak_mem_snap = {d: dict(s) for d, s in self._curr_mem_snap.items()}
        self._peak_pending = False
        self._peak_capture = None

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
# transformers / peft patches for fake tensors  [copied from harness.py]
# --------------------------------------------------------------------------------------------
_PATCHED = False


def patch_transformers_for_fake() -> None:
    """``is_fake_tensor -> False`` (no-padding mask fast path like real inputs) and a fake-safe
    ``find_packed_sequence_indices`` (answers "not packed" for arange position_ids)."""
    global _PATCHED
    if _PATCHED:
        return
    import transformers.masking_utils as mu
    import transformers.utils.import_utils as iu
    from torch._subclasses.fake_tensor import FakeTensor

    if hasattr(iu, "is_fake_tensor"):
        iu.is_fake_tensor = lambda x: False
    orig = getattr(mu, "find_packed_sequence_indices", None)
    if orig is None:
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


@contextlib.contextmanager
def _fake_swappable(fake_mode):
    """peft's ``Module.to()`` on fake parameters goes through ``swap_tensors``, blocked by the fake
    converter memo's weakref: drop the memo entry first.  [copied from harness.py]"""
    import torch.utils as tu

    if fake_mode is None:
        yield
        return
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


def load_config(model: str, overrides: dict | None = None, fixtures: str | Path | None = None):
    """Real HF config, ``overrides`` applied before the config class is instantiated.
    [copied from harness.py]"""
    from transformers import AutoConfig

    folder = Path(fixtures or DEFAULT_FIXTURES) / model
    raw = json.loads((folder / "config.json").read_text())
    raw.pop("quantization_config", None)
    overrides = dict(overrides or {})
    for key, val in overrides.items():
        if "." in key:
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
    return AutoConfig.for_model(model_type, **raw)


def build_model(config, dtype: torch.dtype, attention: str | None):
    from transformers import AutoModelForCausalLM

    kw: dict[str, Any] = {"dtype": dtype}
    if attention:
        kw["attn_implementation"] = attention
    return AutoModelForCausalLM.from_config(config, **kw)


def storage_bytes(tensors, rounding: int | None = None) -> int:
    seen = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        for st in _mt.get_untyped_storages(t):
            if id(st) in seen:
                continue
            seen.add(id(st))
            total += round_up(st.nbytes(), rounding)
    return total


def versions() -> dict[str, str | None]:
    import transformers

    try:
        import peft

        pv = peft.__version__
    except Exception:
        pv = None
    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": pv,
        "python": sys.version.split()[0],
    }


_FSDP_PATCHED = False


def patch_fsdp_for_fake() -> None:
    """FSDP2's ``FSDPParam.reset_sharded_param`` (run again at lazy init) decides whether the
    sharded local tensor is still a view of its padded storage by comparing
    ``untyped_storage().data_ptr()`` -- always 0 for fake tensors.  On a rank whose shard is padded
    (dim 0 not divisible by the world size) the fake run would then re-pad: allocate a new padded
    storage and free the old one (same total, but the parameter shard is re-categorised as an
    activation).  Answer the test by storage identity instead, as a real tensor's data_ptr does."""
    global _FSDP_PATCHED
    if _FSDP_PATCHED:
        return
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.distributed.fsdp._fully_shard import _fsdp_param as fsp

    orig = fsp.FSDPParam.reset_sharded_param

    def reset_sharded_param(self):
        spd = getattr(self, "_sharded_param_data", None)
        mi = self._module_info
        new_param = getattr(mi.module, mi.param_name)
        lt = getattr(new_param, "_local_tensor", None)
        if (
            isinstance(spd, FakeTensor)
            and isinstance(lt, FakeTensor)
            and new_param is self.sharded_param
            and spd.untyped_storage().nbytes() > 0
            and spd.untyped_storage()._cdata == lt.untyped_storage()._cdata
        ):
            # real tensors: same_local_tensor=True and no re-padding -> only this is left to do
            self._sharding_spec = self.sharded_param._spec
            return
        return orig(self)

    fsp.FSDPParam.reset_sharded_param = reset_sharded_param
    _FSDP_PATCHED = True


@contextlib.contextmanager
def untracked_backend_waits(tracker: PeakTracker):
    """Real gloo runs only: ``Work.wait()`` runs gloo's own copy-out in the calling thread, which
    dispatches ``split`` views of a gloo-internal buffer (reduce-scatter: the size of the input) and
    ``copy_`` into the output -- allocations that NCCL (and the fake PG) never make.  Inside this
    context, ops dispatched during ``Work.wait()`` are not tracked."""
    import torch._C._distributed_c10d as c10d

    orig = c10d.Work.wait

    def wait(self, *args, **kwargs):
        tracker._suspended += 1
        try:
            return orig(self, *args, **kwargs)
        finally:
            tracker._suspended -= 1

    c10d.Work.wait = wait
    try:
        yield
    finally:
        c10d.Work.wait = orig


# --------------------------------------------------------------------------------------------
# process group / mesh
# --------------------------------------------------------------------------------------------
def init_fake_pg(world_size: int, rank: int = 0) -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_world_size() == world_size and dist.get_rank() == rank:
            return
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


def make_meshes(world_size: int, tp: int):
    """(dp_mesh | None, tp_mesh | None).  Built OUTSIDE fake mode (the mesh holds a real tensor)."""
    from torch.distributed.device_mesh import init_device_mesh

    if world_size % tp:
        raise ValueError(f"world_size {world_size} not divisible by tp {tp}")
    dp = world_size // tp
    if tp == 1:
        return init_device_mesh("cpu", (dp,), mesh_dim_names=("dp",)), None
    if dp == 1:
        return None, init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    return mesh["dp"], mesh["tp"]


# --------------------------------------------------------------------------------------------
# parallelisms
# --------------------------------------------------------------------------------------------
def decoder_layers(model) -> list[torch.nn.Module]:
    """The decoder layers (what HF accelerate / torchtitan wrap one by one)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise RuntimeError("no decoder layers found")
    return layers


def apply_tp(model, tp_mesh, sequence_parallel: bool) -> dict:
    """torchtitan's Llama plan on an HF Llama/Qwen model.

    No SP: embedding RowwiseParallel(input Replicate -> output Replicate), q/k/v/gate/up
    ColwiseParallel, o/down RowwiseParallel (output Replicate), lm_head ColwiseParallel(output
    Replicate: full logits, no loss parallel); norms stay plain replicated tensors.
    SP (torchtitan): embedding output Shard(1); norms SequenceParallel; attention / mlp inputs
    PrepareModuleInput(Shard(1) -> Replicate); o/down RowwiseParallel(output Shard(1)); lm_head
    ColwiseParallel(input Shard(1), output Replicate).  The residual stream is kept as DTensor
    (use_local_output=False) so HF's position_ids / mask see the global sequence length --
    torchtitan keeps local tensors instead; the storages are the same.
    Attention heads: HF reshapes q/k/v with ``view(B, S, -1, head_dim)`` so the local head count
    (num_heads / tp) follows from the sharded projection width, no config change needed.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tp = tp_mesh.size()
    cfg = model.config
    for key in ("num_attention_heads", "num_key_value_heads"):
        if getattr(cfg, key) % tp:
            raise ValueError(f"{key}={getattr(cfg, key)} not divisible by tp={tp}")
    inner = model.model
    if not sequence_parallel:
        parallelize_module(
            model,
            tp_mesh,
            {
                "model.embed_tokens": RowwiseParallel(
                    input_layouts=Replicate(), output_layouts=Replicate()
                ),
                "lm_head": ColwiseParallel(output_layouts=Replicate()),
            },
        )
        layer_plan = {
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(),
        }
    else:
        parallelize_module(
            model,
            tp_mesh,
            {
                "model.embed_tokens": RowwiseParallel(
                    input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False
                ),
                "model.norm": SequenceParallel(),
                "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
            },
        )
        layer_plan = {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()},
            ),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            ),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        }
    for layer in inner.layers:
        parallelize_module(layer, tp_mesh, layer_plan)
    return {
        "tp": tp,
        "sequence_parallel": sequence_parallel,
        "local_heads": cfg.num_attention_heads // tp,
        "local_kv_heads": cfg.num_key_value_heads // tp,
        "loss_parallel": False,
    }


def apply_fsdp(
    model,
    dp_mesh,
    mp_policy=None,
    layers=None,
    root=None,
    reshard_after_forward: bool | None = None,
) -> dict:
    """fully_shard on every decoder layer, then on the root (HF accelerate / torchtitan).
    ``reshard_after_forward`` None: FSDP2's default (True for the layers; the root is switched to
    False at lazy init).  True/False: passed explicitly to every call, root included (accelerate's
    FSDP2 plugin passes True by default; torchtitan passes ``not pp_enabled`` to the root)."""
    from torch.distributed.fsdp import fully_shard

    kw = {"mesh": dp_mesh}
    if reshard_after_forward is not None:
        kw["reshard_after_forward"] = bool(reshard_after_forward)
    if mp_policy is not None:
        kw["mp_policy"] = mp_policy
    layers = layers if layers is not None else decoder_layers(model)
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(root if root is not None else model, **kw)
    return {
        "n_fsdp_units": len(layers) + 1,
        "reshard_after_forward": "default (True for layers; root: False, set at lazy init)"
        if reshard_after_forward is None
        else f"explicit {bool(reshard_after_forward)} on every unit, root included",
        "mp_policy": None
        if mp_policy is None
        else {
            "param_dtype": _short_dtype(mp_policy.param_dtype),
            "reduce_dtype": _short_dtype(mp_policy.reduce_dtype),
        },
    }


def fsdp_params(model):
    """(fqn, FSDPParam) for every FSDP-managed parameter."""
    from torch.distributed.fsdp import FSDPModule

    out = []
    for m in model.modules():
        if isinstance(m, FSDPModule):
            pg = m._get_fsdp_state()._fsdp_param_group
            if pg is None:
                continue
            for fp in pg.fsdp_params:
                out.append((fp._param_fqn, fp))
    return out


def _optimizer(case: dict, params):
    impl = case.get("optimizer_impl", "foreach")
    if case.get("optimizer", "adamw").lower() != "adamw":
        raise ValueError("adamw only")
    kw = {"lr": float(case.get("lr", 1e-5))}
    kw.update(
        {"foreach": {"foreach": True}, "fused": {"fused": True}, "forloop": {"foreach": False}}[
            impl
        ]
    )
    from torch.distributed.tensor import DTensor

    # foreach kernels cannot mix DTensor and plain tensors in one list: one param group each
    # (torch runs the foreach kernels per group, so the temporaries are per group anyway)
    dt = [p for p in params if isinstance(p, DTensor)]
    pl = [p for p in params if not isinstance(p, DTensor)]
    groups = [{"params": g} for g in (dt, pl) if g]
    return torch.optim.AdamW(groups, **kw)


# --------------------------------------------------------------------------------------------
# one case
# --------------------------------------------------------------------------------------------
def measure_case(
    case: dict,
    mode: str = "fake",
    fixtures=None,
    seed: int = 0,
    top_k: int = 10,
    untrack_backend_waits: bool = False,
) -> dict:
    """Run one case on this rank.  mode="fake": fake PG (initialised here; rank ``case["rank"]``,
    default 0) + FakeTensorMode.  mode="real": real CPU tensors; the caller must have initialised
    the process group.  ``untrack_backend_waits`` (real gloo only): see untracked_backend_waits."""
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    patch_transformers_for_fake()
    patch_fsdp_for_fake()
    t0 = time.time()
    ws = int(case.get("world_size", 8))
    tp = int(case.get("tp", 1))
    sp = bool(case.get("sp", False))
    framework = case.get("framework", "fsdp2")
    precision = case.get("precision", "bf16")
    ckpt = case.get("checkpointing", "none")
    lora = case.get("lora")
    B, S = int(case["micro_batch"]), int(case["seq"])
    if mode == "fake":
        init_fake_pg(ws, int(case.get("rank", 0)))
    elif not dist.is_initialized() or dist.get_world_size() != ws:
        raise RuntimeError("real mode: initialise the process group with world_size first")
    rank = dist.get_rank()
    torch.manual_seed(seed)
    dp_mesh, tp_mesh = make_meshes(ws, tp)
    fake_mode = None
    if mode == "fake":
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    build_ctx = (
        (lambda: contextlib.ExitStack())
        if fake_mode is None
        else (lambda: _stack(fake_mode, _fake_swappable(fake_mode)))
    )

    res: dict[str, Any] = {
        "case": case,
        "mode": {
            "fake": "fake-pg + FakeTensorMode (cpu)",
            "real": f"real {dist.get_backend()} pg, real cpu tensors",
        }[mode],
        "rank": rank,
        "world_size": ws,
        "versions": versions(),
        "round_bytes": ROUND_BYTES,
        "config_overrides": case.get("config_overrides") or {},
    }
    param_dtype = torch.float32 if precision == "mixed" else DTYPES[case.get("dtype", "bf16")]
    config = load_config(case["model"], case.get("config_overrides"), fixtures)
    res["num_hidden_layers"] = config.get_text_config().num_hidden_layers
    with build_ctx():
        model = build_model(config, param_dtype, case.get("attention", "sdpa"))
    res["model_class"] = type(model).__name__
    res["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    res["num_params_full"] = int(sum(p.numel() for p in model.parameters()))
    res["param_bytes_full"] = storage_bytes(list(model.parameters()))
    hf_model = model
    if lora:
        from peft import LoraConfig, get_peft_model

        lcfg = LoraConfig(
            r=int(lora.get("r", 16)),
            lora_alpha=int(lora.get("alpha", 32)),
            target_modules=list(lora.get("target_modules", ["q_proj", "v_proj"])),
            lora_dropout=float(lora.get("dropout", 0.0)),
            task_type="CAUSAL_LM",
        )
        with build_ctx():
            model = get_peft_model(model, lcfg)
    if ckpt == "full":
        # HF: checkpoints each decoder layer's forward (torch.utils.checkpoint, non-reentrant);
        # FSDP2's module hooks stay outside the checkpoint (transformers >= 5 wraps forward)
        hf_model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )
    elif ckpt != "none":
        raise ValueError(f"checkpointing {ckpt!r}")
    par: dict[str, Any] = {"framework": framework}
    with build_ctx():
        if tp > 1:
            if lora:
                raise ValueError("tp + lora not supported here")
            par["tp"] = apply_tp(hf_model, tp_mesh, sp)
        if framework == "fsdp2":
            if dp_mesh is None:
                raise ValueError("fsdp2 needs dp > 1 (world_size / tp)")
            mp = None
            if precision == "mixed":
                from torch.distributed.fsdp import MixedPrecisionPolicy

                mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            par["fsdp"] = apply_fsdp(
                model,
                dp_mesh,
                mp,
                layers=decoder_layers(hf_model),
                root=model,
                reshard_after_forward=case.get("reshard_after_forward"),
            )
        elif framework != "tp":
            raise ValueError(f"framework {framework!r}")
    res["parallel"] = par
    if case.get("force_sum_reduction_for_comms"):
        for m in model.modules():
            if hasattr(m, "set_force_sum_reduction_for_comms"):
                m.set_force_sum_reduction_for_comms(True)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    local = lambda p: p.to_local() if hasattr(p, "to_local") else p  # noqa: E731
    res["trainable_params_full"] = int(sum(p.numel() for p in params))
    res["trainable_params_local"] = int(sum(local(p).numel() for p in params))
    res["trainable_param_dtypes"] = sorted({_short_dtype(p.dtype) for p in params})
    res["param_bytes_local"] = storage_bytes([local(p) for p in model.parameters()])
    res["param_local_numel"] = int(sum(local(p).numel() for p in model.parameters()))
    with build_ctx():
        opt = _optimizer(case, params)

    tracker = PeakTracker(top_k=top_k)
    tracker.track_model(model)
    res["tracked_at_start_bytes"] = tracker.current()
    vocab = config.get_text_config().vocab_size
    use_cache = case.get("use_cache")
    fwd_kw = {} if use_cache is None else {"use_cache": bool(use_cache)}
    phases: dict[str, Any] = {}
    tops: dict[str, Any] = {}
    step_seconds = []
    cms = [fake_mode] if fake_mode is not None else []
    if untrack_backend_waits:
        cms.append(untracked_backend_waits(tracker))
    res["untrack_backend_waits"] = untrack_backend_waits
    run = _stack(*cms, tracker)
    with run:
        x = torch.randint(0, vocab, (B, S), dtype=torch.long)
        for step in range(2):
            ts = time.time()
            last = step == 1
            if last:
                # FSDP2 unsharded parameters exist now (storages resized to 0 between uses): label
                for fqn, fp in fsdp_params(model):
                    if hasattr(fp, "_unsharded_param"):
                        tracker.label(fp._unsharded_param, f"fsdp_unsharded_param:{fqn}")
                    if getattr(fp, "_sharded_param_data", None) is not None:
                        tracker.label(fp._sharded_param_data, f"param_local:{fqn}")
                held_before = tracker.current()
                phases["start_breakdown"] = tracker.current_breakdown()
                tracker.reset_peak()
            loss = model(input_ids=x, labels=x, **fwd_kw).loss
            if last:
                phases["forward_peak"] = tracker.peak()
                phases["after_forward"] = tracker.current()
                phases["forward_peak_breakdown"] = tracker.peak_breakdown()
                tops["forward"] = tracker.take_top()
                tracker.reset_peak()
            loss.backward()
            if last:
                phases["backward_peak"] = tracker.peak()
                phases["after_backward"] = tracker.current()
                phases["backward_peak_breakdown"] = tracker.peak_breakdown()
                phases["after_backward_breakdown"] = tracker.current_breakdown()
                tops["backward"] = tracker.take_top()
                tracker.reset_peak()
            opt.step()
            if last:
                phases["optimizer_peak"] = tracker.peak()
                phases["optimizer_peak_breakdown"] = tracker.peak_breakdown()
                tops["optimizer"] = tracker.take_top()
            opt.zero_grad(set_to_none=True)
            del loss
            step_seconds.append(round(time.time() - ts, 3))
        end = tracker.current()
        res["held_end_breakdown"] = tracker.current_breakdown()
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
        res["optimizer_state_dtypes"] = sorted(
            {
                _short_dtype(v.dtype)
                for s in opt.state.values()
                for k, v in s.items()
                if isinstance(v, torch.Tensor) and k != "step"
            }
        )
        del x
    peaks = {
        "forward": phases["forward_peak"],
        "backward": phases["backward_peak"],
        "optimizer": phases["optimizer_peak"],
    }
    res["peak_bytes"] = max(peaks.values())
    res["peak_GiB"] = round(res["peak_bytes"] / GiB, 3)
    res["peak_phase"] = max(peaks, key=peaks.get)
    res["held_before_step_bytes"] = held_before
    res["resident_after_step_bytes"] = end
    res["resident_after_step_GiB"] = round(end / GiB, 3)
    res["phases"] = phases
    res["top_at_peak"] = tops
    res["sdpa_ops"] = sorted(o for o in tracker.ops_seen if "scaled_dot" in o or "flash" in o)
    res["collective_ops"] = sorted(o for o in tracker.ops_seen if "c10d" in o)
    res["n_top_captures"] = tracker.n_captures
    res["n_untracked_ops"] = tracker.n_untracked_ops
    res["step_seconds"] = step_seconds
    del opt, model, hf_model, tracker
    gc.collect()
    res["seconds"] = round(time.time() - t0, 3)
    return res


@contextlib.contextmanager
def _stack(*cms):
    with contextlib.ExitStack() as st:
        for cm in cms:
            st.enter_context(cm)
        yield


def flat_figures(r: dict) -> dict:
    """Every byte figure of a record (for fake vs real comparisons)."""
    out = {
        k: r[k]
        for k in (
            "peak_bytes",
            "held_before_step_bytes",
            "resident_after_step_bytes",
            "optimizer_state_bytes",
            "optimizer_step_scalar_bytes",
            "param_bytes_local",
            "tracked_at_start_bytes",
        )
        if k in r
    }
    ph = r.get("phases", {})
    for k in ("forward_peak", "after_forward", "backward_peak", "after_backward", "optimizer_peak"):
        if k in ph:
            out["phases." + k] = ph[k]
    for bk in (
        "forward_peak_breakdown",
        "backward_peak_breakdown",
        "optimizer_peak_breakdown",
        "after_backward_breakdown",
    ):
        for k, v in (ph.get(bk) or {}).items():
            out[f"{bk}.{k}"] = v
    for k, v in (r.get("held_end_breakdown") or {}).items():
        out["held_end_breakdown." + k] = v
    return out


# --------------------------------------------------------------------------------------------
# CLI: every case in its own subprocess
# --------------------------------------------------------------------------------------------
def _child(case_path: str, out_path: str) -> None:
    case = json.loads(Path(case_path).read_text())
    t0 = time.time()
    try:
        rec = measure_case(case, mode="fake")
    except Exception as exc:
        rec = {
            "case": case,
            "error": f"{type(exc).__name__}: {exc}"[:3000],
            "traceback": traceback.format_exc()[-8000:],
            "versions": versions(),
            "seconds": round(time.time() - t0, 3),
        }
    Path(out_path).write_text(json.dumps(rec, indent=1, default=str))


def run_isolated(case: dict, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as td:
        cp, op = Path(td) / "case.json", Path(td) / "out.json"
        cp.write_text(json.dumps(case))
        t0 = time.time()
        try:
            p = subprocess.run(
                [sys.executable, __file__, "--child", str(cp), str(op)],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {
                "case": case,
                "error": f"timeout after {timeout}s",
                "seconds": round(time.time() - t0, 1),
            }
        if op.exists():
            rec = json.loads(op.read_text())
        else:
            rec = {
                "case": case,
                "error": f"child exited {p.returncode} without a record",
                "stderr_tail": p.stderr[-6000:],
            }
        rec["wall_seconds"] = round(time.time() - t0, 2)
        return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(HERE / "cases_sharded.json"))
    ap.add_argument("--out", default=str(HERE / "measured_sharded.json"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--timeout", type=float, default=1500)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(*a.child)
        return 0
    cases = json.loads(Path(a.cases).read_text())
    out = Path(a.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    for case in cases:
        if a.only and case["id"] not in a.only:
            continue
        print(f"== {case['id']} ...", flush=True)
        rec = run_isolated(case, a.timeout)
        results[case["id"]] = rec
        out.write_text(json.dumps(results, indent=1, default=str))
        if "error" in rec:
            print(f"   ERROR {rec['error'][:300]}", flush=True)
        else:
            ph = rec["phases"]
            print(
                f"   peak {rec['peak_GiB']} GiB ({rec['peak_phase']})  fwd {ph['forward_peak'] / GiB:.3f}"
                f" bwd {ph['backward_peak'] / GiB:.3f} opt {ph['optimizer_peak'] / GiB:.3f}"
                f"  resident {rec['resident_after_step_GiB']}  [{rec.get('wall_seconds')} s]",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
