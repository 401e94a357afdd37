"""Typed, validating access to one config.json dict.  Errors name the field and the file."""

from __future__ import annotations

from typing import Any

from nodeledger.errors import ConfigError

_MISSING = object()
MAX_INT = 2**40  # any size field beyond this is nonsense (a vocab or hidden size of 10^12)
MAX_LAYERS = 100_000


class ConfigReader:
    """One config.json dict (or a nested table of it), read field by field with type and range
    checks; every error names the field and the file; defaults applied are recorded."""

    def __init__(
        self,
        data: dict[str, Any],
        where: str,
        prefix: str = "",
        defaults: dict[str, Any] | None = None,
    ) -> None:
        self.data = data
        self.where = where
        self.prefix = prefix
        # field -> default value applied because the config omits it (reported, never silent)
        self.defaults: dict[str, Any] = {} if defaults is None else defaults

    def sub(self, key: str) -> ConfigReader | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, f"must be an object, got {type(value).__name__}")
        return ConfigReader(value, self.where, f"{self.prefix}{key}.", self.defaults)

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: field {self.prefix}{key} {problem}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def _first(self, keys: tuple[str, ...]) -> tuple[str, Any]:
        for k in keys:
            if self.data.get(k) is not None:
                return k, self.data[k]
        return keys[0], _MISSING

    def int(
        self, *keys: str, default: Any = _MISSING, min_value: int = 1, max_value: int = MAX_INT
    ) -> int:
        """An integer field (first of ``keys`` present), ``min_value`` <= value <= ``max_value``."""
        key, value = self._first(keys)
        if value is _MISSING:
            if default is _MISSING:
                raise self.error(key, "is missing")
            if default is not None:
                self.defaults[self.prefix + key] = default
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise self.error(key, f"must be an integer, got {value!r}")
        if value < min_value:
            raise self.error(key, f"must be >= {min_value}, got {value}")
        if value > max_value:
            raise self.error(key, f"must be <= {max_value:,}, got {value:,}")
        return value

    def layers(self, *keys: str, default: Any = _MISSING) -> int:
        """A layer count: at most MAX_LAYERS (no real model comes near it)."""
        return self.int(*keys, default=default, max_value=MAX_LAYERS)

    def opt_int(self, *keys: str, min_value: int = 1) -> int | None:
        return self.int(*keys, default=None, min_value=min_value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            self.defaults[self.prefix + key] = default
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def str(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(key, f"must be a list of integers, got {value!r}")
        return value

    def str_list(self, key: str, allowed: set[str] | None = None) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"must be a list of strings, got {value!r}")
        if allowed is not None:
            bad = sorted(set(value) - allowed)
            if bad:
                raise self.error(key, f"has entries {bad}; allowed: {sorted(allowed)}")
        return value

    def divides(self, big_key: str, big: int, small_key: str, small: int) -> int:
        if big % small:
            raise ConfigError(
                f"{self.where}: {self.prefix}{big_key}={big} is not divisible by "
                f"{self.prefix}{small_key}={small}"
            )
        return big // small
