"""Runtime settings over HTTP (admin keys only): the values in force in this API process, and changes, each
recorded on the control topic for the workers and every API process to apply
(``compassmem/library/runtime_settings.py``).

No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
"""

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from compassmem.core.contracts.records import FieldError, ValidationErrorResponse
from compassmem.query_api.auth import AdminRoute
from compassmem.query_api.dependencies import ADMIN_ERRORS, INVALID, UNAVAILABLE, Services
from compassmem.library.runtime_settings import (
    SPECS,
    SettingInForce,
    SettingRecorded,
    SettingValueError,
    UnknownSettingError,
)

router = APIRouter(tags=["operations"], route_class=AdminRoute)


class SettingsInForce(BaseModel):
    settings: list[SettingInForce]


class SettingValueBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Text too ("0.5", "false"), as `compassmem config set` takes it: the key's rule decides.
    value: bool | int | float | Annotated[str, StringConstraints(max_length=100)] = Field(
        description="The new value; GET /v1/config names each key's rule.")


SettingKey = Annotated[str, Path(max_length=100, description=f"One of: {', '.join(SPECS)}.")]


@router.get("/v1/config", response_model=SettingsInForce, summary="Runtime settings in force (admin)",
            description="Every runtime setting with its value in this API process and where it came from: the "
                        "default, the process's environment (COMPASSMEM_*, .env, TOML), or a runtime change on the "
                        "control topic (when it was asked for, its control-topic offset, and once a worker "
                        "answered, the offset of its marker in each turns partition). Workers apply write-path "
                        "keys at those markers.",
            responses={**ADMIN_ERRORS})
def show_config(services: Services) -> SettingsInForce:
    return SettingsInForce(settings=services.memory.runtime.in_force())


@router.put("/v1/config/{key}", response_model=SettingRecorded, status_code=202,
            summary="Change a runtime setting (admin)",
            description="Checks the key and value, then records the change on the control topic and answers once "
                        "the broker acknowledged it. Every worker applies a write-path key at the change's marker "
                        "in each turns partition (turns before it keep the old value, so a replay rebuilds the same "
                        "memory); every API process applies a read-path key as it reads the control topic.",
            responses={**ADMIN_ERRORS, **UNAVAILABLE, **INVALID})
def set_config(key: SettingKey, body: SettingValueBody, services: Services) -> SettingRecorded | JSONResponse:
    try:
        return services.memory.set_setting(key, body.value)
    except UnknownSettingError as error:
        return _invalid("key", str(error))
    except SettingValueError as error:
        return _invalid("value", str(error))


def _invalid(field: str, message: str) -> JSONResponse:
    body = ValidationErrorResponse(detail=[FieldError(field=field, message=message)])
    return JSONResponse(status_code=422, content=body.model_dump())
