"""`nodeledger watch` and `nodeledger exporter`: per-card memory, utilisation and processes over
time, checked against the ledger's prediction, with idle cards and their likely cause.

- base.py: the card-sampler interface; backends.py: the samplers (NVML through
  machine/probe/nvml.py, nvidia-smi, rocm-smi / hy-smi, npu-smi); fake.py: scenarios
- host.py: host RAM, swap, paging, CPU / IO wait, per-NUMA memory, owner processes' bindings
- watcher.py: the sampling loop; record.py: JSONL recordings and replays
- expect.py: the ledger's per-card prediction from --job / --plan
- analyze.py: verify rules and idle diagnosis (thresholds documented there)
- exporter.py: Prometheus metrics (dcgm-exporter names where they overlap)
"""
