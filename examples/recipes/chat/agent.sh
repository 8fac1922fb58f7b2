#!/bin/sh
# The chat recipe's agent: an interactive session (schemas/agent.md). Each
# prompt, a JSON line on stdin, gets an answer and the end of the turn;
# {"type":"end"}, or the end of input, ends the session. A first prompt of
# "spin" leaves a busy loop running for the session (the tests show that a
# frozen, idle session uses no CPU) and takes a second over its turn.
turns=0 spinner=
while read -r line; do
  case $line in
    *'"type":"end"'*) break ;;
  esac
  turns=$((turns + 1))
  # the prompt's text, still JSON-escaped: fit to go back into JSON
  text=$(printf '%s\n' "$line" | sed -n 's/.*"text":"\(.*\)"}$/\1/p')
  if [ "$turns" = 1 ] && [ "$text" = spin ]; then
    (while :; do :; done) &
    spinner=$!
    sleep 1
  fi
  printf '{"type":"message","role":"assistant","text":"turn %d: you said %s"}\n' \
    "$turns" "$text" >&3
  printf 'turn %d: %s\n' "$turns" "$text" >>/outputs/transcript.txt
  printf '{"type":"turn-ended"}\n' >&3
done
[ -n "$spinner" ] && kill "$spinner"
printf '{"type":"message","role":"assistant","text":"bye after %d turns"}\n' "$turns" >&3
