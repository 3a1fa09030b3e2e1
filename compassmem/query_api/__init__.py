"""The HTTP API over the read side (``compassmem/retrieval/``) and the turns topic: FastAPI only, no query logic.

app.py              ``create_app``: middleware, error handlers, the routers
dependencies.py     the services, the API-key check and the parameters every router shares
routers/            the endpoints: query, turns, memory, operations, management
explorer/           the memory explorer's endpoints, its live stream and its page (``ui/``)
auth.py             per-tenant and admin API keys
body_limit.py       the request body size limit
request_id.py       a request id on every response and log line
turn_publisher.py   produces ``POST /v1/turns`` and the control commands to Kafka
change_listener.py  follows the worker's change feeds to keep the hot tier current
server.py           ``compassmem api`` and the ``compassmem dev`` sidecar: the services built, uvicorn run
"""
