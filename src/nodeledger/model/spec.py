"""The model spec: what a job runs, as tensors and attention layers, derived from config.json.

A family builder (``families.py``) turns a config into a ``ModelSpec``: the list of weight
tensor groups (shape, count, which part of the model, whether it is a quantisable linear
weight) and the list of attention layers (for the KV cache).  Parameter counts, weight bytes
and KV bytes are all computed *from* these lists, so they cannot disagree with each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Literal

# The parts a parameter can belong to (``params.by_part`` keys, in display order).
PARTS = (
    "embeddings",
    "attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "lm_head",
    "vision",
)

Part = Literal[
    "embeddings",
    "attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "lm_head",
    "vision",
]

# linear: a 2-D matmul weight (out, in) that weight quantisation schemes convert;
# embedding / lm_head: vocab tables; vector: norms, biases, sinks, small state parameters;
# conv: convolution kernels.
TensorKind = Literal["linear", "embedding", "lm_head", "vector", "conv"]


@dataclass(frozen=True)
class TensorGroup:
    """``count`` tensors of ``shape`` (for a linear weight: (out_features, in_features))."""

    name: str  # module path pattern, e.g. "layers.*.self_attn.q_proj.weight"
    part: Part
    kind: TensorKind
    shape: tuple[int, ...]
    count: int = 1
    # Tensors that checkpoints keep in fp32 whatever the model dtype (e.g. ERNIE's router).
    keep_fp32: bool = False
    # Layer-type tag for quantisation rules: "attn", "mlp", "expert", "shared", "router", ...
    module: str = ""

    @property
    def numel(self) -> int:
        return prod(self.shape) * self.count


@dataclass(frozen=True)
class AttentionLayer:
    """One decoder layer's token mixer, as the KV cache sees it.

    kind:
      full     softmax attention over the whole context (MHA / GQA / MQA)
      sliding  softmax attention over the last ``window`` tokens
      mla      multi-head latent attention: caches the compressed latent + rope key
      linear   linear attention / state-space layer: a fixed state per sequence, no per-token cache
    """

    kind: Literal["full", "sliding", "mla", "linear"]
    kv_heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0
    window: int | None = None
    latent_dim: int = 0  # MLA: kv_lora_rank + qk_rope_head_dim elements per token
    state_elements: int = 0  # linear: recurrent state elements per sequence
    conv_state_elements: int = 0  # linear: short-convolution state elements per sequence
    # heads transformers' cache holds when not kv_heads: Falcon's new decoder architecture
    # broadcasts K and V to every query head before caching (FalconAttention: broadcast_to,
    # flatten); engines (vLLM) cache the kv_heads.  0: kv_heads
    hf_cache_heads: int = 0
    # linear layers: the recurrence they run ("gdn" Gated DeltaNet, "mamba2", "none" for a layer
    # with no token mixer at all, an MLP-only layer of a hybrid)
    ssm: str = ""
    chunk: int = 0  # linear: the chunk length of its chunked scan (Mamba-2 chunk_size)
    conv_kernel: int = 0  # linear: the width of its short causal convolution (conv_kernel)


@dataclass(frozen=True)
class MoEInfo:
    num_experts: int
    top_k: int
    moe_layers: int
    expert_params: int  # parameters of one routed expert in one layer (incl. its biases)
    # the router's top-k weights stay fp32 (transformers' DeepSeek-V2/V3 / GLM-4.5 routers run in
    # fp32): the experts' weighted outputs are promoted to fp32 when they are scaled by them
    router_fp32: bool = False


@dataclass
class ModelSpec:
    family: str  # model_type of the (text) model, e.g. "qwen3_moe"
    model_type: str  # the config's own model_type (e.g. "gemma3" for the multimodal wrapper)
    source: str  # where the config came from
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_attention_heads: int
    tied_embeddings: bool
    tensors: list[TensorGroup]
    attention: list[AttentionLayer]
    moe: MoEInfo | None = None
    torch_dtype: str | None = None  # the config's declared dtype (checkpoint dtype)
    activation: str | None = None  # MLP activation as the config names it (silu, gelu_new, ...)
    # transformers' attention implementations for this family: eager-only families (Gemma-2 in
    # transformers 5, BLOOM) materialise the attention probabilities whatever is asked.
    sdpa_supported: bool = True
    sdpa_source: str = ""  # where sdpa_supported came from (model/attention_path.py)
    attention_dropout: float = 0.0  # dropout on attention probabilities in training
    hidden_dropout: float = 0.0  # dropout on the residual branches in training
    max_position_embeddings: int | None = None  # the longest context the config declares
    quantization: dict | None = None  # the config's quantization_config, verbatim
    notes: list[str] = field(default_factory=list)
    # Parameters in the checkpoint that transformers does not build (multi-token prediction).
    extra_checkpoint_tensors: list[TensorGroup] = field(default_factory=list)
    # the config's mamba_ssm_cache_dtype (Nemotron-H): the dtype it asks engines to keep the
    # SSM state in ("float32"); None when the config does not say
    ssm_cache_dtype: str | None = None

    # -- parameter counts ------------------------------------------------------------
    def params_by_part(self) -> dict[str, int]:
        out = dict.fromkeys(PARTS, 0)
        for t in self.tensors:
            out[t.part] += t.numel
        return out

    def params_total(self) -> int:
        """Sum of every tensor's elements; remembered until ``tensors`` changes (the ledger and
        the search ask for it thousands of times per answer)."""
        key = (id(self.tensors), len(self.tensors))
        memo = self.__dict__.get("_params_total_memo")
        if memo is not None and memo[0] == key:
            return memo[1]
        total = sum(t.numel for t in self.tensors)
        self.__dict__["_params_total_memo"] = (key, total)
        return total

    def params_active(self) -> int:
        """Parameters touched per generated text token.

        total - vision encoder - routed experts + (top_k routed experts per MoE layer).
        Embedding and lm_head are included (as in DeepSeek-V3's "37B activated" figure).
        """
        parts = self.params_by_part()
        active = self.params_total() - parts["vision"]
        if self.moe is not None:
            active -= parts["routed_experts"]
            active += self.moe.moe_layers * self.moe.top_k * self.moe.expert_params
        return active
