"""Records every layer shares, below all of them (beside ``compassmem/core/models.py``, the turn, event and relation).

query.py         ``QueryRequest`` / ``QueryResponse`` with its evidence items: the question and its answer
records.py       what the API answers with and ``Memory``, ``Client`` and the MCP server share: events, errors,
                 acknowledgements, deletion results, listings and graphs
search.py        ``SparseVector`` (a keyword vector) and ``SearchScope`` (what a store search covers)
commands.py      the control topic's ``ForgetCommand`` and ``RedactCommand``
dead_letters.py  the dead-letter topic's ``DeadLetter`` with its stage and reason code
limits.py        the bounds of what a caller may ask for (page sizes, query budget, text lengths), one table that
                 every surface's parameters take

They import nothing of compassmem but ``models``: a record used by two layers lives here, not in either.
"""
