"""Family builders: config.json -> ModelSpec (tensor groups + attention layers).

Each builder mirrors the module tree that HuggingFace transformers builds for that
``model_type`` (``transformers/models/<family>/modeling_<family>.py``), tensor by tensor, so
that ``ModelSpec.params_total()`` equals ``sum(p.numel() for p in model.parameters())`` of
transformers' model built from the same config (tied weights counted once).  The equality is
checked against recorded reference values (``benchmarks/record_reference.py``).

Defaults used when a config omits a field are the defaults of transformers' own config class
for that family; each is named in the code where it is applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nodeledger.errors import UnknownFamilyError
from nodeledger.model.attention_path import attention_path
from nodeledger.model.cfg import ConfigReader
from nodeledger.model.spec import AttentionLayer, ModelSpec, MoEInfo, Part, TensorGroup


class TensorList:
    """The tensor groups of one model, accumulated layer by layer as a family builds its spec."""

    def __init__(self) -> None:
        self.tensors: list[TensorGroup] = []

    def linear(
        self,
        name: str,
        part: Part,
        out: int,
        inp: int,
        count: int,
        bias: bool = False,
        module: str = "",
        keep_fp32: bool = False,
    ) -> None:
        if count <= 0:
            return
        self.tensors.append(
            TensorGroup(f"{name}.weight", part, "linear", (out, inp), count, keep_fp32, module)
        )
        if bias:
            self.tensors.append(
                TensorGroup(f"{name}.bias", part, "vector", (out,), count, False, module)
            )

    def vec(self, name: str, part: Part, n: int, count: int, keep_fp32: bool = False) -> None:
        if count > 0 and n > 0:
            self.tensors.append(TensorGroup(name, part, "vector", (n,), count, keep_fp32))

    def norm(self, name: str, n: int, count: int, bias: bool = False) -> None:
        self.vec(f"{name}.weight", "norms", n, count)
        if bias:
            self.vec(f"{name}.bias", "norms", n, count)

    def add(self, group: TensorGroup) -> None:
        if group.count > 0:
            self.tensors.append(group)


# ---------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------


def _embed_head(
    b: TensorList, vocab: int, hidden: int, tied: bool, head_bias: bool = False
) -> None:
    b.add(TensorGroup("embed_tokens.weight", "embeddings", "embedding", (vocab, hidden)))
    if not tied:
        b.add(TensorGroup("lm_head.weight", "lm_head", "lm_head", (vocab, hidden)))
        if head_bias:
            b.vec("lm_head.bias", "lm_head", vocab, 1)


def _gated_mlp(
    b: TensorList,
    name: str,
    part: Part,
    hidden: int,
    inter: int,
    count: int,
    bias=False,
    fused: bool = False,
) -> None:
    """SwiGLU/GeGLU MLP: gate_proj, up_proj (hidden->inter), down_proj (inter->hidden);
    ``fused``: one gate_up_proj (hidden->2 inter), as transformers' Phi3MLP builds it."""
    mod = {"dense_mlp": "mlp", "shared_experts": "shared", "routed_experts": "expert"}[part]
    if fused:
        b.linear(f"{name}.gate_up_proj", part, 2 * inter, hidden, count, bias, mod)
    else:
        b.linear(f"{name}.gate_proj", part, inter, hidden, count, bias, mod)
        b.linear(f"{name}.up_proj", part, inter, hidden, count, bias, mod)
    b.linear(f"{name}.down_proj", part, hidden, inter, count, bias, mod)


@dataclass
class _Attn:
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    q_gate: bool = False  # qwen3_next: q_proj also produces an output gate (2x width)
    sinks: bool = False  # gpt_oss: one learned sink logit per head


def _gqa_attention(b: TensorList, hidden: int, a: _Attn, count: int, fused: bool = False) -> None:
    """q, k, v and o projections; ``fused``: one qkv_proj (hidden -> q + 2 kv), as
    transformers' Phi3Attention builds it."""
    q_out = a.heads * a.head_dim * (2 if a.q_gate else 1)
    kv_out = a.kv_heads * a.head_dim
    if fused:
        b.linear("layers.*.self_attn.qkv_proj", "attention", q_out + 2 * kv_out, hidden, count,
                 a.qkv_bias, "attn")  # fmt: skip
    else:
        b.linear("layers.*.self_attn.q_proj", "attention", q_out, hidden, count, a.qkv_bias, "attn")
        b.linear(
            "layers.*.self_attn.k_proj", "attention", kv_out, hidden, count, a.qkv_bias, "attn"
        )
        b.linear(
            "layers.*.self_attn.v_proj", "attention", kv_out, hidden, count, a.qkv_bias, "attn"
        )
    b.linear(
        "layers.*.self_attn.o_proj",
        "attention",
        hidden,
        a.heads * a.head_dim,
        count,
        a.o_bias,
        "attn",
    )
    if a.qk_norm:
        b.norm("layers.*.self_attn.q_norm", a.head_dim, count)
        b.norm("layers.*.self_attn.k_norm", a.head_dim, count)
    if a.sinks:
        b.vec("layers.*.self_attn.sinks", "attention", a.heads, count)


