"""`nodeledger doctor`: read-only tuning and health checks of one machine (checks.py) and the
pre-flight of one job against it (preflight.py).  Nothing here changes the machine: every fix
is a command printed for a person to run."""

from nodeledger.doctor.checks import SEVERITIES, Finding, exit_code, run_checks, worst
from nodeledger.doctor.machine_state import MachineState, load_state
from nodeledger.doctor.preflight import Preflight, preflight

__all__ = ["SEVERITIES", "Finding", "MachineState", "Preflight", "exit_code", "load_state",
           "preflight", "run_checks", "worst"]  # fmt: skip
