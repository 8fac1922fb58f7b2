"""The producer's API: a Client from the fleet's configuration, files
uploaded as inputs, Tasks submitted (or replayed, or named), their events
followed (also with asyncio), their results awaited, their artifacts
downloaded or shared, follow-ups sent to interactive sessions, and dead
letters read and sent back. Each call mirrors a command: ``submit`` is
``taskbox submit`` (``replay_from``: ``--replay-from``), ``upload``
``taskbox artifacts put``, ``Task.events`` ``taskbox watch TASK``,
``Task.wait`` ``taskbox submit --wait``, ``Task.artifacts`` ``taskbox
artifacts list`` (``Artifact.download``/``share``: ``get``/``share``),
``Task.send``/``end`` ``taskbox send``/``end``, ``dlq`` ``taskbox dlq
list`` and ``send_back`` ``taskbox dlq send``.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from typing import (Any, AsyncIterator, Callable, Dict, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

from . import codec, dlq, replay, uploads
from .artifacts import Artifact
from .config import Config, load
from .dlq import DeadLetter
from .errors import (ConfigError, DeadLetterError, InvalidMessage, KafkaFailure, NotFound,
                     StoreError, TaskNotDone, UsageError)
from .events import BEGINNING, Event, Follower, Settled
from .ledger import Ledger
from .store import Store
from .uploads import Upload

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
    Kafka is needed for tasks and the DLQ, the ledger for follow-ups,
    records and sending back, the store for uploads and artifacts: each
    is reached on first use, and one the configuration cannot reach
    (kafka.brokers 'mock', ledger.url 'memory:') is refused then, with
    ConfigError. Close it (or use ``with``) to flush and let go of its
    connections."""

    def __init__(self, config: "str | Config | None" = None) -> None:
        self.config = config if isinstance(config, Config) else load(config)
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

    def kafka_required(self) -> None:
        """ConfigError unless kafka.brokers names a cluster (uploads and
        artifacts need only the store; tasks and the DLQ need Kafka)."""
        if self.config.brokers == "mock":
            raise ConfigError("kafka.brokers is 'mock', which lives inside one process: point it "
                              "at the cluster (TASKBOX_KAFKA_BROKERS)")

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

        self.kafka_required()
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

    def ledger_required(self, what: str) -> Ledger:
        """The fleet's ledger, or ConfigError saying why ``what`` needs it."""
        if self.config.ledger_url == "memory:":
            raise ConfigError(f"ledger.url is 'memory:', which lives inside one worker: {what} "
                              "needs the fleet's Redis (TASKBOX_LEDGER_URL)")
        return self.ledger()

    # -- uploads

    def upload(self, path: "str | os.PathLike[str]", name: Optional[str] = None,
               on_file: Optional[Callable[[Upload], None]] = None) -> List[Upload]:
        """Uploads a file, or each regular file under a directory, to the
        store under its content's name (``uploads/<sha256>``, with its
        block list at ``blocks/<sha256>``), exactly as `taskbox artifacts
        put` does, sending nothing for content that is there already.
        Returns an Upload a file, in name order: give them to ``submit``
        as ``inputs``. Each is named, as the task will see it under
        /inputs, by the file's name (a directory: its name and the path
        below it), or with ``name`` as `taskbox submit --input NAME=@PATH`
        names it: ``name`` for a file, ``name/<path below>`` for a
        directory's files. Symbolic links and other kinds of file under
        a directory are skipped (a warning on the ``taskbox`` logger).
        ``on_file`` is called after each file. Raises UploadError (no
        such path, not a file or a directory, a file that changed as it
        was read), StoreError."""
        is_dir = os.path.isdir(path)
        out: List[Upload] = []

        def each(u: Upload) -> None:
            if name is not None:
                u = Upload(f"{name}/{u.rel}" if is_dir else name, u.rel, u.path, u.key,
                           u.sha256, u.blocks, u.size, u.uploaded)
            out.append(u)
            if on_file is not None:
                on_file(u)
        uploads.put(self.store(), path, uploads.MAX_FILES, each)
        return out

    # -- tasks

    def submit(self, *, recipe: Optional[str] = None, commit: Optional[str] = None,
               prompt: Optional[str] = None, runtime: Optional[str] = None,
               kind: Optional[str] = None,
               inputs: Optional[Sequence[Union[Mapping[str, str], Upload]]] = None,
               labels: Optional[Mapping[str, str]] = None,
               limits: Optional[Mapping[str, int]] = None, id: Optional[str] = None,
               replay_from: Optional[str] = None, replay_attempt: Optional[int] = None,
               replay_mode: Optional[str] = None,
               replay_pace: Optional[str] = None) -> "Task":
        """Puts one task on the tasks topic, keyed by its id, and returns
        it. ``recipe``: the git URL, ``commit``: its 40 hex digits;
        ``prompt``; ``runtime`` ("default"); ``kind``: "one-shot" (the
        default) or "interactive"; ``inputs``: Uploads (``upload``'s)
        and dicts as schemas/task.md has them ({"name", "artifact"[,
        "sha256", "blocks"]} or {"name", "task", "path"}); ``limits``:
        task.md's names to integers; ``labels``; ``id`` (else one like
        the command makes).

        ``replay_from``: an earlier, done task, sent again as its egress
        recording keeps it, its providers answered from that recording
        at no cost (task.md, "Replay"), as `taskbox submit --replay-from`:
        only ``id``, ``commit`` (another recipe commit),
        ``replay_attempt`` (default: the attempt that counted),
        ``replay_mode`` ("strict" or "fill") and ``replay_pace``
        ("instant" or "recorded") go with it.

        The task is checked as the C codec checks it and refused, naming
        the field (InvalidMessage), before anything is sent."""
        if replay_from is not None:
            given = [n for n, v in (("recipe", recipe), ("prompt", prompt), ("runtime", runtime),
                                    ("kind", kind), ("inputs", inputs), ("labels", labels),
                                    ("limits", limits)) if v is not None]
            if given:
                raise UsageError(f"submit: replay_from takes the task from its recording: "
                                 f"{', '.join(given)} cannot go with it (only id, commit and "
                                 "the replay_* arguments)")
            why = codec.check_id(replay_from) if replay_from else "required"
            if why:
                raise InvalidMessage(f"field 'replay_from': {why}", "replay_from")
            ledger = None if replay_attempt else self.ledger_required("replay_from")
            doc = replay.doc(ledger, self.store(), replay_from, replay_attempt, replay_mode,
                             replay_pace, commit)
            doc["id"] = id if id is not None else new_id()
            doc["submitted_at"] = _now_ms()
            # a recording from a newer build may hold fields this one drops
            message = codec.canonical("task", doc, strict=False)
        else:
            if replay_attempt is not None or replay_mode is not None or replay_pace is not None:
                raise UsageError("submit: replay_attempt, replay_mode and replay_pace go with "
                                 "replay_from")
            missing = [n for n, v in (("recipe", recipe), ("commit", commit), ("prompt", prompt))
                       if v is None]
            if missing:
                raise UsageError(f"submit: {', '.join(missing)} needed (or replay_from)")
            doc = {
                "id": id if id is not None else new_id(), "kind": kind or "one-shot",
                "recipe": {"url": recipe, "commit": commit}, "prompt": prompt,
                "inputs": [i.input() if isinstance(i, Upload) else i for i in inputs or []],
                "runtime": runtime or "default", "limits": dict(limits or {}),
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

    # -- dead letters (schemas/dlq.md)

    def dlq(self) -> List[DeadLetter]:
        """Every record of the DLQ topic, oldest first per partition, as
        `taskbox dlq list` reads them. Raises KafkaFailure (the topic
        unknown, or not read to its end in 60 s)."""
        self.kafka_required()
        return dlq.read(self.config)

    def send_back(self, letter: "DeadLetter | str | Tuple[int, int]") -> "Task":
        """Sends the task of a dead letter (a DeadLetter, its
        "PARTITION:OFFSET" or (partition, offset)) back to the tasks
        topic, unchanged, after a fix (a runtime added, a commit pushed),
        as `taskbox dlq send` does: the ledger forgets its dead letter
        and its attempts count afresh. Returns the task, followed from
        now. Raises DeadLetterError: no record there; it holds no task
        (malformed: fix it at its producer); the ledger holds no dead
        letter for it (``retry``: a worker may still be writing it, or
        it was sent back already), or it is done with a record."""
        if isinstance(letter, DeadLetter):
            rec: Optional[DeadLetter] = letter
            partition, offset = letter.partition, letter.offset
        else:
            if isinstance(letter, str):
                p, sep, o = letter.partition(":")
                if not sep or not p.isdigit() or not o.isdigit():
                    raise UsageError(f"send_back: a dead letter's PARTITION:OFFSET, as dlq() "
                                     f"gives it, not '{letter}'")
                partition, offset = int(p), int(o)
            else:
                partition, offset = letter
            if partition < 0 or offset < 0:
                raise UsageError(f"send_back: no place {partition}:{offset}")
            self.kafka_required()
            self.ledger_required("send_back")  # before the topic is read
            found = dlq.read(self.config, partition, offset, first_only=True)
            rec = found[0] if found and found[0].offset == offset else None
        topic = self.config.dlq_topic
        if rec is None:
            raise DeadLetterError(f"no record at {partition}:{offset} in {topic}")
        task = rec.task()
        if task is None or rec.task_id is None:
            raise DeadLetterError(f"{rec.where} holds no task to send back ({rec.cause}): fix "
                                  "it at its producer")
        ledger = self.ledger_required("send_back")
        # Only a task the ledger holds dead: a worker writes that marker
        # just after the DLQ record, and a task sent back before it would
        # be found done and not run.
        revived = ledger.revive(rec.task_id)
        if revived == 0:
            raise DeadLetterError(
                f"the ledger ({self.config.ledger_url}, prefix {self.config.ledger_prefix}) "
                f"holds no dead letter for task {rec.task_id}: a worker may still be writing "
                "it, or it was sent back already; try again in a moment", retry=True)
        if revived < 0:
            raise DeadLetterError(f"task {rec.task_id} is done with a record: nothing to send "
                                  "back")
        since = _now_ms() - 2000
        try:
            self._produce(rec.task_id, rec.original)
        except KafkaFailure as e:
            # the dead letter is forgotten: a second try says "sent back
            # already", so say here what to do
            raise KafkaFailure(f"the ledger forgot the dead letter of task {rec.task_id} but "
                               f"it did not reach {self.config.tasks_topic} (submit it "
                               f"again): {e}") from None
        return Task(self, rec.task_id, since, task)


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
        self._record: Optional[Tuple[Mapping[str, Any], str]] = None

    def __repr__(self) -> str:
        return f"Task({self.id!r})"

    def _follower(self) -> Follower:
        c = self.client
        c.kafka_required()
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
        return self._events(timeout, None)

    def _events(self, timeout: Optional[float],
                stop: Optional[threading.Event]) -> Iterator[Event]:
        f = self._follower()
        for ev in f.run(timeout, stop):
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

    # -- asyncio

    async def aevents(self, timeout: Optional[float] = None) -> AsyncIterator[Event]:
        """``events`` for asyncio: ``async for ev in task.aevents():``.
        The events are read on a thread of their own (confluent-kafka's
        consumer blocks) and handed to the loop as they come; leaving the
        loop early (``break``, a cancellation) stops that thread within
        0.2 s. Raises as ``events`` does."""
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Tuple[str, Any]]" = asyncio.Queue()
        stop = threading.Event()

        def hand(kind: str, v: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, v))
            except RuntimeError:  # the loop is closed: nobody is listening
                stop.set()

        def pump() -> None:
            try:
                for ev in self._events(timeout, stop):
                    hand("event", ev)
                hand("end", None)
            except BaseException as e:  # raised where the caller awaits
                hand("error", e)

        thread = threading.Thread(target=pump, name=f"taskbox-events-{self.id}", daemon=True)
        thread.start()
        try:
            while True:
                kind, v = await queue.get()
                if kind == "event":
                    yield v
                elif kind == "error":
                    raise v
                else:
                    return
        finally:
            stop.set()
            await asyncio.get_running_loop().run_in_executor(None, thread.join)

    async def await_result(self, timeout: Optional[float] = None) -> Result:
        """``wait`` for asyncio: ``result = await task.await_result()``,
        the events read as ``aevents`` reads them."""
        if self._settled is None:
            async for _ in self.aevents(timeout):
                pass
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.wait, 0)

    # -- the record: artifacts

    def record(self) -> Tuple[Mapping[str, Any], str]:
        """The manifest of the task's done attempt (the one its
        done-marker names) and its key, read once. Raises TaskNotDone
        (unknown to the ledger, not done yet, or dead-lettered: no
        record), StoreError, ConfigError (no ledger)."""
        if self._record is None:
            ledger = self.client.ledger_required("a task's record")
            done = ledger.done(self.id)
            if done is None:
                if ledger.attempts(self.id):
                    raise TaskNotDone(f"task {self.id} is not done yet (see taskbox status)",
                                      "running")
                raise TaskNotDone(f"task {self.id} is unknown to the ledger", "unknown")
            if not done.manifest:
                raise TaskNotDone(f"task {self.id} was dead-lettered: it has no record",
                                  "dead-lettered")
            try:
                m = codec.decode(self.client.store().get(done.manifest, MANIFEST_MAX),
                                 "manifest")
            except InvalidMessage as e:
                raise InvalidMessage(f"manifest {done.manifest}: {e}", e.field) from None
            self._record = (m, done.manifest)
        return self._record

    def artifacts(self) -> List[Artifact]:
        """The files the task's agent wrote under /outputs, as its done
        attempt's manifest records them, in its order. Raises as
        ``record``."""
        m, _ = self.record()
        store = self.client.store()
        return [Artifact(store, m["task_id"], m["attempt"], a["path"], a["key"], a["size"],
                         a["sha256"]) for a in m.get("artifacts", [])]

    def artifact(self, path: str) -> Artifact:
        """One of ``artifacts`` by its path under /outputs; or
        ``"conversation"`` and ``"manifest"``, the record's own objects.
        Raises NotFound when the record has no such file."""
        m, key = self.record()
        store = self.client.store()
        if path == "conversation":
            return Artifact(store, m["task_id"], m["attempt"], path, m["conversation_key"])
        if path == "manifest":
            return Artifact(store, m["task_id"], m["attempt"], path, key)
        for a in self.artifacts():
            if a.path == path:
                return a
        raise NotFound(f"task {self.id} has no artifact {path}")

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
