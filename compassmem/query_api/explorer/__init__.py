"""The memory explorer: the web page at ``/ui`` (static files in ``compassmem/query_api/ui/``) and what it reads.

``live`` follows the worker's change feeds for the page's live view, ``router`` puts it and the listings of
``compassmem/retrieval/listing.py`` (conversations, events, a conversation's graph within limits: plain functions
over the stores) on HTTP.
"""
