"""The producer's API: a Client from the fleet's configuration, Tasks
submitted or named, their events followed, their results awaited, and
follow-ups sent to interactive sessions. Each call mirrors a command:
``submit`` is ``taskbox submit``, ``Task.events`` ``taskbox watch TASK``,
``Task.wait`` ``taskbox submit --wait``, ``Task.send``/``end`` ``taskbox
send``/``end``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from . import codec
from .config import Config, load
from .errors import ConfigError, InvalidMessage, KafkaFailure, StoreError
from .events import BEGINNING, Event, Follower, Settled
from .ledger import Ledger
from .store import Store

MANIFEST_MAX = 8 << 20
VERDICT_MAX = 16 << 10
DELIVERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Verdict:
    """One judge's grade (schemas/verdict.md)."""

    judge: str
    outcome: str  # pass, fail, error
    score: Optional[float] = None
    reason: str = ""


@dataclass(frozen=True)
class Result:
    """How a task ended: the attempt that counts, its outcome (one of
    manifest.md's, or "dead-lettered"), why, its judges' verdicts and what
    it used (the manifest's ``usage`` map), and the manifest itself when
    the store could be read."""

    task_id: str
    attempt: int
    outcome: str
    reason: str = ""
    verdicts: Sequence[Verdict] = ()
    usage: Mapping[str, Any] = field(default_factory=dict)
    manifest: Optional[Mapping[str, Any]] = None

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"


def new_id() -> str:
    """t-20261129-134501-9f2c4e1a, as `taskbox submit` names a task:
    sortable by time, unique by chance."""
    return time.strftime("t-%Y%m%d-%H%M%S-", time.gmtime()) + os.urandom(4).hex()


def _now_ms() -> int:
    return int(time.time() * 1000)


