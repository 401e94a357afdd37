"""Write src/nodeledger/speed/hardware.json from hardware.toml: run after editing the TOML.

    python tests/regen_hardware_json.py

The loader reads the JSON (parsing the TOML would cost ~40 ms of every cold start);
tests/test_speed.py fails while the two differ.
"""

from __future__ import annotations

import json
import sys

from nodeledger import atomic
from nodeledger.speed import hardware as H


def text() -> str:
    return json.dumps(H.parse_source(), indent=0, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    t = text()
    atomic.write_text(H.PARSED, t)
    sys.stdout.write(f"wrote {H.PARSED} ({len(t):,} bytes)\n")
