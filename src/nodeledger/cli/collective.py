"""`nodeledger collective`: how long one collective takes on a machine (nccl-tests terms)."""

from __future__ import annotations

import re

import click

from nodeledger.cli.common import card_indices, console, print_json
from nodeledger.cli.options import json_option
from nodeledger.errors import NodeledgerError

OPS = ("all_reduce", "all_gather", "reduce_scatter")
SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 10**3, "KIB": 2**10, "M": 2**20, "MB": 10**6,
              "MIB": 2**20, "G": 2**30, "GB": 10**9, "GIB": 2**30, "T": 2**40, "TB": 10**12,
              "TIB": 2**40, "P": 2**50, "PB": 10**15, "PIB": 2**50}  # fmt: skip
SIZE_RE = re.compile(r"([0-9]{1,16}(?:\.[0-9]{1,16})?)([KMGTP]?I?B?)")
MAX_SIZE = 2**50  # 1 PiB: a bound, not a realistic buffer


def parse_size(text: str) -> int:
    """BYTES with an optional unit: 268435456, 256M (MiB, as nccl-tests' -b/-e), 1.5G, 1GB, 8GiB, 1P."""
    t = text.strip().upper().replace(" ", "")
    m = SIZE_RE.fullmatch(t)
    if m is None or m.group(2) not in SIZE_UNITS:
        raise NodeledgerError(f"--size {text!r}: write bytes, optionally with K/M/G/T/P (binary, as "
                              "nccl-tests), KB/MB/GB (decimal) or KiB/MiB/GiB")  # fmt: skip
    num_part, unit = m.groups()
    if unit in ("", "B") and "." in num_part:
        raise NodeledgerError(f"--size {text!r}: a byte count is a whole number")
    size = round(float(num_part) * SIZE_UNITS[unit])
    if not 1 <= size <= MAX_SIZE:
        raise NodeledgerError(f"--size {text!r}: must be between 1 byte and 1 PiB")
    return size


def parse_cards(text: str | None, have: list[int]) -> list[int] | None:
    """--cards as every command reads it (common.card_indices), each card in the machine."""
    out = card_indices(text)
    if out is None:
        return None
    missing = sorted(set(out) - set(have))
    if missing:
        raise NodeledgerError(
            f"--cards {text!r}: card(s) {missing} not in the machine (cards {have})"
        )
    return out


@click.command("collective")
@click.argument(
    "machine", required=False, help="Preset or profile file; default: reference machine."
)
@click.option(
    "--op",
    "op",
    type=click.Choice(OPS),
    default="all_reduce",
    show_default=True,
    help="The collective, as nccl-tests names it (all_reduce_perf, ...).",
)
@click.option(
    "--size",
    "size",
    default="256M",
    show_default=True,
    help="Bytes (the buffer for all_reduce, the whole output for all_gather); K/M/G are binary as in nccl-tests.",
)
@click.option("--cards", "cards", help="Card indices, e.g. 0-3 or 0,2,4,6; default: all.")
@click.option(
    "--machines",
    "machines",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="Identical machines the collective spans (through their NICs).",
)
@click.option("--machine", "machine_opt", help="Same as MACHINE (as the other commands spell it).")
@json_option
def collective_cmd(machine=None, op="all_reduce", size="256M", cards=None, machines=1,
                   machine_opt=None, as_json=False) -> None:  # fmt: skip
    """Time of one collective: algbw_gbps, busbw_gbps (nccl-tests definitions) and seconds, from
    measured figures (bench --save-profile) or the links and the hardware data."""
    from nodeledger.report.machines import estimate_collective

    if machine and machine_opt and machine != machine_opt:
        raise NodeledgerError(f"two machines named: {machine!r} and --machine {machine_opt!r}")
    d = estimate_collective(machine or machine_opt, op, parse_size(size),
                            lambda have: parse_cards(cards, have), machines)  # fmt: skip
    if as_json:
        print_json(d)
        return
    con = console()
    where = f"{len(d['cards'])} card(s) {d['cards']}" + (
        f" x {machines} machines" if machines > 1 else "")  # fmt: skip
    what = f"{op} of {d['size_bytes']:,} B over {where} on {d['machine']} ({d['ranks']} ranks)"
    if d.get("seconds") is None:
        con.print(f"{what}: unknown", markup=False, highlight=False)
        c = d.get("busbw_ceiling_gbps")
        if c and c.get("value") is not None:
            con.print(f"  bound: busbw at most {c['value']:,.1f} GB/s", markup=False)
        con.print(f"  why: {d['reason']}", markup=False)
        if c and c.get("value") is not None:
            con.print(f"  source of the bound: {c['source']}", markup=False)
        return
    if d["ranks"] <= 1:
        con.print(f"{what}: one rank, nothing moves", markup=False, highlight=False)
        return
    at_least = "at least " if d.get("seconds_is_lower_bound") else ""

    def t(x: float) -> str:
        return f"{x * 1e3:,.3f} ms" if x >= 1e-3 else f"{x * 1e6:,.3g} us"

    # the answer first (time and bus bandwidth), the binding in one clause, the sources last
    con.print(f"{what}: {at_least}{t(d['seconds'])}, busbw {d['busbw_gbps']:,.2f} GB/s",
              markup=False, highlight=False)  # fmt: skip
    con.print(f"  seconds: {at_least}{t(d['seconds'])} ({d['algorithm']}; ring "
              f"{t(d['ring_seconds'])}, tree {t(d['tree_seconds'])})")  # fmt: skip
    con.print(f"  algbw_gbps: {d['algbw_gbps']:,.2f} GB/s; busbw_gbps: {d['busbw_gbps']:,.2f} GB/s "
              f"(algbw x {d['bus_factor']:.3f}, nccl-tests doc/PERFORMANCE.md)")  # fmt: skip
    con.print(f"  binding: {d['reason'].split(' (')[0]}", markup=False)
    if d.get("latency_per_step_s") is not None:
        con.print(f"  latency per step: {d['latency_per_step_s'] * 1e6:,.1f} us", markup=False)
    con.print("sources:", markup=False)
    con.print(f"  binding: {d['reason']}", markup=False)
    if d.get("latency_source"):
        con.print(f"  latency: {d['latency_source']}", markup=False)
