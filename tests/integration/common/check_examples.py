#!/usr/bin/env python3
"""A second implementation of the wire format, from schemas/ alone.

For every example in schemas/examples, encodes the JSON document with the
Python msgpack library following the rules in schemas/README.md (keys in
document order, shortest integers, float64 reals, {"$bin": base64} as bin)
and checks that the bytes equal the .hex file that taskbox's C codec
round-trips. Then decodes the .hex bytes and checks they equal the JSON.
If this passes, a producer or consumer in another language needs nothing
but schemas/ to speak taskbox's topics.
"""
import base64
import json
import pathlib
import sys

import msgpack


def to_wire(value):
    if isinstance(value, dict):
        if list(value) == ["$bin"]:
            return base64.b64decode(value["$bin"], validate=True)
        return {k: to_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_wire(v) for v in value]
    return value


def from_wire(value):
    if isinstance(value, bytes):
        return {"$bin": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    return value


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "schemas/examples")
    passed = failed = 0
    for js in sorted(root.glob("*.json")):
        doc = json.loads(js.read_text())
        want = bytes.fromhex(js.with_suffix(".hex").read_text())
        got = msgpack.packb(to_wire(doc), use_bin_type=True)
        back = from_wire(msgpack.unpackb(want, raw=False, strict_map_key=True))
        if got != want:
            print(f"FAIL {js.name}: Python encoding differs from the .hex file")
            print(f"  python: {got.hex()}\n  .hex:   {want.hex()}")
            failed += 1
        elif back != doc:
            print(f"FAIL {js.name}: decoding the .hex file does not give the JSON")
            failed += 1
        else:
            print(f"ok   {js.name} ({len(want)} bytes)")
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
