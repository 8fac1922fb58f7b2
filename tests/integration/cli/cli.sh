#!/usr/bin/env bash
# The taskbox command as a user runs it: `schema` turns the JSON examples
# into their exact bytes and back, refuses bad input with the field named
# and exit code 4, and validates configuration files; `--help` and
# `--version` work.
set -u
tb=$1 root=$2
pass=0 fail=0
check() { # check NAME EXPECTED_EXIT CMD...
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); got=$?
  if [ "$got" = "$want" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name: exit $got, wanted $want"; echo "$out" | head -5; fi
}
contains() { # contains NAME NEEDLE CMD...
  local name=$1 needle=$2; shift 2
  out=$("$@" 2>&1)
  if grep -qF -- "$needle" <<<"$out"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name: '$needle' not in:"; echo "$out" | head -5; fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

for js in "$root"/schemas/examples/*.json; do
  base=${js%.json}
  "$tb" schema encode --hex "$js" >"$tmp/out.hex" 2>&1
  if diff -q <(tr -d ' \n' <"$tmp/out.hex") <(tr -d ' \n' <"$base.hex") >/dev/null; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL encode $(basename "$js")"; fi
  check "check $(basename "$base").hex" 0 "$tb" schema check --hex "$base.hex"
done
"$tb" schema encode "$root/schemas/examples/task.json" >"$tmp/task.bin"
"$tb" schema decode "$tmp/task.bin" >"$tmp/task.json"
check "decode gives JSON that encodes again" 0 "$tb" schema encode "$tmp/task.json"

printf '{"schema":"task","v":1,"id":"x"}' >"$tmp/bad.json"
check "encode refuses an incomplete task" 4 "$tb" schema encode "$tmp/bad.json"
contains "and names the field" "field 'kind': required but missing" "$tb" schema encode "$tmp/bad.json"
contains "check on a JSON file says to encode it" "it is JSON: check wants a message's MessagePack bytes" \
  "$tb" schema check "$root/schemas/examples/task.json"
"$tb" schema encode "$root/schemas/examples/task.json" >"$tmp/task.msgpack"
check "check - reads stdin" 0 sh -c '"$0" schema check - <"$1"' "$tb" "$tmp/task.msgpack"
"$tb" schema check --json "$tmp/task.msgpack" "$root/schemas/examples/task.json" >"$tmp/check.json"
if python3 -c '
import json, sys
good, bad = json.load(open(sys.argv[1]))
assert good["ok"] is True and good["canonical"] is True, good
assert bad["ok"] is False and "not a MessagePack map" in bad["reason"] and "encode" in bad["hint"], bad
' "$tmp/check.json"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL check --json"; cat "$tmp/check.json"; fi
printf '\xc1' >"$tmp/junk.bin"
check "check refuses junk" 4 "$tb" schema check "$tmp/junk.bin"
check "runtime example is valid" 0 "$tb" schema runtime "$root/examples/runtimes/default.json"
check "recipe example is valid" 0 "$tb" schema recipe "$root/examples/recipes/hello/taskbox.json"
check "config example is valid" 0 "$tb" schema config "$root/examples/worker.json"
contains "schema config with no FILE checks the file a command would read" \
  "$root/examples/worker.json: ok" env TASKBOX_CONFIG="$root/examples/worker.json" "$tb" schema config
# a misspelled TASKBOX_* variable is named, with the key it is nearest
contains "a misspelled variable is named" "TASKBOX_SLOTZ (did you mean TASKBOX_SLOTS?): ignored" \
  env TASKBOX_SLOTZ=3 "$tb" schema config "$root/examples/worker.json"
contains "an override a key refuses is named as the environment's" \
  "(with TASKBOX_SLOTS from the environment): field 'slots'" \
  env TASKBOX_SLOTS=99999 "$tb" schema config "$root/examples/worker.json"

# --version: the version project() sets (the one place it is set), the
# commit and build, and the libraries the program runs with; from every
# command too
version=$(sed -n 's/^project(taskbox VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
check "--version" 0 "$tb" --version
if "$tb" --version | head -1 | grep -Eq "^taskbox $version \(commit ([0-9a-f]{12}|unknown), [A-Za-z]+ build\)$"
then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL --version's first line: $("$tb" --version | head -1)"; fi
for lib in librdkafka libgit2 libseccomp hiredis libcurl libarchive libmicrohttpd libfuse3 msgpack-c jansson OpenSSL; do
  contains "--version names $lib" "$lib " "$tb" --version
done
contains "status --version" "taskbox $version" "$tb" status --version
# log_format json: the worker's log lines are JSON objects (the fault
# point's warning is its first line, before the mock cluster is refused)
contains "log_format json" '{"ts":"' env TASKBOX_LOG_FORMAT=json TASKBOX_FAULT=nothing "$tb" worker
contains "log_format json, level" '"level":"warn","msg":"TASKBOX_FAULT is set' \
  env TASKBOX_LOG_FORMAT=json TASKBOX_FAULT=nothing "$tb" worker

# which configuration file a command reads: --config, else $TASKBOX_CONFIG,
# else $XDG_CONFIG_HOME/taskbox/config.json, else /etc/taskbox/worker.json
# (each here names another unreachable Redis, which the error then names)
cfgfile() { printf '{"v": 1, "ledger": {"url": "redis://127.0.0.1:%s"}}\n' "$2" >"$1"; }
mkdir -p "$tmp/xdg/taskbox"
cfgfile "$tmp/xdg/taskbox/config.json" 3
cfgfile "$tmp/env.json" 2
cfgfile "$tmp/flag.json" 4
contains "XDG_CONFIG_HOME's file" "127.0.0.1:3" env -u TASKBOX_CONFIG XDG_CONFIG_HOME="$tmp/xdg" \
  "$tb" status some-task
contains "TASKBOX_CONFIG over it" "127.0.0.1:2" env TASKBOX_CONFIG="$tmp/env.json" \
  XDG_CONFIG_HOME="$tmp/xdg" "$tb" status some-task
contains "--config over both" "127.0.0.1:4" env TASKBOX_CONFIG="$tmp/env.json" \
  XDG_CONFIG_HOME="$tmp/xdg" "$tb" status --config "$tmp/flag.json" some-task
check "TASKBOX_CONFIG naming no file" 3 env TASKBOX_CONFIG="$tmp/none.json" "$tb" status x
contains "a variable over the file" "127.0.0.1:5" env XDG_CONFIG_HOME="$tmp/xdg" \
  TASKBOX_LEDGER_URL=redis://127.0.0.1:5 "$tb" status some-task
contains "worker --version" "taskbox $version" "$tb" worker --version
# config show: every key, its value and where it came from (the file and
# the key's line, the variable that won over it, the default); credentials
# masked; --json for machines; the file found as every command finds it
cat >"$tmp/show.json" <<'EOF'
{
  "v": 1,
  "slots": 3,
  "kafka": {"brokers": "127.0.0.1:9",
            "properties": {"sasl.password": "hunter2", "socket.timeout.ms": "9000"}},
  "ledger": {"url": "redis://taskbox:s3cret@127.0.0.1:6/0"},
  "runtimes_dir": "runtimes"
}
EOF
show=("$tb" config show --config "$tmp/show.json")
check "config show" 0 "${show[@]}"
shown() { # shown NAME REGEX [VAR=VALUE...]: a line of config show matches
  local name=$1 re=$2; shift 2
  if env "$@" "${show[@]}" | grep -Eq -- "$re"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL config show: $name"; env "$@" "${show[@]}" | head -40; fi
}
shown "a value from the file, with its line" "^slots +3 +$tmp/show\.json:3$"
shown "a nested key's line" "^kafka\.brokers +\"127\.0\.0\.1:9\" +$tmp/show\.json:4$"
shown "a variable wins over the file" '^slots +5 +env TASKBOX_SLOTS$' TASKBOX_SLOTS=5
shown "a default" '^drain_seconds +120 +default$'
shown "an optional key unset" '^store\.endpoint +\(none\) +default$'
shown "a relative directory, resolved, with what was given" \
  "^runtimes_dir +\"$tmp/runtimes\" +$tmp/show\.json:7 \(given as \"runtimes\"\)$"
shown "kafka.properties' credentials masked" \
  '^kafka\.properties +\{"sasl\.password":"\*\*\*\*\*\*\*\*","socket\.timeout\.ms":"9000"\} '
shown "a URL's password masked" '^ledger\.url +"redis://taskbox:\*\*\*\*\*\*\*\*@127\.0\.0\.1:6/0" '
if "${show[@]}" --json 2>&1 | grep -q 'hunter2\|s3cret'; then fail=$((fail + 1))
  echo "FAIL config show --json prints a credential"; else pass=$((pass + 1)); fi
env TASKBOX_STORE_REGION=eu-west-1 "$tb" --json config show -c "$tmp/show.json" >"$tmp/show.out"
if python3 - "$tmp/show.out" "$tmp/show.json" "$root/schemas/config.md" <<'EOF'
import json, re, sys
shown = json.load(open(sys.argv[1]))
keys = shown["keys"]
assert shown["file"] == sys.argv[2], shown["file"]
assert keys["slots"] == {"value": 3, "source": "file", "file": sys.argv[2], "line": 3}, keys["slots"]
assert keys["store.region"] == {"value": "eu-west-1", "source": "env",
                                "variable": "TASKBOX_STORE_REGION"}, keys["store.region"]
assert keys["kafka.group"] == {"value": "taskbox-workers", "source": "default"}, keys["kafka.group"]
assert keys["kafka.group_instance_id"]["value"] is None
p = keys["kafka.properties"]
assert p["value"] == {"sasl.password": "********", "socket.timeout.ms": "9000"} and p["masked"], p
assert p["line"] == 5 and keys["kafka.brokers"]["line"] == 4, p
assert keys["runtimes_dir"]["given"] == "runtimes", keys["runtimes_dir"]
# every key of schemas/config.md's table, and no other
table = re.findall(r"^\| `([a-z_.]+)` \|", open(sys.argv[3]).read(), re.M)
assert sorted(table) == sorted(keys), sorted(set(table) ^ set(keys))
EOF
then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL config show --json"; cat "$tmp/show.out"; fi
contains "with no file, it says so" "configuration file: none (the built-in defaults)" \
  env -u TASKBOX_CONFIG XDG_CONFIG_HOME="$tmp/none" HOME="$tmp/none" "$tb" config show
contains "the file found as every command finds it" "configuration file: $tmp/show.json" \
  env TASKBOX_CONFIG="$tmp/show.json" "$tb" config show
contains "-c before the command reaches show" "configuration file: $tmp/show.json" \
  "$tb" -c "$tmp/show.json" config show
check "config show of a missing --config file" 3 "$tb" config show --config "$tmp/nope.json"
contains "... names it" "taskbox config show: $tmp/nope.json: No such file or directory" \
  "$tb" config show --config "$tmp/nope.json"
printf '{"v": 1,\n "slots": 2,\n "slots": 3}\n' >"$tmp/twice.json"
check "a key given twice is refused" 3 "$tb" config show --config "$tmp/twice.json"
contains "... naming where" "$tmp/twice.json:3:" "$tb" config show --config "$tmp/twice.json"
check "config --help" 0 "$tb" config --help
contains "config --help ends with its short forms" "Short forms: -c --config, -j --json" \
  "$tb" config --help
contains "an unknown config verb is named, with the nearest" \
  "'shwo' is not show or check; did you mean 'show'?" "$tb" config shwo
check "... as a usage error" 2 "$tb" config shwo
check "config with no verb" 2 "$tb" config
check "check takes no --json" 2 "$tb" config check --json
check "config check of a missing --config file" 3 "$tb" config check --config "$tmp/nope.json"
check "missing config file" 1 "$tb" schema config "$tmp/nope.json"
contains "bad env override is explained" "TASKBOX_SLOTS" env TASKBOX_SLOTS=x "$tb" schema config
# Every command's options the same way (worker/cli/opts.h).
check "an unknown option" 2 "$tb" status --frob
contains "is named" "taskbox status: unknown option '--frob'" "$tb" status --frob
contains "--name=value is --name value" "$tmp/nope.json" "$tb" worker --config="$tmp/nope.json"
check "-- ends the options" 0 "$tb" schema check -- "$tmp/task.bin"
check "a flag takes no value" 2 "$tb" schema check --hex=1 "$tmp/task.bin"
contains "a number out of range" "--interval wants 1..60 seconds, not '0'" "$tb" top --interval 0
contains "a positional too many" "unexpected argument 'b'" "$tb" status a b
contains "an option missing its value" "--config wants a value" "$tb" watch --config
# short forms, combined as getopt combines them
contains "-jc FILE is --json --config FILE" "$tmp/nope.json" "$tb" status -jc "$tmp/nope.json" x
contains "-cFILE takes the rest of the word" "$tmp/nope.json" "$tb" status -c"$tmp/nope.json" x
contains "an unknown letter is named" "taskbox submit: unknown option '-z'" "$tb" submit -iwz
check "-V is --version" 0 "$tb" top -V
contains "--version in a verb's place" "taskbox $version" "$tb" artifacts --version
contains "-V in a verb's place" "taskbox $version" "$tb" schema -V
contains "a command's help lists its short forms" "-f --follow" "$tb" watch --help
check "-- ends the letters too" 0 "$tb" schema check -- "$tmp/task.bin"
check "help" 0 "$tb" --help
check "worker help" 0 "$tb" worker --help
check "worker refuses the mock cluster" 3 env TASKBOX_KAFKA_BROKERS=mock "$tb" worker
contains "and says what to do" "taskbox demo" env TASKBOX_KAFKA_BROKERS=mock "$tb" worker
check "worker with a bad config" 3 env TASKBOX_SLOTS=0 "$tb" worker
# Every sandbox's init is a program of its own: one that cannot be found
# stops the demo (and the worker) at start, saying where it looked.
contains "a missing sandbox init is named" \
  "cannot run taskbox-sandbox-init, tried /nonexistent/init" \
  env TASKBOX_SANDBOX_INIT=/nonexistent/init "$tb" demo \
  --recipe "$root/examples/recipes/hello" --chat "$root/examples/recipes/chat"
# ... and one that others could have replaced is not run at all.
cp "$(dirname "$tb")/taskbox-sandbox-init" "$tmp/init" && chmod 0777 "$tmp/init"
contains "a sandbox init others can write is refused" "(writable by group or others)" \
  env TASKBOX_SANDBOX_INIT="$tmp/init" "$tb" demo \
  --recipe "$root/examples/recipes/hello" --chat "$root/examples/recipes/chat"
check "schema help" 0 "$tb" schema --help
contains "schema --help ends with its short forms" "Short forms: -j --json" "$tb" schema --help
contains "artifacts --help too" "Short forms: -c --config, -j --json, -o --output" \
  "$tb" artifacts --help
check "unknown command" 2 "$tb" frobnicate
contains "a near one is suggested" "did you mean 'status'?" "$tb" statsu
# global options before the command reach it
contains "--config before the command is the command's" "taskbox status: /nope" \
  "$tb" --config=/nope status some-task
contains "-c FILE before it too" "taskbox status: /nope" "$tb" -c /nope status some-task
contains "before a command with verbs, after its verb" "taskbox artifacts: /nope" \
  "$tb" -c /nope artifacts list some-task
contains "--json before it too" '"ok": true' "$tb" --json schema check "$tmp/task.bin"
check "an option only a command knows, before it, is refused" 2 "$tb" --since 5 watch
contains "... saying where it goes" "give it after the command" "$tb" --since 5 watch
check "--version takes nothing after it" 2 "$tb" --version --frob
contains "... and says so" "takes nothing after it ('--frob')" "$tb" --version --frob
check "no command after the options" 2 "$tb" --json
# a usage error says what is wrong before the usage
contains "schema names a verb it lacks" "'bogus' is not encode, decode, check, config, runtime or recipe" "$tb" schema bogus
contains "schema says the nearest verb" "'decod' is not encode, decode, check, config, runtime or recipe; did you mean 'decode'?" "$tb" schema decod
contains "artifacts says the nearest verb" "'lst' is not list, get, share or put; did you mean 'list'?" "$tb" artifacts lst
contains "dlq names a verb it lacks" "'frob' is not list or send" "$tb" dlq frob
contains "dlq says the nearest verb" "'snd' is not list or send; did you mean 'send'?" "$tb" dlq snd
contains "dlq send says what it wants" "PARTITION:OFFSET, as \`dlq list\` prints it (not '3')" \
  "$tb" dlq send 3
contains "send says the prompt is missing" "give the prompt: TEXT, or --file FILE" "$tb" send t-1
contains "artifacts get counts its arguments" "get wants TASK_ID and PATH, got 1 argument" \
  "$tb" artifacts get t-1
check "... as a usage error" 2 "$tb" artifacts get t-1
# the man pages: real sections, dated, and clean by man's and lexgrog's checks
man=$(dirname "$tb")/cli/man
for page in "$man"/taskbox.1 "$man"/taskbox-*.1; do
  p=$(basename "$page")
  if grep -q '^\.SH SYNOPSIS' "$page" && grep -q '^\.SH OPTIONS' "$page" &&
    grep -q '^\.SH ENVIRONMENT' "$page" && grep -Eq '^\.TH [A-Z-]+ 1 "[0-9]{4}-[0-9]{2}-[0-9]{2}"' "$page"
  then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $p: sections or date missing"; fi
  w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
  if [ -z "$w" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $p: $w"; fi
  if lexgrog "$page" >/dev/null; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL lexgrog $p"; fi
done
# ... and the configuration file's, in section 5 (check_config_page.py
# reads what it says against schemas/config.md)
page=$man/taskbox-config.5
if grep -Eq '^\.TH TASKBOX-CONFIG 5 "[0-9]{4}-[0-9]{2}-[0-9]{2}"' "$page" &&
  (for s in NAME SYNOPSIS DESCRIPTION KEYS EXAMPLE ENVIRONMENT FILES "SEE ALSO"; do
    grep -q "^\.SH $s\$" "$page" || exit 1; done)
then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL taskbox-config.5: sections or date missing"; fi
w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
if [ -z "$w" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL taskbox-config.5: $w"; fi
if lexgrog "$page" >/dev/null; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL lexgrog taskbox-config.5"; fi
if grep -q 'taskbox-config\\fR(5)' "$man/taskbox-worker.1"; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL taskbox-worker.1 does not name taskbox-config(5)"; fi
grep -q '^\.SH EXIT STATUS' "$man/taskbox-status.1" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL taskbox-status.1 has no EXIT STATUS"; }
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
