"""Guards around faust-streaming 0.15.3's delivery: each upstream defect, what it did here, what guards it and the
test that proves the guard. An upgrade of faust-streaming can drop a guard once its defect is fixed upstream and its
test passes without it.

1. The consumer's fetch wait is fixed at 1500 ms (no setting). Symptom: Tansu holds a fetch spanning several
   partitions for the whole wait, about 480 ms per record of freshness. Guard: ``transport._ConsumerThread`` sets
   100 ms. Test: tests/test_streaming.py ``test_a_turn_is_searchable_at_once_and_an_idle_segment_closes``.
2. After a rebalance aiokafka seeks back to the committed offset only when it is above 0. Symptom: a partition never
   committed (a new group, a worker killed before its first commit) kept its fetch position past the records Faust
   had dropped from its queues: turns missing after a restart. Guard: ``transport._ConsumerThread
   ._seek_to_committed_or_start``. Test: tests/test_stream_delivery.py ``test_restarts_with_a_backlog_lose_no_turn``.
3. Faust counts the offsets it saw skipped in delivery as acknowledged (meant for compacted offsets). Symptom: after a
   restart with a backlog, hundreds of unapplied offsets became committable. Guard: ``transport._Consumer._add_gap``
   is off on the turns topic, where only offsets the broker says do not exist count (``mark_missing``). Tests:
   tests/test_stream_transport.py ``test_offsets_skipped_in_delivery_are_not_committed_on_a_guarded_topic``,
   ``test_offsets_the_broker_says_do_not_exist_are_committed_past``.
4. ``stop_flow`` does not wait for the delivery loop. Symptom: a record it was still handing over (or a fetch that
   returned while the flow was stopped) moved the read offset after our seek, and the records fetched again were
   dropped. Guard: ``transport._Consumer.stop_delivery``, which every seek waits for. Tests:
   tests/test_stream_transport.py ``test_a_seek_after_stopping_delivery_is_not_undone_by_the_record_being_handed_over``,
   ``test_stopping_delivery_waits_for_a_loop_part_way_through_a_record_and_returns_at_once_without_one``.
5. Table recovery resumes the stream partitions before it seeks them and clears the streams' queues after. Symptom:
   records fetched in between were thrown away and never fetched again (the agent got offsets 52-55, then 240).
   Guard: ``recovery.SeekFirstRecovery`` (set as the app's ``TableManager``). Test: tests/test_stream_delivery.py
   ``test_restarts_with_a_backlog_lose_no_turn``.
6. Whatever else loses records between the fetch and the agent. Symptom: a turn applied past a hole moves its
   conversation's offset past turns never applied. Guard: ``positions.PartitionPositions`` admits a turns partition in
   log order only, and ``gap_repair.GapRepair`` seeks back to holes and to partitions that stopped short of the
   broker's end. Tests: tests/test_positions.py, and tests/test_stream_delivery.py
   ``test_records_lost_inside_the_consumer_are_caught_and_read_again``.

transport.py   the consumer and transport (1-4), registered as the ``compassmem-kafka://`` scheme
recovery.py    the table manager whose recovery seeks before it resumes (5)
positions.py   the offset-gap bookkeeping, without Kafka (6)
gap_repair.py  the seeks back on the Faust app (6)
"""
