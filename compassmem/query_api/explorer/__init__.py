"""The memory explorer: the web page at ``/ui`` (static files in ``compassmem/query_api/ui/``, mounted by ``ui``) and
its live view.

``live`` follows the worker's change feeds for the page's live streams; the listings of
``compassmem/retrieval/listing.py`` (conversations, events, a conversation's graph within limits) and the live stream
are on HTTP in ``compassmem/query_api/routers/conversations.py``.
"""
