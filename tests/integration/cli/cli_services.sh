#!/usr/bin/env bash
# The taskbox command end to end against the real services, as a producer
# and an operator use it: a worker runs; `submit --wait` follows a task to
# its outcome; `watch` replays its events; `status` and `artifacts` read
# its record; a shared URL downloads an artifact with curl and has the
# form schemas/keys.md documents (its signature recomputed); a task
# dead-lettered for a missing runtime is sent back with `dlq send` after
# the runtime is added, and succeeds; an artifact replaced behind the
# store's back is refused against the manifest. Topics, bucket, ledger prefix and
# group are this run's own. Usage: cli_services.sh TASKBOX SOURCE_DIR
set -u
tb=$1 root=$2
if [ -z "${TASKBOX_TEST_KAFKA:-}" ] || [ -z "${TASKBOX_TEST_S3_ENDPOINT:-}" ]; then
  echo "skipped: TASKBOX_TEST_* not set (tests/run starts the services)"
  exit 77
fi
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# expect NAME WANT_EXIT OUT CMD...: runs CMD, stdout to OUT, stderr to OUT.err
expect() {
  local name=$1 want=$2 out=$3; shift 3
  "$@" >"$out" 2>"$out.err"; local got=$?
  if [ "$got" = "$want" ]; then ok; else
    bad "$name: exit $got, wanted $want"; tail -20 "$out" "$out.err"; fi
}
has() { # has NAME NEEDLE OUT: in what the command wrote to stdout or stderr
  if cat "$3" "$3.err" 2>/dev/null | grep -qF -- "$2"; then ok; else
    bad "$1: '$2' not in $3:"; tail -20 "$3" "$3.err" 2>/dev/null; fi
}

run=tbcli-$$
tmp=$(mktemp -d /tmp/tb-cli-XXXXXX)
chmod 711 "$tmp" # the sandboxes' users pass through to their work dirs
worker= provider=
cleanup() {
  if [ -n "$worker" ] && kill -0 "$worker" 2>/dev/null; then
    kill "$worker"; wait "$worker"
  fi
  if [ -n "$provider" ] && kill -0 "$provider" 2>/dev/null; then
    kill "$provider"; wait "$provider"
  fi
  [ "${KEEP:-}" ] || { [ "$fail" = 0 ] && rm -rf "$tmp"; }
}
trap cleanup EXIT

"$root/deploy/local/services" topic "$run.tasks:4" "$run.events:4" "$run.dlq:1" || exit 1
export AWS_ACCESS_KEY_ID=$TASKBOX_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$TASKBOX_TEST_S3_SECRET_KEY
curl -sf -X PUT --aws-sigv4 "aws:amz:$TASKBOX_TEST_S3_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$TASKBOX_TEST_S3_ENDPOINT/$run" || {
  echo "cannot create bucket $run"; exit 1; }

# The hello recipe in a repository of our own, pinned.
git init -q "$tmp/hello" && cp -r "$root/examples/recipes/hello/." "$tmp/hello/" &&
  git -C "$tmp/hello" add -A && git -C "$tmp/hello" -c user.name=t -c user.email=t@t commit -qm hello || exit 1
commit=$(git -C "$tmp/hello" rev-parse HEAD)
mkdir -p "$tmp/runtimes" && cp "$root/examples/runtimes/default.json" "$tmp/runtimes/"
cfg=$tmp/worker.json
cat >"$cfg" <<EOF
{
  "v": 1, "worker_id": "$run", "slots": 2, "log_level": "info",
  "kafka": {"brokers": "$TASKBOX_TEST_KAFKA", "group": "$run", "tasks_topic": "$run.tasks",
            "events_topic": "$run.events", "dlq_topic": "$run.dlq"},
  "ledger": {"url": "$TASKBOX_TEST_REDIS", "prefix": "$run", "lease_ms": 6000},
  "store": {"url": "s3://$run", "endpoint": "$TASKBOX_TEST_S3_ENDPOINT",
            "region": "$TASKBOX_TEST_S3_REGION"},
  "runtimes_dir": "$tmp/runtimes", "work_dir": "$tmp/work", "cache_dir": "$tmp/cache",
  "metrics_listen": "127.0.0.1:0"
}
EOF
"$tb" worker --config "$cfg" >"$tmp/worker.log" 2>&1 &
worker=$!
# The metrics endpoint's port, from the worker's log (port 0: any free one).
for _ in $(seq 100); do
  port=$(sed -n 's/.*metrics on .*, port \([0-9]*\).*/\1/p' "$tmp/worker.log")
  [ -n "$port" ] && break; sleep 0.1