class Client:
    """A producer of one fleet. ``config``: a configuration file, as
    ``--config`` names it (else found as the command finds it, with the
    ``TASKBOX_*`` variables over it); or a ``Config`` already made.
    Close it (or use ``with``) to flush and let go of its connections."""

    def __init__(self, config: "str | Config | None" = None) -> None:
        self.config = config if isinstance(config, Config) else load(config)
        if self.config.brokers == "mock":
            raise ConfigError("kafka.brokers is 'mock', which lives inside one process: point it "
                              "at the cluster (TASKBOX_KAFKA_BROKERS)")
        self._producer: Any = None
        self._ledger: Optional[Ledger] = None
        self._store: Optional[Store] = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(DELIVERY_TIMEOUT_S)
            self._producer = None
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    # -- what the fleet is reached through, each made on first use

    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.config.ledger_url, self.config.ledger_prefix)
        return self._ledger

    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.config)
        return self._store

    def _produce(self, key: str, value: bytes) -> None:
        """``value`` on the tasks topic under ``key``, delivery awaited."""
        from confluent_kafka import KafkaException, Producer

        if self._producer is None:
            conf: Dict[str, Any] = dict(self.config.kafka_properties)
            # as tb_kafka_producer_new: in order, once each; librdkafka's
            # own partitioner, so a key lands where the command puts it
            conf.update({"bootstrap.servers": self.config.brokers, "enable.idempotence": True,
                         "linger.ms": 5, "reconnect.backoff.max.ms": 1000})
            try:
                self._producer = Producer(conf)
            except KafkaException as e:
                raise KafkaFailure(f"kafka: {e.args[0] if e.args else e}") from None
        failed: List[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        topic = self.config.tasks_topic
        try:
            self._producer.produce(topic, key=key.encode(), value=value, on_delivery=delivered)
        except (KafkaException, BufferError) as e:
            raise KafkaFailure(f"kafka: produce to {topic}: {e}") from None
        left = self._producer.flush(DELIVERY_TIMEOUT_S)
        if failed:
            raise KafkaFailure(f"kafka: {topic}: not delivered: {failed[0]}")
        if left:
            raise KafkaFailure(f"kafka: {topic}: not delivered in {DELIVERY_TIMEOUT_S:g} s "
                               f"(no broker of {self.config.brokers} answers?)")

    # -- tasks

    def submit(self, *, recipe: str, commit: str, prompt: str, runtime: str = "default",
               kind: str = "one-shot", inputs: Optional[Sequence[Mapping[str, str]]] = None,
               labels: Optional[Mapping[str, str]] = None,
               limits: Optional[Mapping[str, int]] = None, id: Optional[str] = None) -> "Task":
        """Puts one task on the tasks topic, keyed by its id, and returns
        it. ``recipe``: the git URL, ``commit``: its 40 hex digits;
        ``inputs``: dicts as schemas/task.md has them ({"name",
        "artifact"[, "sha256"]} or {"name", "task", "path"}); ``limits``:
        task.md's names to integers; ``kind``: "one-shot" or
        "interactive". The task is checked as the C codec checks it and
        refused, naming the field (InvalidMessage), before anything is
        sent."""
        doc: Dict[str, Any] = {
            "id": id if id is not None else new_id(), "kind": kind,
            "recipe": {"url": recipe, "commit": commit}, "prompt": prompt,
            "inputs": list(inputs or []), "runtime": runtime, "limits": dict(limits or {}),
            "labels": dict(labels or {}), "submitted_at": _now_ms(),
        }
        message = codec.canonical("task", doc)
        # events are stamped by the workers' clocks: a little slack
        since = _now_ms() - 2000
        self._produce(message["id"], codec.encode(message))
        return Task(self, message["id"], since, message)

    def task(self, task_id: str) -> "Task":
        """A task already submitted (by anyone), its events read from the
        oldest the topic keeps."""
        why = codec.check_id(task_id) if task_id else "required"
        if why:
            raise InvalidMessage(f"task id '{task_id}': {why}", "id")
        return Task(self, task_id, BEGINNING, None)


class Task:
    """One task: its events, its result, and for an interactive task,
    its follow-ups."""

    def __init__(self, client: Client, task_id: str, since_ms: int,
                 message: Optional[Mapping[str, Any]]) -> None:
        self.client = client
        self.id = task_id
        self.message = message  # what was sent, when this client sent it
        self._since = since_ms
        self._settled: Optional[Settled] = None
        self._verdicts: Dict[int, List[Verdict]] = {}

    def __repr__(self) -> str:
        return f"Task({self.id!r})"

    def _follower(self) -> Follower:
        c = self.client
        ledger: Optional[Ledger] = None
        if c.config.ledger_url != "memory:":
            ledger = c.ledger()
        return Follower(c.config, self.id, self._since, ledger, self._outcome_of_manifest)

    def events(self, timeout: Optional[float] = None) -> Iterator[Event]:
        """The task's events in order, across attempts, until it is
        settled: the last are the settling attempt's ``result``,
        ``torn-down`` and ``acknowledged`` (or fewer, when its worker died
        after its done-marker). Raises TaskTimeout when ``timeout``
        seconds pass first; KafkaFailure when the topic cannot be read."""
        f = self._follower()
        for ev in f.run(timeout):
            if ev.type == "verdict":
                p = ev.payload
                score = p.get("score")
                self._verdicts.setdefault(ev.attempt, []).append(Verdict(
                    str(p.get("judge", "")), str(p.get("outcome", "")),
                    float(score) if isinstance(score, (int, float)) else None,
                    str(p.get("reason", ""))))
            elif ev.type == "phase" and ev.payload.get("phase") == "received":
                self._verdicts.pop(ev.attempt, None)  # an attempt replayed: its own
            yield ev
        self._settled = f.settled

    def wait(self, timeout: Optional[float] = None) -> Result:
        """Follows the task until it is settled and returns its Result
        (verdicts from its events, else its manifest's records; usage from
        its result event, else its manifest). Raises TaskTimeout when
        ``timeout`` seconds pass first (the task goes on)."""
        if self._settled is None:
            for _ in self.events(timeout):
                pass
        s = self._settled
        assert s is not None
        manifest = self._manifest(s)
        usage: Mapping[str, Any] = {}
        if s.result is not None and isinstance(s.result.get("usage"), Mapping):
            usage = s.result["usage"]
        elif manifest is not None and isinstance(manifest.get("usage"), Mapping):
            usage = manifest["usage"]
        verdicts = self._verdicts.get(s.attempt) or self._stored_verdicts(manifest)
        return Result(self.id, s.attempt, s.outcome, s.reason, tuple(verdicts), usage, manifest)

    def _manifest(self, s: Settled) -> Optional[Mapping[str, Any]]:
        if not s.manifest_key:
            return None
        try:
            return codec.decode(self.client.store().get(s.manifest_key, MANIFEST_MAX), "manifest")
        except (StoreError, ConfigError, InvalidMessage):
            return None  # the events said the outcome; the record is extra

    def _stored_verdicts(self, manifest: Optional[Mapping[str, Any]]) -> List[Verdict]:
        out: List[Verdict] = []
        for ref in (manifest or {}).get("verdicts", []):
            score, reason = None, ""
            try:
                v = codec.decode(self.client.store().get(ref["key"], VERDICT_MAX), "verdict")
                score, reason = v.get("score"), v.get("reason", "")
            except (StoreError, InvalidMessage):
                pass
            out.append(Verdict(ref["judge"], ref["outcome"], score, reason))
        return out

    def _outcome_of_manifest(self, attempt: int, key: str) -> Settled:
        try:
            m = codec.decode(self.client.store().get(key, MANIFEST_MAX), "manifest")
        except (StoreError, ConfigError, InvalidMessage) as e:
            return Settled(attempt, "recorded", str(e), manifest_key=key)
        return Settled(attempt, m["outcome"], m.get("reason", ""), manifest_key=key)

    # -- interactive sessions (schemas/followup.md)

    def _followup(self, text: Optional[str], seq: Optional[int]) -> int:
        doc: Dict[str, Any] = {"task_id": self.id, "seq": seq or 1,
                               "kind": "end" if text is None else "prompt", "text": text,
                               "sent_at": _now_ms()}
        if text is None:
            del doc["text"]
        codec.canonical("followup", doc)  # checked before a number is taken: no gap
        if seq is None:
            if self.client.config.ledger_url == "memory:":
                raise ConfigError("ledger.url is 'memory:', which lives inside one worker: point "
                                  "it at the fleet's Redis (TASKBOX_LEDGER_URL), or give seq")
            doc["seq"] = self.client.ledger().next_followup(self.id)
        self.client._produce(self.id, codec.encode(codec.canonical("followup", doc)))
        return int(doc["seq"])

    def send(self, text: str, seq: Optional[int] = None) -> int:
        """A further prompt for the task's session; returns its number
        (``seq``, else the next from the ledger, as `taskbox send`)."""
        return self._followup(text, seq)

    def end(self, seq: Optional[int] = None) -> int:
        """Ends the task's session once every prompt sent before is
        answered; returns the end's number."""
        return self._followup(None, seq)
