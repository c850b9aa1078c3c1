# Two entry points for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install browser clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all]'
	touch $(STAMP)

install: $(STAMP)

# The dashboard's browser test drives the distribution's Chromium through playwright (no browser
# download): install it from Debian's packages when it is missing and we may (root).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	  echo "chromium not installed: the browser test will skip outside CI"

demo: $(STAMP)
	$(BIN)/trainsentry demo

test: $(STAMP) browser
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV)
