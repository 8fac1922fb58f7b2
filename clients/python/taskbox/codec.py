"""The wire formats (schemas/README.md) in Python, as the C codec has them.

Each message kind is a table of fields, in the order its page lists them
(common/src/schema_*.c are the C tables; keep the two in step). From a
table come the three things a client needs:

- ``canonical(kind, doc)``: the document with its fields in table order,
  absent and empty optional fields left out, every field checked (type,
  range, identifier, relative path, commit, SHA-256, UTF-8 without NUL),
  so that what is refused is refused here, naming the field, before
  anything is sent;
- ``encode(doc)``: the canonical MessagePack bytes (shortest integers,
  float64 reals, str and bin types);
- ``decode(data)``: bytes to a dict, refusing what the C decoder refuses
  (over the size cap, truncated, trailing bytes, duplicate keys, deeper
  than 16, a missing or wrong field, an unknown schema or version).
  Unknown keys are kept and ignored, as a consumer must.

Not here: the meaning of a message (client.py, events.py).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import msgpack

from .errors import InvalidMessage

MAX_DEPTH = 16
PROMPT_MAX_BYTES = 256 << 10

# Whole message caps, per kind (each page's "Whole message").
MAX_BYTES = {
    "task": 1 << 20,
    "followup": 1 << 20,
    "event": (256 << 10) + 1024,
    "verdict": 16 << 10,
    "manifest": 8 << 20,
    "dlq": 2 << 20,
}

OUTCOMES = ("succeeded", "failed", "timed-out", "oom-killed", "pids-limit",
            "cancelled", "error", "budget")
EVENT_TYPES = ("phase", "message", "tool-call", "tool-result", "thought", "artifact",
               "verdict", "error", "egress", "turn", "result", "usage")

Check = Callable[[str], Optional[str]]  # a string's fault, or None


def _all_hex(s: str, n: int) -> bool:
    return len(s) == n and all(c in "0123456789abcdef" for c in s)


def check_commit(s: str) -> Optional[str]:
    return None if _all_hex(s, 40) else "expected a full commit id (40 lowercase hex digits)"


def check_sha256(s: str) -> Optional[str]:
    return None if _all_hex(s, 64) else "expected a SHA-256 (64 lowercase hex digits)"


_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_./")


def check_id(s: str) -> Optional[str]:
    if s[:1] in (".", "-"):
        return f"must not start with '{s[0]}'"
    if not set(s) <= _ID_CHARS:
        return "may hold only letters, digits, '-', '_' and '.'"
    return None


def check_label(s: str) -> Optional[str]:
    if not set(s) <= _LABEL_CHARS:
        return "label keys may hold only a-z, 0-9, '-', '_', '.' and '/'"
    return None


def check_relpath(s: str) -> Optional[str]:
    if s.startswith("/"):
        return "must be a relative path"
    if any(seg in ("", ".", "..") for seg in s.split("/")):
        return "empty, '.' and '..' path segments are not allowed"
    return None


# Field types, as the C codec's TB_FT_*.
STR, U64, F64, BOOL, ENUM, OBJ, LIST, STRMAP, MAP, BIN = (
    "string", "integer", "number", "boolean", "enum", "map", "list", "string map",
    "any map", "bytes")


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool = False
    lo: int = 0
    hi: int = 2**64 - 1
    check: Optional[Check] = None
    sub: Optional["Schema"] = None
    names: Tuple[str, ...] = ()
    item_hi: int = 0  # STRMAP: the longest key or value


@dataclass(frozen=True)
class Schema:
    name: str
    fields: Tuple[Field, ...]
    check: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None


def _s(name: str, lo: int, hi: int, check: Optional[Check] = None, required: bool = False) -> Field:
    return Field(name, STR, required, lo, hi, check)


def _u(name: str, lo: int = 0, hi: int = 2**64 - 1, required: bool = False) -> Field:
    return Field(name, U64, required, lo, hi)


def _e(name: str, names: Sequence[str], required: bool = False) -> Field:
    return Field(name, ENUM, required, names=tuple(names))


_RECIPE = Schema("recipe", (_s("url", 1, 2048, required=True),
                            _s("commit", 1, 40, check_commit, required=True)))


def _input_check(i: Mapping[str, Any]) -> Optional[str]:
    if ("task" in i or "path" in i) if "artifact" in i else not ("task" in i and "path" in i):
        return "give either 'artifact', or 'task' and 'path' (an earlier task's output)"
    return None


_INPUT = Schema("input", (
    _s("name", 1, 255, check_relpath, required=True),
    _s("artifact", 1, 1024, check_relpath),
    _s("task", 1, 128, check_id),
    _s("path", 1, 1024, check_relpath),
    _s("sha256", 64, 64, check_sha256),
    _s("blocks", 64, 64, check_sha256),
), _input_check)

LIMITS = Schema("limits", (
    _u("wall_seconds", 1, 7 * 86400), _u("memory_mb", 1, 1 << 20), _u("pids", 1, 1 << 20),
    _u("cpu_millis", 1, 1024000), _u("outputs_mb", 1, 1 << 20), _u("max_tokens", 1, 10**12),
    _u("max_requests", 1, 10**9), _u("max_egress_mb", 1, 1 << 30),
    _u("max_input_tokens", 1, 10**12), _u("max_output_tokens", 1, 10**12),
))

_REPLAY = Schema("replay", (_u("attempt", 1, 1000), _e("mode", ("strict", "fill")),
                            _e("pace", ("instant", "recorded"))))


def _task_check(t: Mapping[str, Any]) -> Optional[str]:
    if "replay" in t and "replay_from" not in t:
        return "field 'replay': needs 'replay_from'"
    if t.get("replay_from") is not None and t.get("replay_from") == t.get("id"):
        return "field 'replay_from': a task cannot replay itself"
    return None


TASK = Schema("task", (
    _s("id", 1, 128, check_id, required=True),
    _e("kind", ("one-shot", "interactive"), required=True),
    Field("recipe", OBJ, True, sub=_RECIPE),
    _s("prompt", 0, PROMPT_MAX_BYTES, required=True),
    Field("inputs", LIST, hi=64, sub=_INPUT),
    _s("runtime", 1, 64, check_id, required=True),
    Field("limits", OBJ, sub=LIMITS),
    Field("labels", STRMAP, hi=32, check=check_label, item_hi=255),
    _u("submitted_at", required=True),
    _s("replay_from", 1, 128, check_id),
    Field("replay", OBJ, sub=_REPLAY),
), _task_check)


def _followup_check(f: Mapping[str, Any]) -> Optional[str]:
    if f.get("kind") == "prompt" and "text" not in f:
        return "field 'text': required when kind is 'prompt'"
    if f.get("kind") == "end" and "text" in f:
        return "field 'text': not allowed when kind is 'end'"
    return None


FOLLOWUP = Schema("followup", (
    _s("task_id", 1, 128, check_id, required=True),
    _u("seq", 1, 1000000, required=True),
    _e("kind", ("prompt", "end"), required=True),
    _s("text", 0, PROMPT_MAX_BYTES),
    _u("sent_at", required=True),
), _followup_check)

EVENT = Schema("event", (
    _s("task_id", 1, 128, check_id, required=True),
    _u("attempt", 1, 1000, required=True),
    _u("seq", 0, 2**32 - 1, required=True),
    _u("ts", required=True),
    # a type this version does not know is skipped by consumers, not
    # refused (schemas/event.md, "Payloads")
    _s("type", 1, 64, required=True),
    _e("source", ("worker", "agent")),
    Field("payload", MAP, True, hi=256 << 10),
))

VERDICT = Schema("verdict", (
    _s("task_id", 1, 128, check_id, required=True),
    _u("attempt", 1, 1000, required=True),
    _s("judge", 1, 64, check_id, required=True),
    _e("outcome", ("pass", "fail", "error"), required=True),
    Field("score", F64, lo=0, hi=1),
    _s("reason", 0, 4096),
    _u("ts", required=True),
    _u("duration_ms", required=True),
))

_ARTIFACT = Schema("artifact", (_s("path", 1, 1024, check_relpath, True),
                                _s("key", 1, 1024, check_relpath, True), _u("size", required=True),
                                _s("sha256", 64, 64, check_sha256, True)))
_REFUSED = Schema("refused", (_s("path", 1, 1024, required=True),
                              _s("reason", 1, 256, required=True)))
_VREF = Schema("verdict", (_s("judge", 1, 64, check_id, True),
                           _e("outcome", ("pass", "fail", "error"), True),
                           _s("key", 1, 1024, check_relpath, True)))
_PHASE = Schema("phase", (_s("name", 1, 64, required=True), _u("at", required=True),
                          _u("duration_ms", required=True)))

MANIFEST = Schema("manifest", (
    _s("task_id", 1, 128, check_id, required=True),
    _u("attempt", 1, 1000, required=True),
    _e("outcome", OUTCOMES, required=True),
    _s("reason", 0, 4096),
    Field("recipe", OBJ, True, sub=_RECIPE),
    _u("started_at", required=True),
    _u("finished_at", required=True),
    _s("conversation_key", 1, 1024, check_relpath, True),
    _u("events", required=True),
    Field("artifacts", LIST, hi=10000, sub=_ARTIFACT),
    Field("refused", LIST, hi=10000, sub=_REFUSED),
    Field("verdicts", LIST, hi=64, sub=_VREF),
    _s("runtime", 1, 128, check_id),
    Field("phases", LIST, hi=32, sub=_PHASE),
    _u("turns", 0, 1000001),
    _u("followups", 0, 1000000),
    Field("environment", MAP, hi=8 << 20),
    Field("usage", MAP, hi=8 << 20),
    _s("recording_key", 1, 1024, check_relpath),
))

_DLQ_ATTEMPT = Schema("attempt", (_s("worker", 1, 128, required=True),
                                  _u("attempt", 1, 1000, required=True), _u("ts", required=True),
                                  _s("reason", 1, 4096, required=True)))
DLQ = Schema("dlq", (
    _s("task_id", 1, 128, check_id),
    _e("cause", ("malformed", "poison", "max-attempts", "orphan"), required=True),
    _s("reason", 1, 4096, required=True),
    _s("topic", 1, 249, required=True),
    _u("partition"),
    _u("offset"),
    _u("ts", required=True),
    Field("attempts", LIST, hi=1000, sub=_DLQ_ATTEMPT),
    Field("original", BIN, True, hi=1 << 20),
))

SCHEMAS: Dict[str, Schema] = {s.name: s for s in (TASK, FOLLOWUP, EVENT, VERDICT, MANIFEST, DLQ)}


def _fail(path: str, why: str) -> InvalidMessage:
    return InvalidMessage(f"field '{path}': {why}", path)


def _type_name(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "a negative integer" if v < 0 else "an integer"
    if isinstance(v, float):
        return "a float"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (bytes, bytearray)):
        return "binary data"
    if isinstance(v, (list, tuple)):
        return "an array"
    if isinstance(v, Mapping):
        return "a map"
    return type(v).__name__


def _string(v: Any, lo: int, hi: int, check: Optional[Check], path: str) -> str:
    if not isinstance(v, str):
        raise _fail(path, f"expected a string, got {_type_name(v)}")
    try:
        n = len(v.encode("utf-8"))
    except UnicodeEncodeError:
        raise _fail(path, "not valid UTF-8 (or contains NUL)") from None
    if n > hi:
        raise _fail(path, f"{n} bytes, at most {hi} allowed")
    if n < lo:
        raise _fail(path, f"{n} bytes, at least {lo} required")
    if "\0" in v:
        raise _fail(path, "not valid UTF-8 (or contains NUL)")
    why = check(v) if check else None
    if why:
        raise _fail(path, why)
    return v


def _field(f: Field, v: Any, path: str, strict: bool) -> Any:
    if f.type == STR:
        return _string(v, f.lo, f.hi, f.check, path)
    if f.type == U64:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise _fail(path, f"expected a non-negative integer, got {_type_name(v)}")
        if not f.lo <= v <= f.hi:
            raise _fail(path, f"{v} is outside {f.lo}..{f.hi}")
        return v
    if f.type == F64:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _fail(path, f"expected a number, got {_type_name(v)}")
        if not f.lo <= v <= f.hi:
            raise _fail(path, f"{v:g} is outside {f.lo}..{f.hi}")
        return float(v)
    if f.type == BOOL:
        if not isinstance(v, bool):
            raise _fail(path, f"expected a boolean, got {_type_name(v)}")
        return v
    if f.type == ENUM:
        if not isinstance(v, str):
            raise _fail(path, f"expected a string, got {_type_name(v)}")
        if v not in f.names:
            raise _fail(path, f"'{v[:64]}' is not one of the allowed values ({', '.join(f.names)})")
        return v
    if f.type == OBJ:
        assert f.sub is not None
        return _fields(f.sub, v, path, strict)
    if f.type == LIST:
        assert f.sub is not None
        if not isinstance(v, (list, tuple)):
            raise _fail(path, f"expected an array, got {_type_name(v)}")
        if len(v) > f.hi:
            raise _fail(path, f"{len(v)} entries, at most {f.hi} allowed")
        return [_fields(f.sub, e, f"{path}[{i}]", strict) for i, e in enumerate(v)]
    if f.type == STRMAP:
        if not isinstance(v, Mapping):
            raise _fail(path, f"expected a map, got {_type_name(v)}")
        if len(v) > f.hi:
            raise _fail(path, f"{len(v)} entries, at most {f.hi} allowed")
        out: Dict[str, str] = {}
        for i, (k, val) in enumerate(v.items()):
            out[_string(k, 1, f.item_hi, f.check, f"{path} key {i}")] = _string(
                val, 0, f.item_hi, None, f"{path}.{k}")
        return out
    if f.type == MAP:
        if not isinstance(v, Mapping):
            raise _fail(path, f"expected a map, got {_type_name(v)}")
        # any MessagePack inside (an agent's tool input may hold nil)
        n = len(msgpack.packb(v, use_bin_type=True))
        if n > f.hi:
            raise _fail(path, f"{n} bytes, at most {f.hi} allowed")
        return dict(v)
    if f.type == BIN:
        if not isinstance(v, (bytes, bytearray)):
            raise _fail(path, f"expected binary data, got {_type_name(v)}")
        if len(v) > f.hi:
            raise _fail(path, f"{len(v)} bytes, at most {f.hi} allowed")
        return bytes(v)
    raise _fail(path, "unsupported type")  # pragma: no cover


def _fields(s: Schema, doc: Any, path: str, strict: bool) -> Dict[str, Any]:
    if not isinstance(doc, Mapping):
        raise InvalidMessage(f"{path or s.name}: expected a map, got {_type_name(doc)}", path or None)
    known = {f.name for f in s.fields}
    for k in doc:
        if not isinstance(k, str):
            raise InvalidMessage(f"{path or s.name}: a map key is {_type_name(k)}, expected a string")
        if strict and k not in known and not (not path and k in ("schema", "v")):
            sub = f"{path}.{k}" if path else k
            raise InvalidMessage(f"unknown key '{sub}' (the {s.name} has: {', '.join(sorted(known))})",
                                 sub)
    out: Dict[str, Any] = {}
    for f in s.fields:
        sub = f"{path}.{f.name}" if path else f.name
        if f.name not in doc:
            if f.required:
                raise _fail(sub, "required but missing")
            continue
        v = _field(f, doc[f.name], sub, strict)
        # absent optional fields, and empty optional lists and maps, are
        # left out (schemas/README.md, "Canonical form")
        if not f.required and f.type in (OBJ, LIST, STRMAP) and not v:
            continue
        out[f.name] = v
    why = s.check(out) if s.check else None
    if why:
        raise InvalidMessage(f"{path}: {why}" if path else why, path or None)
    return out


def canonical(kind: str, doc: Mapping[str, Any], strict: bool = True) -> Dict[str, Any]:
    """``doc`` (a message of ``kind``, with or without its ``schema`` and
    ``v``) checked and in canonical order, ``schema`` and ``v`` first.
    ``strict``: a key the table does not have is refused (what a producer
    wants: a misspelt limit would otherwise be dropped); else dropped.
    Raises InvalidMessage naming the field."""
    s = SCHEMAS.get(kind)
    if s is None:
        raise InvalidMessage(f"field 'schema': unknown message kind '{kind}'", "schema")
    if doc.get("schema", kind) != kind:
        raise InvalidMessage(f"{kind}: message is a '{doc.get('schema')}', not a '{kind}'", "schema")
    if doc.get("v", 1) != 1:
        raise InvalidMessage(f"field 'v': version {doc.get('v')} is not supported (this reads 1)", "v")
    out: Dict[str, Any] = {"schema": kind, "v": 1}
    out.update(_fields(s, doc, "", strict))
    n = len(encode(out))
    if n > MAX_BYTES[kind]:
        raise InvalidMessage(f"{kind}: {n} bytes, at most {MAX_BYTES[kind]} allowed")
    return out


def _plain(v: Any, depth: int) -> None:
    """Refuses what a message cannot hold (negative integers, None, other
    objects, non-string keys, nesting past 16)."""
    if depth > MAX_DEPTH:
        raise InvalidMessage(f"message: nested deeper than {MAX_DEPTH}")
    if isinstance(v, Mapping):
        for k, e in v.items():
            if not isinstance(k, str):
                raise InvalidMessage(f"message: a map key is {_type_name(k)}, expected a string")
            _plain(e, depth + 1)
    elif isinstance(v, (list, tuple)):
        for e in v:
            _plain(e, depth + 1)
    elif isinstance(v, bool) or isinstance(v, (str, float, bytes, bytearray)):
        return
    elif isinstance(v, int):
        if not 0 <= v < 2**64:
            raise InvalidMessage(f"message: integer {v} is outside 0..2^64-1")
    else:
        raise InvalidMessage(f"message: cannot encode {_type_name(v)}")


def encode(doc: Mapping[str, Any]) -> bytes:
    """The MessagePack bytes of ``doc``, keys in the order given (run it
    through ``canonical`` first for a message's own order)."""
    _plain(doc, 1)
    out = msgpack.packb(doc, use_bin_type=True)
    assert isinstance(out, bytes)
    return out


def _no_duplicates(pairs: List[Tuple[Any, Any]]) -> Dict[Any, Any]:
    d: Dict[Any, Any] = {}
    for k, v in pairs:
        if k in d:
            raise InvalidMessage(f"field '{k}': appears twice", str(k))
        d[k] = v
    return d


def _depth(v: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InvalidMessage(f"message: nested deeper than {MAX_DEPTH}")
    if isinstance(v, dict):
        for e in v.values():
            _depth(e, depth + 1)
    elif isinstance(v, list):
        for e in v:
            _depth(e, depth + 1)
    elif isinstance(v, str) and "\0" in v:
        raise InvalidMessage("message: a string contains NUL")


def decode(data: bytes, kind: Optional[str] = None) -> Dict[str, Any]:
    """A message's bytes as a dict, checked as the C decoder checks them
    (its kind's table; unknown keys kept). ``kind``: the kind expected
    (else any). Raises InvalidMessage."""
    cap = MAX_BYTES[kind] if kind in MAX_BYTES else max(MAX_BYTES.values())
    what = kind or "message"
    if len(data) > cap:
        raise InvalidMessage(f"{what}: {len(data)} bytes, at most {cap} allowed")
    if not data:
        raise InvalidMessage(f"{what}: empty, where a MessagePack map was expected")
    try:
        doc = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True, use_list=True,
                              object_pairs_hook=_no_duplicates)
    except InvalidMessage:
        raise
    except msgpack.ExtraData:
        raise InvalidMessage(f"{what}: trailing bytes after the message") from None
    except UnicodeDecodeError:
        raise InvalidMessage(f"{what}: a string is not valid UTF-8") from None
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise InvalidMessage(f"{what}: not valid MessagePack ({e})") from None
    if not isinstance(doc, dict):
        raise InvalidMessage(f"{what}: expected a map, got {_type_name(doc)}")
    _depth(doc, 1)
    got = doc.get("schema")
    if got is None:
        raise InvalidMessage("field 'schema': required but missing", "schema")
    if not isinstance(got, str):
        raise InvalidMessage(f"field 'schema': expected a string, got {_type_name(got)}", "schema")
    if got not in SCHEMAS:
        raise InvalidMessage(f"field 'schema': unknown message kind '{got[:64]}'", "schema")
    if kind and got != kind:
        raise InvalidMessage(f"{kind}: message is a '{got}', not a '{kind}'", "schema")
    if "v" not in doc:
        raise InvalidMessage("field 'v': required but missing", "v")
    if doc["v"] != 1 or isinstance(doc["v"], bool):
        raise InvalidMessage(f"field 'v': version {doc['v']} is not supported (this reads 1)", "v")
    if len(data) > MAX_BYTES[got]:
        raise InvalidMessage(f"{got}: {len(data)} bytes, at most {MAX_BYTES[got]} allowed")
    _fields(SCHEMAS[got], doc, "", strict=False)  # checks; unknown keys stay in doc
    return doc


def to_json(v: Any) -> Any:
    """A decoded value as the JSON examples write it: bin as
    {"$bin": base64} (schemas/README.md, "Types")."""
    if isinstance(v, (bytes, bytearray)):
        return {"$bin": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, Mapping):
        return {k: to_json(e) for k, e in v.items()}
    if isinstance(v, list):
        return [to_json(e) for e in v]
    return v


def from_json(v: Any) -> Any:
    """The reverse of ``to_json``: {"$bin": base64} as bytes."""
    if isinstance(v, Mapping):
        if list(v) == ["$bin"]:
            return base64.b64decode(v["$bin"], validate=True)
        return {k: from_json(e) for k, e in v.items()}
    if isinstance(v, list):
        return [from_json(e) for e in v]
    return v
