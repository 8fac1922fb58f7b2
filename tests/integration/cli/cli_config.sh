#!/usr/bin/env bash
# `taskbox config check` as an operator runs it on the host that is to run
# the worker: the same checks as `taskbox worker --check`, with the same
# exit statuses. All well against the real services (0, one line each);
# a runtimes_dir with no runtime refused before a service is asked (3,
# naming the key and the file); Kafka and the ledger on a loopback port
# nothing listens on (1, naming each). Usage: cli_config.sh TASKBOX
# SOURCE_DIR. As root with the services tests/run starts; skips (77)
# otherwise.
set -u
tb=$1 root=$2
if [ -z "${TASKBOX_TEST_KAFKA:-}" ] || [ -z "${TASKBOX_TEST_S3_ENDPOINT:-}" ]; then
  echo "skipped: TASKBOX_TEST_* not set (tests/run starts the services)"
  exit 77
fi
[ "$(id -u)" = 0 ] || { echo "skipped: the check builds a sandbox, as root"; exit 77; }
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

run=tbcfg-$$
tmp=$(mktemp -d /tmp/tb-config-XXXXXX)
chmod 711 "$tmp" # the sandbox's users pass through to the work dir
export AWS_ACCESS_KEY_ID=$TASKBOX_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$TASKBOX_TEST_S3_SECRET_KEY
s3() { # s3 METHOD: on this run's bucket (the check writes nothing in it)
  curl -sf -X "$1" --aws-sigv4 "aws:amz:$TASKBOX_TEST_S3_REGION:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    "$TASKBOX_TEST_S3_ENDPOINT/$run"
}
trap 's3 DELETE; [ "$fail" = 0 ] && rm -rf "$tmp"' EXIT
s3 PUT || { echo "cannot create bucket $run"; exit 1; }
mkdir -p "$tmp/runtimes" "$tmp/empty" && cp "$root/examples/runtimes/default.json" "$tmp/runtimes/"
# worker.json with runtimes_dir $1 (relative: to the file)
config() {
  cat <<EOF
{
  "v": 1,
  "kafka": {"brokers": "$TASKBOX_TEST_KAFKA", "group": "$run"},
  "ledger": {"url": "$TASKBOX_TEST_REDIS", "prefix": "$run"},
  "store": {"url": "s3://$run", "endpoint": "$TASKBOX_TEST_S3_ENDPOINT",
            "region": "$TASKBOX_TEST_S3_REGION"},
  "runtimes_dir": "$1",
  "work_dir": "$tmp/work", "cache_dir": "$tmp/cache"
}
EOF
}
config runtimes >"$tmp/worker.json"
config empty >"$tmp/no-runtimes.json"

# all well: the configuration, then each service, one line each
expect "config check, all well" 0 "$tmp/ok.out" "$tb" config check --config "$tmp/worker.json"
for line in "ok configuration $tmp/worker.json: runtimes, a sandbox under $tmp/work" \
  "ok kafka $TASKBOX_TEST_KAFKA" "ok ledger $TASKBOX_TEST_REDIS" "ok store s3 "; do
  has "config check says '$line'" "$line" "$tmp/ok.out"
done
# ... and says what worker --check says, line for line
expect "worker --check, all well" 0 "$tmp/worker-ok.out" \
  "$tb" worker --check --config "$tmp/worker.json"
if diff "$tmp/ok.out" "$tmp/worker-ok.out" >/dev/null; then ok; else
  bad "config check and worker --check differ:"; diff "$tmp/ok.out" "$tmp/worker-ok.out"; fi
# found as every command finds it, and with -c before the command
expect "config check with TASKBOX_CONFIG" 0 "$tmp/env.out" \
  env TASKBOX_CONFIG="$tmp/worker.json" "$tb" config check
expect "-c before config check" 0 "$tmp/before.out" "$tb" -c "$tmp/worker.json" config check

# refused: no valid runtime in runtimes_dir, named with the file
expect "a runtimes_dir with no runtime" 3 "$tmp/refused.out" \
  "$tb" config check --config "$tmp/no-runtimes.json"
has "names the key, the directory and the file" \
  "taskbox config check: refused: runtimes_dir $tmp/empty (from $tmp/no-runtimes.json) holds no valid runtime" \
  "$tmp/refused.out"
if grep -q "^ok kafka\|^FAIL kafka" "$tmp/refused.out"; then
  bad "a refused configuration asked the services"; else ok; fi
expect "the mock cluster" 3 "$tmp/mock.out" \
  env TASKBOX_KAFKA_BROKERS=mock "$tb" config check --config "$tmp/worker.json"
has "says where it belongs" "run \`taskbox demo\`" "$tmp/mock.out"

# a service that does not answer: Kafka and the ledger on a loopback port
# nothing listens on (one bound and closed again)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect "services down" 1 "$tmp/down.out" env TASKBOX_KAFKA_BROKERS="127.0.0.1:$port" \
  TASKBOX_LEDGER_URL="redis://127.0.0.1:$port" "$tb" config check --config "$tmp/worker.json"
has "the configuration is fine" "ok configuration $tmp/worker.json" "$tmp/down.out"
has "Kafka named" "FAIL kafka 127.0.0.1:$port: " "$tmp/down.out"
has "the ledger named" "FAIL ledger redis://127.0.0.1:$port: " "$tmp/down.out"
has "the store still asked" "ok store s3 " "$tmp/down.out"

# metrics_listen: held by a running worker (here a listener of the test's
# own) is said and not refused, so a check runs beside a live worker; a
# value that is not HOST:PORT is refused
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(120)' >"$tmp/held.port" &
holder=$!
for _ in $(seq 1 100); do [ -s "$tmp/held.port" ] && break; sleep 0.1; done
held=$(cat "$tmp/held.port")
expect "metrics_listen in use" 0 "$tmp/held.out" env TASKBOX_METRICS_LISTEN="127.0.0.1:$held" \
  "$tb" config check --config "$tmp/worker.json"
has "says it is in use" "ok metrics_listen 127.0.0.1:$held: in use now (by a worker running here?)" \
  "$tmp/held.out"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
expect "metrics_listen not HOST:PORT" 3 "$tmp/badlisten.out" env TASKBOX_METRICS_LISTEN=nowhere \
  "$tb" config check --config "$tmp/worker.json"
has "refuses it" "taskbox config check: refused: metrics_listen" "$tmp/badlisten.out"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ] || echo "files kept in $tmp"
[ "$fail" = 0 ]
