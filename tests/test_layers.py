"""The folder tree is the layer map: every import of the package (module level or inside a
function) goes down the layer order, never up, never sideways between consumers or between CLI
command modules, and never round in a cycle.

Layers, lowest first (docs/reference.md "Layout"):
    errors, units -> atomic, files -> machine.parsers (pure), logs -> machine -> model -> ledger -> speed -> verdict
    -> placement -> consumers (report, doctor, watch, bench, triage) -> golive -> cli
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nodeledger"

# (layer rank, unit name): a module belongs to the longest unit prefix that names it
UNITS: dict[str, int] = {
    "nodeledger": 0,  # the package's own __init__ (the version)
    "nodeledger.errors": 0,
    "nodeledger.units": 0,
    "nodeledger.atomic": 0.5,  # file helpers: may import errors and units
    "nodeledger.files": 0.5,
    "nodeledger.field_notes": 0.5,
    "nodeledger.validation": 0.5,  # pydantic behind one function, imported when data is validated
    "nodeledger.document": 0.5,  # the section kinds every consumer renders (report, doctor, golive)
    "nodeledger.machine.parsers": 1,
    "nodeledger.logs": 1,  # log readers (kernel / accelerator OOM, job lines): beside the parsers
    "nodeledger.machine": 2,
    "nodeledger.model": 3,
    "nodeledger.ledger": 4,
    "nodeledger.speed": 4.5,  # time terms beside the ledger: may import ledger, not verdict
    "nodeledger.verdict": 5,
    "nodeledger.placement": 6,
    "nodeledger.report": 7,
    "nodeledger.doctor": 7,
    "nodeledger.watch": 7,
    "nodeledger.bench": 7,
    "nodeledger.triage": 7,
    "nodeledger.golive": 8,
    "nodeledger.fleet": 8,  # hooks into Prometheus / Slurm / Kubernetes: above the consumers
    "nodeledger.cli": 9,
    "nodeledger.api": 9,  # the library's facade (fit, capacity_report, probe): beside the CLI
    "nodeledger.__main__": 10,
}
CLI_SHARED = {"nodeledger.cli", "nodeledger.cli.common", "nodeledger.cli.options"}
# the one import that goes up: `import nodeledger; nodeledger.fit(...)` loads the facade on
# first use (PEP 562 __getattr__ in the package's __init__), never at import
FACADE = ("nodeledger", "nodeledger.api")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(imported nodeledger module, line) for every import in the file, lazy ones included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("nodeledger")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("nodeledger"):
                continue
            for a in node.names:  # `from pkg import module` imports the module
                sub = f"{target}.{a.name}"
                found.append((sub if sub in known else target, node.lineno))
    return found


def unit(name: str) -> str:
    best = max((u for u in UNITS if name == u or name.startswith(u + ".")), key=len, default=None)
    assert best is not None, (
        f"{name} is in no layer: add it to UNITS and to the layout in docs/reference.md"
    )
    return best


def edges() -> list[tuple[str, str, int]]:
    mods = modules()
    known = set(mods)
    return [(m, t, line) for m, p in mods.items() for t, line in imports(m, p, known)]


def test_every_module_has_a_layer():
    for m in modules():
        unit(m)


def test_no_upward_or_sideways_import():
    bad = []
    for src, dst, line in edges():
        su, du = unit(src), unit(dst)
        if (src, dst) == FACADE:
            continue
        if su == du:
            if su == "nodeledger.cli" and src not in CLI_SHARED and dst not in CLI_SHARED:
                bad.append(f"{src}:{line} -> {dst} (CLI command modules never import each other)")
            continue
        rs, rd = UNITS[su], UNITS[du]
        if rd > rs:
            bad.append(f"{src}:{line} -> {dst} (upward: layer {rs} imports layer {rd})")
        elif rd == rs:
            bad.append(f"{src}:{line} -> {dst} (sideways: {su} and {du} are siblings)")
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for src, dst, _ in edges():
        if src != dst:
            graph.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_parsers_are_pure():
    """machine/parsers reads text it is given: no Runner, no subprocess, no open() of a path."""
    for name, path in modules().items():
        if not name.startswith("nodeledger.machine.parsers"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert mod not in ("subprocess", "os"), f"{name}:{node.lineno} imports {mod}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", f"{name}:{node.lineno} opens a file"


@pytest.mark.parametrize("vendor_module", ["pynvml"])
def test_one_choke_point_per_vendor_library(vendor_module):
    users = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import) and any(a.name == vendor_module for a in node.names):
                users.append(name)
            if isinstance(node, ast.ImportFrom) and node.module == vendor_module:
                users.append(name)
    assert len(set(users)) == 1, f"{vendor_module} imported by {sorted(set(users))}"


# -- the CLI is thin: it imports use cases and renderers, and the words its options take ---------

# the consumers' packages hold the commands' use cases and their renderers (report.documents,
# report.sections); go-live and fleet are consumers of those
CLI_MAY_USE_PACKAGES = ("nodeledger.report", "nodeledger.doctor", "nodeledger.watch",
                        "nodeledger.bench", "nodeledger.triage", "nodeledger.golive",
                        "nodeledger.fleet")  # fmt: skip
# below the consumers, only a use case module, or the vocabulary an option or a help text names
CLI_MAY_USE_BELOW = {
    "nodeledger.errors": "the errors mapped to exit codes",
    "nodeledger.units": "the byte formatter",
    "nodeledger.files": "reading a user's file (bounded)",
    "nodeledger.atomic": "writing an output file whole or not at all",
    "nodeledger.verdict.assess": "the fit use case",
    "nodeledger.placement.usecase": "the place use case",
    "nodeledger.placement.reserve": "the run / slurm use cases (book, wait, release)",
    "nodeledger.placement.emit": "the Slurm hooks' files written (the emitter's writer)",
    "nodeledger.ledger.jobs": "the job options' names (fit's options, the engines)",
    "nodeledger.machine.vendors": "the vendors' names, samplers and labels in help and tables",
    "nodeledger.machine.parsers.common": "--cards 0-3,5 read as every command reads it",
    "nodeledger.machine.parsers.numa": "a card list printed as 0-3,5",
    "nodeledger.logs.units": "a size printed as the logs print it",
}


def cli_import_problems(name: str, imported: str) -> str | None:
    """Why ``imported`` may not be imported by the CLI module ``name`` (None: it may)."""
    if imported.startswith("nodeledger.cli") or imported == "nodeledger":
        return None
    if any(imported == p or imported.startswith(p + ".") for p in CLI_MAY_USE_PACKAGES):
        return None
    if imported in CLI_MAY_USE_BELOW:
        return None
    return f"{name} imports {imported}: the CLI calls a use case (add one in the consumer's layer)"


def test_the_cli_imports_only_use_cases_renderers_and_option_words():
    mods = modules()
    known = set(mods)
    bad = [f"{p} (line {line})" for m, path in mods.items() if m.startswith("nodeledger.cli")
           for t, line in imports(m, path, known) if (p := cli_import_problems(m, t))]  # fmt: skip
    assert not bad, "\n".join(bad)


def test_the_thin_cli_check_catches_an_orchestrating_import():
    assert cli_import_problems("nodeledger.cli.fit", "nodeledger.speed.serving") is not None
    assert cli_import_problems("nodeledger.cli.fit", "nodeledger.machine.probe.runner") is not None
    assert cli_import_problems("nodeledger.cli.fit", "nodeledger.verdict.assess") is None
    assert cli_import_problems("nodeledger.cli.oom", "nodeledger.triage.usecase") is None
