"""The counter contract's machinery: how a counter field is declared, turned into JSON and read back.

A counter is a field of a frozen dataclass declared with :func:`wire`, whose metadata holds its
published name (the ledger's and the dashboards' names, which never change; the attribute may say
what it means) and, where Prometheus mirrors it, its metric. JSON exists only at the boundary:
:func:`to_json` when a heartbeat, a control answer or a final line leaves a process, :func:`decode`
(the one reader) when one arrives. ``decode`` refuses a message without the current
``schema`` version, an unknown key, a missing one or a value of the wrong type, with the path of
the field in the message, so a counter renamed on one side fails where it is read, at once.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Any, TypeVar, Union

SCHEMA_VERSION = 1
SCHEMA_KEY = "schema"
# What the bus adds around a heartbeat or an answer (core/bus.py): not counters.
ENVELOPE_KEYS: frozenset[str] = frozenset({"service", "ts", "performer"})

T = TypeVar("T")


class CounterSchemaError(ValueError):
    """A counters message this code cannot read (another schema version, a key it does not know)."""


@dataclasses.dataclass(frozen=True)
class Metric:
    """Where a field's value goes in Prometheus: a family of core/metrics.py ``FAMILIES``, with
    fixed label values. ``key_label``: the field is a ``dict`` whose keys are that label's values
    (rejects by reason); ``derive``: the value is computed from the field (a maximum over consumers)."""

    family: str
    labels: tuple[tuple[str, str], ...] = ()
    key_label: str = ""
    derive: Callable[[Any], float] | None = None
    initial: float | None = None  # a gauge's value before the first sync


def wire(default: Any = dataclasses.MISSING, *, name: str = "", metric: Metric | tuple[Metric, ...] = (),
         omit_none: bool = False, per_performer: bool = False) -> Any:
    """A counter field. ``name``: the published key when it differs from the attribute;
    ``omit_none``: absent from the JSON while None (a mode's part: ``durable``, ``tcp``);
    ``per_performer``: a ``dict`` by avatar index whose values carry per-performer metrics."""
    metrics = (metric,) if isinstance(metric, Metric) else metric
    meta = {"wire": name, "metrics": metrics, "omit_none": omit_none, "per_performer": per_performer}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    if isinstance(default, dict | list):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def published_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("wire") or f.name)


def field_metrics(f: dataclasses.Field[Any]) -> tuple[Metric, ...]:
    return tuple(f.metadata.get("metrics", ()))


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def fields_of(cls: type) -> Iterator[tuple[dataclasses.Field[Any], Any]]:
    """(field, its resolved type) of a counters dataclass."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        yield f, hints[f.name]


# --- to JSON -------------------------------------------------------------------------------------

def to_json(counts: Any) -> dict[str, Any]:
    """A counters record as the JSON object it is published as, with the schema version."""
    return {SCHEMA_KEY: SCHEMA_VERSION, **_encode_record(counts)}


def as_published(value: Any) -> Any:
    """A part of a record (a nested record, a list or map of them) as it appears inside the JSON."""
    return _encode(value)


def _encode_record(counts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(counts):
        value = getattr(counts, f.name)
        if value is None and f.metadata.get("omit_none"):
            continue
        out[published_name(f)] = _encode(value)
    return out


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encode_record(value)
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


# --- from JSON -----------------------------------------------------------------------------------

def decode(cls: type[T], data: Any) -> T:
    """The one reader of a published counters object: its ``schema`` must be this code's
    version; the bus's envelope keys are left aside; everything else must be a field of ``cls``."""
    if not isinstance(data, Mapping):
        raise CounterSchemaError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    version = data.get(SCHEMA_KEY)
    if version != SCHEMA_VERSION:
        said = "no schema version" if version is None else f"schema version {version!r}"
        raise CounterSchemaError(f"{cls.__name__}: {said}; this mocapline reads version {SCHEMA_VERSION} "
                                 "(a service of another mocapline version, or a file recorded by one)")
    body = {k: v for k, v in data.items() if k != SCHEMA_KEY and k not in ENVELOPE_KEYS}
    return from_parts(cls, body)


def from_parts(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """A counters record from its published keys (no version: a part inside a message, or what a
    lower layer reports as a dict: the reliable link's, the fan-out's counts), checked as strictly."""
    where = where or cls.__name__
    if not isinstance(data, Mapping):
        raise CounterSchemaError(f"{where}: expected an object, got {type(data).__name__}")
    known: dict[str, tuple[dataclasses.Field[Any], Any]] = {published_name(f): (f, tp) for f, tp in fields_of(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise CounterSchemaError(f"{where}: unknown key(s) {unknown}")
    kwargs: dict[str, Any] = {}
    for key, (f, tp) in known.items():
        if key in data:
            kwargs[f.name] = _decode(tp, data[key], f"{where}.{key}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise CounterSchemaError(f"{where}: missing key {key!r}")
    return cls(**kwargs)


def _decode(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None:
            if type(None) in options:
                return None
            raise CounterSchemaError(f"{where}: null where {tp} is expected")
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _decode(option, value, where)
            except CounterSchemaError as exc:
                errors.append(str(exc))
        raise CounterSchemaError("; ".join(errors))
    if dataclasses.is_dataclass(tp):
        return from_parts(tp, value, where)  # type: ignore[arg-type]
    if origin is dict:
        _, value_type = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise CounterSchemaError(f"{where}: expected an object, got {type(value).__name__}")
        return {str(k): _decode(value_type, v, f"{where}.{k}") for k, v in value.items()}
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise CounterSchemaError(f"{where}: expected a list, got {type(value).__name__}")
        (item_type, *_rest) = typing.get_args(tp) or (Any,)
        return [_decode(item_type, v, f"{where}[]") for v in value]
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, bool):
        raise CounterSchemaError(f"{where}: expected int, got bool")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise CounterSchemaError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
    return value


def zero(cls: type[T], **values: Any) -> T:
    """A record with every count at zero (empty lists and maps, None where allowed, nested parts
    zero too) but for ``values``: a take before its first frame; what tests and benchmarks start from."""
    kwargs: dict[str, Any] = {}
    for f, tp in fields_of(cls):
        if f.name in values:
            kwargs[f.name] = values.pop(f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(tp)
    if values:
        raise TypeError(f"{cls.__name__} has no field(s) {sorted(values)}")
    return cls(**kwargs)


def _zero(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return None if type(None) in typing.get_args(tp) else _zero(typing.get_args(tp)[0])
    if dataclasses.is_dataclass(tp):
        return zero(typing.cast(type, tp))
    if origin is not None:
        return origin()
    return tp() if tp is not Any else None
