"""The API's endpoints, one router per concern; ``compassmem/query_api/app.py`` includes them in this order.

query.py       POST /v1/query
turns.py       POST /v1/turns
memory.py      GET /v1/events/{event_id}, DELETE /v1/conversations/{conversation_id}
operations.py  GET /healthz, GET /metrics
management.py  DELETE of one turn (redaction) and of a whole tenant (admin)
config.py      GET /v1/config, PUT /v1/config/{key}: runtime settings (admin)

The explorer's endpoints and page are in ``compassmem/query_api/explorer/router.py``. Every router takes what it
needs through the dependencies of ``compassmem/query_api/dependencies.py``.
"""
