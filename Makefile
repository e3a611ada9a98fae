# The two commands a new user needs: `make demo` (the main job on the embedded stack) and
# `make test` (the whole suite). Both install what is missing first. `make setup` installs only
# what testing your own bot needs (goldfish, Locust, the oracle; no system packages).
VENV ?= .venv
PY := $(VENV)/bin/python
MODE ?= correct

.PHONY: setup demo test bench clean

# scripts/setup.sh's levels: core (your own bot), stack (+ the reference stack), full (+ test tooling)
setup: $(VENV)/.goldfish-core

$(VENV)/.goldfish-core: pyproject.toml scripts/setup.sh
	GOLDFISH_SETUP=core VENV=$(VENV) bash scripts/setup.sh
	touch $@

$(VENV)/.goldfish-stack: pyproject.toml scripts/setup.sh
	GOLDFISH_SETUP=stack VENV=$(VENV) bash scripts/setup.sh
	touch $@ $(VENV)/.goldfish-core

# The whole suite also needs the container tooling and chromium (scripts/setup.sh says which).
$(VENV)/.goldfish-full: pyproject.toml scripts/setup.sh
	GOLDFISH_SETUP=full VENV=$(VENV) bash scripts/setup.sh
	touch $@ $(VENV)/.goldfish-stack $(VENV)/.goldfish-core

demo: $(VENV)/.goldfish-stack
	MODE=$(MODE) VENV=$(VENV) bash scripts/demo.sh

test: $(VENV)/.goldfish-full
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.goldfish-stack
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf results/*/ .stack .pytest_cache
