"""`nodeledger bench` and `nodeledger golive`.

- ``disk``: sequential / random 4 KiB reads of the dataset and model-cache folders, page cache
  bypassed (O_DIRECT) or dropped (POSIX_FADV_DONTNEED, checked with mincore) and said which;
- ``cards``: host <-> card copies (pinned / pageable, NUMA-local / remote), card <-> card copies,
  all-reduce / all-gather bus bandwidth (``collective`` is the per-rank worker), allocatable
  memory — torch only (the ``bench`` extra); without it every card part is "unavailable";
- ``judge``: ok / low / bad against the class or the topology, thresholds with their sources;
- ``nccl``: nccl-tests output parser, so nodeledger's bus bandwidth compares with it;
- ``run``: the bench as one report; ``golive``: the pre-production checklist.
"""
