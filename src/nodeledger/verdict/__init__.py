"""Verdicts: what the ledger's bytes mean for one job on one machine.

- ``fit``: one job against one machine — fits / tight / cannot per resource, the binding
  resource, headroom, re-checked suggestions, the largest concurrency that still fits;
- ``search``: the layouts (TP / dp / sharding / micro-batch / checkpointing) that fit, ranked;
- ``links``: the traffic check — per-token tensor-parallel and data-parallel traffic against the
  slowest link the job rides (in-box links, or the NICs between machines);
- ``catalogue``: the workload catalogue (``workloads/default.toml``) that report, placement and
  watch judge.

Above ``ledger``, below ``placement`` and the consumers.  Never prints, never exits.
"""
