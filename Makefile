# The two commands that matter: `make demo` and `make test`. Each sets itself up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# pytest-xdist workers, each given whole test files (their module fixtures built once): the suite
# takes about 24 CPU minutes, more than one core gives in 15; `make test TEST_WORKERS=0` runs it
# in this process.
TEST_WORKERS ?= 2

.PHONY: demo test install clean

$(BIN)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all,test]'
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/python demo.py --out demo_out

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS) tests

clean:
	rm -rf $(VENV) demo_out .pytest_cache
