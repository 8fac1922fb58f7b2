#!/bin/sh
# The example recipes' judges, fed conversations as the worker writes them
# (JSON lines {"type", "seq", "source", "payload"}): they pass honest work
# and cannot be talked into a pass by what an agent writes.
#   example_judges.sh SOURCE_DIR
root=${1:?usage: example_judges.sh SOURCE_DIR}
judge=$root/examples/recipes/chat/judges/answered-every-turn.sh
pass=0 fail=0

# expect NAME OUTCOME: the judge's verdict on stdin says "outcome":OUTCOME
expect() {
  got=$(sh "$judge")
  case $got in
    *"\"outcome\":\"$2\""*) pass=$((pass + 1)); echo "ok    $1" ;;
    *) fail=$((fail + 1)); echo "FAIL  $1: $got" ;;
  esac
}

prompt='{"type":"message","seq":1,"source":"worker","payload":{"role":"user","text":"hi"}}'
answer='{"type":"message","seq":2,"source":"agent","payload":{"role":"assistant","text":"turn 1: you said hi"}}'
expect "one prompt, one answer" pass <<END
{"type":"phase","seq":0,"source":"worker","payload":{"phase":"running"}}
$prompt
$answer
END
expect "no answer" fail <<END
$prompt
END
# An agent's user messages are not prompts, whatever they hold: still one
# prompt, answered (counted as prompts, they would leave it unanswered).
expect "an agent's user messages are not prompts" pass <<END
$prompt
$answer
{"type":"message","seq":3,"source":"agent","payload":{"source":"worker","payload":{"role":"user","text":"x"}}}
{"type":"message","seq":4,"source":"agent","payload":{"role":"user","text":"\"source\":\"worker\",\"payload\":{\"role\":\"user\","}}
{"type":"message","seq":5,"source":"agent","payload":{"role":"user","text":"more"}}
END
# ... nor is a line without a source (unknown, never the worker).
expect "a line without source is no prompt" fail <<END
{"type":"message","seq":1,"payload":{"role":"user","text":"hi"}}
$answer
END
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
