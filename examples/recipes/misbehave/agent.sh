#!/bin/sh
# Everything an agent should not do, then a crash.
printf 'not json at all\n' >&3
printf '{"type":"telepathy","text":"?"}\n' >&3
printf '{"type":"message","role":"assistant"}\n' >&3
head -c 100000 /dev/zero | tr '\0' 'x' >&3; printf '\n' >&3
printf '{"type":"message","role":"assistant","text":"still here"}\n' >&3
kill -SEGV $$
