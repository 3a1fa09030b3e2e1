"""Keeps the API's hot tier current from the worker's change feeds (events and relations topics).

The worker publishes every event it writes, deletes or forgets, and every relation it writes, once the stores have
them. An API process (``compassmem api`` or the one inside ``compassmem dev``) follows both topics from their end
and drops the hot-tier entries they name (a relation names both its events): a merge, a new relation or a new turn
of a cached event is seen as soon as the worker has written it, not ``api_view_max_age_s`` later. An event written
again (not deleted) whose entry was held is read again after each poll, on the listener's thread, so a conversation
being queried while it is written stays warm instead of each query reloading what the last write touched. While it
follows without a break the hot tier keeps entries up to ``api_hot_followed_max_age_s``; when a poll fails it falls
back to the short limit. Records that are not change records are skipped (logged), never fatal: the feed only
invalidates. ``ChangeFollower`` does the following.

With ``runtime`` it also reads the control topic, from its start: every runtime setting change (a
``SettingCommand``) in order, so the values in force here are the log's whatever the process's age; the read-path
keys take effect as they are read, and the worker's answers say where each change's markers sit in the turns log.
"""

from __future__ import annotations

import structlog
from pydantic import ValidationError

from compassmem.core.config import Settings
from compassmem.query_api.change_follower import ChangeFollower
from compassmem.retrieval.hot_tier import PRELOAD_PAGE_EVENTS, HotTier
from compassmem.library.runtime_settings import RuntimeSettings
from compassmem.streams.forget_log import follow_setting
from compassmem.core.contracts.stream_records import ChangeOp, EventChange, RelationChange

log = structlog.get_logger(__name__)


class ChangeFeedListener:
    """Follows the events and relations topics (every partition, from the end, no group) into the hot tier, and with
    ``runtime`` the control topic (from its start) into the runtime settings."""

    def __init__(self, bootstrap: str, settings: Settings, hot: HotTier, poll_ms: int = 200,
                 runtime: RuntimeSettings | None = None, reread_per_poll: int = PRELOAD_PAGE_EVENTS) -> None:
        self._hot = hot
        self._reread_per_poll = reread_per_poll
        self._events_topic = settings.events_topic
        self.applied = 0
        # Held entries the feed dropped since the last poll ended, per tenant: read again then (``_polled``).
        self._to_reread: dict[str, set[str]] = {}
        # Entries read again so far (the events found).
        self.reread = 0
        self._follower = ChangeFollower(bootstrap, (settings.events_topic, settings.relations_topic), self.apply,
                                        client_id="compassmem-hot-tier", poll_ms=poll_ms,
                                        polled=self._polled,
                                        replayed={settings.control_topic:
                                                  lambda record: follow_setting(runtime, record)}
                                        if runtime is not None else None)

    @property
    def following(self) -> bool:
        """Whether it has found the topics and follows them (changes from then on are applied)."""
        return self._follower.following.is_set()

    def start(self) -> ChangeFeedListener:
        self._follower.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._follower.stop(timeout_s)
        self._hot.feed_followed(False)

    def apply(self, topic: str, value: bytes) -> None:
        try:
            if topic == self._events_topic:
                change = EventChange.model_validate_json(value)
                if change.op == ChangeOp.FORGET or change.event_id is None:
                    self._hot.invalidate(change.tenant, change.conversation_id)
                elif self._hot.invalidate_event(change.tenant, change.event_id) and change.op == ChangeOp.UPSERT:
                    self._to_reread.setdefault(change.tenant, set()).add(change.event_id)
            else:
                relation = RelationChange.model_validate_json(value).relation
                for event_id in (relation.source, relation.target):
                    if self._hot.invalidate_event(relation.tenant, event_id):
                        self._to_reread.setdefault(relation.tenant, set()).add(event_id)
        except ValidationError as error:
            log.warning("api.change_feed.skipped", topic=topic, reason=str(error).splitlines()[0])
            return
        self.applied += 1

    def _polled(self, ok: bool) -> None:
        # After applying: an entry loaded from now on has seen every change the feed delivered so far.
        self._hot.feed_followed(ok)
        pending, self._to_reread = self._to_reread, {}
        # At most a page per poll: the changes that follow wait while it is read, so a burst of writes to held
        # conversations must not hold them up for long; what is left out loads on the next query's miss.
        room = self._reread_per_poll
        for tenant in sorted(pending):
            chosen = sorted(pending[tenant])[:room]
            room -= len(chosen)
            try:
                # A deleted or forgotten event is simply not found; a load that a later change overtakes is
                # discarded by the tier itself.
                self.reread += self._hot.preload(tenant, chosen)
            except Exception as error:  # noqa: BLE001 - the feed goes on; the next query loads on a miss
                log.warning("api.change_feed.reread_failed", tenant=tenant, events=len(chosen), error=str(error))
            if not room:
                break
