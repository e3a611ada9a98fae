# The two commands a new user needs: `make demo` (the main job on the embedded stack) and
# `make test` (the whole suite). Both install what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
MODE ?= correct

.PHONY: setup demo test bench clean

setup: $(VENV)/.goldfish-installed

$(VENV)/.goldfish-installed: pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $@

demo: setup
	$(PY) -m refbot demo --mode $(MODE)

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: setup
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf results/*/ .stack .pytest_cache
