# The two commands that matter: `make demo` and `make test`. Each sets itself up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

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
	$(BIN)/python -m pytest -q $(PYTEST_ARGS) tests

clean:
	rm -rf $(VENV) demo_out .pytest_cache
