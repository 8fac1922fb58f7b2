#!/bin/sh
# Passes when every prompt of the session (a user message the worker
# recorded: "source":"worker"; an agent may write user messages too) got
# its answer (an assistant message "turn N: ..."): stdin is the
# conversation as JSON lines, one event each.
users=0 answers=0
while read -r line; do
  case $line in
    *'"source":"worker","payload":{"role":"user"'*) users=$((users + 1)) ;;
    *'"role":"assistant","text":"turn '*) answers=$((answers + 1)) ;;
  esac
done
if [ "$users" -ge 1 ] && [ "$users" = "$answers" ]; then
  printf '{"outcome":"pass","score":1,"reason":"%d prompts, %d answers"}\n' "$users" "$answers"
else
  printf '{"outcome":"fail","score":0,"reason":"%d prompts, %d answers"}\n' "$users" "$answers"
fi