done
metric() { # metric NAME_AND_LABELS: its value now
  curl -sf "http://127.0.0.1:$port/metrics" | awk -v k="$1" '$1 == k { print $2 }'
}
submit=("$tb" submit --config "$cfg" --recipe "file://$tmp/hello" --commit "$commit")

# submit --wait: phases live, the conversation, the verdicts, the outcome.
expect "submit --wait succeeds" 0 "$tmp/submit.out" \
  "${submit[@]}" --prompt world --label team=cli --wait --timeout 180
id=$(head -1 "$tmp/submit.out")
for needle in "phase received" "assistant: hello, queue!" "verdict wrote-greeting: pass" \
  "verdict file-says-hello: pass" "artifact hello.txt" "result succeeded" \
  "phase acknowledged" "task $id: succeeded (attempt 1)"; do
  has "submit --wait shows '$needle'" "$needle" "$tmp/submit.out"
done

# The worker's metrics count it.
[ "$(metric 'taskbox_tasks_total{outcome="succeeded"}')" = 1 ] && ok || bad "metrics: 1 succeeded"
[ "$(metric 'taskbox_sandbox_launch_seconds_count')" = 1 ] && ok || bad "metrics: 1 sandbox launch"
[ "$(metric 'taskbox_phase_duration_seconds_count{phase="judged"}')" = 1 ] && ok ||
  bad "metrics: the judged phase timed once"
