"""The API's endpoints, one router per resource; ``compassmem/query_api/app.py`` includes them.

query.py          POST /v1/query
turns.py          POST /v1/turns
conversations.py  GET /v1/conversations; a conversation's events, graph and live changes; DELETE of a conversation
                  (forget) and of one of its turns (redaction)
events.py         GET /v1/events/{event_id}
tenants.py        DELETE /v1/tenants/{tenant} (admin)
operations.py     GET /healthz, GET /metrics
health.py         GET /v1/health/memory: a tenant's memory health with trends
config.py         GET /v1/config, PUT /v1/config/{key}: runtime settings (admin)

The explorer's page is mounted by ``compassmem/query_api/explorer/ui.py``. Every router takes what it needs through
the dependencies of ``compassmem/query_api/dependencies.py``.
"""
