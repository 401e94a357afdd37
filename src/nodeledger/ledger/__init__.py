"""The memory ledger: every byte a job holds per card and in host RAM.

Term modules are pure accounting functions, one small function per term, each with its formula
and source in the docstring:

  weights      weight bytes per storage scheme (bf16/fp16/fp32, fp8, int8, int4, nf4, mxfp4)
  kv_cache     KV cache per token / sequence / card (MHA/GQA, sliding window, MLA, linear)
  activations  saved activations in training, no-grad transients in inference, the loss
  model_state  training state per card: parameters, gradients, optimizer states, ZeRO/FSDP
               sharding, offload, LoRA adapters
  runtime      overheads outside PyTorch's allocator (context, allocator reserve, NCCL, ...)
  comm         link traffic and the compute it hides behind (used by verdict/links.py)

``dims`` reads the per-layer dimensions those formulas need off a ModelSpec, ``jobs`` holds the
validated job specifications, and ``build`` composes the terms into the ledger of one job on
one machine (``serve_ledger``, ``train_ledger``, ``load_ledger``).
"""
