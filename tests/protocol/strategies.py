"""Hypothesis strategies that build any protocol message from its annotations."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from hypothesis import strategies as st

from pushjobs.protocol import messages as m

# orjson refuses lone surrogates; everything else in Unicode must survive a round trip.
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
ident = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
nonneg = st.integers(min_value=0, max_value=2**63 - 1)
json_scalar = (
    st.none() | st.booleans() | int64 | st.floats(allow_nan=False, allow_infinity=False) | text
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=10,
)


def for_type(hint: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return json_value
    if hint is str:
        return text
    if hint is bool:
        return st.booleans()
    if hint is int:
        return int64
    if hint is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([st.none() if a is type(None) else for_type(a) for a in args])
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin is dict:
        return st.dictionaries(text, for_type(args[1]), max_size=4)
    if origin is tuple:
        return st.lists(for_type(args[0]), max_size=4).map(tuple)
    if dataclasses.is_dataclass(hint):
        return for_class(hint)
    raise TypeError(hint)


def for_class(cls: Any) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls, vars(m))
    fields = {f.name: for_type(hints[f.name]) for f in dataclasses.fields(cls)}
    if issubclass(cls, m.Message):
        fields.update(sender=ident, incarnation=ident, sequence=nonneg, timestamp=nonneg)
    return st.builds(cls, **fields)


any_message = st.one_of([for_class(cls) for cls in m.MESSAGE_TYPES])
