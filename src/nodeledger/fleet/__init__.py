"""When one box is not enough: hooks into the Prometheus, Grafana, Slurm and Kubernetes a team
already runs (rules, a dashboard, a prolog / epilog, a DaemonSet and node labels) and a table
over many boxes' bundles.  Never a scheduler or a collector of its own."""
