#!/bin/sh
# Passes when the agent left /outputs/hello.txt with a greeting in it:
# judges see the task's outputs, read-only to them.
if grep -q hello /outputs/hello.txt 2>/dev/null; then
  echo '{"outcome":"pass","score":1,"reason":"/outputs/hello.txt greets"}'
else
  echo '{"outcome":"fail","score":0,"reason":"no greeting in /outputs/hello.txt"}'
fi
