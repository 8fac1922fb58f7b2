#!/bin/bash
# The broker as apache/kafka's image starts it: every KAFKA_* variable is
# a server property (the prefix dropped, lower case, `_` for `.`, `__`
# for `_`, `___` for `-`), except the JVM's own (KAFKA_HEAP_OPTS, ...);
# the storage is formatted with CLUSTER_ID the first time; log.dirs is
# /tmp/kraft-combined-logs unless KAFKA_LOG_DIRS says otherwise.
set -euo pipefail
conf=/opt/kafka/config/server.properties
: >"$conf"
for var in $(compgen -e); do
  case $var in
    KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_LOG4J_OPTS | \
      KAFKA_JMX_OPTS | KAFKA_GC_LOG_OPTS | KAFKA_LOG4J_LOGGERS | KAFKA_LOG4J_ROOT_LOGLEVEL | \
      KAFKA_TOOLS_LOG4J_LOGLEVEL | KAFKA_VERSION) ;;
    KAFKA_*)
      key=${var#KAFKA_}
      key=${key,,}
      key=${key//___/-}
      key=${key//__/@}
      key=${key//_/.}
      key=${key//@/_}
      printf '%s=%s\n' "$key" "${!var}" >>"$conf"
      ;;
  esac
done
grep -q '^log\.dirs=' "$conf" || echo 'log.dirs=/tmp/kraft-combined-logs' >>"$conf"
: "${CLUSTER_ID:?the storage is formatted with CLUSTER_ID}"
kafka-storage.sh format --ignore-formatted -t "$CLUSTER_ID" -c "$conf"
export KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}
export KAFKA_LOG4J_OPTS=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.xml}
exec kafka-run-class.sh kafka.Kafka "$conf"
