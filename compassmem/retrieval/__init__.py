"""The read side: answering a question from the stores, beside the write side (``pipeline`` and ``processors``).

engine.py         ``QueryEngine``: subgoals, hybrid seed search, graph walk, ranking, the optional LLM answer
decomposition.py  rule-based question analysis: the kind of answer wanted and the subgoals that need evidence
navigation.py     the priority-queue walk over the event graph from a subgoal's seed events
memory_view.py    what one query ranks: its candidate events, their turns, vectors and relations
hot_tier.py       recently used events with their turns, vectors, token counts and edges, bounded by turns
bm25_index.py     BM25 over the windows of turns a query's candidates make
listing.py        a tenant's conversations, a conversation's events and its graph within limits, page by page

Nothing here speaks HTTP: ``compassmem.query_api`` serves it over FastAPI, ``compassmem.library.memory`` in process.
"""
