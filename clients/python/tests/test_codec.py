#!/usr/bin/env python3
"""The Python codec against the C one, on schemas/examples, and the
checks a producer relies on.

Every example's .hex decodes to its .json, and to what `taskbox schema
decode` makes of it; every .json encodes to the .hex bytes, which
`taskbox schema check` finds valid and canonical; a task and a follow-up
given in any key order come out as `taskbox schema encode` writes them.
What the C codec refuses, Python refuses before sending, naming the
field. The configuration is found and read as the command does.

Usage: test_codec.py TASKBOX SCHEMAS_EXAMPLES_DIR
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import msgpack  # noqa: E402

import taskbox  # noqa: E402
from taskbox import codec  # noqa: E402
from taskbox.config import load  # noqa: E402

TASKBOX = sys.argv[1] if len(sys.argv) > 1 else "taskbox"
EXAMPLES = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "schemas/examples")


def taskbox_cmd(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([TASKBOX, *args], input=stdin, capture_output=True, timeout=60)


def examples() -> list[tuple[pathlib.Path, dict, bytes]]:
    out = []
    for js in sorted(EXAMPLES.glob("*.json")):
        out.append((js, json.loads(js.read_text()), bytes.fromhex(js.with_suffix(".hex").read_text())))
    return out


class Conformance(unittest.TestCase):
    def test_every_example_decodes_to_its_json(self) -> None:
        self.assertTrue(examples(), f"no examples in {EXAMPLES}")
        for js, doc, wire in examples():
            with self.subTest(js.name):
                self.assertEqual(codec.to_json(codec.decode(wire)), doc)

    def test_decoding_agrees_with_taskbox_schema_decode(self) -> None:
        for js, _, wire in examples():
            with self.subTest(js.name):
                r = taskbox_cmd("schema", "decode", stdin=wire)
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                self.assertEqual(json.loads(r.stdout), codec.to_json(codec.decode(wire)))

    def test_every_example_encodes_to_its_hex_and_taskbox_accepts_it(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for js, doc, wire in examples():
                with self.subTest(js.name):
                    got = codec.encode(codec.canonical(doc["schema"], codec.from_json(doc)))
                    self.assertEqual(got.hex(), wire.hex())
                    path = os.path.join(tmp, js.stem + ".msgpack")
                    pathlib.Path(path).write_bytes(got)
                    files.append(path)
            r = taskbox_cmd("schema", "check", "--json", *files)
            self.assertEqual(r.returncode, 0, r.stdout.decode() + r.stderr.decode())
            for verdict in json.loads(r.stdout):
                self.assertEqual((verdict["ok"], verdict.get("canonical")), (True, True), verdict)

    def test_any_key_order_becomes_the_canonical_one(self) -> None:
        for js, doc, wire in examples():
            if doc["schema"] not in ("task", "followup"):
                continue
            with self.subTest(js.name):
                shuffled = dict(reversed(list(doc.items())))
                if "recipe" in shuffled:
                    shuffled["recipe"] = dict(reversed(list(doc["recipe"].items())))
                r = taskbox_cmd("schema", "encode", stdin=json.dumps(shuffled).encode())
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                self.assertEqual(codec.encode(codec.canonical(doc["schema"], shuffled)), r.stdout)
                self.assertEqual(r.stdout, wire)


TASK = {"id": "t-1", "kind": "one-shot",
        "recipe": {"url": "https://git.example.com/r.git", "commit": "0" * 40},
        "prompt": "p", "runtime": "default", "submitted_at": 1}


def with_(path: str, value: object) -> dict:
    doc = json.loads(json.dumps(TASK))
    *parents, last = path.split(".")
    at = doc
    for p in parents:
        at = at[p]
    at[last] = value
    return doc


class Refusals(unittest.TestCase):
    """What the C codec refuses, refused in Python, naming the field; and
    the C command refuses it too (one source of truth, two codecs)."""

    CASES = [
        ("recipe.commit", "abc123", "40 lowercase hex"),
        ("recipe.commit", "A" * 40, "40 lowercase hex"),
        ("id", "-x", "must not start with '-'"),
        ("id", "a b", "may hold only"),
        ("id", "", "at least 1 required"),
        ("kind", "batch", "not one of the allowed values"),
        ("runtime", "r" * 65, "at most 64 allowed"),
        ("prompt", "x" * (256 << 10 | 1), "at most 262144 allowed"),
        ("prompt", "nul\0here", "NUL"),
        ("labels", {"Team": "x"}, "label keys may hold only"),
        ("labels", {"k": "v" * 256}, "at most 255 allowed"),
        ("limits", {"wall_seconds": 0}, "outside 1..604800"),
        ("limits", {"memory_mb": -1}, "non-negative integer"),
        ("inputs", [{"name": "../x", "artifact": "a"}], "'..' path segments"),
        ("inputs", [{"name": "x", "artifact": "a", "task": "t"}], "give either"),
        ("inputs", [{"name": "x", "artifact": "a", "sha256": "0" * 63}], "at least 64"),
        ("replay_from", "t-1", "cannot replay itself"),
    ]

    def test_each_bad_field_is_refused_by_both_codecs(self) -> None:
        for path, value, why in self.CASES:
            with self.subTest(path=path, value=str(value)[:20]):
                doc = with_(path, value)
                with self.assertRaises(taskbox.InvalidMessage) as e:
                    codec.canonical("task", doc)
                self.assertIn(why, str(e.exception))
                if "replay" not in path:  # the field named, or one inside it
                    self.assertTrue((e.exception.field or "").startswith(path), e.exception.field)
                doc.update({"schema": "task", "v": 1})
                r = taskbox_cmd("schema", "encode", stdin=json.dumps(doc).encode())
                self.assertNotEqual(r.returncode, 0, f"taskbox took {path}={value!r}")

    def test_an_unknown_limit_is_refused_not_dropped(self) -> None:
        with self.assertRaises(taskbox.InvalidMessage) as e:
            codec.canonical("task", with_("limits", {"wall_second": 5}))
        self.assertIn("unknown key 'limits.wall_second'", str(e.exception))

    def test_decode_refuses_what_c_refuses(self) -> None:
        good = codec.encode(codec.canonical("task", TASK))
        bad = {
            "trailing bytes": good + b"\x00",
            "truncated": good[:-3],
            "not a map": msgpack.packb([1, 2]),
            "no schema": msgpack.packb({"v": 1}),
            "version 2": msgpack.packb({"schema": "task", "v": 2}),
            "duplicate key": good[:1] + b"\xa2id\xa1x" + good[1:],
            "too big": b"\x80" * ((1 << 20) + 1),
            "deep": msgpack.packb({"schema": "event", "v": 1, "payload": [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}),
        }
        for name, data in bad.items():
            with self.subTest(name):
                with self.assertRaises(taskbox.InvalidMessage):
                    codec.decode(data, "task" if name != "deep" else None)
                r = taskbox_cmd("schema", "check", "-", stdin=data)
                self.assertNotEqual(r.returncode, 0, f"taskbox accepted {name}")

    def test_followup_text_goes_with_its_kind(self) -> None:
        base = {"task_id": "c", "seq": 1, "sent_at": 1}
        with self.assertRaises(taskbox.InvalidMessage):
            codec.canonical("followup", {**base, "kind": "prompt"})
        with self.assertRaises(taskbox.InvalidMessage):
            codec.canonical("followup", {**base, "kind": "end", "text": "x"})
        with self.assertRaises(taskbox.InvalidMessage):
            codec.canonical("followup", {**base, "seq": 0, "kind": "end"})


class Configuration(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = pathlib.Path(self.tmp.name)

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def write(self, name: str, doc: object) -> str:
        p = self.dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(doc))
        return str(p)

    def test_which_file_as_the_command_finds_it(self) -> None:
        given = self.write("given.json", {"v": 1, "kafka": {"brokers": "given:1"}})
        named = self.write("named.json", {"v": 1, "kafka": {"brokers": "named:1"}})
        self.write("xdg/taskbox/config.json", {"v": 1, "kafka": {"brokers": "xdg:1"}})
        env = {"TASKBOX_CONFIG": named, "XDG_CONFIG_HOME": str(self.dir / "xdg")}
        self.assertEqual(load(given, env).brokers, "given:1")
        self.assertEqual(load(None, env).brokers, "named:1")
        del env["TASKBOX_CONFIG"]
        self.assertEqual(load(None, env).brokers, "xdg:1")

    def test_variables_win_over_the_file(self) -> None:
        f = self.write("c.json", {"v": 1, "kafka": {"brokers": "file:1", "tasks_topic": "t"},
                                  "ledger": {"url": "redis://h:1", "prefix": "p"}})
        cfg = load(f, {"TASKBOX_KAFKA_BROKERS": "env:2", "TASKBOX_LEDGER_PREFIX": "q"})
        self.assertEqual((cfg.brokers, cfg.tasks_topic, cfg.ledger_url, cfg.ledger_prefix),
                         ("env:2", "t", "redis://h:1", "q"))

    def test_what_the_command_refuses_is_refused(self) -> None:
        cases = {
            "misspelt.json": ({"v": 1, "kafka": {"broker": "x"}}, "unknown key 'kafka.broker'"),
            "noversion.json": ({"kafka": {}}, "key 'v'"),
            "v2.json": ({"v": 2}, "version 2"),
            "owned.json": ({"v": 1, "kafka": {"properties": {"group.id": "g"}}}, "set by taskbox"),
        }
        for name, (doc, why) in cases.items():
            with self.subTest(name):
                f = self.write(name, doc)
                with self.assertRaises(taskbox.ConfigError) as e:
                    load(f, {})
                self.assertIn(why, str(e.exception))
                r = taskbox_cmd("schema", "config", f)
                self.assertNotEqual(r.returncode, 0, f"taskbox took {name}")
        with self.assertRaises(taskbox.ConfigError):
            load(str(self.dir / "missing.json"), {})

    def test_a_client_refuses_the_mock_cluster(self) -> None:
        # made (uploads and artifacts need only the store), refused at
        # the first call that needs Kafka, before anything is sent
        client = taskbox.Client(load(None, {"HOME": str(self.dir)}))
        for call in (lambda: client.submit(recipe="r", commit="a" * 40, prompt="p"),
                     lambda: list(client.task("t-1").events()), client.dlq):
            with self.assertRaises(taskbox.ConfigError) as e:
                call()
            self.assertIn("'mock'", str(e.exception))


class Version(unittest.TestCase):
    def test_the_version_is_the_commands(self) -> None:
        r = taskbox_cmd("--version")
        self.assertEqual(r.returncode, 0)
        first = r.stdout.decode().splitlines()[0]  # taskbox X.Y.Z (commit ...)
        self.assertEqual(first.split()[1], taskbox.__version__)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