[ "$(metric 'taskbox_events_total')" -ge 20 ] 2>/dev/null && ok || bad "metrics: events counted"
# ... and each step inside its phases, once (docs/operating.md)
for step in ledger_begin recipe egress_start store_record store_manifest events_delivered \
  done_marker teardown teardown_wait; do
  [ "$(metric "taskbox_step_duration_seconds_count{step=\"$step\"}")" = 1 ] && ok ||
    bad "metrics: the step $step timed once"
done

# A producer in Python, on the taskbox package (clients/python), run from
# the repository: submits a task with an uploaded input, follows its
# events to the outcome, and saves its artifacts.
if python3 -c 'import confluent_kafka, msgpack, botocore' 2>/dev/null; then
  printf 'a note\n' >"$tmp/note.txt"
  expect "examples/producer.py --wait" 0 "$tmp/py.out" python3 "$root/examples/producer.py" \
    --config "$cfg" --recipe "file://$tmp/hello" --commit "$commit" --prompt "from python" \
    --input "note.txt=@$tmp/note.txt" --wait --timeout 120 --download "$tmp/py-out"
  has "python sees the conversation" "assistant: hello, queue!" "$tmp/py.out"
  has "python sees the outcome" ": succeeded" "$tmp/py.out"
  has "python uploaded its input" "uploaded note.txt (uploads/" "$tmp/py.out"
  if grep -qF "hello, queue!" "$tmp/py-out/hello.txt" 2>/dev/null; then ok; else
    bad "python saved the artifact"; fi
else
  bad "python3 has no confluent_kafka, msgpack or botocore (tests/run installs them)"
fi

# watch: the same task's events again, as JSON lines, in order.
expect "watch --json" 0 "$tmp/watch.json" "$tb" watch --config "$cfg" --json --timeout 60 "$id"
if python3 - "$tmp/watch.json" "$id" <<'EOF'; then ok; else bad "watch --json lines"; fi
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert evs and all(e["task_id"] == sys.argv[2] for e in evs), evs
assert [e["seq"] for e in evs] == list(range(len(evs))), [e["seq"] for e in evs]
assert evs[-1]["type"] == "phase" and evs[-1]["payload"]["phase"] == "acknowledged"
assert any(e["type"] == "result" and e["payload"]["outcome"] == "succeeded" for e in evs)
EOF
expect "watch every task for 3 s" 0 "$tmp/watch-all.out" \
  "$tb" watch --config "$cfg" --since 600 --timeout 3
has "watch shows every task" "$id" "$tmp/watch-all.out"

# status and artifacts read the record.
expect "status of the task" 0 "$tmp/status.out" "$tb" status --config "$cfg" "$id"
has "status says done" "task $id: done" "$tmp/status.out"
has "status lists the artifact" "artifact  hello.txt" "$tmp/status.out"
has "status says what the task used" "  used      " "$tmp/status.out"
has "status says its CPU" "CPU: agent " "$tmp/status.out"
expect "status of the task as JSON" 0 "$tmp/status.json" \
  "$tb" status --config "$cfg" --json "$id"
if python3 -c 'import json,sys; u=json.load(open(sys.argv[1]))["manifest"]["usage"]; assert u["wall_ms"] > 0 and "agent" in u, u' \
  "$tmp/status.json"; then ok; else bad "status --json carries the manifest's usage"; fi
expect "status of the fleet" 0 "$tmp/fleet.out" "$tb" status --config "$cfg"
has "the fleet has our worker" "$run" "$tmp/fleet.out"
has "and its image cache" "image cache: 0 images" "$tmp/fleet.out"
expect "artifacts list" 0 "$tmp/list.out" "$tb" artifacts list --config "$cfg" "$id"
has "artifacts list names hello.txt" "hello.txt" "$tmp/list.out"
expect "artifacts get" 0 "$tmp/get.out" \
  "$tb" artifacts get -c "$cfg" --output "$tmp/got.txt" "$id" hello.txt
if grep -qF "hello, queue! (task $id, attempt 1)" "$tmp/got.txt"; then ok; else
  bad "the artifact is the agent's file"; fi
expect "artifacts get of a missing file" 5 "$tmp/get-missing.out" \
  "$tb" artifacts get --config "$cfg" -o "$tmp/nope" "$id" nope.txt
expect "artifacts of an unknown task" 5 "$tmp/list-unknown.out" \
  "$tb" artifacts list --config "$cfg" "no-such-task"
expect "artifacts share" 0 "$tmp/share.out" \
  "$tb" artifacts share --config "$cfg" --expires 60 "$id" hello.txt
if curl -sf "$(cat "$tmp/share.out")" -o "$tmp/shared.txt" && cmp -s "$tmp/shared.txt" "$tmp/got.txt"
then ok; else bad "the shared URL downloads the artifact"; fi
expect "share with a bad lifetime" 2 "$tmp/share-bad.out" \
  "$tb" artifacts share --config "$cfg" --expires 0 "$id" hello.txt

# The artifact replaced behind the store's back by other bytes, with their
# own checksums as the record: the store finds nothing wrong, the manifest
# does. artifacts get compares the SHA-256 of what arrived with the
# manifest's, refuses, and keeps no file.
expect "artifacts list --json" 0 "$tmp/list.json" \
  "$tb" artifacts list --config "$cfg" --json "$id"
forged=$(python3 - "$tmp/list.json" "$tmp/forged.txt" <<'EOF'
import hashlib, json, sys
a = next(x for x in json.load(open(sys.argv[1]))["artifacts"] if x["path"] == "hello.txt")
body = b"not what the agent wrote\n"
open(sys.argv[2], "wb").write(body)
table = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
crc = 0xFFFFFFFF
for b in body:
    crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
print(a["key"], a["sha256"], hashlib.sha256(body).hexdigest(), "%08x" % (crc ^ 0xFFFFFFFF))
EOF
)
read -r fkey msha fsha fcrc <<<"$forged"
# the shared URL is what schemas/keys.md says, signature and all
if python3 "$root/tests/integration/cli/check_share_url.py" "$(cat "$tmp/share.out")" \
  "$TASKBOX_TEST_S3_ENDPOINT" "$run" "$fkey" "$TASKBOX_TEST_S3_REGION" 60
then ok; else bad "the shared URL has the form schemas/keys.md documents"; fi
if [ -n "$fcrc" ] && curl -sf -X PUT --aws-sigv4 "aws:amz:$TASKBOX_TEST_S3_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
  -H "x-amz-meta-sha256: $fsha" -H "x-amz-meta-crc32c: $fcrc" --data-binary "@$tmp/forged.txt" \
  "$TASKBOX_TEST_S3_ENDPOINT/$run/$fkey"; then ok; else bad "replace $fkey behind the store"; fi
expect "artifacts get of replaced content" 1 "$tmp/get-forged.out" \
  "$tb" artifacts get --config "$cfg" -o "$tmp/forged-got.txt" "$id" hello.txt
has "and says the manifest disagrees" "has sha256 $fsha, the manifest says $msha" \
  "$tmp/get-forged.out"
if [ ! -e "$tmp/forged-got.txt" ]; then ok; else bad "a refused download left a file"; fi

# Bad input: refused before anything is sent.
expect "submit refuses a short commit" 4 "$tmp/bad.out" \
  "$tb" submit --config "$cfg" --recipe "file://$tmp/hello" --commit abc123 --prompt x
has "and names the field" "commit" "$tmp/bad.out"
expect "submit without a prompt" 2 "$tmp/usage.out" \
  "$tb" submit --config "$cfg" --recipe "file://$tmp/hello" --commit "$commit"
expect "submit to the mock cluster" 3 "$tmp/mock.out" \
  env TASKBOX_KAFKA_BROKERS=mock "${submit[@]}" --prompt x

# A runtime the worker lacks: dead-lettered; added; sent back; succeeds.
expect "submit --wait of a dead letter" 7 "$tmp/dead.out" \
  "${submit[@]}" --prompt again --runtime later --wait --timeout 180
dead=$(head -1 "$tmp/dead.out")
has "the dead letter's reason" "unknown runtime 'later'" "$tmp/dead.out"
expect "dlq list" 0 "$tmp/dlq.json" "$tb" dlq list --config "$cfg" --json
at=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["task"] == sys.argv[2]:
        print("%d:%d" % (r["partition"], r["offset"]))' "$tmp/dlq.json" "$dead")
if [ -n "$at" ]; then ok; else bad "dlq list has $dead"; cat "$tmp/dlq.json"; fi
sed 's/"name": "default"/"name": "later"/' "$root/examples/runtimes/default.json" >"$tmp/runtimes/later.json"
expect "dlq send" 0 "$tmp/send.out" "$tb" dlq send --config "$cfg" "$at"
expect "watch the task sent back" 0 "$tmp/revived.out" "$tb" watch --config "$cfg" --timeout 180 "$dead"
has "it succeeded" "task $dead: succeeded (attempt 2)" "$tmp/revived.out"

[ "$(metric 'taskbox_dlq_messages_total{cause="poison"}')" = 1 ] && ok || bad "metrics: 1 DLQ record"
[ "$(metric 'taskbox_tasks_total{outcome="dead-lettered"}')" = 1 ] && ok || bad "metrics: 1 dead letter"
[ "$(metric 'taskbox_tasks_total{outcome="succeeded"}')" = 3 ] && ok || bad "metrics: 3 succeeded"
[ "$(metric 'taskbox_slots')" = 2 ] && ok || bad "metrics: 2 slots"
# the consumer's statistics come every 5 s: a round with a lag known for a
# partition the worker committed on, 20 s at most
lag=
for _ in $(seq 40); do
  lag=$(curl -sf "http://127.0.0.1:$port/metrics" | grep '^taskbox_consumer_lag{partition="[0-3]"} [0-9]*$')
  [ -n "$lag" ] && break; sleep 0.5
done
if [ -n "$lag" ]; then ok; else bad "metrics: the consumer lag of a partition"
  curl -sf "http://127.0.0.1:$port/metrics" | grep consumer_lag; fi

# top, in a terminal (tmux): the fleet as the dashboard draws it; q quits.
expect "top --once" 0 "$tmp/top-once.out" "$tb" top --config "$cfg" --once --interval 1
has "top --once counts the worker" "workers 1 alive" "$tmp/top-once.out"
expect "top --once --json" 0 "$tmp/top.json" "$tb" top --config "$cfg" --once --json --interval 1
if python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))
assert len(f["workers"]) == 1 and f["workers"][0]["worker"] == sys.argv[2], f["workers"]
assert f["slots"] == 2 and f["group"] == sys.argv[2], f
assert set(f) >= {"ts", "topic", "busy", "waiting", "lag", "dlq", "last_minute", "running", "recent", "errors"}
' "$tmp/top.json" "$run"; then ok; else bad "top --json: one object with the fleet"; cat "$tmp/top.json"; fi
sock=$tmp/tmux.sock
tmux -S "$sock" new-session -d -s top -x 150 -y 45 \
  "$tb top --config $cfg --interval 1 2>$tmp/top.err; echo \$? >$tmp/top.exit"
