"""The use cases of the machine and model commands (``machine list / probe / show``,
``parse``, ``collective``, ``model list / show``): each resolves what it is given, asks the layer
that knows and returns the answer the CLI renders (``--json`` prints it as it is).  They live
here, above ``speed``, because ``machine show`` and ``collective`` carry the card figures and
the collective times.  Never prints, never exits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict

from nodeledger.errors import NodeledgerError
from nodeledger.machine.profile import to_json as profile_json  # machine probe --json

LIST_SCHEMA_VERSION = 1  # machine list --json and model list --json


class PresetJSON(TypedDict):
    name: str
    default: bool  # the preset a command without --machine falls back to
    accelerators: int
    product: str
    card_memory_total_bytes: int | None
    host_ram_bytes: int | None
    description: str


class MachineListJSON(TypedDict):
    """``machine list --json``: the bundled presets."""

    schema_version: int
    machines: list[PresetJSON]


class ModelEntryJSON(TypedDict):
    id: str
    aliases: list[str]
    source: str


class ModelListJSON(TypedDict):
    """``model list --json``: the bundled model catalogue and the supported families."""

    schema_version: int
    catalogue: list[ModelEntryJSON]
    families: list[str]


def list_json_schemas() -> dict[str, dict]:
    from nodeledger.schemas import json_schema

    return {"machine-list": json_schema(MachineListJSON, "nodeledger machine list --json"),
            "model-list": json_schema(ModelListJSON, "nodeledger model list --json")}  # fmt: skip


def machine_list_json() -> MachineListJSON:
    return {"schema_version": LIST_SCHEMA_VERSION, "machines": list_machines()}


def list_machines() -> list[PresetJSON]:
    """One row per bundled preset: cards, memory totals (bytes), the default marked."""
    from nodeledger.machine import DEFAULT_PRESET, list_presets, resolve_machine

    rows = []
    for name in list_presets():
        p = resolve_machine(name)
        rows.append({
            "name": name,
            "default": name == DEFAULT_PRESET,
            "accelerators": len(p.accelerators),
            "product": ", ".join(sorted({a.product for a in p.accelerators})),
            "card_memory_total_bytes": p.total_accelerator_memory_bytes(),
            "host_ram_bytes": p.host.ram_bytes,
            "description": p.description,
        })  # fmt: skip
    return rows


def probe_profile(timeout: float = 5.0, from_bundle: str | None = None, save: str | None = None):
    """This machine's profile (or a bundle's), written to ``save`` when given; the path is
    checked before the probe, so nothing probed is lost to a bad name."""
    from nodeledger.machine import save_profile
    from nodeledger.machine.probe import Runner, probe_machine

    if not timeout > 0:
        raise NodeledgerError(f"--timeout must be > 0, got {timeout}")
    if save is not None:
        from nodeledger.machine.io import check_save_path

        check_save_path(save)
    if from_bundle:
        from nodeledger.machine.probe.bundle import load_bundle

        profile = probe_machine(load_bundle(from_bundle))
    else:
        profile = probe_machine(Runner(timeout=timeout, live=True))
    if save is not None:
        save_profile(profile, save)
    return profile


@dataclass
class MachineView:
    """A machine profile with its cards' figures (value, unit, source) and device identity."""

    profile: Any  # MachineProfile
    identity: dict[str, Any]
    figures: dict[int, dict[str, dict[str, Any]]]  # card index -> figure -> value/unit/source

    def to_json(self) -> dict[str, Any]:
        return {**profile_json(self.profile), "device_identity": self.identity,
                "card_figures": {str(i): d for i, d in self.figures.items()}}  # fmt: skip


def show_machine(ref: str | None, save: str | None = None) -> MachineView:
    from nodeledger.machine import resolve_machine, save_profile
    from nodeledger.machine.identity import device_identity, read_dev_nodes
    from nodeledger.speed.figures import card_figures

    if save is not None:
        from nodeledger.machine.io import check_save_path

        check_save_path(save)
    profile = resolve_machine(ref)
    if save is not None:
        save_profile(profile, save)
    # /dev nodes are this host's: read only for the live probe (a preset's cards are not here)
    ident = device_identity(profile, dev_nodes=read_dev_nodes() if ref == "probe" else None)
    figures = {i: {k: {"value": f.value, "unit": f.unit, "source": f.source} for k, f in d.items()}
               for i, d in card_figures(profile).items()}  # fmt: skip
    return MachineView(profile, ident, figures)


