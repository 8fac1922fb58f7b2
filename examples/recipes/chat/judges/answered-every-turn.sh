#!/bin/sh
# Passes when every prompt of the session got its answer (an assistant
# message "turn N: ..."): stdin is the conversation as JSON lines, one
# event each, {"type", "seq", "source", "payload"} in that order.
# A prompt is a user message the worker recorded: the line's own
# "source" is "worker". The match is anchored at the start of the line,
# on the worker's top-level keys: an agent may write user messages too,
# and put any keys it likes (even "source") inside its payload.
conv=$(cat)
users=$(printf '%s\n' "$conv" |
  grep -cE '^\{"type":"message","seq":[0-9]+,"source":"worker","payload":\{"role":"user",')
answers=$(printf '%s\n' "$conv" |
  grep -cE '^\{"type":"message","seq":[0-9]+,"source":"agent","payload":\{"role":"assistant","text":"turn ')
if [ "$users" -ge 1 ] && [ "$users" = "$answers" ]; then
  printf '{"outcome":"pass","score":1,"reason":"%d prompts, %d answers"}\n' "$users" "$answers"
else
  printf '{"outcome":"fail","score":0,"reason":"%d prompts, %d answers"}\n' "$users" "$answers"
fi