tmux_pid=$(tmux -S "$sock" display-message -p '#{pid}')
for _ in $(seq 100); do # a frame with the minute's four settlements, 20 s at most
  tmux -S "$sock" capture-pane -p -t top >"$tmp/top.screen" 2>/dev/null
  grep -q "4 settled" "$tmp/top.screen" && break
  sleep 0.2
done
for needle in "workers 1 alive" "slots 0/2 busy" "lag 0" "DLQ 1" \
  "4 settled (0.1/s), 1 not succeeded, 1 errors" "$run" "dead-lettered" \
  "error: unknown runtime 'later'"; do
  has "top shows '$needle'" "$needle" "$tmp/top.screen"
done
if [ "$(grep -c "$dead" "$tmp/top.screen")" -ge 2 ]; then ok; else
  bad "top lists the task sent back twice (dead-lettered, then succeeded)"; fi
tmux -S "$sock" send-keys -t top q
for _ in $(seq 50); do [ -s "$tmp/top.exit" ] && break; sleep 0.1; done
[ "$(cat "$tmp/top.exit" 2>/dev/null)" = 0 ] && ok || bad "top quits with q (exit 0)"
kill "$tmux_pid" 2>/dev/null

# An interactive session: submitted, two follow-ups and an end sent with
# `taskbox send` / `end` (numbered by the ledger), watched to its outcome.
git init -q "$tmp/chat" && cp -r "$root/examples/recipes/chat/." "$tmp/chat/" &&
  git -C "$tmp/chat" add -A && git -C "$tmp/chat" -c user.name=t -c user.email=t@t commit -qm chat || exit 1
