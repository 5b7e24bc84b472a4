#!/usr/bin/env bash
# Install redis-server if missing (Debian), then run a throwaway one in the foreground.
#   infra/redis/run.sh           # run
#   infra/redis/run.sh ensure    # install only
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PY:-.venv/bin/python}"
exec "$PY" -m infra.redis.server "${1:-run}"
