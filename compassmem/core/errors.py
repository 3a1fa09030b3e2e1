"""The errors of the public surface: the same classes whether memory is used in-process (``Memory``) or over
HTTP (``Client``, ``AsyncClient``), so a caller handles "no such conversation" once for both."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from compassmem.core.contracts.records import FieldError


class CompassmemError(Exception):
    """Anything compassmem refuses or fails to do; ``status`` is the HTTP status when a server answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class BadRequest(CompassmemError, ValueError):
    """A field breaks a rule (HTTP 400/413/422). ``errors`` names each field and the rule it broke, as the server
    wrote them, or as ``Memory`` checked them (``refused``). Also a ValueError."""

    def __init__(self, message: str, status: int | None = None, errors: list[FieldError] | None = None) -> None:
        super().__init__(message, status)
        self.errors = errors or []


class Unauthorized(CompassmemError):
    """The tenant needs an API key and none was sent (HTTP 401)."""


class Forbidden(CompassmemError):
    """The API key is not valid for the tenant (HTTP 403)."""


class NotFound(CompassmemError, LookupError):
    """No memory for that tenant and conversation, or no such event (HTTP 404)."""


class Unavailable(CompassmemError):
    """Try again later: a store or topic did not answer, or a query ran past its deadline (HTTP 503)."""


class ServerError(CompassmemError):
    """The server failed (another 5xx); its log has the traceback."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a write that cleans up after itself (an import): still a KeyboardInterrupt, so it ends the
    program as one would, with ``message`` saying what the stores hold now."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def field_name(location: Sequence[str | int]) -> str:
    """A field as the HTTP API's errors name it: ``[0].timestamp``, ``conversation_id``."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location).lstrip(".")


def rule_of(error: ErrorDetails) -> str:
    """The rule a field broke, in the words every surface uses (pydantic's own repeat the type of check)."""
    if error["type"] == "missing":
        return "is required"
    if error["type"] == "extra_forbidden":
        return "is not a known field"
    return error["msg"].removeprefix("Value error, ")


def refused(details: Iterable[ErrorDetails], at: Sequence[str | int] = ()) -> BadRequest:
    """The BadRequest of a validation error's details, each field named under ``at`` (a turn's place in a list);
    a rule of the whole input (one scope of a question) is named 'arguments'."""
    errors = [FieldError(field=field_name([*at, *item["loc"]]) or "arguments", message=rule_of(item))
              for item in details]
    return BadRequest("; ".join(f"{e.field}: {e.message}" for e in errors), errors=errors)


def field_rules(error: ValidationError) -> str:
    """Each broken rule as 'field: rule' (pydantic's own text also repeats the input and a documentation link)."""
    return "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'arguments'}: "
                     f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors())