chat_commit=$(git -C "$tmp/chat" rev-parse HEAD)
expect "submit --interactive" 0 "$tmp/chat.out" "$tb" submit --config "$cfg" --interactive \
  --recipe "file://$tmp/chat" --commit "$chat_commit" --prompt first
chat=$(head -1 "$tmp/chat.out")
for _ in $(seq 100); do # the session idles after turn 1: status names its phase, 20 s at most
  "$tb" status --config "$cfg" "$chat" >"$tmp/chat-status.out" 2>&1
  grep -q "running, running on $run" "$tmp/chat-status.out" && break; sleep 0.2
done
has "status names a running task's phase and worker" "running, running on $run" "$tmp/chat-status.out"
expect "send" 0 "$tmp/send1.out" "$tb" send --config "$cfg" "$chat" second
has "send says its number" "follow-up 1 to $chat" "$tmp/send1.out"
# a repeated number is ignored; a skipped one is dead-lettered (below)
expect "send a duplicate" 0 "$tmp/send-dup.out" "$tb" send --config "$cfg" --seq 1 "$chat" again
expect "send out of order" 0 "$tmp/send-gap.out" "$tb" send --config "$cfg" --seq 7 "$chat" skipped
expect "send from a file" 0 "$tmp/send2.out" \
  "$tb" send --config "$cfg" "$chat" --file <(printf 'third')
has "numbered after the last" "follow-up 2 to $chat" "$tmp/send2.out"
expect "end" 0 "$tmp/end.out" "$tb" end --config "$cfg" "$chat"
has "end is number 3" "end 3 to $chat" "$tmp/end.out"
expect "watch the session to its end" 0 "$tmp/chat-watch.out" \
  "$tb" watch --config "$cfg" --timeout 120 "$chat"
