#!/usr/bin/env bash
# Install the services the integration tests start as plain processes (Debian packages: redis-server, postgresql)
# and the browser the FinOps page test drives (chromium).
# Idempotent: does nothing when they are already there. Tests start and stop their own
# throwaway instances (e.g. infra/redis/server.py); nothing here starts a daemon.
set -euo pipefail
need=()
command -v redis-server > /dev/null 2>&1 || need+=(redis-server)
# local Kafka (infra/kafka): a JVM to run the broker, Maven to fetch its jars from Maven Central
command -v java > /dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn > /dev/null 2>&1 || need+=(maven)
# PostgreSQL: the config database's second backend; tests run a throwaway cluster (infra/postgres/server.py).
ls /usr/lib/postgresql/*/bin/initdb > /dev/null 2>&1 || need+=(postgresql)
# the FinOps page's browser test (tests/e2e/test_finops_page.py): Debian's headless-capable Chromium
command -v chromium > /dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get install -y --no-install-recommends "${need[@]}" > /dev/null 2>&1 \
    || { $SUDO apt-get update > /dev/null && $SUDO apt-get install -y --no-install-recommends "${need[@]}" > /dev/null; }
  # Debian's packages start a system redis on :6379 (and a postgres cluster on :5432 where systemd runs);
  # the tests use their own ports and don't need them.
fi
