#!/bin/sh
# Kafka's kafka-broker-api-versions.sh, for the compose healthcheck.
exec java -Xmx128m -Dlog4j.configuration=file:/opt/kafka/config/tools-log4j.properties \
    -Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.properties \
    -cp '/opt/kafka/libs/*' "${BROKER_API_VERSIONS_CLASS:-kafka.admin.BrokerApiVersionsCommand}" "$@"
