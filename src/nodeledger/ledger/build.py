"""Assemble the ledger of one job on one machine: every byte per card and in host RAM.

Each line item names its formula and source.  ``torch_peak_bytes`` is what
``torch.cuda.max_memory_allocated`` would show on the busiest card; ``total_bytes`` adds the
runtime overheads outside the allocator (what nvidia-smi / rocm-smi would show).

The ledgers are compositions: every byte figure comes from a named term function, here or in
the term modules (weights, kv_cache, activations, state, runtime), each with its formula and
source in its docstring; this module only picks the terms a job needs, names the line items
and sums the phases.

The compositions live one per module (ledger/core.py: the types and shared items; serve.py and
serve_hf.py / serve_vllm.py / serve_sglang.py: serving, one module per engine; train.py; load.py);
this module names them in one place.
"""

from __future__ import annotations

from nodeledger.ledger.core import (  # noqa: F401 (re-exported)
    PROCESS_RSS_BYTES,
    CardLedger,
    HostLedger,
    Item,
    Ledger,
    card_capacity,
    check_parallel,
    dataloader_host_bytes,
    eager_only_note,
    pipeline_stage_layers,
    process_rss_bytes,
    rope_cache_bytes,
    ssm_path,
    weights_bytes_per_card,
    weights_share_bytes,
)
from nodeledger.ledger.load import (  # noqa: F401 (re-exported)
    load_cpu_copies,
    load_ledger,
)
from nodeledger.ledger.serve import (  # noqa: F401 (re-exported)
    SERVE_ENGINES,
    ServeEngineLedger,
    resolve_job,
    serve_ledger,
)
from nodeledger.ledger.serve_vllm import (  # noqa: F401 (re-exported)
    vllm_budget_bytes,
    vllm_kv_pool_bytes,
    vllm_weights_as_loaded,
)
from nodeledger.ledger.train import (  # noqa: F401 (re-exported)
    autocast_cache_bytes_per_card,
    check_lora_targets,
    embedding_grad_bytes_per_card,
    fp8_weight_copy_bytes,
    pipeline_inflight,
    saved_activation_bytes_per_card,
    train_ledger,
    train_phases,
)