for needle in "turn-started 1" "assistant: turn 1: you said first" "turn-started 3" \
  "assistant: turn 3: you said third" "verdict answered-every-turn: pass" \
  "task $chat: succeeded (attempt 1): the session ended: ended by its producer"; do
  has "the session shows '$needle'" "$needle" "$tmp/chat-watch.out"
done
expect "the session's transcript" 0 "$tmp/transcript.out" \
  "$tb" artifacts get --config "$cfg" -o "$tmp/transcript.txt" "$chat" transcript.txt
if [ "$(cat "$tmp/transcript.txt")" = "$(printf 'turn 1: first\nturn 2: second\nturn 3: third')" ]
then ok; else bad "the transcript has the three turns"; fi
# Follow-ups no session takes: dead-lettered with the reason.
expect "send to a one-shot task" 0 "$tmp/send-oneshot.out" "$tb" send --config "$cfg" --seq 1 "$id" hi
expect "send to a finished session" 0 "$tmp/send-done.out" "$tb" send --config "$cfg" "$chat" late
expect "send to an unknown task" 0 "$tmp/send-unknown.out" \
  "$tb" send --config "$cfg" --seq 1 no-such-task hi
expect "send refuses a huge prompt" 4 "$tmp/send-big.out" \
  "$tb" send --config "$cfg" --seq 9 "$chat" --file <(head -c 300000 /dev/zero | tr '\0' x)
for _ in $(seq 100); do # the DLQ records, 20 s at most
  "$tb" dlq list --config "$cfg" >"$tmp/dlq2.out" 2>&1
  [ "$(grep -c orphan "$tmp/dlq2.out")" -ge 4 ] && break; sleep 0.2
done
for needle in "task $id is done and was one-shot" "task $chat is done: its session had ended" \
  "no session for task no-such-task" "follow-up 7 out of order: the session expects 2 next"; do
  has "the DLQ says '$needle'" "$needle" "$tmp/dlq2.out"
done

# A follow-up held but never taken: an agent that answers one prompt in 3 s
# and exits without ending its turn, sent a follow-up at once (held by its
# session meanwhile): dead-lettered with the reason, not acknowledged in
# silence with its task.
git init -q "$tmp/once" && cp -r "$root/examples/recipes/hello/." "$tmp/once/" &&
  sed -i '1a sleep 3' "$tmp/once/agent.sh" && git -C "$tmp/once" add -A &&
  git -C "$tmp/once" -c user.name=t -c user.email=t@t commit -qm once || exit 1
expect "submit a one-prompt agent as a session" 0 "$tmp/short.out" "$tb" submit --config "$cfg" \
  --interactive --recipe "file://$tmp/once" --commit "$(git -C "$tmp/once" rev-parse HEAD)" \
  --prompt "just one"
short=$(head -1 "$tmp/short.out")
expect "send to it at once" 0 "$tmp/short-send.out" "$tb" send --config "$cfg" "$short" "unheard"
expect "watch it end" 0 "$tmp/short-watch.out" "$tb" watch --config "$cfg" --timeout 120 "$short"
for _ in $(seq 100); do
  "$tb" dlq list --config "$cfg" >"$tmp/dlq3.out" 2>&1
  grep -q "$short" "$tmp/dlq3.out" && break; sleep 0.2
done
if grep "$short" "$tmp/dlq3.out" | grep -q "follow-up 1: the session ended before it took it"
then ok; else bad "a follow-up its session held and never took is dead-lettered"; cat "$tmp/dlq3.out"; fi

# Uploads: a file of one's own into the store under its content's name,
# as `artifacts put` does it and as another language does it from
# schemas/keys.md alone (Python's hashlib and a CRC-32C, curl's SigV4);
# each given to a task as an input, which reads it back.
printf 'uploaded words\n' >"$tmp/words.txt"
words_sha=$(sha256sum "$tmp/words.txt" | cut -d' ' -f1)
expect "artifacts put" 0 "$tmp/put.out" "$tb" artifacts put --config "$cfg" "$tmp/words.txt"
has "prints the input reference" "words.txt=uploads/$words_sha" "$tmp/put.out"
expect "artifacts put again, as JSON" 0 "$tmp/put2.json" \
  "$tb" artifacts put --config "$cfg" --json "$tmp/words.txt"
