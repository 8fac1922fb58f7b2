#!/usr/bin/env python3
"""A taskbox producer in Python, on the taskbox package (clients/python,
docs/python.md): uploads its inputs, submits one task, and with --wait
follows its events, prints the conversation, the verdicts and what it
used, and downloads its artifacts.

    pip install clients/python        # or run from the repository as is
    examples/producer.py --config /tmp/tour/config.json \\
        --recipe file:///tmp/tour/hello --commit <40 hex> --prompt world \\
        --input notes.txt=@notes.txt --wait --download out/
    examples/producer.py --config ... --replay-from TASK --wait

The configuration is found as `taskbox` finds it (--config, else
TASKBOX_CONFIG, ~/.config/taskbox/config.json, /etc/taskbox/worker.json,
with the TASKBOX_* variables over it); the store's keys come from
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Exit: 0 submitted (with
--wait: succeeded), 1 a service failed, 2 usage, 3 configuration, 4 the
task is invalid, 6 it ended without success, 7 dead-lettered, 8 --timeout
passed first (the task goes on): as `taskbox submit`.
"""
import argparse
import pathlib
import sys

try:
    import taskbox
except ImportError:  # run from the repository, the package not installed
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "clients" / "python"))
    import taskbox


def inputs_of(client, specs):
    """--input NAME=@PATH (uploaded), NAME=TASK:PATH or NAME=KEY, as
    `taskbox submit --input` reads them."""
    out = []
    for spec in specs:
        name, eq, what = spec.partition("=")
        if not eq or not name:
            raise SystemExit(f"producer: --input wants NAME=VALUE, not '{spec}'")
        if what.startswith("@"):
            for up in client.upload(what[1:], name=name):
                print(f"{'uploaded' if up.uploaded else 'already there:'} {up.name} ({up.key})",
                      file=sys.stderr)
                out.append(up)
        elif ":" in what and ("/" not in what or what.index(":") < what.index("/")):
            task, _, path = what.partition(":")
            out.append({"name": name, "task": task, "path": path})
        else:
            out.append({"name": name, "artifact": what})
    return out


def pairs(specs, flag):
    out = {}
    for spec in specs:
        k, eq, v = spec.partition("=")
        if not eq or not k:
            raise SystemExit(f"producer: {flag} wants KEY=VALUE, not '{spec}'")
        out[k] = v
    return out


def show(ev):
    p = ev.payload
    if ev.type == "phase":
        return f"phase {p['phase']}"
    if ev.type == "message":
        return f"{p['role']}: {p['text']}"
    if ev.type == "verdict":
        return f"verdict {p['judge']}: {p['outcome']}"
    if ev.type == "artifact":
        return f"artifact {p.get('path', '')}"
    if ev.type == "result":
        return f"result {p['outcome']} {p.get('reason', '')}".rstrip()
    if ev.type == "error":
        return f"error [{p.get('code', '')}] {p.get('reason', '')}"
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", help="the configuration file (as taskbox --config)")
    p.add_argument("--recipe", help="git repository URL")
    p.add_argument("--commit", help="the pinned commit, 40 hex digits")
    p.add_argument("--prompt")
    p.add_argument("--runtime")
    p.add_argument("--id", help="the task id (default: a new one)")
    p.add_argument("--interactive", action="store_true")
    p.add_argument("--input", action="append", default=[], metavar="NAME=@PATH|TASK:PATH|KEY")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--limit", action="append", default=[], metavar="KEY=N")
    p.add_argument("--replay-from", metavar="TASK", help="replay a done task's recording")
    p.add_argument("--wait", action="store_true", help="follow the task until it is settled")
    p.add_argument("--timeout", type=float, help="with --wait: seconds to wait at most")
    p.add_argument("--download", metavar="DIR", help="with --wait: save its artifacts here")
    args = p.parse_args()

    try:
        with taskbox.Client(args.config) as client:
            if args.replay_from:
                task = client.submit(replay_from=args.replay_from, id=args.id, commit=args.commit)
            else:
                if not (args.recipe and args.commit and args.prompt is not None):
                    p.error("--recipe, --commit and --prompt are needed (or --replay-from)")
                task = client.submit(
                    recipe=args.recipe, commit=args.commit, prompt=args.prompt,
                    runtime=args.runtime, id=args.id,
                    kind="interactive" if args.interactive else "one-shot",
                    inputs=inputs_of(client, args.input),
                    labels=pairs(args.label, "--label"),
                    limits={k: int(v) for k, v in pairs(args.limit, "--limit").items()})
            print(task.id, flush=True)
            if not args.wait:
                return 0
            for ev in task.events(timeout=args.timeout):
                line = show(ev)
                if line:
                    print(f"  #{ev.seq:<3} {line}", flush=True)
            result = task.wait()
            print(f"task {task.id}: {result.outcome} (attempt {result.attempt})"
                  f"{': ' + result.reason if result.reason else ''}")
            for v in result.verdicts:
                print(f"  verdict {v.judge}: {v.outcome} {v.reason}".rstrip())
            if result.usage:
                print(f"  used {result.usage.get('wall_ms', 0)} ms")
            if args.download and result.manifest is not None:
                for a in task.artifacts():
                    where = pathlib.Path(args.download) / a.path
                    where.parent.mkdir(parents=True, exist_ok=True)
                    print(f"  saved {a.download(where)}")
    except taskbox.TaskTimeout as e:
        print(f"producer: {e}", file=sys.stderr)
        return 8
    except taskbox.ConfigError as e:
        print(f"producer: {e}", file=sys.stderr)
        return 3
    except (taskbox.InvalidMessage, taskbox.UsageError, taskbox.UploadError) as e:
        print(f"producer: {e}", file=sys.stderr)
        return 4 if isinstance(e, taskbox.InvalidMessage) else 2
    except taskbox.TaskboxError as e:
        print(f"producer: {e}", file=sys.stderr)
        return 1
    if result.succeeded:
        return 0
    return 7 if result.outcome == "dead-lettered" else 6


if __name__ == "__main__":
    sys.exit(main())
