# farebox — the two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install services run test bench bench-budget bench-distributed bench-availability bench-finance bench-sim bench-limits kafka-up kafka-down clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## Debian packages the integration tests run as plain processes (redis-server).
services:
	infra/install-services.sh

## Run the simulator and the gateway on http://127.0.0.1:8080 (foreground; Ctrl-C stops both).
run: install
	infra/run-dev.sh

## Everything the CI runs: installs what is missing, starts what the tests need.
test: install services
	$(BIN)/python -m pytest -q -p no:cacheprovider

## Added latency and TTFT against a direct-to-simulator run, at several concurrencies and rates.
bench: install
	$(BIN)/python -m tests.bench.gateway

## Budgets under a burst: 2,000 concurrent streams, 50 keys, a team budget for ~60% of them.
bench-budget: install
	$(BIN)/python -m tests.bench.budget

## Distributed mode on Kafka: worker events/s, lag at 1,000 req/s, lease round trip, early stop with 3 pods.
bench-distributed: install services
	$(BIN)/python -m tests.bench.distributed

## Alias availability vs each provider's, in simulated time (two providers, independent 1%-of-minutes outages).
bench-availability: install
	$(BIN)/python -m tests.bench.availability

## The finance warehouse at a month's scale: a synthetic 30-day month of 10M request events (200 teams) straight to
## Parquet; ArchiveWriter events/s, showback time, FOCUS export time, archive size per million events.
bench-finance: install
	$(BIN)/python -m tests.bench.finance

## The simulator's own ceiling.
bench-sim: install
	$(BIN)/python -m infra.simulator.bench

## Rate-limit bucket latency (memory / Redis) and accuracy against a real Redis.
bench-limits: install services
	$(BIN)/python -m tests.proxy.admission.bench_latency
	$(BIN)/python -m tests.proxy.admission.bench_accuracy

## A local single-node Kafka (KRaft, jars from Maven Central) with farebox's topics, for distributed mode.
kafka-up: install services
	infra/kafka/run.sh up

kafka-down:
	infra/kafka/run.sh down

clean:
	rm -rf var .pytest_cache
