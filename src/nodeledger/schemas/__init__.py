"""The JSON Schemas of the commands' ``--json`` outputs, generated from their types and shipped
(``fit.schema.json``: ``verdict.assess.FitJSON``).  ``tests/test_schemas.py`` regenerates each
and fails when the shipped file differs; rewrite it with

    .venv/bin/python -c "import json; from nodeledger.verdict.assess import fit_json_schema; \
        open('src/nodeledger/schemas/fit.schema.json', 'w').write(json.dumps(fit_json_schema(), indent=2, sort_keys=True) + '\\n')"
"""
