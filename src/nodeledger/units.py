"""Units, defined once.  Binary sizes (KiB, MiB, GiB, TiB = powers of 1024) are what the
kernel, the drivers and PyTorch report; decimal ones (KB, MB, GB = powers of 1000) are what
datasheets, disks and networks quote (GB/s, Gbit/s).  Names in the code say which."""

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

KB = 10**3
MB = 10**6
GB = 10**9


def gib_text(
    n: float | None, decimals: int = 1, unknown: str = "unknown", unit: str = " GiB"
) -> str:
    """Bytes as GiB (2**30) with thousands separators, the one byte formatter every output
    uses: ``gib_text(3 * 2**30)`` -> ``"3.0 GiB"``; ``None`` -> ``unknown``."""
    if n is None:
        return unknown
    return f"{n / GiB:,.{decimals}f}{unit}"


def gib_num(n: float, decimals: int = 1) -> str:
    """Bytes as a GiB figure without its unit (for a column or a sentence that says GiB once):
    ``gib_num(3 * 2**30, 2)`` -> ``"3.00"``."""
    return gib_text(n, decimals, unit="")


def count(n: int, noun: str, plural: str = "") -> str:
    """ "1 workload", "3 workloads" (``plural`` where adding an s is wrong), thousands grouped."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


_COUNT_NOUNS = {"sequences", "blocks", "graphs", "cards", "tokens", "workloads", "replicas"}


def num(value: object, unit: str = "") -> str:
    """A figure with its unit; None -> unknown; floats to one decimal, trailing zeros dropped;
    "1 sequence", not "1 sequences"."""
    if value is None:
        return "unknown"
    if isinstance(value, float):
        text = f"{value:,.1f}".rstrip("0").rstrip(".")
    else:
        text = f"{value:,}" if isinstance(value, int) else str(value)
    if value == 1 and unit in _COUNT_NOUNS:
        unit = unit[:-1]
    return f"{text} {unit}".rstrip()
