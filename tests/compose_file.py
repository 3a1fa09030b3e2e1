"""docker-compose.yml as the tests read it: a service's environment with `${VAR:-default}` resolved to its default
(what `docker compose up` uses when the variable is not set)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

COMPOSE_FILE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def with_defaults(text: str) -> str:
    return _INTERPOLATION.sub(lambda match: match.group("default") or "", text)


def compose_environment(service: str) -> dict[str, str]:
    environment = load_compose()["services"][service].get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {name: with_defaults(str(value)) for name, value in environment.items()}
