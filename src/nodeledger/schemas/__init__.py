"""The JSON Schemas of the commands' ``--json`` outputs, generated from their types and shipped:
``fit.schema.json`` (``verdict.assess.FitJSON``), ``doctor.schema.json`` and
``doctor-preflight.schema.json`` (``doctor.usecase.DoctorChecksJSON`` / ``PreflightJSON``),
``report.schema.json`` (``report.usecase.CapacityJSON``), ``place.schema.json``
(``placement.usecase.PlaceJSON``), ``model.schema.json`` (``report.model_summary.ModelJSON``),
``machine.schema.json`` (``machine.profile.MachineProfile``, serialised, with its card figures),
``compare.schema.json`` (``report.compare.CompareJSON``), ``oom.schema.json``
(``triage.report.OomJSON``), ``watch.schema.json`` (``watch.session.WatchJSON``), ``golive.schema.json``
(``golive.checklist.GoLiveJSON``), ``bench.schema.json`` (``bench.usecase.BenchJSON``), ``collective.schema.json``
(``report.machines.CollectiveJSON``), ``fleet.schema.json`` (``fleet.table.FleetJSON``); and one
for an input, ``catalogue.schema.json``
(``verdict.catalogue.CatalogueFile``: a workload catalogue or plan file, for editors).
``tests/test_schemas.py`` regenerates each (its ``GENERATORS`` table names the function behind
every file) and fails when the shipped file differs; after a deliberate change to a type,
rewrite them all with ``python tests/test_schemas.py --write``.
"""

from typing import Any, Literal

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def json_schema(tp: Any, title: str,
                mode: Literal["validation", "serialization"] = "validation") -> dict[str, Any]:  # fmt: skip
    """The JSON Schema pydantic generates for ``tp`` (a TypedDict or a model), with its draft and
    ``title``: the one way every command's shipped schema is made.  pydantic is imported here,
    only when a schema is asked for."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(tp).json_schema(mode=mode)
    schema["$schema"] = DRAFT
    schema["title"] = title
    return schema
