#!/usr/bin/env bash
# Local single-node Kafka (KRaft) from the Maven Central jars; see infra/kafka/README.md.
#   infra/kafka/run.sh up [--port 9092] [--partitions 3]   # fetch (first time), format, start, create topics
#   infra/kafka/run.sh status | down | wipe | fetch
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PY:-.venv/bin/python}"
exec "$PY" -m infra.kafka "${@:-status}"
