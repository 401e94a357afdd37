"""Per-layer dimensions the activation formulas need, read off a ModelSpec's tensors."""

from __future__ import annotations

from dataclasses import dataclass

from nodeledger.model.spec import ModelSpec

_DENSE_FIRST = (
    "gate_proj.weight",
    "fc1.weight",
    "c_fc.weight",
    "dense_h_to_4h.weight",
    "gate_up_proj.weight",
    "up_proj.weight",  # a classic MLP named up / down (Nemotron-H's relu2 MLP layers)
)


@dataclass(frozen=True)
class Dims:
    hidden: int
    layers: int
    vocab: int
    heads: int
    q_dim: int  # heads x head_dim (MLA: heads x (nope + rope))
    kv_dim: int  # kv_heads x head_dim (MLA: heads x (nope + v) after up-projection)
    intermediate: int  # dense MLP width (0 if none)
    gated: bool  # SwiGLU/GeGLU (3 matrices) vs classic 2-matrix MLP
    dense_layers: int
    moe_layers: int
    moe_intermediate: int
    experts: int
    top_k: int
    shared_intermediate: int
    layernorm_bias: bool  # LayerNorm with bias (GPT-2/OPT/BLOOM/Falcon) vs RMSNorm
    qk_norm: bool
    mla: bool
    family: str = ""
    activation: str = ""
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0  # residual-branch dropout (GPT-2 resid_pdrop, OPT dropout)
    sdpa_supported: bool = True  # False: transformers runs this family's attention eagerly
    # learned absolute positions (a position table: GPT-2's wpe, OPT's embed_positions), so no
    # rotary on q / k; and one fused q/k/v projection (GPT-2's c_attn, Phi-3's qkv_proj)
    learned_positions: bool = False
    fused_qkv: bool = False
    router_fp32: bool = False  # MoE: top-k weights fp32 (MoEInfo.router_fp32)
    experts_gated: bool = True  # routed experts with a gate (SwiGLU); False: up / down only
    # linear-attention (Gated DeltaNet) layers: how many, their value heads, key / value head
    # dims and the width of their fused q/k/v/z projection
    linear_layers: int = 0
    lin_heads: int = 0
    lin_dk: int = 0
    lin_dv: int = 0
    lin_proj: int = 0
    # Mamba-2 layers: count, heads, head dim, state size, groups, chunk length
    mamba_layers: int = 0
    m_heads: int = 0
    m_dim: int = 0
    m_state: int = 0
    m_groups: int = 0
    m_chunk: int = 0
    # a hybrid with one mixer per layer (Nemotron-H): its attention and MLP-only layers
    mixer_attn_layers: int = 0
    mlp_only_layers: int = 0
    # a dense decoder layer's linears in call order: (output features, input features, has a
    # bias): torchtitan's op-level checkpointing saves every other bias-free matmul's output
    layer_matmuls: tuple[tuple[int, int, bool], ...] = ()

    @property
    def m_inter(self) -> int:
        """A Mamba-2 mixer's intermediate width: heads x head_dim."""
        return self.m_heads * self.m_dim

    @property
    def m_conv(self) -> int:
        """A Mamba-2 mixer's conv1d channels (x, B, C): intermediate + 2 x groups x state."""
        return self.m_inter + 2 * self.m_groups * self.m_state


def _first(spec: ModelSpec, part: str, suffixes) -> tuple[int, int] | None:
    for t in spec.tensors:
        if t.part == part and t.kind == "linear" and t.name.endswith(suffixes):
            return t.shape[-2], t.count
    return None


def dims_of(spec: ModelSpec) -> Dims:
    """The dimensions the activation formulas read, derived once per spec (remembered until
    its tensors, attention layers or scalar fields change: a search asks thousands of times)."""
    key = (id(spec.tensors), len(spec.tensors), id(spec.attention), len(spec.attention),
           id(spec.moe), spec.hidden_size, spec.num_layers, spec.num_attention_heads,
           spec.vocab_size, spec.family, spec.activation, spec.attention_dropout,
           spec.hidden_dropout, spec.sdpa_supported)  # fmt: skip
    memo = spec.__dict__.get("_dims_memo")
    if memo is not None and memo[0] == key:
        return memo[1]
    d = _dims_of(spec)
    spec.__dict__["_dims_memo"] = (key, d)
    return d


