# opsgraph: `make run` starts the whole service, `make test` runs every test. Both set themselves up.
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-unit bench lint format clean install

$(STAMP): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh

install: $(STAMP)

run: $(STAMP)  ## start Redis (if none answers), the API and console, a worker per pool, the scheduler
	@$(BIN)/opsgraph run

test: $(STAMP)  ## unit and integration tests on real Redis, Celery workers, Alertmanager, SQLite (and PostgreSQL if set)
	@bash scripts/ensure-redis-server.sh
	@bash scripts/ensure-alertmanager.sh
	@$(BIN)/python -m pytest -q -p no:cacheprovider

test-unit: $(STAMP)
	@$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

bench: $(STAMP)  ## benchmarks; figures printed and written to bench/results/
	@bash scripts/ensure-redis-server.sh
	@$(BIN)/python -m bench.e2e
	@$(BIN)/python -m bench.cache
	@$(BIN)/python -m bench.compression
	@$(BIN)/python -m bench.scheduling
	@$(BIN)/python -m bench.dispatch
	@$(BIN)/python -m bench.tuning
	@$(BIN)/python -m bench.investigations
	@$(BIN)/python -m bench.investigate_large
	@$(BIN)/python -m bench.auth
	@$(BIN)/python -m bench.ratelimit
	@$(BIN)/python -m bench.remediation

lint: $(STAMP)
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .
	@$(BIN)/mypy

format: $(STAMP)
	@$(BIN)/ruff check --fix .
	@$(BIN)/ruff format .

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
