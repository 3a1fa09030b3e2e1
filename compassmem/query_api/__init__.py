"""The HTTP API over ``Memory`` and the turns topic (``compassmem/publish/``): FastAPI only, no query logic.

app.py              ``create_app``: middleware, error handlers, the routers
dependencies.py     the services, the API-key check and the parameters every router shares
routers/            the endpoints: query, turns, memory, operations, management, config
explorer/           the memory explorer's endpoints, its live stream and its page (``ui/``)
auth.py             the API-key check (``compassmem.core.api_keys.TenantKeys``) on the Authorization header: 401 and 403
body_limit.py       the request body size limit
request_id.py       a request id on every response and log line
change_listener.py  follows the worker's change feeds to keep the hot tier current, and the runtime settings
server.py           ``compassmem api`` and the ``compassmem dev`` sidecar: the services built, uvicorn run
"""
