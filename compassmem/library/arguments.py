"""The arguments of ``Memory``'s verbs, checked at the door.

A verb declares the rules of its arguments as annotated types (``Id``, ``Tenant`` here, the bounds of
``core/contracts/limits.py``) and ``checked`` holds each call to them: a bad argument is a ``BadRequest`` naming it,
the documented error the HTTP API's 422 also becomes, never pydantic's ValidationError. Arguments the verb reads
itself (a path or stream) are marked ``SkipValidation``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Annotated, ParamSpec, TypeVar

from pydantic import (
    AfterValidator,
    ConfigDict,
    StringConstraints,
    ValidationError,
    validate_call,
)
from pydantic_core import ErrorDetails

from compassmem.core.errors import refused
from compassmem.core.models import TENANT_PATTERN, check_id

P = ParamSpec("P")
R = TypeVar("R")

Id = Annotated[str, AfterValidator(check_id)]
Tenant = Annotated[str, StringConstraints(pattern=TENANT_PATTERN)]
# After a list type's own bounds: each item an id (the error names the list).
EachId = AfterValidator(lambda ids: [check_id(value) for value in ids])


def checked(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` with its arguments validated against their annotations: BadRequest naming each bad one."""
    validated = validate_call(config=ConfigDict(arbitrary_types_allowed=True))(function)
    names = list(inspect.signature(function).parameters)

    @wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return validated(*args, **kwargs)
        except ValidationError as error:
            if error.title != function.__qualname__:  # a model the verb built itself: not the caller's arguments
                raise
            # An argument given by position is located by its index: name it.
            raise refused(_by_name(error.errors(), names)) from None

    return call


def _by_name(details: list[ErrorDetails], names: list[str]) -> list[ErrorDetails]:
    return [ErrorDetails(**{**item, "loc": (names[item["loc"][0]], *item["loc"][1:])})
            if item["loc"] and isinstance(item["loc"][0], int) else item for item in details]