has "says it was there already" '"uploaded":false' "$tmp/put2.json"
expect "artifacts put of nothing" 5 "$tmp/put3.out" "$tb" artifacts put --config "$cfg" "$tmp/none"
# Its block list (keys.md, "Block digests"), as another language reads it:
# the SHA-256 of each 1 MiB block, concatenated, at blocks/<sha256>, and
# named by its own SHA-256 in --json's "blocks".
head -c 2621440 /dev/urandom >"$tmp/big.bin"
expect "artifacts put of 2.5 MiB, as JSON" 0 "$tmp/put4.json" \
  "$tb" artifacts put --config "$cfg" --json "$tmp/big.bin"
big_sha=$(sha256sum "$tmp/big.bin" | cut -d' ' -f1)
curl -sf --aws-sigv4 "aws:amz:$TASKBOX_TEST_S3_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
  -o "$tmp/big.blocks" "$TASKBOX_TEST_S3_ENDPOINT/$run/blocks/$big_sha" ||
  bad "the block list is at blocks/<sha256>"
if python3 - "$tmp/big.bin" "$tmp/big.blocks" "$tmp/put4.json" <<'PYEOF2'
import hashlib, json, sys
data = open(sys.argv[1], "rb").read()
want = b"".join(hashlib.sha256(data[i:i + 1048576]).digest()
                for i in range(0, len(data), 1048576))
got = open(sys.argv[2], "rb").read()
ref = json.load(open(sys.argv[3]))[0]
sys.exit(0 if got == want and len(got) == 96 and
         ref["blocks"] == hashlib.sha256(want).hexdigest() else 1)
PYEOF2
then ok; else bad "the block list is each 1 MiB block's SHA-256, named by its own"; fi
printf 'from python\n' >"$tmp/py-words.txt"
read -r py_sha py_crc < <(python3 - "$tmp/py-words.txt" <<'PYEOF'
import hashlib, sys
data = open(sys.argv[1], "rb").read()
crc = 0xFFFFFFFF
for b in data:  # CRC-32C (Castagnoli), reflected, as keys.md says
    crc ^= b
    for _ in range(8):
        crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
print(hashlib.sha256(data).hexdigest(), "%08x" % (crc ^ 0xFFFFFFFF))
PYEOF
)
curl -sf --aws-sigv4 "aws:amz:$TASKBOX_TEST_S3_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "Content-Type: application/octet-stream" \
  -H "x-amz-meta-sha256: $py_sha" -H "x-amz-meta-crc32c: $py_crc" \
  -T "$tmp/py-words.txt" "$TASKBOX_TEST_S3_ENDPOINT/$run/uploads/$py_sha" >/dev/null && ok ||
  bad "an upload from schemas/keys.md alone"
git init -q "$tmp/reads" && cp -r "$root/examples/recipes/hello/." "$tmp/reads/" || exit 1
cat >"$tmp/reads/agent.sh" <<'EOF'
read -r prompt
cat /inputs/notes.txt /inputs/more.txt > /outputs/notes.txt
printf 'hello\n' > /outputs/hello.txt
EOF
git -C "$tmp/reads" add -A && git -C "$tmp/reads" -c user.name=t -c user.email=t@t commit -qm reads ||
  exit 1
expect "submit --input NAME=@PATH" 0 "$tmp/up.out" "$tb" submit --config "$cfg" \
  --recipe "file://$tmp/reads" --commit "$(git -C "$tmp/reads" rev-parse HEAD)" --prompt read \
  --input "notes.txt=@$tmp/words.txt" --input "more.txt=uploads/$py_sha" --wait --timeout 180
reader=$(head -1 "$tmp/up.out")
expect "its output" 0 "$tmp/notes.out" \
  "$tb" artifacts get --config "$cfg" --output "$tmp/notes.got" "$reader" notes.txt
if [ "$(cat "$tmp/notes.got" 2>/dev/null)" = "$(printf 'uploaded words\nfrom python')" ]; then ok
else bad "the task read back what was uploaded: $(cat "$tmp/notes.got" 2>/dev/null)"; fi

