"""The task a replay sends (schemas/task.md, "Replay"), as `taskbox
submit --replay-from` builds it (worker/client/submit_replay.c; keep the
two in step): the earlier task as its egress recording keeps it (the
recording's header, schemas/recording.md), with no id or submitted_at,
``replay_from`` naming it and ``replay.attempt`` pinning the attempt
whose recording answers, on another recipe commit when one is given.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import msgpack

from . import codec
from .errors import InvalidMessage, NotFound, TaskNotDone
from .ledger import Ledger
from .store import Store

MANIFEST_MAX = 8 << 20
HEADER_MAX = 8 << 20  # the header holds the task: at most 1 MiB of it


def _manifest_key(ledger: Optional[Ledger], task: str, attempt: Optional[int]) -> str:
    if attempt:
        return f"tasks/{task}/{attempt}/manifest.msgpack"
    assert ledger is not None
    done = ledger.done(task)
    if done is None or not done.manifest:
        dead = " (it was dead-lettered)" if done is not None else ""
        raise TaskNotDone(f"task {task} is not done{dead}: replay a done task, or name the "
                          "attempt (replay_attempt)", "dead-lettered" if dead else "running")
    return done.manifest


def _header(store: Store, key: str) -> Dict[str, Any]:
    """The recording's first value, its header; the rest read through
    too, so that the object's checksums are checked (flat memory)."""
    un = msgpack.Unpacker(raw=False, max_buffer_size=HEADER_MAX, strict_map_key=False)
    header: Any = None
    with store.open(key) as r:
        while True:
            chunk = r.read(1 << 20)
            if not chunk:
                break
            if header is None:
                try:
                    un.feed(chunk)
                    for v in un:
                        header = v
                        break
                except (ValueError, msgpack.UnpackException) as e:
                    raise InvalidMessage(f"recording {key}: not a recording: {e}") from None
    if not isinstance(header, dict) or header.get("schema") != "recording":
        raise InvalidMessage(f"recording {key}: its first value is not a recording's header")
    return header


def doc(ledger: Optional[Ledger], store: Store, task: str, attempt: Optional[int] = None,
        mode: Optional[str] = None, pace: Optional[str] = None,
        commit: Optional[str] = None) -> Dict[str, Any]:
    """The replay of ``task`` (its ``attempt``, else the one its
    done-marker names), without an id or submitted_at."""
    key = _manifest_key(ledger, task, attempt)
    try:
        m = codec.decode(store.get(key, MANIFEST_MAX), "manifest")
    except NotFound:
        raise NotFound(f"task {task}: no manifest {key}: no such attempt, or not done") from None
    rec = m.get("recording_key")
    if not rec:
        raise NotFound(f"{key} names no egress recording: its runtime recorded no endpoint "
                       '("record": true)')
    try:
        header = _header(store, rec)
    except NotFound:
        raise NotFound(f"task {task}: its recording {rec} is not in the store") from None
    t = header.get("task")
    if not isinstance(t, dict):
        raise InvalidMessage(f"recording {rec}: the recording keeps no task")
    out = dict(t)
    # a new task: its own id and time; the same questions
    out.pop("id", None)
    out.pop("submitted_at", None)
    out["replay_from"] = task
    how: Dict[str, Any] = {"attempt": m["attempt"]}
    if mode is not None:
        how["mode"] = mode
    if pace is not None:
        how["pace"] = pace
    out["replay"] = how
    if commit is not None:
        recipe = dict(out.get("recipe") or {})
        recipe["commit"] = commit
        out["recipe"] = recipe
    return out
