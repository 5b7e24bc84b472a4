#!/usr/bin/env bash
# `make run`: the provider simulator on :9090, then farebox on :8080 in the
# foreground, with a fresh dev key printed ready to paste. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
CONFIG=examples/farebox.yaml
mkdir -p var

chmod 600 examples/secrets.env  # provider keys: readable by their owner only (farebox warns otherwise)
$BIN/farebox config check "$CONFIG"
$BIN/farebox simulator --config examples/simulator.yaml --port 9090 > var/simulator.log 2>&1 &
SIM=$!
trap 'kill "$SIM" 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 100); do
  curl -fs http://127.0.0.1:9090/_sim/health > /dev/null 2>&1 && break
  kill -0 "$SIM" 2>/dev/null || { echo "simulator failed to start:"; cat var/simulator.log; exit 1; }
  sleep 0.1
done

KEY=$($BIN/farebox keys create --config "$CONFIG" --team platform --app playground \
      --aliases chat-default,embed-default --json | $BIN/python -c 'import json,sys; print(json.load(sys.stdin)["key"])')
cat <<MSG

  Provider simulator: http://127.0.0.1:9090   (log: var/simulator.log)
  farebox gateway:    http://127.0.0.1:8080/v1
  Your dev key (shown once; only its hash is stored, in the config database var/control.sqlite):

    export FAREBOX_KEY=$KEY

  Try:  curl -s http://127.0.0.1:8080/v1/chat/completions -H "Authorization: Bearer \$FAREBOX_KEY" \\
          -H 'content-type: application/json' -d '{"model":"chat-default","messages":[{"role":"user","content":"Hello"}]}'
  Events: .venv/bin/farebox events tail --config $CONFIG

MSG
$BIN/farebox serve --config "$CONFIG"
