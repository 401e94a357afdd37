"""Mutation fuzzing of every `nodeledger parse` kind (issue 14), bounded for CI.

The real fixtures of each kind (test_parsers_expected.FIXTURE_KINDS: ../shared/fixtures/real when
present, else only tests/fixtures) are mutated by hypothesis (byte flips, line drops and
duplications, cells replaced by hostile values, 200k-character cells, extra columns, deep JSON,
huge cpulists); each parse must refuse with ParseError / InputError or give strict-JSON output
whose numbers are finite and not negative, in under 2 s.  benchmarks/fuzz.py runs the same
checks on 10,000 inputs per kind by hand."""

from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import test_parsers_expected as tpe
from nodeledger.errors import InputError
from nodeledger.machine.parsers import PARSERS, parse_kind
from nodeledger.machine.parsers.common import ParseError, cpulist_count, cpulist_ids

HOSTILE = ["²", "0x10", "0x10%", "1e400", "1e400W", "NaN", "nan%", "inf", "-1", "-1%", "٣", "...",
           ".", "", ",", "N/A", "(16)", "0-99999999999", "0-1048577", "9" * 5000, "x" * 200_000,
           "9" * 200_000, '"' * 3, "{" * 50_000, "[" * 50_000 + "]" * 50_000]  # fmt: skip
SIGNED_KINDS = {
    "nvidia-smi-csv",
    "vllm-log",
}  # numbers kept as printed, a sign included (vLLM prints a negative KV pool when start-up fails)


# kinds with no public recording of their own that run another kind's parser on its layout
ALIASES = {"hy-smi-pids": "rocm-smi-pids"}


def _corpus() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {k: [] for k in PARSERS}
    for rel, kind in sorted(tpe.FIXTURE_KINDS.items()):
        if kind in PARSERS and tpe.root_present(rel) and tpe.fixture_path(rel).is_file():
            out[kind].append(tpe.read_fixture(rel))
    for kind, same in ALIASES.items():  # one parser under two names: fuzz it on the other's texts
        out[kind] = out[kind] or out[same]
    return out


CORPUS = _corpus()


@st.composite
def mutated(draw, texts: list[str]) -> str:
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, 3))):
        lines = text.split("\n")
        op = draw(st.integers(0, 6))
        if op == 0 and text:  # flip bytes
            b = bytearray(text.encode())
            for _ in range(draw(st.integers(1, 6))):
                i = draw(st.integers(0, len(b) - 1))
                b[i] ^= 1 << draw(st.integers(0, 7))
            text = b.decode("utf-8", "replace")
        elif op == 1 and len(lines) > 1:  # drop a line
            del lines[draw(st.integers(0, len(lines) - 1))]
            text = "\n".join(lines)
        elif op == 2:  # duplicate a line
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op in (3, 4):  # a token (a cell) replaced by a hostile value
            toks = [(i, j) for i, ln in enumerate(lines) for j, _ in enumerate(ln.split())]
            if toks:
                i, j = draw(st.sampled_from(toks))
                cells = lines[i].split()
                cells[j] = draw(st.sampled_from(HOSTILE))
                lines[i] = " ".join(cells) if "\t" not in lines[i] else "\t".join(cells)
                text = "\n".join(lines)
        elif op == 5:  # extra columns
            i = draw(st.integers(0, len(lines) - 1))
            lines[i] += draw(st.sampled_from([",extra", ",1,2,3", "\tX", " 1 2 3", ',"a,b"']))
            text = "\n".join(lines)
        else:  # truncated
            text = text[: draw(st.integers(0, len(text)))]
    return text


def _bad_numbers(obj, signed: bool, path: str = "") -> list[str]:
    if isinstance(obj, bool) or obj is None:
        return []
    if isinstance(obj, float):
        return [] if math.isfinite(obj) and (signed or obj >= 0) else [f"{path}={obj!r}"]
    if isinstance(obj, int):
        return [] if (signed or obj >= 0) and abs(obj) < 2**63 else [f"{path}={obj!r}"]
    if isinstance(obj, dict):
        return [b for k, v in obj.items() for b in _bad_numbers(v, signed, f"{path}.{k}")]
    if isinstance(obj, (list, tuple)):
        return [b for i, v in enumerate(obj) for b in _bad_numbers(v, signed, f"{path}[{i}]")]
    return []


def check(kind: str, text: str) -> None:
    """The raw parser (not parse_kind's safety net): a refusal, or sane output, under 2 s."""
    t0 = time.perf_counter()
    try:
        out = PARSERS[kind](text)
    except (ParseError, InputError):
        out = None
    elapsed = time.perf_counter() - t0
    assert elapsed < 2.0, f"{kind}: {elapsed:.2f} s for one input"
    if out is not None:
        json.dumps(out, allow_nan=False)  # strict JSON: no NaN / Infinity
        bad = _bad_numbers(out, kind in SIGNED_KINDS)
        assert not bad, f"{kind}: out-of-range numbers {bad[:5]}"


