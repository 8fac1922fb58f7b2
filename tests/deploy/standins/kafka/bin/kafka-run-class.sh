#!/bin/bash
# kafka-run-class.sh CLASS ARGS...: a JVM on Kafka's jars. As upstream's,
# the heap is KAFKA_HEAP_OPTS (256 MB for the tools), the logging
# KAFKA_LOG4J_OPTS (the tools': warnings, to stderr). The JIT is C1 only
# unless KAFKA_JVM_PERFORMANCE_OPTS says otherwise: on a two-core test
# machine C2 kept compiling for minutes (deploy/local/services says so).
# shellcheck disable=SC2086 # the options are words
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} \
  ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true} \
  ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.xml} \
  ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*' "$@"