def _heads(c: ConfigReader) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim); head_dim from the config when given, else hidden/heads."""
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    kv = c.int("num_key_value_heads", default=heads)
    if heads % kv:
        raise c.error(
            "num_key_value_heads", f"={kv} must divide num_attention_heads={heads} (GQA groups)"
        )
    if c.has("head_dim"):
        head_dim = c.int("head_dim")
    else:
        head_dim = c.divides("hidden_size", hidden, "num_attention_heads", heads)
    return heads, kv, head_dim


SOFTMAX_LAYER_TYPES = {"full_attention", "sliding_attention"}


def _softmax_layers(
    c: ConfigReader,
    n_layers: int,
    kv: int,
    head_dim: int,
    default_sliding=None,
    default_window=None,
):
    """Attention layers from ``layer_types`` / ``sliding_window`` settings.

    ``default_window``: the family's own sliding window when the config omits it
    (transformers' config default), recorded as an applied default.
    """
    window = c.int("sliding_window", default=default_window)
    types = c.str_list("layer_types", allowed=SOFTMAX_LAYER_TYPES)
    if types is not None and len(types) != n_layers:
        raise c.error("layer_types", f"has {len(types)} entries for num_hidden_layers={n_layers}")
    out = []
    for i in range(n_layers):
        if types is not None:
            sliding = types[i] == "sliding_attention"
        elif default_sliding is not None:
            sliding = default_sliding(i)
        else:
            sliding = False
        if sliding and window:
            out.append(AttentionLayer("sliding", kv, head_dim, head_dim, window=window))
        else:
            out.append(AttentionLayer("full", kv, head_dim, head_dim))
    return out


def _dropout(c: ConfigReader) -> float:
    for key in ("attention_dropout", "attn_pdrop"):
        v = c.raw(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1:
            return float(v)
    # GPT-2's config class defaults attn_pdrop to 0.1
    return 0.1 if c.str("model_type") == "gpt2" else 0.0


def _hidden_dropout(c: ConfigReader) -> float:
    """Dropout on the residual branches (after the attention output and the MLP output
    projections): GPT-2's resid_pdrop (its config class defaults it to 0.1), OPT's dropout,
    BLOOM / Falcon's hidden_dropout."""
    for key in ("resid_pdrop", "hidden_dropout", "hidden_dropout_prob", "dropout"):
        v = c.raw(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1:
            return float(v)
    return 0.1 if c.str("model_type") == "gpt2" else 0.0


# families whose transformers implementation has no SDPA path: read from the installed
# transformers where it is (model/attention_path.py), else its table of transformers 5.24 (Gemma-2:
# tanh soft-capping of the scores; BLOOM: ALiBi; gpt-oss: attention sinks)


def _spec(
    c: ConfigReader, family: str, b: TensorList, attention, tied: bool, moe=None, **kw
) -> ModelSpec:
    quant = c.sub("quantization_config")
    path = attention_path(family)  # whether transformers has an SDPA path for it, and why
    return ModelSpec(
        family=family,
        model_type=family,
        source=c.where,
        hidden_size=c.int("hidden_size", "n_embd", "n_embed"),
        num_layers=c.layers("num_hidden_layers", "n_layer"),
        vocab_size=c.int("vocab_size"),
        num_attention_heads=c.int("num_attention_heads", "n_head"),
        tied_embeddings=tied,
        tensors=b.tensors,
        attention=attention,
        moe=moe,
        torch_dtype=c.str("torch_dtype") or c.str("dtype"),
        activation=c.str("hidden_act")
        or c.str("hidden_activation")
        or c.str("activation_function"),
        sdpa_supported=path.sdpa,
        sdpa_source=path.source,
        attention_dropout=_dropout(c),
        hidden_dropout=_hidden_dropout(c),
        max_position_embeddings=c.int(
            "max_position_embeddings", "n_positions", "seq_length", default=None
        ),
        quantization=quant.data if quant is not None else None,
        **kw,
    )


# ---------------------------------------------------------------------------------------
# Llama-like decoders (dense and MoE)
# ---------------------------------------------------------------------------------------


@dataclass
class _Dialect:
    tie_default: bool = False
    qkv_bias_key: str | None = "attention_bias"  # config key, or None for a fixed value
    qkv_bias_fixed: bool = False
    o_bias_follows_qkv: bool = True
    mlp_bias_key: str | None = None
    qk_norm: bool = False
    norms_per_layer: int = 2


_DIALECTS: dict[str, _Dialect] = {
    # transformers LlamaConfig: attention_bias (q,k,v,o), mlp_bias, tie_word_embeddings=False
    "llama": _Dialect(mlp_bias_key="mlp_bias"),
    "mistral": _Dialect(qkv_bias_key=None),
    # Qwen2: q/k/v carry a bias, o_proj does not
    "qwen2": _Dialect(qkv_bias_key=None, qkv_bias_fixed=True, o_bias_follows_qkv=False),
    "qwen3": _Dialect(qk_norm=True),
    "gemma": _Dialect(tie_default=True),
    "gemma2": _Dialect(tie_default=True, norms_per_layer=4),
    "gemma3_text": _Dialect(tie_default=True, norms_per_layer=4, qk_norm=True),
    "phi3": _Dialect(qkv_bias_key=None),
    "mixtral": _Dialect(qkv_bias_key=None),
    "qwen2_moe": _Dialect(qkv_bias_key=None, qkv_bias_fixed=True, o_bias_follows_qkv=False),
    "qwen3_moe": _Dialect(qk_norm=True),
}


def _dialect_attn(c: ConfigReader, d: _Dialect) -> _Attn:
    heads, kv, head_dim = _heads(c)
    qkv_bias = c.bool(d.qkv_bias_key, False) if d.qkv_bias_key else d.qkv_bias_fixed
    return _Attn(
        heads,
        kv,
        head_dim,
        qkv_bias=qkv_bias,
        o_bias=qkv_bias and d.o_bias_follows_qkv,
        qk_norm=d.qk_norm,
    )


def _llama_like(c: ConfigReader, family: str) -> ModelSpec:
    d = _DIALECTS[family]
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", d.tie_default)
    attn = _dialect_attn(c, d)
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("norm", hidden, 1)
    b.norm("layers.*.layernorm", hidden, n_layers * d.norms_per_layer)
    fused = family == "phi3"  # Phi3Attention.qkv_proj, Phi3MLP.gate_up_proj
    _gqa_attention(b, hidden, attn, n_layers, fused)

    moe = None
    if family == "mixtral":
        experts = c.int("num_local_experts")
        top_k = c.int("num_experts_per_tok", default=2)
        inter = c.int("intermediate_size")
        b.linear("layers.*.mlp.gate", "router", experts, hidden, n_layers, module="router")
        _gated_mlp(b, "layers.*.mlp.experts", "routed_experts", hidden, inter, n_layers * experts)
        moe = MoEInfo(experts, top_k, n_layers, 3 * hidden * inter)
    elif family in ("qwen2_moe", "qwen3_moe"):
        moe = _qwen_moe(c, b, hidden, n_layers, shared=family == "qwen2_moe")
    else:
        mlp_bias = c.bool(d.mlp_bias_key, False) if d.mlp_bias_key else False
        _gated_mlp(b, "layers.*.mlp", "dense_mlp", hidden, c.int("intermediate_size"), n_layers,
                   mlp_bias, fused)  # fmt: skip

    sliding_default = None
    if family == "gemma2":  # Gemma2: every other layer (even index) is sliding
        sliding_default = lambda i: i % 2 == 0  # noqa: E731
    elif family == "gemma3_text":  # Gemma3: 5 sliding, then 1 global (sliding_window_pattern=6)
        pattern = c.int("sliding_window_pattern", default=6)
        sliding_default = lambda i: (i + 1) % pattern != 0  # noqa: E731
    elif family in ("mistral", "mixtral", "phi3", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        # these apply sliding_window only when the config says so (use_sliding_window for Qwen)
        use = c.bool("use_sliding_window", family in ("mistral", "mixtral", "phi3"))
        max_window_layers = c.opt_int("max_window_layers", min_value=0)
        if use and family.startswith("qwen") and max_window_layers is not None:
            sliding_default = lambda i: i >= max_window_layers  # noqa: E731
        elif use:
            sliding_default = lambda i: True  # noqa: E731
    # transformers' defaults: Gemma2Config / Gemma3TextConfig sliding_window = 4096
    default_window = 4096 if family in ("gemma2", "gemma3_text") else None
    attention = _softmax_layers(
        c, n_layers, attn.kv_heads, attn.head_dim, sliding_default, default_window
    )
    return _spec(c, family, b, attention, tied, moe)


def _qwen_moe(c: ConfigReader, b: TensorList, hidden: int, n_layers: int, shared: bool) -> MoEInfo:
    experts = c.int("num_experts")
    top_k = c.int("num_experts_per_tok")
    moe_inter = c.int("moe_intermediate_size")
    step = c.int("decoder_sparse_step", default=1)
    mlp_only = set(c.int_list("mlp_only_layers") or [])
    moe_layers = sum(
        1 for i in range(n_layers) if i not in mlp_only and experts > 0 and (i + 1) % step == 0
    )
    dense_layers = n_layers - moe_layers
    if dense_layers:
        _gated_mlp(b, "layers.*.mlp", "dense_mlp", hidden, c.int("intermediate_size"), dense_layers)
    b.linear("layers.*.mlp.gate", "router", experts, hidden, moe_layers, module="router")
    _gated_mlp(b, "layers.*.mlp.experts", "routed_experts", hidden, moe_inter, moe_layers * experts)
    if shared:
        sh = c.int("shared_expert_intermediate_size")
        _gated_mlp(b, "layers.*.mlp.shared_expert", "shared_experts", hidden, sh, moe_layers)
        b.linear(
            "layers.*.mlp.shared_expert_gate",
            "shared_experts",
            1,
            hidden,
            moe_layers,
            module="router",
        )
    return MoEInfo(experts, top_k, moe_layers, 3 * hidden * moe_inter)


# ---------------------------------------------------------------------------------------
# Qwen3-Next: hybrid gated-DeltaNet linear attention + gated full attention, MoE
# ---------------------------------------------------------------------------------------


def _qwen3_next(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", False)
    heads, kv, head_dim = _heads(c)
    types = c.str_list("layer_types", allowed={"full_attention", "linear_attention"})
    if types is None:  # Qwen3NextConfig: every full_attention_interval-th layer is full attention
        interval = c.int("full_attention_interval", default=4)
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(n_layers)
        ]
    if len(types) != n_layers:
        raise c.error("layer_types", f"has {len(types)} entries for num_hidden_layers={n_layers}")
    n_full = types.count("full_attention")
    n_lin = n_layers - n_full
    nk = c.int("linear_num_key_heads")
    nv = c.int("linear_num_value_heads")
    dk = c.int("linear_key_head_dim")
    dv = c.int("linear_value_head_dim")
    kernel = c.int("linear_conv_kernel_dim", default=4)
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim

    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("norm", hidden, 1)
    b.norm("layers.*.layernorm", hidden, 2 * n_layers)
    _gqa_attention(b, hidden, _Attn(heads, kv, head_dim, qk_norm=True, q_gate=True), n_full)
    la = "layers.*.linear_attn"
    b.linear(
        f"{la}.in_proj_qkvz", "attention", 2 * key_dim + 2 * value_dim, hidden, n_lin, module="attn"
    )
    b.linear(f"{la}.in_proj_ba", "attention", 2 * nv, hidden, n_lin, module="attn")
    b.add(TensorGroup(f"{la}.conv1d.weight", "attention", "conv", (conv_dim, 1, kernel), n_lin))
    b.vec(f"{la}.dt_bias", "attention", nv, n_lin)
    b.vec(f"{la}.A_log", "attention", nv, n_lin)
    b.norm(f"{la}.norm", dv, n_lin)
    b.linear(f"{la}.out_proj", "attention", hidden, value_dim, n_lin, module="attn")
    moe = _qwen_moe(c, b, hidden, n_layers, shared=True)

    attention = []
    for t in types:
        if t == "full_attention":
            attention.append(AttentionLayer("full", kv, head_dim, head_dim))
        else:
            attention.append(
                AttentionLayer(
                    "linear",
                    ssm="gdn",
                    kv_heads=nv,  # value heads (the key heads are repeated to them)
                    k_head_dim=dk,
                    v_head_dim=dv,
                    state_elements=nv * dk * dv,
                    conv_state_elements=conv_dim * (kernel - 1),
                    conv_kernel=kernel,
                )
            )
    return _spec(c, family, b, attention, tied, moe)


# ---------------------------------------------------------------------------------------
# Nemotron-H: Mamba-2 / attention / MLP layers by ``hybrid_override_pattern`` (or
# ``layers_block_type``): each layer is a norm and ONE mixer (transformers' NemotronHBlock)
# ---------------------------------------------------------------------------------------

NEMOTRON_H_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _nemotron_h(c: ConfigReader, family: str) -> ModelSpec:
    # long: one family's config to tensors, in module order (mixer, MLP, MoE, the per-layer kinds)
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", False)
    kinds = c.str_list("layers_block_type", allowed={"mamba", "attention", "mlp", "moe"})
    if kinds is None:
        pattern = c.str("hybrid_override_pattern") or ""
        if any(ch not in NEMOTRON_H_KINDS for ch in pattern):
            raise c.error(
                "hybrid_override_pattern", f"{pattern!r} has a layer letter other than M * - E"
            )
        kinds = [NEMOTRON_H_KINDS[ch] for ch in pattern]
    if len(kinds) != n_layers:
        raise c.error(
            "hybrid_override_pattern", f"has {len(kinds)} layers for num_hidden_layers={n_layers}"
        )
    heads = c.int("num_attention_heads")
    kv = c.int("num_key_value_heads", default=heads)
    head_dim = c.int("attention_head_dim", "head_dim", default=hidden // heads)
    n_attn, n_mamba, n_mlp = kinds.count("attention"), kinds.count("mamba"), kinds.count("mlp")
    # NemotronHMamba2Mixer: in_proj (hidden -> intermediate + conv_dim + heads), a depthwise
    # conv over conv_dim = intermediate + 2 x groups x state, dt_bias / A_log / D per head, a
    # gated RMSNorm over intermediate and out_proj back to hidden
    m_heads, m_dim = c.int("mamba_num_heads"), c.int("mamba_head_dim")
    state, groups, kernel = (
        c.int("ssm_state_size"),
        c.int("n_groups", default=1),
        c.int("conv_kernel", default=4),
    )
    inter = m_heads * m_dim
    conv_dim = inter + 2 * groups * state
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("norm_f", hidden, 1)
    b.norm("layers.*.norm", hidden, n_layers)
    _gqa_attention(
        b, hidden, _Attn(heads, kv, head_dim, qkv_bias=c.bool("attention_bias", False)), n_attn
    )
    mx = "layers.*.mixer"
    b.linear(f"{mx}.in_proj", "attention", inter + conv_dim + m_heads, hidden, n_mamba,
             c.bool("use_bias", False), module="attn")  # fmt: skip
    b.add(TensorGroup(f"{mx}.conv1d.weight", "attention", "conv", (conv_dim, 1, kernel), n_mamba))
    if c.bool("use_conv_bias", True):
        b.vec(f"{mx}.conv1d.bias", "attention", conv_dim, n_mamba)
    for name in ("dt_bias", "A_log", "D"):
        b.vec(f"{mx}.{name}", "attention", m_heads, n_mamba)
    b.norm(f"{mx}.norm", inter, n_mamba)
    b.linear(f"{mx}.out_proj", "attention", hidden, inter, n_mamba, c.bool("use_bias", False),
             module="attn")  # fmt: skip
    # MLP layers: up / down with relu2 (NemotronHMLP, no gate)
    mlp_inter = c.int("intermediate_size")
    bias = c.bool("mlp_bias", False)
    b.linear(f"{mx}.up_proj", "dense_mlp", mlp_inter, hidden, n_mlp, bias, "mlp")
    b.linear(f"{mx}.down_proj", "dense_mlp", hidden, mlp_inter, n_mlp, bias, "mlp")
    moe = None
    n_moe = kinds.count("moe")
    if n_moe:
        # MoE layers (NemotronHMoE, transformers 5): a sigmoid top-k router whose weight is
        # created fp32 (NemotronHTopkRouter; its e_score_correction_bias is a buffer, not
        # counted, as DeepSeek-V3's), non-gated relu2 experts stored as 3-D up / down tensors
        # (NemotronHExperts: (E, I, in) and (E, in, I)), a NemotronHMLP shared expert, and the
        # optional latent projections around the experts (moe_latent_size)
        experts, top_k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
        moe_inter = c.int("moe_intermediate_size")
        latent = c.int("moe_latent_size", default=0, min_value=0) or hidden
        b.linear(f"{mx}.gate", "router", experts, hidden, n_moe, module="router", keep_fp32=True)
        if latent != hidden:
            b.linear(f"{mx}.fc1_latent_proj", "dense_mlp", latent, hidden, n_moe, bias, "mlp")
            b.linear(f"{mx}.fc2_latent_proj", "dense_mlp", hidden, latent, n_moe, bias, "mlp")
        b.linear(f"{mx}.experts.up_proj", "routed_experts", moe_inter, latent, n_moe * experts,
                 module="expert")  # fmt: skip
        b.linear(f"{mx}.experts.down_proj", "routed_experts", latent, moe_inter, n_moe * experts,
                 module="expert")  # fmt: skip
        sh = c.int("moe_shared_expert_intermediate_size", default=0, min_value=0)
        if sh:
            b.linear(f"{mx}.shared_experts.up_proj", "shared_experts", sh, hidden, n_moe, bias,
                     "shared")  # fmt: skip
            b.linear(f"{mx}.shared_experts.down_proj", "shared_experts", hidden, sh, n_moe, bias,
                     "shared")  # fmt: skip
        moe = MoEInfo(experts, top_k, n_moe, 2 * latent * moe_inter, router_fp32=True)
    attention = []
    for k in kinds:
        if k == "attention":
            attention.append(AttentionLayer("full", kv, head_dim, head_dim))
        elif k == "mamba":
            attention.append(AttentionLayer(
                "linear", kv_heads=m_heads, k_head_dim=state, v_head_dim=m_dim,
                state_elements=m_heads * m_dim * state, conv_state_elements=conv_dim * kernel,
                ssm="mamba2", chunk=c.int("chunk_size", default=128), latent_dim=groups,
                conv_kernel=kernel))  # fmt: skip
        else:  # an MLP-only or MoE layer: no token mixer, no cache
            attention.append(AttentionLayer("linear", ssm="none"))
    spec = _spec(c, family, b, attention, tied, moe)
    spec.activation = c.str("mlp_hidden_act") or spec.activation
    spec.ssm_cache_dtype = c.str("mamba_ssm_cache_dtype")
    return spec


# ---------------------------------------------------------------------------------------
# DeepSeek-V2/V3 (MLA, shared experts, first-k dense layers) and GLM-4.5 (glm4_moe)
# ---------------------------------------------------------------------------------------


def _moe_layer_flags(c: ConfigReader, n_layers: int) -> list[bool]:
    first_dense = c.int("first_k_dense_replace", default=0, min_value=0)
    freq = c.int("moe_layer_freq", default=1)
    return [i >= first_dense and i % freq == 0 for i in range(n_layers)]


def _deepseek_moe_mlp(c: ConfigReader, b: TensorList, hidden: int, flags: list[bool]) -> MoEInfo:
    n_moe = sum(flags)
    n_dense = len(flags) - n_moe
    experts = c.int("n_routed_experts")
    top_k = c.int("num_experts_per_tok")
    moe_inter = c.int("moe_intermediate_size")
    n_shared = c.int("n_shared_experts", default=0, min_value=0)
    _gated_mlp(b, "layers.*.mlp", "dense_mlp", hidden, c.int("intermediate_size"), n_dense)
    # Router weight (E, H).  DeepSeek-V3 / GLM-4.5 e_score_correction_bias is a buffer in
    # transformers (not a parameter), so it is not counted.
    b.linear("layers.*.mlp.gate", "router", experts, hidden, n_moe, module="router")
    _gated_mlp(b, "layers.*.mlp.experts", "routed_experts", hidden, moe_inter, n_moe * experts)
    if n_shared:
        _gated_mlp(
            b, "layers.*.mlp.shared_experts", "shared_experts", hidden, moe_inter * n_shared, n_moe
        )
    # DeepseekV2/V3TopkRouter, Glm4MoeTopkRouter: F.linear(hidden.float(), weight.float()), the
    # top-k weights gathered from the fp32 scores (transformers 5)
    return MoEInfo(experts, top_k, n_moe, 3 * hidden * moe_inter, router_fp32=True)


def _mla_attention(c: ConfigReader, b: TensorList, hidden: int, count: int) -> AttentionLayer:
    heads = c.int("num_attention_heads")
    q_lora = c.opt_int("q_lora_rank")
    kv_lora = c.int("kv_lora_rank")
    nope = c.int("qk_nope_head_dim")
    rope = c.int("qk_rope_head_dim")
    v_dim = c.int("v_head_dim")
    bias = c.bool("attention_bias", False)
    qk = nope + rope
    p = "layers.*.self_attn"
    if q_lora:
        b.linear(f"{p}.q_a_proj", "attention", q_lora, hidden, count, bias, "attn")
        b.norm(f"{p}.q_a_layernorm", q_lora, count)
        b.linear(f"{p}.q_b_proj", "attention", heads * qk, q_lora, count, False, "attn")
    else:
        b.linear(f"{p}.q_proj", "attention", heads * qk, hidden, count, False, "attn")
    b.linear(f"{p}.kv_a_proj_with_mqa", "attention", kv_lora + rope, hidden, count, bias, "attn")
    b.norm(f"{p}.kv_a_layernorm", kv_lora, count)
    b.linear(f"{p}.kv_b_proj", "attention", heads * (nope + v_dim), kv_lora, count, False, "attn")
    b.linear(f"{p}.o_proj", "attention", hidden, heads * v_dim, count, bias, "attn")
    # vLLM / SGLang cache the compressed latent (kv_lora_rank) and the shared rope key per token.
    return AttentionLayer("mla", kv_heads=1, latent_dim=kv_lora + rope)


def _mtp_note(c: ConfigReader, spec: ModelSpec, layer_params: int) -> None:
    n = c.int("num_nextn_predict_layers", default=0, min_value=0)
    if n:
        hidden = spec.hidden_size
        # MTP module per DeepSeek-V3 README_WEIGHTS: enorm, hnorm, eh_proj (2H->H), one decoder
        # layer, shared_head.norm; embedding and output head shared with the main model.
        per = layer_params + 3 * hidden + 2 * hidden * hidden
        spec.extra_checkpoint_tensors.append(
            TensorGroup("mtp.layers.*", "attention", "linear", (per,), n)
        )
        spec.notes.append(
            f"checkpoint also holds {n} multi-token-prediction layer(s), {n * per:,} parameters, "
            "that transformers does not build; not in params.total (serving engines load them "
            "only for speculative decoding)"
        )


def _deepseek(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", False)
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("norm", hidden, 1)
    b.norm("layers.*.layernorm", hidden, 2 * n_layers)
    layer = _mla_attention(c, b, hidden, n_layers)
    flags = _moe_layer_flags(c, n_layers)
    moe = _deepseek_moe_mlp(c, b, hidden, flags)
    spec = _spec(c, family, b, [layer] * n_layers, tied, moe)
    per_layer = _one_moe_layer_params(spec)
    _mtp_note(c, spec, per_layer)
    return spec


def _one_moe_layer_params(spec: ModelSpec) -> int:
    """Parameters of one MoE decoder layer (attention + norms + MoE block)."""
    assert spec.moe is not None
    total = 0
    for t in spec.tensors:
        if not t.name.startswith("layers."):
            continue
        if t.part in ("attention", "norms"):
            total += t.numel // spec.num_layers
        elif t.part in ("routed_experts", "shared_experts", "router"):
            total += t.numel // spec.moe.moe_layers
    return total


def _glm4_moe(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", False)
    heads, kv, head_dim = _heads(c)
    # Glm4MoeAttention: q/k/v bias = attention_bias, o_proj without bias, q/k norm if use_qk_norm
    attn = _Attn(
        heads,
        kv,
        head_dim,
        qkv_bias=c.bool("attention_bias", False),
        qk_norm=c.bool("use_qk_norm", False),
    )
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("norm", hidden, 1)
    b.norm("layers.*.layernorm", hidden, 2 * n_layers)
    _gqa_attention(b, hidden, attn, n_layers)
    flags = [i >= c.int("first_k_dense_replace", default=1, min_value=0) for i in range(n_layers)]
    moe = _deepseek_moe_mlp(c, b, hidden, flags)
    attention = _softmax_layers(c, n_layers, kv, head_dim)
    spec = _spec(c, family, b, attention, tied, moe)
    _mtp_note(c, spec, _one_moe_layer_params(spec))
    return spec


# ---------------------------------------------------------------------------------------
# gpt-oss, ERNIE-4.5 MoE
# ---------------------------------------------------------------------------------------


def _gpt_oss(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", False)
    heads, kv, head_dim = _heads(c)
    experts = c.int("num_local_experts")
    top_k = c.int("num_experts_per_tok", "experts_per_token")
    inter = c.int("intermediate_size")
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("norm", hidden, 1)
    b.norm("layers.*.layernorm", hidden, 2 * n_layers)
    bias = c.bool("attention_bias", True)
    _gqa_attention(b, hidden, _Attn(heads, kv, head_dim, bias, bias, sinks=True), n_layers)
    b.linear("layers.*.mlp.router", "router", experts, hidden, n_layers, bias=True, module="router")
    # GptOssExperts: gate_up_proj (E, H, 2I) + bias (E, 2I); down_proj (E, I, H) + bias (E, H)
    e = "layers.*.mlp.experts"
    b.linear(
        f"{e}.gate_up_proj", "routed_experts", 2 * inter, hidden, n_layers * experts, True, "expert"
    )
    b.linear(f"{e}.down_proj", "routed_experts", hidden, inter, n_layers * experts, True, "expert")
    moe = MoEInfo(experts, top_k, n_layers, 3 * hidden * inter + 2 * inter + hidden)
    # GptOssConfig defaults: sliding_window 128, even layers sliding
    attention = _softmax_layers(c, n_layers, kv, head_dim, lambda i: i % 2 == 0, 128)
    return _spec(c, family, b, attention, tied, moe)


def _ernie4_5_moe(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", True)  # Ernie4_5_MoeConfig default
    heads, kv, head_dim = _heads(c)
    bias = c.bool("use_bias", False)
    experts = c.int("moe_num_experts", "num_experts", default=64)
    top_k = c.int("moe_k", "num_experts_per_tok", default=6)
    moe_inter = c.int("moe_intermediate_size", default=1536)
    n_shared = c.int("moe_num_shared_experts", default=2, min_value=0)
    start = c.int("moe_layer_start_index", default=1, min_value=0)
    end = c.int("moe_layer_end_index", default=-1, min_value=-1)
    end = n_layers - 1 if end == -1 else end
    interval = c.int("moe_layer_interval", default=1)
    flags = [(i + 1) % interval == 0 and start <= i <= end for i in range(n_layers)]
    n_moe = sum(flags)
    b = TensorList()
    _embed_head(b, vocab, hidden, tied, head_bias=bias)
    b.norm("norm", hidden, 1)
    b.norm("layers.*.layernorm", hidden, 2 * n_layers)
    _gqa_attention(b, hidden, _Attn(heads, kv, head_dim, bias, bias), n_layers)
    _gated_mlp(
        b, "layers.*.mlp", "dense_mlp", hidden, c.int("intermediate_size"), n_layers - n_moe, bias
    )
    # router weight (E, H) and moe_statics (E,) are float32 parameters in transformers
    b.linear("layers.*.mlp.gate", "router", experts, hidden, n_moe, module="router", keep_fp32=True)
    b.vec("layers.*.mlp.gate.moe_statics", "router", experts, n_moe, keep_fp32=True)
    _gated_mlp(b, "layers.*.mlp.experts", "routed_experts", hidden, moe_inter, n_moe * experts)
    if n_shared:
        _gated_mlp(
            b,
            "layers.*.mlp.shared_experts",
            "shared_experts",
            hidden,
            moe_inter * n_shared,
            n_moe,
            bias,
        )
    moe = MoEInfo(experts, top_k, n_moe, 3 * hidden * moe_inter)
    return _spec(c, family, b, _softmax_layers(c, n_layers, kv, head_dim), tied, moe)


# ---------------------------------------------------------------------------------------
# Classic decoders: GPT-2, OPT, BLOOM, Falcon
# ---------------------------------------------------------------------------------------


def _gpt2(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("n_embd", "hidden_size")
    n_layers = c.layers("n_layer", "num_hidden_layers")
    heads = c.int("n_head", "num_attention_heads")
    head_dim = c.divides("n_embd", hidden, "n_head", heads)
    vocab = c.int("vocab_size")
    positions = c.int("n_positions", "max_position_embeddings", default=1024)
    inner = c.int("n_inner", default=4 * hidden)
    tied = c.bool("tie_word_embeddings", True)
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.add(TensorGroup("wpe.weight", "embeddings", "embedding", (positions, hidden)))
    b.norm("ln_f", hidden, 1, bias=True)
    b.norm("h.*.ln", hidden, 2 * n_layers, bias=True)
    # Conv1D layers: weight (in, out) + bias (out); stored transposed, same numel
    b.linear("h.*.attn.c_attn", "attention", 3 * hidden, hidden, n_layers, True, "attn")
    b.linear("h.*.attn.c_proj", "attention", hidden, hidden, n_layers, True, "attn")
    b.linear("h.*.mlp.c_fc", "dense_mlp", inner, hidden, n_layers, True, "mlp")
    b.linear("h.*.mlp.c_proj", "dense_mlp", hidden, inner, n_layers, True, "mlp")
    attention = [AttentionLayer("full", heads, head_dim, head_dim)] * n_layers
    return _spec(c, family, b, attention, tied)


def _opt(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    heads = c.int("num_attention_heads")
    head_dim = c.divides("hidden_size", hidden, "num_attention_heads", heads)
    vocab = c.int("vocab_size")
    proj = c.int("word_embed_proj_dim", default=hidden)
    ffn = c.int("ffn_dim")
    bias = c.bool("enable_bias", True)
    affine = c.bool("layer_norm_elementwise_affine", True)
    tied = c.bool("tie_word_embeddings", True)
    b = TensorList()
    b.add(TensorGroup("embed_tokens.weight", "embeddings", "embedding", (vocab, proj)))
    if not tied:
        b.add(TensorGroup("lm_head.weight", "lm_head", "lm_head", (vocab, proj)))
    # OPTLearnedPositionalEmbedding keeps an offset of 2 rows
    positions = c.int("max_position_embeddings") + 2
    b.add(TensorGroup("embed_positions.weight", "embeddings", "embedding", (positions, hidden)))
    if proj != hidden:
        b.linear("project_out", "embeddings", proj, hidden, 1)
        b.linear("project_in", "embeddings", hidden, proj, 1)
    if c.bool("do_layer_norm_before", True) and not c.bool("_remove_final_layer_norm", False):
        b.norm("final_layer_norm", hidden, 1 if affine else 0, bias=True)
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        b.linear(f"layers.*.self_attn.{name}", "attention", hidden, hidden, n_layers, bias, "attn")
    b.norm("layers.*.layer_norm", hidden, 2 * n_layers if affine else 0, bias=True)
    b.linear("layers.*.fc1", "dense_mlp", ffn, hidden, n_layers, bias, "mlp")
    b.linear("layers.*.fc2", "dense_mlp", hidden, ffn, n_layers, bias, "mlp")
    attention = [AttentionLayer("full", heads, head_dim, head_dim)] * n_layers
    return _spec(c, family, b, attention, tied)


def _bloom(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size", "n_embed")
    n_layers = c.layers("n_layer", "num_hidden_layers")
    heads = c.int("num_attention_heads", "n_head")
    head_dim = c.divides("hidden_size", hidden, "num_attention_heads", heads)
    vocab = c.int("vocab_size")
    tied = c.bool("tie_word_embeddings", True)
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("word_embeddings_layernorm", hidden, 1, bias=True)
    b.norm("ln_f", hidden, 1, bias=True)
    b.norm("h.*.layernorm", hidden, 2 * n_layers, bias=True)
    b.linear(
        "h.*.self_attention.query_key_value",
        "attention",
        3 * hidden,
        hidden,
        n_layers,
        True,
        "attn",
    )
    b.linear("h.*.self_attention.dense", "attention", hidden, hidden, n_layers, True, "attn")
    b.linear("h.*.mlp.dense_h_to_4h", "dense_mlp", 4 * hidden, hidden, n_layers, True, "mlp")
    b.linear("h.*.mlp.dense_4h_to_h", "dense_mlp", hidden, 4 * hidden, n_layers, True, "mlp")
    attention = [AttentionLayer("full", heads, head_dim, head_dim)] * n_layers
    return _spec(c, family, b, attention, tied)


def _falcon(c: ConfigReader, family: str) -> ModelSpec:
    hidden = c.int("hidden_size")
    n_layers = c.layers("num_hidden_layers")
    heads = c.int("num_attention_heads")
    head_dim = c.divides("hidden_size", hidden, "num_attention_heads", heads)
    vocab = c.int("vocab_size")
    bias = c.bool("bias", False)
    new_arch = c.bool("new_decoder_architecture", False)
    multi_query = c.bool("multi_query", True)
    parallel = c.bool("parallel_attn", True)
    tied = c.bool("tie_word_embeddings", True)
    ffn = c.int("ffn_hidden_size", default=4 * hidden)
    if new_arch:
        kv = c.int("num_kv_heads", default=heads)
    elif multi_query:
        kv = 1
    else:
        kv = heads
    qkv_out = (heads + 2 * kv) * head_dim if new_arch or multi_query else 3 * hidden
    b = TensorList()
    _embed_head(b, vocab, hidden, tied)
    b.norm("ln_f", hidden, 1, bias=True)
    if new_arch:
        n_ln = c.int("num_ln_in_parallel_attn", default=2)
        b.norm("h.*.ln_attn", hidden, n_layers * (n_ln == 2), bias=True)
        b.norm("h.*.input_layernorm", hidden, n_layers * (n_ln != 2), bias=True)
    else:
        b.norm("h.*.input_layernorm", hidden, n_layers, bias=True)
        b.norm("h.*.post_attention_layernorm", hidden, 0 if parallel else n_layers, bias=True)
    if new_arch and c.int("num_ln_in_parallel_attn", default=2) == 2:
        b.norm("h.*.ln_mlp", hidden, n_layers, bias=True)
    b.linear(
        "h.*.self_attention.query_key_value", "attention", qkv_out, hidden, n_layers, bias, "attn"
    )
    b.linear("h.*.self_attention.dense", "attention", hidden, hidden, n_layers, bias, "attn")
    b.linear("h.*.mlp.dense_h_to_4h", "dense_mlp", ffn, hidden, n_layers, bias, "mlp")
    b.linear("h.*.mlp.dense_4h_to_h", "dense_mlp", hidden, ffn, n_layers, bias, "mlp")
    # the new decoder architecture broadcasts K and V to all query heads before caching them
    hf_heads = heads if new_arch and kv != heads else 0
    attention = [AttentionLayer("full", kv, head_dim, head_dim, hf_cache_heads=hf_heads)] * n_layers
    return _spec(c, family, b, attention, tied)


# ---------------------------------------------------------------------------------------
# Multimodal wrappers: the text model plus its vision tower and projector
# ---------------------------------------------------------------------------------------


def _siglip_vision(v: ConfigReader, b: TensorList) -> int:
    vh = v.int("hidden_size", default=768)
    vi = v.int("intermediate_size", default=3072)
    layers = v.layers("num_hidden_layers", default=12)
    patch = v.int("patch_size", default=16)
    image = v.int("image_size", default=224)
    channels = v.int("num_channels", default=3)
    p = "vision_tower"
    b.add(
        TensorGroup(f"{p}.patch_embedding.weight", "vision", "conv", (vh, channels, patch, patch))
    )
    b.vec(f"{p}.patch_embedding.bias", "vision", vh, 1)
    b.add(
        TensorGroup(
            f"{p}.position_embedding.weight", "vision", "embedding", ((image // patch) ** 2, vh)
        )
    )
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        b.linear(f"{p}.layers.*.self_attn.{name}", "vision", vh, vh, layers, True, "vision")
    b.linear(f"{p}.layers.*.mlp.fc1", "vision", vi, vh, layers, True, "vision")
    b.linear(f"{p}.layers.*.mlp.fc2", "vision", vh, vi, layers, True, "vision")
    b.vec(f"{p}.layers.*.layer_norm.weight", "vision", vh, 2 * layers)
    b.vec(f"{p}.layers.*.layer_norm.bias", "vision", vh, 2 * layers)
    b.vec(f"{p}.post_layernorm.weight", "vision", vh, 1)
    b.vec(f"{p}.post_layernorm.bias", "vision", vh, 1)
    return vh


def _pixtral_vision(v: ConfigReader, b: TensorList) -> int:
    vh = v.int("hidden_size", default=1024)
    vi = v.int("intermediate_size", default=4096)
    layers = v.layers("num_hidden_layers", default=24)
    patch = v.int("patch_size", default=16)
    channels = v.int("num_channels", default=3)
    p = "vision_tower"
    b.add(TensorGroup(f"{p}.patch_conv.weight", "vision", "conv", (vh, channels, patch, patch)))
    b.vec(f"{p}.ln_pre.weight", "vision", vh, 1)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        b.linear(f"{p}.layers.*.attention.{name}", "vision", vh, vh, layers, False, "vision")
    for name, (o, i) in {"gate_proj": (vi, vh), "up_proj": (vi, vh), "down_proj": (vh, vi)}.items():
        b.linear(f"{p}.layers.*.feed_forward.{name}", "vision", o, i, layers, False, "vision")
    b.vec(f"{p}.layers.*.norm.weight", "vision", vh, 2 * layers)
    return vh


def _multimodal(c: ConfigReader, family: str) -> ModelSpec:
    text = c.sub("text_config")
    vision = c.sub("vision_config")
    if text is None or vision is None:
        raise c.error("text_config", f"and vision_config are required for {family}")
    default_text = {"gemma3": "gemma3_text", "mistral3": "mistral"}[family]
    text_type = text.str("model_type", default_text)
    if text_type not in ("gemma3_text", "mistral", "llama"):
        raise text.error("model_type", f"{text_type!r} is not a supported {family} text model")
    spec = _llama_like(text, text_type)
    spec.model_type = family
    b = TensorList()
    th = spec.hidden_size
    if family == "gemma3":
        vh = _siglip_vision(vision, b)
        # Gemma3MultiModalProjector: mm_input_projection_weight (vh, th) + mm_soft_emb_norm (vh)
        b.add(
            TensorGroup(
                "multi_modal_projector.mm_input_projection_weight", "vision", "linear", (th, vh)
            )
        )
        b.vec("multi_modal_projector.mm_soft_emb_norm.weight", "vision", vh, 1)
    else:
        vh = _pixtral_vision(vision, b)
        merge = c.int("spatial_merge_size", default=2)
        layers = c.raw("vision_feature_layer", -1)
        n_feat = len(layers) if isinstance(layers, list) else 1
        pbias = c.bool("multimodal_projector_bias", False)
        m = "multi_modal_projector"
        b.vec(f"{m}.norm.weight", "vision", vh, 1)
        b.linear(
            f"{m}.patch_merger.merging_layer", "vision", vh, vh * merge * merge, 1, False, "vision"
        )
        b.linear(f"{m}.linear_1", "vision", th, vh * n_feat, 1, pbias, "vision")
        b.linear(f"{m}.linear_2", "vision", th, th, 1, pbias, "vision")
    spec.tensors.extend(b.tensors)
    # Which tie flag applies: a top-level tie_word_embeddings wins, else the text model's.
    if c.has("tie_word_embeddings") and c.bool("tie_word_embeddings", True) != spec.tied_embeddings:
        tied = c.bool("tie_word_embeddings", True)
        spec.tied_embeddings = tied
        vocab, hid = spec.vocab_size, spec.hidden_size
        spec.tensors = [t for t in spec.tensors if t.part != "lm_head"]
        if not tied:
            spec.tensors.append(TensorGroup("lm_head.weight", "lm_head", "lm_head", (vocab, hid)))
    if family == "mistral3" and not c.has("tie_word_embeddings"):
        spec.notes.append(
            "config.json does not set tie_word_embeddings at the top level; nodeledger follows the "
            "text model's setting (untied, as in the published checkpoints, which store lm_head). "
            "transformers >= 5 defaults Mistral3Config to tied and would count one vocab table less."
        )
    spec.torch_dtype = c.str("torch_dtype") or c.str("dtype") or spec.torch_dtype
    q = c.sub("quantization_config")
    spec.quantization = q.data if q is not None else spec.quantization
    return spec


# ---------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------

Builder = Callable[[ConfigReader, str], ModelSpec]

FAMILIES: dict[str, Builder] = {
    "llama": _llama_like,
    "mistral": _llama_like,
    "qwen2": _llama_like,
    "qwen3": _llama_like,
    "gemma": _llama_like,
    "gemma2": _llama_like,
    "gemma3_text": _llama_like,
    "phi3": _llama_like,
    "mixtral": _llama_like,
    "qwen2_moe": _llama_like,
    "qwen3_moe": _llama_like,
    "qwen3_next": _qwen3_next,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "glm4_moe": _glm4_moe,
    "nemotron_h": _nemotron_h,
    "gpt_oss": _gpt_oss,
    "ernie4_5_moe": _ernie4_5_moe,
    "gpt2": _gpt2,
    "opt": _opt,
    "bloom": _bloom,
    "falcon": _falcon,
    "gemma3": _multimodal,
    "mistral3": _multimodal,
}


def supported_families() -> list[str]:
    return sorted(FAMILIES)


def build_spec(config: dict, where: str) -> ModelSpec:
    """Turn one parsed config.json into a ModelSpec; raises ConfigError naming the problem."""
    c = ConfigReader(config, where)
    model_type = c.str("model_type")
    if not model_type:
        raise c.error(
            "model_type", "is missing; supported families: " + ", ".join(supported_families())
        )
    builder = FAMILIES.get(model_type)
    if builder is None:
        raise UnknownFamilyError(
            f"{where}: model_type {model_type!r} is not supported (no guessing); "
            f"supported families: {', '.join(supported_families())}"
        )
    spec = builder(c, model_type)
    if c.defaults:
        applied = ", ".join(f"{k}={v}" for k, v in c.defaults.items())
        spec.notes.append(
            f"config.json omits these fields; the family's defaults (transformers' config class) "
            f"were applied: {applied}"
        )
    return spec
