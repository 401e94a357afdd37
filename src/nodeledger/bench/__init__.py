"""`nodeledger bench`: measure the machine and judge the figures.

- ``disk``: sequential / random 4 KiB reads of the dataset and model-cache folders, page cache
  bypassed (O_DIRECT) or dropped (POSIX_FADV_DONTNEED, checked with mincore) and said which;
- ``cards``: host <-> card copies (pinned / pageable, NUMA-local / remote), card <-> card copies,
  all-reduce / all-gather bus bandwidth (``collective`` is the per-rank worker), allocatable
  memory — torch only (the ``bench`` extra); without it every card part is "unavailable";
- ``judge``: ok / low / bad against the class or the topology, thresholds with their sources;
- ``nccl``: reads an nccl-tests output (parsed by ``machine/parsers/nccl_tests.py``) and puts
  nodeledger's bus bandwidth beside it;
- ``suite``: the whole bench as one report (what ``nodeledger bench`` prints).

The pre-production checklist that runs the bench is ``nodeledger.golive``.
"""
