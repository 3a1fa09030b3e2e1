"""Adapters of compassmem to agent frameworks, installed with ``pip install compassmem[langchain]``.

``compassmem.integrations.langgraph``: ``CompassmemStore``, a LangGraph ``BaseStore``.
``compassmem.integrations.langchain``: ``CompassmemRetriever`` and ``CompassmemChatMessageHistory``.
Each works over a ``Memory`` (in-process) or a ``Client`` (HTTP) alike, through the verbs of ``verbs.py``. Nothing
else in compassmem imports this package, so the package works without the extra.
"""
