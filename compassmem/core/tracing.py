"""Optional OpenTelemetry traces, switched on by ``COMPASSMEM_OTEL_ENDPOINT`` (docs/traces.md).

Unset, nothing is set up: ``span`` and ``stage`` are a flag test and a stopwatch, and no OpenTelemetry SDK is
imported. Set, ``configure_tracing`` makes an SDK tracer provider of compassmem's own with a batching OTLP/HTTP
exporter (the ``otel`` extra), and the query engine, the worker's and the pipeline's batches and the query API's
requests open spans through the helpers here. Spans leave the machine, so what leaves is cut down at export to
``ALLOWED_ATTRIBUTES`` (ids, counts, sizes, the route), never a question's or a turn's text; a failed span records
the exception's type only (a message may quote its input).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

# The API alone (no-op until a provider is installed) is tiny and already required by fastapi and mcp, so it is a
# core dependency; the SDK and the exporter are the `otel` extra, imported only when traces are switched on.
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from compassmem.core.config import Settings
from compassmem.core.errors import CompassmemError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    _ExporterBase = SpanExporter
else:
    # The SDK is imported only once traces are on: until then the allow-list's exporter is a plain class, which does
    # all a span processor asks of an exporter (export, shutdown, force_flush).
    _ExporterBase = object

# Attribute values as OpenTelemetry takes them (None values are left out).
AttributeValue = str | bool | int | float | list[str] | list[int] | None
TRACES_PATH = "/v1/traces"
_SCOPE = "compassmem"
_tracer: trace.Tracer | None = None

# The only attributes a span takes out of the process, each named in docs/traces.md: ids, counts, sizes, the route.
# An allow-list, so that what a new attribute or instrumentation records (a URL's query, a request's body, an
# exception's message) stays here until it is vetted and named there.
ALLOWED_ATTRIBUTES = frozenset({
    *(f"{_SCOPE}.{name}" for name in (
        "tenant", "scope", "request_id", "question_chars", "budget_turns", "max_hops", "evidence_items", "turns",
        "subgoals", "candidate_turns", "candidate_events", "conversations", "sinks", "summed_over_turns",
        "partitions", "records", "dead_letters")),
    "http.request.method", "http.route", "url.path", "http.response.status_code", "error.type",
})


class TracingSetupError(CompassmemError):
    """COMPASSMEM_OTEL_ENDPOINT is set but traces cannot be sent (the ``otel`` extra is not installed)."""


class Stopwatch:
    """How long a ``stage`` block ran, read after the block: the same measure feeds the stage's span, its
    timing entry and its metric."""

    def __init__(self) -> None:
        self._started = time.perf_counter()
        self.seconds = 0.0

    def stop(self) -> None:
        self.seconds = time.perf_counter() - self._started

    @property
    def ms(self) -> float:
        return round(self.seconds * 1000, 3)


def enabled() -> bool:
    return _tracer is not None


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL (``http://collector:4318``); a URL that already names a
    path is taken as it is."""
    return endpoint.rstrip("/") + TRACES_PATH if urlsplit(endpoint).path in {"", "/"} else endpoint


def configure_tracing(settings: Settings, service: str) -> bool:
    """Send this process's spans to ``settings.otel_endpoint``, as service ``service`` (``OTEL_SERVICE_NAME``
    overrides it). False, and nothing set up, when the setting is unset."""
    if settings.otel_endpoint is None:
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as error:
        raise TracingSetupError(f"COMPASSMEM_OTEL_ENDPOINT is set, but the OpenTelemetry SDK or its OTLP exporter "
                                f"is not installed ({error.name}): pip install 'compassmem[otel]'") from error
    trace_to(OTLPSpanExporter(endpoint=traces_url(settings.otel_endpoint)),
             os.environ.get("OTEL_SERVICE_NAME") or service)
    return True


