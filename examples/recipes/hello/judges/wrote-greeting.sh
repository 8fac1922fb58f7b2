#!/bin/sh
# Passes when the agent said hello in the conversation (stdin: the events
# as JSON lines); the verdict is the last line of output.
if grep -q '"role":"assistant".*hello' ; then
  echo '{"outcome":"pass","score":1,"reason":"the agent greeted the queue"}'
else
  echo '{"outcome":"fail","score":0,"reason":"no greeting from the agent"}'
fi
