# The two commands a new user needs: `make demo` (the main job on the embedded stack) and
# `make test` (the whole suite). Both install what is missing first. `make setup` installs only
# what testing your own bot needs (goldfish, Locust, the oracle; no system packages).
VENV ?= .venv
PY := $(VENV)/bin/python
MODE ?= correct
# The Locust tests, run again on the oldest Locust and geventhttpclient pyproject.toml allows.
OLDEST_VENV ?= .venv-locust-oldest
LOCUST_TESTS ?= tests/test_locust_wire.py tests/test_locust_units.py tests/test_locust_runs.py \
	tests/test_locust_distributed.py tests/test_extras.py

.PHONY: setup demo soak test test-locust-oldest bench clean

# scripts/setup.sh's levels: core (your own bot), stack (+ the reference stack), full (+ test tooling)
setup: $(VENV)/.goldfish-core

$(VENV)/.goldfish-core: pyproject.toml scripts/setup.sh
	GOLDFISH_SETUP=core VENV=$(VENV) bash scripts/setup.sh
	touch $@

$(VENV)/.goldfish-stack: pyproject.toml scripts/setup.sh
	GOLDFISH_SETUP=stack VENV=$(VENV) bash scripts/setup.sh
	touch $@ $(VENV)/.goldfish-core

# A long steady run with the soak chaos plan (default 2 hours; DURATION=8h, USERS=..., docs/soak.md).
soak: $(VENV)/.goldfish-stack
	MODE=$(MODE) VENV=$(VENV) bash scripts/soak.sh

# The whole suite also needs the container tooling and chromium (scripts/setup.sh says which).
$(VENV)/.goldfish-full: pyproject.toml scripts/setup.sh
	GOLDFISH_SETUP=full VENV=$(VENV) bash scripts/setup.sh
	touch $@ $(VENV)/.goldfish-stack $(VENV)/.goldfish-core

demo: $(VENV)/.goldfish-stack
	MODE=$(MODE) VENV=$(VENV) bash scripts/demo.sh

# CI runs `make test test-locust-oldest`: the suite on the newest Locust the pin allows, then the
# Locust tests on its lower bounds, in a second venv with only the core install.
test: $(VENV)/.goldfish-full
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

test-locust-oldest:
	[ -x $(OLDEST_VENV)/bin/python ] || python3 -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q -e . pytest pytest-timeout \
		$$(python3 scripts/lower_bounds.py locust geventhttpclient)
	$(OLDEST_VENV)/bin/python -m pip list 2>/dev/null | grep -E '^(locust|geventhttpclient|gevent) '
	$(OLDEST_VENV)/bin/python -m pytest $(LOCUST_TESTS) $(PYTEST_ARGS)

bench: $(VENV)/.goldfish-stack
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf results/*/ .stack .pytest_cache