def _dims_of(spec: ModelSpec) -> Dims:
    # long: one Dims read off the spec's tensors; the Dims(...) call alone is 28 lines
    a0 = next((a for a in spec.attention if a.kind != "linear"), spec.attention[0])
    mla = a0.kind == "mla"
    heads = spec.num_attention_heads
    q_dim = kv_dim = 0
    for t in spec.tensors:
        if t.part != "attention" or t.kind != "linear":
            continue
        if t.name.endswith(("q_proj.weight", "q_b_proj.weight")) and not q_dim:
            q_dim = t.shape[0]
        if t.name.endswith(("k_proj.weight",)) and not kv_dim:
            kv_dim = t.shape[0]
        if t.name.endswith("kv_b_proj.weight"):
            kv_dim = t.shape[0] // 2
    if not q_dim:  # fused qkv (phi3, gpt2, bloom, falcon)
        q_dim = spec.hidden_size
        kv_dim = a0.kv_heads * a0.k_head_dim or spec.hidden_size
    if not kv_dim:
        kv_dim = a0.kv_heads * a0.k_head_dim
    dense = _first(spec, "dense_mlp", _DENSE_FIRST)
    inter, dense_layers = (0, 0)
    gated = True
    if dense is not None:
        inter, count = dense
        name = next(t.name for t in spec.tensors if t.part == "dense_mlp" and t.kind == "linear")
        gated = "gate" in name
        if name.endswith("gate_up_proj.weight"):
            inter //= 2
        dense_layers = count
    moe = spec.moe
    moe_inter = 0
    experts_gated = True
    if moe is not None:
        e = _first(spec, "routed_experts", ("gate_proj.weight", "gate_up_proj.weight"))
        experts_gated = e is not None
        if e is None:  # non-gated experts (Nemotron-H: up / down only)
            e = _first(spec, "routed_experts", ("up_proj.weight",))
        if e is not None:
            moe_inter = e[0] // (
                2
                if any("gate_up_proj" in t.name for t in spec.tensors if t.part == "routed_experts")
                else 1
            )
    shared = _first(spec, "shared_experts", ("gate_proj.weight",)) or _first(
        spec, "shared_experts", ("up_proj.weight",)
    )
    norm_bias = any(t.part == "norms" and t.name.endswith(".bias") for t in spec.tensors)
    names = {t.name for t in spec.tensors}
    layer_matmuls = tuple(
        (t.shape[0], t.shape[1], t.name[: -len("weight")] + "bias" in names)
        for t in spec.tensors
        if t.kind == "linear"
        and t.part in ("attention", "dense_mlp")
        and t.count == spec.num_layers
        and t.name.startswith("layers.*.")
        and len(t.shape) == 2
    )
    qk_norm = any(t.name.endswith(("q_norm.weight", "k_norm.weight")) for t in spec.tensors)
    fused_qkv = any(t.part == "attention" and t.kind == "linear" and t.shape[0] == q_dim + 2 * kv_dim
                    for t in spec.tensors)  # fmt: skip
    learned_positions = any(t.part == "embeddings" and t.kind == "embedding"
                            and not t.name.startswith("embed_tokens") for t in spec.tensors)  # fmt: skip
    return Dims(
        hidden=spec.hidden_size,
        layers=spec.num_layers,
        vocab=spec.vocab_size,
        heads=heads,
        q_dim=q_dim,
        kv_dim=kv_dim,
        intermediate=inter,
        gated=gated,
        dense_layers=dense_layers,
        moe_layers=moe.moe_layers if moe else 0,
        moe_intermediate=moe_inter,
        experts=moe.num_experts if moe else 0,
        top_k=moe.top_k if moe else 0,
        router_fp32=bool(moe and moe.router_fp32),
        experts_gated=experts_gated,
        shared_intermediate=shared[0] if shared else 0,
        layernorm_bias=norm_bias,
        qk_norm=qk_norm,
        mla=mla,
        layer_matmuls=layer_matmuls,
        family=spec.family,
        activation="bloom_gelu" if spec.family == "bloom" else (spec.activation or ""),
        attention_dropout=spec.attention_dropout,
        hidden_dropout=spec.hidden_dropout,
        sdpa_supported=spec.sdpa_supported,
        learned_positions=learned_positions,
        fused_qkv=fused_qkv,
        **_linear_dims(spec),
    )


def _linear_dims(spec: ModelSpec) -> dict:
    """Gated DeltaNet layers: their count, value heads, head dims and fused projection width."""
    out: dict = {}
    mlp_only = sum(1 for a in spec.attention if a.kind == "linear" and a.ssm == "none")
    if mlp_only:
        out.update(mlp_only_layers=mlp_only,
                   mixer_attn_layers=sum(1 for a in spec.attention if a.kind != "linear"))  # fmt: skip
    mamba = [a for a in spec.attention if a.kind == "linear" and a.ssm == "mamba2"]
    if mamba:
        m = mamba[0]
        out.update(mamba_layers=len(mamba), m_heads=m.kv_heads, m_dim=m.v_head_dim,
                   m_state=m.k_head_dim, m_groups=max(1, m.latent_dim), m_chunk=m.chunk or 128)  # fmt: skip
    lin = [a for a in spec.attention if a.kind == "linear" and a.ssm == "gdn"]
    if not lin or not lin[0].kv_heads:
        return {"linear_layers": len(lin), **out}
    proj = next(
        (
            t.shape[0]
            for t in spec.tensors
            if t.name.endswith(("in_proj_qkvz", "in_proj_qkvz.weight"))
        ),
        0,
    )
    a = lin[0]
    return {"linear_layers": len(lin), "lin_heads": a.kv_heads, "lin_dk": a.k_head_dim,
            "lin_dv": a.v_head_dim, "lin_proj": proj, **out}  # fmt: skip
