"""Placement: which replica goes on which cards, one lifeboat card kept free.

- ``planner``: the whole-plan search (each replica checked by the ledger, TP groups on the
  best-linked card sets, least fragmentation) and each replica's NUMA node, CPUs and launch line;
- ``emit``: Slurm (gres.conf, one sbatch per workload) and Kubernetes (one Pod per replica);
- ``reserve``: reservations in a state file, and starting one replica (``nodeledger run``).

Above ``verdict``, below the consumers.  Never prints, never exits.
"""
