#!/bin/sh
# The hello recipe's agent: reads its prompt (one JSON line on stdin),
# talks the protocol on fd 3 (schemas/agent.md), writes a greeting to
# /outputs. No library needed: printf is enough.
read -r prompt
printf '{"type":"message","role":"user","text":"%s"}\n' "received the prompt" >&3
printf '{"type":"thought","text":"%s"}\n' "a greeting belongs in /outputs/hello.txt" >&3
printf '{"type":"tool-call","id":"1","name":"write_file","input":{"path":"/outputs/hello.txt"}}\n' >&3
echo "${GREETING:-hello}, queue! (task $TASKBOX_TASK_ID, attempt $TASKBOX_ATTEMPT)" > /outputs/hello.txt
printf '{"type":"tool-result","id":"1","output":"wrote %s bytes"}\n' "$(wc -c < /outputs/hello.txt)" >&3
printf '{"type":"message","role":"assistant","text":"%s"}\n' "$(cat /outputs/hello.txt)" >&3