def parse_output(kind: str, text: str) -> dict[str, Any]:
    """One recorded tool output, parsed field by field (machine.parsers.parse_kind)."""
    from nodeledger.machine.parsers import parse_kind

    return parse_kind(kind, text)


def estimate_collective(ref: str | None, op: str, size_bytes: int, pick_cards,
                        machines: int) -> dict[str, Any]:  # fmt: skip
    """One collective's time on the machine ``ref``; ``pick_cards(indices)`` chooses the cards
    among the profile's (the CLI's --cards)."""
    from nodeledger.machine import resolve_machine
    from nodeledger.speed.collective import estimate

    profile = resolve_machine(ref)
    have = [a.index for a in profile.accelerators]
    if not have:
        raise NodeledgerError(f"{profile.name}: no accelerator in the profile: nothing to time")
    d = estimate(profile, op, size_bytes, pick_cards(have), machines)
    return {"schema_version": COLLECTIVE_SCHEMA_VERSION, **d, "machine": profile.name}


COLLECTIVE_SCHEMA_VERSION = 1


class LimitJSON(TypedDict):
    busbw_gbps: float | None  # large-message bus bandwidth this resource allows
    source: str


class FigureSourceJSON(TypedDict):
    value: float | None
    source: str


class NicJSON(TypedDict):
    gbps: float | None
    source: str


class CollectiveJSON(TypedDict):
    """``nodeledger collective --json``: one collective's time (nccl-tests' algbw / busbw
    definitions), each figure with its source; unknown figures are null with the reason."""

    schema_version: int
    op: str
    size_bytes: int
    cards: list[int]
    machines: int
    ranks: int
    bus_factor: float
    algbw_gbps: float | None
    busbw_gbps: float | None
    seconds: float | None
    binding: str | None
    reason: str
    machine: str
    nic: NotRequired[NicJSON]
    limits: NotRequired[dict[str, LimitJSON]]
    busbw_ceiling_gbps: NotRequired[FigureSourceJSON]  # a bound where the network is unknown
    busbw_large_message_gbps: NotRequired[float]
    ring_seconds: NotRequired[float]
    tree_seconds: NotRequired[float]
    algorithm: NotRequired[Literal["ring", "tree"]]
    latency_per_step_s: NotRequired[float | None]
    latency_source: NotRequired[str]
    seconds_is_lower_bound: NotRequired[bool]
    link_kind: NotRequired[str]
    source: NotRequired[str]


def collective_json_schema() -> dict[str, Any]:
    from nodeledger.schemas import json_schema

    return json_schema(CollectiveJSON, "nodeledger collective --json")


def model_catalogue() -> ModelListJSON:
    """The bundled model catalogue (id, aliases, source) and the supported families."""
    from nodeledger.model import catalogue, supported_families

    entries = [{"id": e["id"], "aliases": e.get("aliases", []), "source": e["source"]}
               for e in catalogue()]  # fmt: skip
    return {"schema_version": LIST_SCHEMA_VERSION, "catalogue": entries,
            "families": supported_families()}  # fmt: skip


def describe_model(ref: str, dtype: str | None = None, online: bool = False) -> dict[str, Any]:
    """``model show``: parameters, weight bytes per dtype, KV cache bytes per token."""
    from nodeledger.model import load_model
    from nodeledger.report.model_summary import model_summary

    spec, src = load_model(ref, online=online)
    return model_summary(spec, src, dtype=dtype)


def machine_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``machine show --json``: the machine profile as
    ``machine.profile.MachineProfile`` serialises it, with the two views ``MachineView`` adds,
    ``device_identity`` and ``card_figures`` (card index -> figure -> value, unit, source).  No
    ``schema_version``: without the two views the document is a profile file, which refuses
    unknown keys."""
    from nodeledger.machine.profile import MachineProfile
    from nodeledger.schemas import json_schema

    schema = json_schema(MachineProfile, "nodeledger machine show --json (a machine profile and "
                         "its card figures)", mode="serialization")  # fmt: skip
    schema["properties"]["device_identity"] = {
        "type": "object", "title": "Device Identity",
        "description": "how the runtime's device numbers map to the vendor tool's cards"}  # fmt: skip
    figure = {"type": "object", "properties": {"value": {}, "unit": {"type": ["string", "null"]},
              "source": {"type": ["string", "null"]}}}  # fmt: skip
    schema["properties"]["card_figures"] = {
        "type": "object", "title": "Card Figures",
        "additionalProperties": {"type": "object", "additionalProperties": figure}}  # fmt: skip
    return schema
