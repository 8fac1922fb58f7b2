#!/usr/bin/env python3
"""A taskbox producer in Python, written from schemas/ alone.

Submits one task (schemas/task.md) to the tasks topic, keyed by its id, and
with --wait reads the events topic (schemas/event.md) for it until the
attempt that settles it says `acknowledged`, printing the conversation and
the result. Needs `msgpack` and `confluent_kafka` (Debian: python3-msgpack,
python3-confluent-kafka).

    examples/producer.py --brokers 127.0.0.1:19092 \\
        --recipe https://git.example.com/recipes/hello.git --commit <40 hex> \\
        --prompt "Say hello" --wait
"""
import argparse
import sys
import time
import uuid

import msgpack
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def task_message(args, task_id):
    # Keys in the order schemas/task.md lists them; integers as integers.
    return {
        "schema": "task",
        "v": 1,
        "id": task_id,
        "kind": "interactive" if args.interactive else "one-shot",
        "recipe": {"url": args.recipe, "commit": args.commit},
        "prompt": args.prompt,
        "runtime": args.runtime,
        "submitted_at": int(time.time() * 1000),
    }


def submit(args, task_id):
    producer = Producer({"bootstrap.servers": args.brokers, "enable.idempotence": True})
    failed = []
    producer.produce(
        args.tasks_topic,
        key=task_id.encode(),
        value=msgpack.packb(task_message(args, task_id), use_bin_type=True),
        on_delivery=lambda err, msg: failed.append(err) if err else None,
    )
    if producer.flush(30) or failed:
        raise SystemExit(f"producer: not delivered: {failed or 'timed out'}")


def events_consumer(args, since_ms):
    """Every partition of the events topic from `since_ms`: no group joined."""
    consumer = Consumer({
        "bootstrap.servers": args.brokers,
        "group.id": f"producer-py-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
    })
    meta = consumer.list_topics(args.events_topic, timeout=10).topics[args.events_topic]
    if meta.error:
        raise SystemExit(f"events topic: {meta.error}")
    wanted = [TopicPartition(args.events_topic, p, since_ms) for p in meta.partitions]
    consumer.assign(consumer.offsets_for_times(wanted, timeout=10))
    return consumer


def follow(args, task_id, since_ms):
    """Prints the task's events until it is settled; returns its outcome."""
    consumer = events_consumer(args, since_ms)
    outcome = {}
    deadline = time.time() + args.timeout
    try:
        while time.time() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() or msg.key() != task_id.encode():
                continue
            ev = msgpack.unpackb(msg.value(), raw=False)
            if ev.get("schema") != "event" or ev.get("v") != 1:
                continue  # a newer version: skip what we cannot read
            payload, kind, attempt = ev["payload"], ev["type"], ev["attempt"]
            if kind == "phase":
                print(f"  #{ev['seq']:<3} phase {payload['phase']}")
            elif kind == "message":
                print(f"  #{ev['seq']:<3} {payload['role']}: {payload['text']}")
            elif kind == "verdict":
                print(f"  #{ev['seq']:<3} verdict {payload['judge']}: {payload['outcome']}")
            elif kind == "result":
                outcome[attempt] = payload["outcome"]
                print(f"  #{ev['seq']:<3} result {payload['outcome']} {payload.get('reason', '')}")
            elif kind == "error":
                print(f"  #{ev['seq']:<3} error [{payload['code']}] {payload['reason']}")
            if kind == "phase" and payload["phase"] == "acknowledged":
                # the settling attempt; no result means it was dead-lettered
                return outcome.get(attempt, "dead-lettered")
    finally:
        consumer.close()
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--brokers", required=True)
    p.add_argument("--tasks-topic", default="taskbox.tasks")
    p.add_argument("--events-topic", default="taskbox.events")
    p.add_argument("--recipe", required=True, help="git repository URL")
    p.add_argument("--commit", required=True, help="the pinned commit, 40 hex digits")
    p.add_argument("--prompt", required=True)
    p.add_argument("--runtime", default="default")
    p.add_argument("--id", help="the task id (default: a new one)")
    p.add_argument("--interactive", action="store_true")
    p.add_argument("--wait", action="store_true", help="follow the task until it is settled")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait at most")
    args = p.parse_args()

    task_id = args.id or f"py-{uuid.uuid4().hex[:16]}"
    since_ms = int(time.time() * 1000) - 2000  # the workers' clocks may lag a little
    try:
        submit(args, task_id)
        print(task_id, flush=True)
        if not args.wait:
            return 0
        outcome = follow(args, task_id, since_ms)
    except KafkaException as e:
        raise SystemExit(f"kafka: {e}")
    if outcome is None:
        print(f"task {task_id}: still not settled after {args.timeout:.0f} s", file=sys.stderr)
        return 8
    print(f"task {task_id}: {outcome}")
    return 0 if outcome == "succeeded" else 7 if outcome == "dead-lettered" else 6


if __name__ == "__main__":
    sys.exit(main())
