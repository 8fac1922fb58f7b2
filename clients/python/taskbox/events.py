"""Following one task's events, as ``taskbox watch TASK`` does
(worker/client/follow.c; keep the two in step).

The events topic is read without joining a group (every partition
assigned by hand, nothing committed) from a point in time or its start.
Only the task's events count (its key, then its ``task_id``); an event
seen twice (a producer's retry: the same attempt and seq) is passed over.
The task is settled when the attempt that settles its message says so
(its ``acknowledged`` phase) and the ledger, when there is one, names
that attempt done; or, with a ledger, when the topic has been read to
its end and the ledger holds the done-marker (a worker that died after
it leaves no ``acknowledged``): then the outcome is the done attempt's
``result`` event, else its manifest, else "dead-lettered".
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

from .codec import decode
from .config import Config
from .errors import InvalidMessage, KafkaFailure, LedgerError, TaskTimeout
from .ledger import Ledger

log = logging.getLogger("taskbox")

BEGINNING = -1  # since_ms: the oldest event the topic keeps
LEDGER_CHECK_S = 1.0
# How long an acknowledged attempt waits for a ledger that cannot be asked
# (a Redis failover takes some seconds) before its events alone settle
# the task, as they do with no ledger (follow.c's LEDGER_PATIENCE_MS).
LEDGER_PATIENCE_S = 15.0
# A done-marker is written only after the attempt's result event was
# delivered; this long for it to arrive before the manifest is asked.
RESULT_GRACE_S = 1.5


@dataclass(frozen=True)
class Event:
    """One event (schemas/event.md). ``source`` is None for events from
    before the field existed: unknown, never "worker"."""

    task_id: str
    attempt: int
    seq: int
    ts: int
    type: str
    payload: Mapping[str, Any]
    source: Optional[str] = None

    @classmethod
    def from_message(cls, doc: Mapping[str, Any]) -> "Event":
        return cls(doc["task_id"], doc["attempt"], doc["seq"], doc["ts"], doc["type"],
                   doc["payload"], doc.get("source"))


@dataclass
class Settled:
    """How a task was settled: the attempt that counts and its outcome
    (manifest.md's, or "dead-lettered"), with the result event's payload
    when one was seen."""

    attempt: int
    outcome: str
    reason: str = ""
    result: Optional[Mapping[str, Any]] = None
    manifest_key: str = ""


@dataclass
class _Attempt:
    last_seq: int = -1
    result: Optional[Mapping[str, Any]] = None
    reason: str = ""  # the result's, else the last error's
    acknowledged: bool = False
    asking_since: float = 0.0  # acknowledged, the ledger unanswered since


@dataclass
class Follower:
    """The state of one task's reading; ``run`` yields its events."""

    cfg: Config
    task_id: str
    since_ms: int
    ledger: Optional[Ledger] = None
    # the outcome of a done attempt whose result event was never seen
    outcome_of_manifest: Optional[Callable[[int, str], Settled]] = None
    settled: Optional[Settled] = None
    attempts: Dict[int, _Attempt] = field(default_factory=dict)
    skipped: List[str] = field(default_factory=list)  # unreadable events, why
    _ledger_at: float = 0.0
    _done_since: float = 0.0
    _asked_at: float = 0.0
    _ledger_error: str = ""

    def _consumer(self) -> Any:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        conf: Dict[str, Any] = {"queued.max.messages.kbytes": "4096"}
        conf.update(self.cfg.kafka_properties)
        conf.update({
            "bootstrap.servers": self.cfg.brokers,
            # assigned by hand: the group is never joined, nothing committed
            "group.id": f"taskbox-follow-py-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        })
        topic = self.cfg.events_topic
        c = Consumer(conf)
        try:
            md = c.list_topics(topic, timeout=10)
            t = md.topics.get(topic)
            if t is None or t.error is not None or not t.partitions:
                why = t.error if t is not None and t.error else "not in the metadata"
                raise KafkaFailure(f"kafka: topic {topic}: {why}")
            parts = sorted(t.partitions)
            if self.since_ms == BEGINNING:
                c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
                return c, len(parts)
            # "the end" read first, then the search by time (follow.c says why)
            ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
            found = c.offsets_for_times([TopicPartition(topic, p, self.since_ms) for p in parts],
                                        timeout=10)
            start = []
            for tp in found:
                off = tp.offset
                if tp.error or off < 0 or off > ends[tp.partition]:
                    off = ends[tp.partition]
                start.append(TopicPartition(topic, tp.partition, off))
            c.assign(start)
            return c, len(parts)
        except KafkaException as e:
            c.close()
            raise KafkaFailure(f"kafka: {topic}: {e.args[0] if e.args else e}") from None
        except BaseException:
            c.close()
            raise

    def _settles(self, attempt: int) -> Optional[bool]:
        """Whether the acknowledged ``attempt`` settles the task (the
        ledger names it done); None when the ledger cannot be asked."""
        if self.ledger is None:
            return True
        try:
            done = self.ledger.done(self.task_id)
        except LedgerError as e:
            self._ledger_error = str(e)
            return None
        return done is not None and done.attempt == attempt

    def _confirm(self, attempt: int, a: _Attempt) -> None:
        """Settles the task on acknowledged ``attempt`` if the ledger
        agrees. A ledger that cannot be asked is asked again each second
        for LEDGER_PATIENCE_S; then the events alone settle the task and
        the "taskbox" logger says so (as follow.c on stderr): the
        acknowledgement is the worker's word that the attempt is over."""
        now = time.monotonic()
        yes = self._settles(attempt)
        self._asked_at = now
        if yes is None:
            if not a.asking_since:
                a.asking_since = now
            if now - a.asking_since < LEDGER_PATIENCE_S:
                return
            log.warning("the ledger could not be asked for %g s (%s): task %s is settled by "
                        "its events alone", LEDGER_PATIENCE_S, self._ledger_error, self.task_id)
        a.asking_since = 0.0
        if yes is not False:
            self._settle(attempt, a)

    def _confirm_again(self) -> None:
        if time.monotonic() - self._asked_at < LEDGER_CHECK_S:
            return
        for attempt, a in list(self.attempts.items()):
            if self.settled is None and a.acknowledged and a.asking_since:
                self._confirm(attempt, a)

    def _track(self, a: _Attempt, ev: Event) -> None:
        p = ev.payload
        if ev.type == "result":
            a.result = p
            a.reason = str(p.get("reason", ""))
        elif ev.type == "error" and a.result is None:
            a.reason = f"[{p.get('code', '')}] {p.get('reason', '')}"
        elif ev.type == "phase" and p.get("phase") == "acknowledged":
            a.acknowledged = True
            self._confirm(ev.attempt, a)

    def _settle(self, attempt: int, a: Optional[_Attempt]) -> None:
        if a is not None and a.result is not None:
            self.settled = Settled(attempt, str(a.result.get("outcome", "")), a.reason, a.result,
                                   str(a.result.get("manifest_key", "")))
        else:
            self.settled = Settled(attempt, "dead-lettered",
                                   a.reason if a and a.reason else "see `taskbox dlq list`")

    def _ask_ledger(self) -> None:
        assert self.ledger is not None
        now = time.monotonic()
        if now - self._ledger_at < LEDGER_CHECK_S:
            return
        self._ledger_at = now
        done = self.ledger.done(self.task_id)
        if done is None:
            return
        a = self.attempts.get(done.attempt)
        if a is not None and a.result is not None:
            self._settle(done.attempt, a)
            return
        if not self._done_since:
            self._done_since = now
        if now - self._done_since < RESULT_GRACE_S:
            return
        if done.manifest and self.outcome_of_manifest is not None:
            self.settled = self.outcome_of_manifest(done.attempt, done.manifest)
        elif done.manifest:
            self.settled = Settled(done.attempt, "recorded", "no store to read the manifest from",
                                   manifest_key=done.manifest)
        else:
            self._settle(done.attempt, a)

    def _event(self, msg: Any) -> Optional[Event]:
        if msg.key() != self.task_id.encode():
            return None
        try:
            doc = decode(msg.value(), "event")
        except InvalidMessage as e:
            self.skipped.append(f"{msg.topic()} [{msg.partition()}] offset {msg.offset()}: {e}")
            return None
        if doc["task_id"] != self.task_id:
            return None
        ev = Event.from_message(doc)
        a = self.attempts.setdefault(ev.attempt, _Attempt())
        if ev.seq <= a.last_seq:  # delivered twice
            return None
        a.last_seq = ev.seq
        self._track(a, ev)
        return ev

    def run(self, timeout: Optional[float] = None,
            stop: Optional[threading.Event] = None) -> Iterator[Event]:
        """The task's events until it is settled (``self.settled``), or
        until ``stop`` is set (within a poll, 0.2 s); raises TaskTimeout
        when ``timeout`` seconds pass first."""
        from confluent_kafka import KafkaError

        consumer, nparts = self._consumer()
        eof: Dict[int, bool] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while self.settled is None and not (stop is not None and stop.is_set()):
                if deadline is not None and time.monotonic() > deadline:
                    raise TaskTimeout(f"task {self.task_id}: not settled after {timeout:g} s; "
                                      "it goes on")
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is not None:
                    code = msg.error().code()
                    if code == KafkaError._PARTITION_EOF:
                        eof[msg.partition()] = True
                    elif code in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART):
                        raise KafkaFailure(f"kafka: {self.cfg.events_topic}: {msg.error().str()}")
                    # other errors are transient: librdkafka retries them
                elif msg is not None:
                    eof[msg.partition()] = False
                    ev = self._event(msg)
                    if ev is not None:
                        yield ev
                if self.settled is None:
                    self._confirm_again()
                if (self.settled is None and self.ledger is not None and len(eof) >= nparts
                        and all(eof.values())):
                    try:
                        self._ask_ledger()
                    except LedgerError:
                        pass  # asked again in a second; the events may settle it first
        finally:
            consumer.close()