@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_fuzz_kind(kind):
    texts = CORPUS[kind]
    if not texts:
        pytest.skip(f"no fixture of kind {kind} here (../shared absent?)")

    @settings(max_examples=100, deadline=2000, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(mutated(texts))
    def run(text):
        check(kind, text)

    run()


# -- the inputs issue 14 names, one by one ---------------------------------------------------

HY_SMI = """\
============================ System Management Interface =============================
DCU     Temp     AvgPwr     Perf     PwrCap     VRAM%      DCU%      Mode
0       67.0C    8.0W       manual   600.0W     0x10%      74%       Normal
1       68.0C    8.0W       manual   600.0W     85%        29%       Normal
=================================== End of SMI Log ===================================
"""


def test_hy_smi_bad_vram_cell_is_unknown_with_a_note():
    info = parse_kind("hy-smi", HY_SMI)
    assert [(c["index"], c["vram_used_pct"]) for c in info["cards"]] == [(0, None), (1, 85.0)]
    assert any("hy-smi" in n and "VRAM%" in n and "0x10%" in n for n in info["notes"])


def test_hy_smi_infinite_power_cap_is_unknown_and_json_strict():
    text = HY_SMI.replace("0x10%", "85%").replace("600.0W", "9" * 400 + "W", 1)
    out = json.loads(json.dumps(parse_kind("hy-smi", text), allow_nan=False))
    assert out["cards"][0]["power_cap_w"] is None and out["cards"][1]["power_cap_w"] == 600.0
    assert any("power cap" in n for n in out["notes"])


def test_nvidia_query_superscript_index_row_is_skipped_with_a_note():
    text = (
        "0, H200, 143771, 00000000:18:00.0, Disabled\n², H200, 143771, 00000000:19:00.0, Disabled\n"
    )
    out = parse_kind("nvidia-smi-query-csv", text)
    assert [c["index"] for c in out["cards"]] == [0]
    assert any("'²'" in n and "index" in n for n in out["notes"])


def test_nvidia_query_bad_memory_cell_is_unknown():
    out = parse_kind("nvidia-smi-query-csv", "0, H200, 1e400, 00000000:18:00.0, Disabled\n")
    assert out["cards"][0]["memory_mib"] is None and "memory.total" in out["notes"][0]


@pytest.mark.parametrize("kind", ["rocm-smi-csv", "nvidia-smi-csv", "nvidia-smi-query-csv"])
def test_csv_field_over_the_csv_limit_is_a_refusal(kind):
    text = 'device,Card series\ncard0,"' + "x" * 200_000 + '"\n'
    if kind != "rocm-smi-csv":
        text = 'index, name\n0, "' + "x" * 200_000 + '"\n'
    with pytest.raises(InputError):
        PARSERS[kind](text)


def test_rocm_csv_extra_columns_keep_the_card():
    out = parse_kind("rocm-smi-csv", "device,Card series\ncard0,Radeon,extra,more\n")
    assert out["cards"][0]["name"] == "Radeon"


@pytest.mark.parametrize("kind", ["rocm-smi-json", "amd-smi-static-json"])
def test_deep_json_is_a_refusal(kind):
    with pytest.raises(ParseError):
        PARSERS[kind]('{"card0": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_numactl_cpu_compress_ranges():
    text = ("available: 2 nodes (0-1)\nnode 0 cpus: 0-15 (16)\nnode 0 size: 64000 MB\n"
            "node 0 free: 1000 MB\nnode 1 cpus: 16-31 (16)\nnode 1 size: 64000 MB\n"
            "node 1 free: 1000 MB\n")  # fmt: skip
    info = parse_kind("numactl", text)
    assert [(n["cpus"], n["cpu_count"]) for n in info["nodes"]] == [("0-15", 16), ("16-31", 16)]


@pytest.mark.parametrize("cpus", ["0-99999999999", "0-1048577", "0-70000", "0x10", "²"])
def test_huge_or_bad_cpulists_are_refused_before_expansion(cpus):
    t0 = time.perf_counter()
    assert cpulist_ids(cpus) is None and cpulist_count(cpus) is None
    lscpu = f"Architecture: x86_64\nCPU(s): 16\nNUMA node(s): 1\nNUMA node0 CPU(s): {cpus}\n"
    with pytest.raises(ParseError, match="not a cpulist"):
        parse_kind("lscpu", lscpu)
    numactl = f"available: 1 nodes (0)\nnode 0 cpus: {cpus}\nnode 0 size: 100 MB\n"
    info = parse_kind("numactl", numactl)
    assert info["nodes"][0]["cpu_count"] == 0
    assert any("not a CPU list" in n for n in info["notes"])
    assert time.perf_counter() - t0 < 2.0


def test_cpulist_count_is_counted_from_ranges():
    assert cpulist_count("0-65535") == 65536 and cpulist_count("0-65536") is None
    assert cpulist_count("0-3,2-5,8") == 7 and cpulist_ids("0-2,5") == {0, 1, 2, 5}


def test_parse_kind_lets_only_refusals_escape(monkeypatch):
    monkeypatch.setitem(PARSERS, "numactl", lambda text: int("x"))
    with pytest.raises(ParseError, match="numactl output not understood"):
        parse_kind("numactl", "")


def test_nvidia_table_process_memory_out_of_range_is_not_a_match():
    text = (
        "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |\n"
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |\n"
        "| N/A   30C    P0     70W /  700W |       1MiB /  81559MiB |      0%      Default |\n"
        "| Processes:                                                                 |\n"
        "|    0   N/A  N/A      1234      C   python                 " + "9" * 23 + "MiB |\n"
    )
    out = parse_kind("nvidia-smi", text)
    assert out["processes"] == [] and out["cards"][0]["memory_total_bytes"] == 81559 * 2**20


def test_topo_gpu_column_with_a_huge_number_is_not_a_gpu():
    with pytest.raises(ParseError):
        PARSERS["nvidia-smi-topo"]("\tGPU" + "9" * 5000 + "\tCPU Affinity\nGPU0\t X \t0-3\n")
