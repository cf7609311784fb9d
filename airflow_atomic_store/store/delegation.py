"""Verbs declared once and answered by an object the caller *has*.

The store answers its row and queue verbs through the objects that hold them
(``RowVerbs``, ``QueueViews``), and the hook answers the store's verbs through
its store: each is the declaring class's own function, wrapped, so
``inspect.signature`` and ``help()`` show exactly what it declares.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Target = TypeVar("_Target")


def delegated(
    method: Callable[Concatenate[_Target, _P], _R],
    target: Callable[[Any], _Target],
    owner: str,
) -> Callable[Concatenate[Any, _P], _R]:
    """``method`` as a method of ``owner`` (a class name), called on ``target(self)``."""

    @functools.wraps(method)
    def verb(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(target(self), *args, **kwargs)

    verb.__qualname__ = f"{owner}.{method.__name__}"
    return verb
