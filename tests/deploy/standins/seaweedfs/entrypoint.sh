#!/bin/sh
# As the upstream image's entrypoint: `server` stores in /data, with as
# many volumes as the disk allows and 1 GB volumes unless the arguments
# say otherwise (a later flag wins); anything else is weed's own.
if [ "${1:-}" = server ]; then
  shift
  max=-volume.max=0
  for a in "$@"; do
    case $a in -volume.max | -volume.max=*) max= ;; esac
  done
  # shellcheck disable=SC2086 # $max is one word or none
  exec /usr/bin/weed server -dir=/data $max -master.volumePreallocate \
    -master.volumeSizeLimitMB=1024 "$@"
fi
exec /usr/bin/weed "$@"