# A recorded run replayed from the command line: a provider of our own on
# loopback is asked once, by the original; `submit --replay-from` sends the
# same task again, answered from its recording, and it writes the same
# answer; the provider is not asked again.
cat >"$tmp/provider.py" <<'PYEOF'
import http.server, sys
class Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(sys.argv[1], "a") as log:
            log.write(self.path + "\n")
        body = b'{"answer":"forty-two","usage":{"prompt_tokens":3,"completion_tokens":2}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
print(server.server_address[1], flush=True)
server.serve_forever()
PYEOF
python3 "$tmp/provider.py" "$tmp/provider.log" >"$tmp/provider.port" &
provider=$!
for _ in $(seq 100); do [ -s "$tmp/provider.port" ] && break; sleep 0.1; done
cat >"$tmp/runtimes/recorded.json" <<EOF
{"v": 1, "name": "recorded", "network": {"allow": [{"name": "llm", "host": "127.0.0.1",
 "port": $(cat "$tmp/provider.port"), "scheme": "http", "dialect": "openai", "record": true}]}}
EOF
git init -q "$tmp/asks" && cp -r "$root/examples/recipes/hello/." "$tmp/asks/" || exit 1
cat >"$tmp/asks/agent.sh" <<'EOF'
read -r prompt
curl -s -H "X-Taskbox-Token: $TASKBOX_TOKEN" -d '{"q":1}' "$TASKBOX_ENDPOINT_LLM/v1/chat" \
  > /outputs/answer.json
printf 'hello\n' > /outputs/hello.txt
EOF
git -C "$tmp/asks" add -A && git -C "$tmp/asks" -c user.name=t -c user.email=t@t commit -qm asks ||
  exit 1
expect "submit a recorded run" 0 "$tmp/rec.out" "$tb" submit --config "$cfg" --runtime recorded \
  --recipe "file://$tmp/asks" --commit "$(git -C "$tmp/asks" rev-parse HEAD)" --prompt ask \
  --wait --timeout 180
orig=$(head -1 "$tmp/rec.out")
expect "submit --replay-from" 0 "$tmp/replay.out" "$tb" submit --config "$cfg" \
  --replay-from "$orig" --wait --timeout 180
again=$(head -1 "$tmp/replay.out")
asked=$(wc -l <"$tmp/provider.log")
if [ "$asked" = 1 ]; then ok; else bad "the provider was asked $asked times, not once"; fi
expect "the replay's answer" 0 "$tmp/answer2.out" \
  "$tb" artifacts get --config "$cfg" --output "$tmp/answer2.json" "$again" answer.json
has "is the recorded one" '"answer":"forty-two"' "$tmp/answer2.json"
expect "replay a task that recorded nothing" 4 "$tmp/norec.out" \
  "$tb" submit --config "$cfg" --replay-from "$id"
has "and says why" "names no egress recording" "$tmp/norec.out"

# A ledger that cannot be asked (its Redis stopped, a failover under way,
# a client that reaches only the old master's port): the acknowledged
# attempt settles the task on its events alone once the ledger has not
# answered for 15 s, and stderr says so, instead of --wait running out
# its timeout with a task long done.
start=$SECONDS
expect "submit --wait with the ledger unreachable" 0 "$tmp/noledger.out" \
  env TASKBOX_LEDGER_URL=redis://127.0.0.1:1 "${submit[@]}" --prompt unreachable --wait \
  --timeout 120
took=$((SECONDS - start))
[ "$took" -ge 14 ] && [ "$took" -le 60 ] && ok ||
  bad "settled without the ledger in $took s, not 15 to 60"
has "and says the events alone settled it" "is settled by its events alone" "$tmp/noledger.out"
has "with the task's outcome" "succeeded" "$tmp/noledger.out"

# With no worker, --wait gives up at its timeout and says the task goes on.
kill "$worker" && wait "$worker"
expect "submit --wait --timeout with no worker" 8 "$tmp/timeout.out" \
  "${submit[@]}" --prompt late --wait --timeout 3
has "and says so" "goes on" "$tmp/timeout.out"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ] || echo "files kept in $tmp"
[ "$fail" = 0 ]
