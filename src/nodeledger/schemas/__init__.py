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
``tests/test_schemas.py`` regenerates each and fails when the shipped file differs; rewrite them
with

    .venv/bin/python -c "import json; from nodeledger.verdict.assess import fit_json_schema; \
        open('src/nodeledger/schemas/fit.schema.json', 'w').write(json.dumps(fit_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.doctor.usecase import doctor_json_schemas; \
        [open(f'src/nodeledger/schemas/{n}.schema.json', 'w').write(json.dumps(s, indent=2, sort_keys=True) + '\\n') \
         for n, s in doctor_json_schemas().items()]"
    .venv/bin/python -c "import json; from nodeledger.report.usecase import capacity_json_schema; \
        open('src/nodeledger/schemas/report.schema.json', 'w').write(json.dumps(capacity_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.placement.usecase import place_json_schema; \
        open('src/nodeledger/schemas/place.schema.json', 'w').write(json.dumps(place_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.report.model_summary import model_json_schema as m; \
        from nodeledger.report.machines import machine_json_schema as p; \
        [open(f'src/nodeledger/schemas/{n}.schema.json', 'w').write(json.dumps(f(), indent=2, sort_keys=True) + '\\n') \
         for n, f in (('model', m), ('machine', p))]"
    .venv/bin/python -c "import json; from nodeledger.report.compare import compare_json_schema; \
        open('src/nodeledger/schemas/compare.schema.json', 'w').write(json.dumps(compare_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.triage.report import oom_json_schema; \
        open('src/nodeledger/schemas/oom.schema.json', 'w').write(json.dumps(oom_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.watch.session import watch_json_schema; \
        open('src/nodeledger/schemas/watch.schema.json', 'w').write(json.dumps(watch_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.golive.checklist import golive_json_schema; \
        open('src/nodeledger/schemas/golive.schema.json', 'w').write(json.dumps(golive_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.bench.usecase import bench_json_schema; \
        open('src/nodeledger/schemas/bench.schema.json', 'w').write(json.dumps(bench_json_schema(), indent=2, sort_keys=True) + '\\n')"
    .venv/bin/python -c "import json; from nodeledger.report.machines import collective_json_schema as c; \
        from nodeledger.fleet.table import fleet_json_schema as f; \
        [open(f'src/nodeledger/schemas/{n}.schema.json', 'w').write(json.dumps(g(), indent=2, sort_keys=True) + '\\n') \
         for n, g in (('collective', c), ('fleet', f))]"
    .venv/bin/python -c "import json; from nodeledger.verdict.catalogue import catalogue_json_schema; \
        open('src/nodeledger/schemas/catalogue.schema.json', 'w').write(json.dumps(catalogue_json_schema(), indent=2, sort_keys=True) + '\\n')"
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
