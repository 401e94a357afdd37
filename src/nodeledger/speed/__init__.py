"""Time beside bytes: how fast a job runs on the machine and which part of it sets the pace.

Layer: after ``ledger`` (it reads the ledger's weight and KV terms and the KV pool), before
``verdict`` (the link and network verdicts and the report's throughput criterion use it).

  terms.py       one pure function per time term, with its formula and source
  hardware.py    the hardware data file (hardware.toml): cards, links, NICs, disks, efficiencies
  figures.py     this machine's figures: measured > profile > hardware data > unknown (+ bounds)
  work.py        FLOPs and bytes of a model's token / step
  serve.py       TTFT, TPOT, output tokens/s, requests/s of one replica
  train.py       step time, tokens/s per card, MFU
  collective.py  nccl-tests algbw / busbw / seconds of one collective
  load.py        checkpoint read, host -> card copy, transfer to a second machine
"""
