"""The ``compassmem`` command, all of it: the top layer, importing downward only (nothing else imports it).

main.py       the parser and ``main`` (the ``compassmem`` script; ``python -m compassmem.cli``), ingest, ask, api,
              build-index, mcp
streaming.py  broker, produce, worker, dev, forget, redact
transfer.py   export, import, migrate-ids
progress.py   the progress line of long commands
errors.py     which failures are told as one line instead of a traceback
"""