def trace_to(exporter: SpanExporter, service: str) -> TracerProvider:
    """Open this process's spans from now on, as service ``service``, and send them to ``exporter`` in batches, each
    cut down to what may leave (``AllowedOnly``); ``configure_tracing``, and tests with an in-memory exporter."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Its exit hook flushes the spans still batched when the process ends. Not made the global provider: libraries'
    # own instrumentation follows that one (FastAPI's server spans record the URL's query, the MCP SDK's an
    # exception's message), and the spans here are the ones docs/traces.md lists.
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(BatchSpanProcessor(AllowedOnly(exporter)))
    start_tracing(provider)
    return provider


class AllowedOnly(_ExporterBase):
    """An exporter that hands ``exporter`` each span as ``allowed_only`` cuts it down."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter.export([allowed_only(span) for span in spans])

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def allowed_only(span: ReadableSpan) -> ReadableSpan:
    """``span`` as it may leave: its name, kind, times, trace, parent, resource and status code, and those of its
    attributes in ``ALLOWED_ATTRIBUTES``; not its events, links or status message (an exception's message and
    stack trace, which may quote its input, are an event and a status message)."""
    from opentelemetry.sdk.trace import ReadableSpan

    attributes = {key: value for key, value in (span.attributes or {}).items() if key in ALLOWED_ATTRIBUTES}
    return ReadableSpan(name=span.name, context=span.context, parent=span.parent, resource=span.resource,
                        attributes=attributes, kind=span.kind, status=Status(span.status.status_code),
                        start_time=span.start_time, end_time=span.end_time,
                        instrumentation_scope=span.instrumentation_scope)


def start_tracing(provider: TracerProvider) -> None:
    """Open spans with ``provider`` from now on (``trace_to``; tests give one of their own)."""
    global _tracer
    _tracer = provider.get_tracer(_SCOPE)


def stop_tracing() -> None:
    """Back to no spans at all (tests)."""
    global _tracer
    _tracer = None


def propagation_headers() -> frozenset[bytes]:
    """The lower-case names of the headers that carry a caller's trace context (W3C ``traceparent``, ...)."""
    return frozenset(name.lower().encode("latin-1") for name in propagate.get_global_textmap().fields)


def _attributes(attributes: Mapping[str, AttributeValue]) -> dict[str, Any]:
    return {f"{_SCOPE}.{name}": value for name, value in attributes.items() if value is not None}


@contextmanager
def span(name: str, *, kind: SpanKind = SpanKind.INTERNAL, parent_headers: Mapping[str, str] | None = None,
         **attributes: AttributeValue) -> Iterator[Span | None]:
    """A span around the block, a child of the current one (or of the W3C ``traceparent`` in ``parent_headers``),
    with ``attributes`` under ``compassmem.``; None and nothing at all when traces are off."""
    tracer = _tracer
    if tracer is None:
        yield None
        return
    context = propagate.extract(parent_headers) if parent_headers is not None else None
    with tracer.start_as_current_span(name, context=context, kind=kind, attributes=_attributes(attributes),
                                      record_exception=False, set_status_on_exception=False) as opened:
        try:
            yield opened
        except BaseException as error:
            opened.set_attribute("error.type", type(error).__qualname__)
            opened.set_status(StatusCode.ERROR)
            raise


def _within_span() -> bool:
    """Steps are parts of a query's or a batch's trace: outside one (the pipeline's final close, a tool's flush)
    they start none of their own."""
    return _tracer is not None and trace.get_current_span().is_recording()


@contextmanager
def stage(name: str, **attributes: AttributeValue) -> Iterator[Stopwatch]:
    """One step of a query or a batch: a child span of the current one when traces are on, and its duration
    either way (for the step's timing or metric). A block that raises leaves the stopwatch unread."""
    with span(name, **attributes) if _within_span() else nullcontext():
        watch = Stopwatch()
        yield watch
        watch.stop()


def record_stages(seconds: Mapping[str, float], started_ns: int) -> None:
    """Child spans of the current span for steps that alternate turn by turn (segment, merge, relate, recluster):
    each step's total time in the batch, drawn as one span, one after another from ``started_ns`` (the moment
    the first of them began), so the trace shows what each cost rather than when each ran."""
    tracer = _tracer
    if tracer is None or not _within_span():
        return
    at = started_ns
    for name, total in seconds.items():
        end = at + int(total * 1e9)
        tracer.start_span(name, start_time=at, attributes={f"{_SCOPE}.summed_over_turns": True}).end(end_time=end)
        at = end


def set_attributes(opened: Span | None, **attributes: AttributeValue) -> None:
    """Attributes known only once the block ran (counts of what it found), on a span ``span`` opened."""
    if opened is not None:
        opened.set_attributes(_attributes(attributes))


def add_trace_ids(logger: object, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: the current span's trace and span ids beside the request id, in OpenTelemetry's
    hex form, so a log line leads to its trace."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = trace.format_trace_id(context.trace_id)
        event["span_id"] = trace.format_span_id(context.span_id)
    return event
