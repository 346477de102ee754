# tollgate — run `make help` for the targets.

GO        ?= go
BIN       := bin/tollgate
PKGS      := ./...
FUZZTIME  ?= 20s
# A new interesting input is shrunk for at most this long (Go's default is
# 60 s, which would leave a short run little time to search).
FUZZMINIMIZE ?= 2s
BENCHTIME ?= 1s
# golangci-lint runs through `go run` at this pinned version, so a fresh
# machine needs nothing but Go (the first run builds it: a few minutes).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The Dockerfile builds with the same flags; integration/deploy_test.go
# checks that they agree.
LDFLAGS   := -s -w -X github.com/tollgatehq/tollgate/pkg/version.Version=$(VERSION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/tollgate: static, version stamped.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tollgate

.PHONY: image
image: ## Build the container image tollgate:VERSION (needs Docker).
	docker build --build-arg VERSION=$(VERSION) -t tollgate:$(VERSION) .

.PHONY: run
run: build ## Serve config-examples/ on the embedded store (gRPC :8081, HTTP :8080).
	$(BIN) serve --config-dir config-examples --store memory

# Test artifacts (testing.T.ArtifactDir: the status page's screenshots)
# are kept here, under _artifacts/.
ARTIFACTS ?= $(CURDIR)/test-artifacts

.PHONY: test
test: deps ## Run every test (installs redis-server and chromium first if they are missing); artifacts in ARTIFACTS.
	@mkdir -p $(ARTIFACTS)
	$(GO) test -race -count=1 -timeout 15m -artifacts -outputdir $(ARTIFACTS) $(PKGS)

.PHONY: redis
redis: ## Install redis-server and redis-tools with apt-get when they are missing.
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null || \
		{ echo "installing redis-server (apt-get)"; apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null; }

.PHONY: deps
deps: ## Install what the tests need with apt-get, those missing, after one apt-get update: redis-server, redis-tools, chromium.
	@missing=""; \
		command -v redis-server >/dev/null || missing="$$missing redis-server"; \
		command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
		command -v chromium >/dev/null || missing="$$missing chromium"; \
		if [ -n "$$missing" ]; then echo "installing$$missing (apt-get)"; apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

.PHONY: bench
bench: build redis ## Run the Go benchmarks (top's memory per rule under a million-key flood among them), the Redis load test (tollgate bench, pinned cores), the leased-budget fleet test's accuracy and the top merge's error.
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)
	$(GO) run ./integration/loadtest -bin $(BIN)
	@echo "== accuracy of leased budgets at full load (the fleet test: 3 instances on one Redis)"
	@$(GO) test -count=1 -run '^TestCachedFleet$$' -v ./integration | grep -o 'RESULT.*'
	@echo "== top clients merged across 2 instances on one Redis: the error against the true counts"
	@$(GO) test -count=1 -run '^TestTopFleet$$' -v ./pkg/app | grep -o 'RESULT.*'

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each, from its committed corpus.
	@# Go 1.26's fuzzing coordinator can fail a target with a bare "context
	@# deadline exceeded" as -fuzztime ends (golang/go#75804, fixed in Go
	@# 1.27). Such a run, with no failing input written, is run again.
	@for target in $$(grep -rl --include='*_test.go' '^func Fuzz' pkg); do \
		dir=$$(dirname $$target); \
		for f in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$target | cut -d' ' -f2); do \
			echo "== $$dir $$f"; \
			for try in 1 2 3; do \
				out=$$($(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) ./$$dir 2>&1); rc=$$?; \
				if [ $$rc -eq 0 ]; then echo "$$out" | grep "execs:" | tail -1; echo "$$out" | tail -1; break; fi; \
				echo "$$out"; \
				if echo "$$out" | grep -q 'Failing input written' || ! echo "$$out" | grep -q 'context deadline exceeded'; then exit 1; fi; \
				echo "(the Go 1.26 coordinator race, golang/go#75804: running $$f again)"; \
			done; \
			[ $$rc -eq 0 ] || exit 1; \
		done; \
	done

.PHONY: lint
lint: ## Check gofmt, go vet and golangci-lint (.golangci.yml).
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GOLANGCI_LINT) run $(PKGS)

.PHONY: tidy
tidy: ## Check that go.mod and go.sum are tidy.
	$(GO) mod tidy -diff

.PHONY: ci
ci: tidy lint test ## What CI runs: tidy, lint, test.
