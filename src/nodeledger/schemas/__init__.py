"""The JSON Schemas of the commands' ``--json`` outputs (``fit.schema.json``, ``report``,
``compare``, ``doctor``, ``doctor-preflight``, ``place``, ``model``, ``model-list``, ``machine``,
``machine-list``, ``oom``, ``watch``, ``golive``, ``bench``, ``collective``, ``fleet``,
``run-list``, ``run-release``) and of one input, ``catalogue.schema.json`` (a workload catalogue
or plan file, for editors), each generated from its types and shipped.  ``tests/test_schemas.py``
names the function behind every file (``GENERATORS``), regenerates each and fails when the
shipped file differs; after a deliberate change to a type, rewrite them all with
``python tests/test_schemas.py --write``."""

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
