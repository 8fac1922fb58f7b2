"""The dead-letter topic (schemas/dlq.md), read as `taskbox dlq list`
reads it (worker/client/actions.c, tb_dlq_each; keep the two in step):
without joining a group, every partition from its oldest record (or one
partition from one offset) to its end, each record decoded and checked.
Sending one back is Client.send_back (`taskbox dlq send`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import codec
from .config import Config
from .errors import InvalidMessage, KafkaFailure

READ_S = 60.0  # the topic read to its end in this long, as the command
log = logging.getLogger("taskbox")


@dataclass(frozen=True)
class DeadAttempt:
    """One attempt's reason, as the record keeps it."""

    worker: str
    attempt: int
    ts: int
    reason: str


@dataclass(frozen=True)
class DeadLetter:
    """One DLQ record, at ``partition``:``offset`` of the DLQ topic (as
    `taskbox dlq list` prints it: ``where``). ``cause``: malformed,
    poison, max-attempts or orphan; ``topic``, ``source_partition`` and
    ``source_offset``: where the original came from; ``original``: its
    bytes (cut at 900 KiB)."""

    partition: int
    offset: int
    task_id: Optional[str]
    cause: str
    reason: str
    topic: str
    ts: int
    attempts: Sequence[DeadAttempt]
    original: bytes
    source_partition: Optional[int] = None
    source_offset: Optional[int] = None

    @property
    def where(self) -> str:
        return f"{self.partition}:{self.offset}"

    def task(self) -> Optional[Dict[str, Any]]:
        """The task it holds, decoded and checked, or None (a malformed
        message, a follow-up, a task cut short)."""
        if self.cause == "malformed" or not self.task_id:
            return None
        try:
            return codec.decode(self.original, "task")
        except InvalidMessage:
            return None

    @classmethod
    def from_record(cls, partition: int, offset: int, doc: Mapping[str, Any]) -> "DeadLetter":
        return cls(partition, offset, doc.get("task_id"), doc["cause"], doc["reason"],
                   doc["topic"], doc["ts"],
                   tuple(DeadAttempt(a["worker"], a["attempt"], a["ts"], a["reason"])
                         for a in doc.get("attempts", [])),
                   bytes(doc["original"]), doc.get("partition"), doc.get("offset"))


def read(cfg: Config, only: int = -1, start: int = -1, first_only: bool = False,
         timeout: float = READ_S) -> List[DeadLetter]:
    """The records of the DLQ topic, oldest first per partition: every
    partition's, or partition ``only``'s, from offset ``start`` (else the
    oldest); ``first_only``: the first record read. A record that is not
    a DLQ record is passed over with a warning on the ``taskbox`` logger.
    Raises KafkaFailure."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, \
        TopicPartition

    conf: Dict[str, Any] = dict(cfg.kafka_properties)
    conf.update({"bootstrap.servers": cfg.brokers, "group.id": "taskbox-dlq-reader",
                 "enable.auto.commit": False, "enable.partition.eof": True})
    topic = cfg.dlq_topic
    try:
        c = Consumer(conf)
    except KafkaException as e:
        raise KafkaFailure(f"kafka: {e.args[0] if e.args else e}") from None
    out: List[DeadLetter] = []
    try:
        md = c.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            why = t.error.str() if t is not None and t.error else "not in the metadata"
            raise KafkaFailure(f"kafka: topic {topic}: {why}")
        parts = [p for p in sorted(t.partitions) if only < 0 or p == only]
        if not parts:
            raise KafkaFailure(f"kafka: topic {topic} has no partition {only}")
        c.assign([TopicPartition(topic, p, start if start >= 0 else OFFSET_BEGINNING)
                  for p in parts])
        ended: set[int] = set()
        until = time.monotonic() + timeout
        while len(ended) < len(parts):
            if time.monotonic() > until:
                raise KafkaFailure(f"kafka: the DLQ topic {topic} was not read to its end in "
                                   f"{timeout:g} s")
            m = c.poll(0.5)
            if m is None:
                continue
            err: Any = m.error()
            partition, offset = int(m.partition() or 0), int(m.offset() or 0)
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    ended.add(partition)
                    continue
                raise KafkaFailure(f"kafka: {topic}: {err.str()}")
            try:
                doc = codec.decode(m.value() or b"", "dlq")
            except InvalidMessage as e:
                log.warning("taskbox: DLQ %d:%d is not a DLQ record: %s", partition, offset, e)
                if first_only:
                    break
                continue
            out.append(DeadLetter.from_record(partition, offset, doc))
            if first_only:
                break
    except KafkaException as e:
        raise KafkaFailure(f"kafka: {topic}: {e.args[0] if e.args else e}") from None
    finally:
        c.close()
    return out
