"""`nodeledger golive`: the one orchestrator.  It runs doctor, bench, placement and a recovery
drill as the pre-production checklist (``checklist``); the consumers it calls never import each
other, and nothing below imports it."""
