"""The memory explorer: the web page at ``/ui`` (static files in ``compassmem/query_api/ui/``) and what it reads.

``listing`` lists conversations and events and draws a conversation's graph within limits (plain functions over the
stores, for the HTTP router and any other caller), ``live`` follows the worker's change feeds for the page's live
view, ``router`` puts both on HTTP.
"""
