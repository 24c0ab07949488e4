# ProxOps build, test and maintenance targets. Every target works on a fresh clone (see README.md).

SHELL := /bin/bash
GO ?= go
BUF := GOWORK=off $(GO) tool -modfile=tools/go.mod buf
# golangci-lint is pinned in tools/go.mod like buf; `go tool -n` builds it (once, cached) and prints its path, so it
# runs with the workspace (go.work) in effect and type-checks every module in one pass.
GOLANGCI_LINT = GOWORK=off $(GO) tool -modfile=tools/go.mod -n golangci-lint
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
FUZZTIME ?= 60s
BENCHTIME ?= 1x

.PHONY: all build test check lint check-modules generate check-generate breaking fuzz fuzz-smoke bench demo demo-live clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/proxops ./cmd/proxops

# The test command: every module of the workspace, with the race detector; then the check of the monitoring
# files under deploy/ with Prometheus' parsers (a module of its own, outside the workspace).
test:
	$(GO) test -race -count=1 work
	cd test/deploy && GOWORK=off $(GO) test -count=1 ./...

# What CI runs: static checks, the services' module dependencies, generated code freshness, wire compatibility,
# the tests and a short fuzz pass.
check: lint check-modules check-generate breaking test fuzz-smoke

# Each service module's go.mod lists only what its production code needs: fails when a service's tests import
# another service or a module the service itself does not (such tests belong under test/).
check-modules:
	$(GO) run ./scripts/checkmodules

lint:
	$(GO) vet work
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^internal/gen/')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(BUF) lint
	$(BUF) format -d --exit-code
	@lint=$$($(GOLANGCI_LINT)) && mods=$$($(GO) list -m -f '{{.Dir}}/...' | sed 's|^$(CURDIR)/|./|') && \
	  echo golangci-lint run $$mods && $$lint run $$mods

generate:
	$(BUF) generate

check-generate: generate
	@if [ -n "$$(git status --porcelain -- internal/gen)" ]; then \
	  echo "internal/gen is stale: run make generate and commit"; git status --short -- internal/gen; exit 1; fi

# Wire compatibility against the previous commit (skipped on the first commit).
breaking:
	@if git rev-parse -q --verify HEAD~1 >/dev/null; then \
	  $(BUF) breaking --against '.git#ref=HEAD~1'; else echo "breaking: no previous commit"; fi

# Native fuzz targets: FUZZTIME each (make fuzz FUZZTIME=60s).
fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

fuzz-smoke:
	@scripts/fuzz.sh 3s

bench:
	@scripts/bench.sh $(BENCHTIME)

# The main job: run ProxOps (proxops up --once) on the example repository against a simulated cluster, then
# show that it converged.
demo: build
	@scripts/demo.sh

# The same, left running until Ctrl-C: proxops up with its status page on http://127.0.0.1:9494/.
demo-live: build
	@scripts/demo.sh --live

clean:
	rm -rf bin
