"""Validation of untrusted data into typed values: pydantic, imported only here and only when a
value is validated, never when a bundled table (a preset, the default catalogue) is read.

The types stay stdlib dataclasses (cheap to import and to build); a field's constraints are
``Annotated[..., Check(ge=0, strict=True)]`` markers that pydantic reads when it validates, and
pydantic also generates their JSON Schema (``nodeledger.schemas``)."""

from __future__ import annotations

from functools import cache
from typing import Any


class Check:
    """Constraints and a conversion in an ``Annotated`` field, applied by pydantic when it
    validates (``validate``); a stdlib dataclass holding them is built without pydantic."""

    __slots__ = ("before", "constraints")

    def __init__(self, before: Any = None, **constraints: Any) -> None:
        self.before = before
        self.constraints = constraints  # core-schema keys: gt, ge, le, strict, min_length

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        schema.update(self.constraints)
        if self.before is None:
            return schema
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(self.before, schema)


@cache
def _adapter(cls: type) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def validate(cls: type, data: Any) -> Any:
    """``cls`` (a dataclass, a type) from untrusted data — a user's file, a vendor tool's figures —
    validated by pydantic: types, bounds, unknown keys refused (``__pydantic_config__``), then the
    dataclass's own cross-field checks (``__post_init__``).
    Raises ``pydantic.ValidationError`` (a ``ValueError``)."""
    return _adapter(cls).validate_python(data)


def to_json(obj: Any) -> Any:
    """``obj`` as JSON-ready data (enums as their values), as a file holds it."""
    return _adapter(type(obj)).dump_python(obj, mode="json")


# pydantic words a dataclass's unknown or missing key as a function's argument; a profile says
# what it says of a model's field (the words of a BaseModel, which the profile was)
_WORDS = {
    "unexpected_keyword_argument": "Extra inputs are not permitted",
    "missing_keyword_only_argument": "Field required",
}


def errors(exc: ValueError) -> list[dict[str, Any]]:
    """A validation error's entries (``loc``, ``msg``), a cross-field check's as one entry."""
    found = getattr(exc, "errors", None)
    if not callable(found):
        return [{"loc": (), "msg": str(exc), "type": "value_error"}]
    return [{**e, "msg": _WORDS.get(e["type"], e["msg"])} for e in found()]


def first_error(exc: ValueError) -> str:
    """The first message of a validation error (pydantic's) or of a cross-field check."""
    return errors(exc)[0]["msg"]
