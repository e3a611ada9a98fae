# The two commands a new user needs: `make demo` (the main job on the embedded stack) and
# `make test` (the whole suite). Both install what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
MODE ?= correct

.PHONY: setup demo soak test bench clean

setup: $(VENV)/.goldfish-installed

$(VENV)/.goldfish-installed: pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $@

demo: setup
	MODE=$(MODE) VENV=$(VENV) bash scripts/demo.sh

# A long steady run with the soak chaos plan (default 2 hours; DURATION=8h, USERS=..., docs/soak.md).
soak: setup
	MODE=$(MODE) VENV=$(VENV) bash scripts/soak.sh

# The whole suite also needs the container tooling and chromium (scripts/setup.sh says which).
$(VENV)/.goldfish-installed-full: pyproject.toml scripts/setup.sh
	GOLDFISH_SETUP=full VENV=$(VENV) bash scripts/setup.sh
	touch $@ $(VENV)/.goldfish-installed

test: $(VENV)/.goldfish-installed-full
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: setup
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf results/*/ .stack .pytest_cache
