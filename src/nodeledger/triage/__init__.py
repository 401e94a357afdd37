"""OOM triage: find out-of-memory incidents in kernel and job logs, say whether the host or the
card ran out, extract every figure in bytes, and give the fixes for that side.

Parsers (``kernel``, ``accel``, ``jobs``) are pure functions of text; ``collect`` runs the
kernel-log tools through the probe ``Runner``; ``report`` links incidents and assembles the
report that ``nodeledger oom`` prints.
"""

from __future__ import annotations

from nodeledger.logs.incidents import Incident
from nodeledger.triage.report import OomReport, build_report

__all__ = ["Incident", "OomReport", "build_report"]
