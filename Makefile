# DATABASE_URL names the PostgreSQL server every target uses.
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
export DATABASE_URL

# FUZZTIME is how many inputs each fuzz target of `make fuzz` tries;
# TEST_FUZZTIME is the short pass every target gets in `make test`. They are
# counts, not durations: with a duration, Go 1.26's fuzz coordinator can
# report "context deadline exceeded" as a failure when the time runs out
# (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 200000x
TEST_FUZZTIME ?= 5000x

# SERVER_MEMORY is where `make test-deps` installs the reference MCP
# memory server (its package.json and lock file pin the version), and
# MCP_TASKS the MCP servers whose tools run as tasks (the reference
# everything server and the tests' own, on the official TypeScript SDK).
SERVER_MEMORY := internal/integration/testdata/server-memory
MCP_TASKS := internal/integration/testdata/mcp-tasks

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Tell the product's story end to end on an embedded Temporal server; exits 0 only if every check holds.
	go run ./cmd/oncerun-dev demo

.PHONY: dev
dev: ## Run an embedded Temporal server, the migrations and a worker in one process.
	go run ./cmd/oncerun-dev dev

.PHONY: migrate
migrate: ## Apply the database migrations to DATABASE_URL.
	go run ./cmd/oncerun migrate

.PHONY: test-deps
test-deps: ## Install what the tests run besides Go: the reference MCP memory and everything servers and the TypeScript MCP SDK, from npm (needs Node.js and npm).
	@test -f $(SERVER_MEMORY)/node_modules/@modelcontextprotocol/server-memory/dist/index.js || \
		npm ci --prefix $(SERVER_MEMORY) --no-audit --no-fund --loglevel=error
	@test -f $(MCP_TASKS)/node_modules/@modelcontextprotocol/server-everything/dist/index.js || \
		npm ci --prefix $(MCP_TASKS) --no-audit --no-fund --loglevel=error
	@test -f internal/openapiclient/node_modules/openapi-typescript/bin/cli.js || npm ci --prefix internal/openapiclient --no-audit --no-fund --loglevel=error

.PHONY: test
test: test-deps ## Vet, check workflow determinism, run every test with the race detector, then fuzz each target briefly (needs PostgreSQL at DATABASE_URL, Chromium, Node.js and npm).
	go vet ./...
	go tool workflowcheck ./workflows/... ./internal/watchdog/... ./internal/reconcile/...
	go test -race -count=1 -timeout 20m ./...
	cd bench/peers && go vet ./... && go test -count=1 ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

.PHONY: lint
lint: ## Run go vet, staticcheck and workflowcheck.
	go vet ./...
	go tool staticcheck ./...
	go tool workflowcheck ./workflows/... ./internal/watchdog/... ./internal/reconcile/...

.PHONY: mutation
mutation: ## Build each named bug into the tests in turn (go test -overlay; the source tree is never written, so it is safe while editing or building) and run the tests that must catch it; exits 1 if one survives (needs PostgreSQL at DATABASE_URL).
	go run ./internal/mutation

.PHONY: worker
worker: ## Run a worker against TEMPORAL_ADDRESS and DATABASE_URL.
	go run ./cmd/oncerun worker

.PHONY: record-histories
record-histories: ## Re-record the workflow histories the replay tests check (after an intended change) into a temporary folder, then copy them over the recorded ones (runs' to workflows/, the watchdog's passes to internal/watchdog/); a recording no test writes any more is kept.
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	ONCERUN_RECORD_HISTORIES=$$dir go test -count=1 ./internal/integration/ && \
	for f in "$$dir"/*.json; do \
		[ -e "$$f" ] || continue; \
		case "$${f##*/}" in \
		*-Watchdog-*) cp "$$f" internal/watchdog/testdata/histories/ ;; \
		*) cp "$$f" workflows/testdata/histories/ ;; \
		esac; \
		echo "recorded $${f##*/}"; \
	done

.PHONY: chaos
chaos: ## Shake oncerun for about an hour: 200 runs, 1,000 worker kills, Temporal and PostgreSQL restarts, 120 network faults between the workers and what they reach, provider and mail faults; then again while the workers roll through three tool registries (chaos-deploy); count every effect where it landed.
	go run ./cmd/oncerun-dev chaos
	go run ./cmd/oncerun-dev chaos --deploy

.PHONY: chaos-deploy
chaos-deploy: ## Shake oncerun for 15 to 20 minutes while the workers roll through three tool registries and five Worker Deployment versions (a tool added, a rule changed, an MCP server down at some workers' start, a sub-agent removed, a schema changed); hold every run's record against every destination by key.
	go run ./cmd/oncerun-dev chaos --deploy

.PHONY: chaos-cluster
chaos-cluster: ## Shake oncerun on two Temporal nodes on PostgreSQL for about eight minutes: 100 runs, each node SIGKILLed twice and kept down 30 s, 100 worker kills, PostgreSQL connections cut, network faults, provider and mail faults.
	go run ./cmd/oncerun-dev chaos --temporal cluster --pg-restart backends

# BENCH_OUT receives the raw output of `make bench`, in Go's benchmark
# format, which benchstat reads (e.g. to compare two commits).
BENCH_OUT ?= bench.txt

.PHONY: bench
bench: ## Every speed goal side by side, raw figures in $(BENCH_OUT), then ratios by benchstat: the dedup store vs a bare transaction (1, 8, 32 callers), a scripted run vs plain Temporal, dev-stack throughput, history per step, claims while pruning, and the peer table (oncerun, plain Temporal and DBOS; needs PostgreSQL at DATABASE_URL; about 25 minutes).
	@: > $(BENCH_OUT)
	go test -run '^$$' -bench BenchmarkIssueCredit -benchtime 2s -count 6 ./internal/idempotency/ | tee -a $(BENCH_OUT)
	go test -run '^$$' -bench BenchmarkScriptedRunVsPlainWorkflow -benchtime 10x -count 3 -timeout 20m ./internal/integration/ | tee -a $(BENCH_OUT)
	go test -run '^$$' -bench BenchmarkDevStackThroughput -benchtime 1x -count 3 -timeout 30m ./internal/integration/ | tee -a $(BENCH_OUT)
	go test -run '^$$' -bench BenchmarkTenStepRunHistory -benchtime 5x -timeout 10m ./internal/integration/ | tee -a $(BENCH_OUT)
	go test -run '^$$' -bench BenchmarkPruneExpiredKeys -benchtime 1x -timeout 30m ./internal/watchdog/ | tee -a $(BENCH_OUT)
	go test -run '^$$' -bench BenchmarkTracingCost -benchtime 5x -count 6 -timeout 20m ./internal/integration/ | tee -a $(BENCH_OUT)
	cd bench/peers && go run . $(PEERS_FLAGS) | tee -a ../../$(BENCH_OUT)
	@echo; echo "== Store.Do against the bare transaction (ratio = 1 + vs base)"
	go tool benchstat -filter '.name:IssueCredit' -col /impl $(BENCH_OUT)
	@echo; echo "== A worker's CPU per step, tracing off and on at 100% sampling (ratio = 1 + vs off)"
	go tool benchstat -filter '.name:TracingCost' -col /tracing $(BENCH_OUT)
	@echo; echo "== Runs against plain Temporal, history, and pruning (the peer table is above)"
	go tool benchstat -filter '-.name:IssueCredit -.name:Peers -.name:TracingCost' $(BENCH_OUT)

# PEERS_FLAGS are bench/peers' flags, e.g. -rounds 6 -temporal sqlite.
PEERS_FLAGS ?=

.PHONY: bench-peers
bench-peers: ## oncerun side by side with DBOS Transact for Go (RunAsTransaction; RunAsStep, at least once) and plain Temporal (activities; local activities): 10-step runs of one insert a step, 1 and 40 at once, Temporal on SQLite then on PostgreSQL; CPU per step (this process, Temporal's, PostgreSQL's backends), steps/s, ratios to DBOS, the goals (needs PostgreSQL at DATABASE_URL; about 5 minutes).
	cd bench/peers && go run . $(PEERS_FLAGS)

.PHONY: bench-prune
bench-prune: ## Prune 1,000,000 expired keys at the watchdog's pace (about 8 minutes; ONCERUN_BENCH_DUTY=1 for back to back); keys/s and claim p99 during pruning vs idle.
	go test -run '^$$' -bench BenchmarkPruneExpiredKeys -benchtime=1x -timeout 30m ./internal/watchdog/

.PHONY: bench-approvals
bench-approvals: ## Approvals lists among 200,000 steps vs a bare query; token lookup, known vs unknown.
	go test -run '^$$' -bench 'BenchmarkListApprovals|BenchmarkTokensLookup' -count 5 ./approvals/

.PHONY: bench-tracing
bench-tracing: ## A worker process's CPU per step and steps/s, tracing off, on at 100% sampling to a local OTLP receiver, and on at 10%, side by side (about 3 minutes).
	go test -run '^$$' -bench BenchmarkTracingCost -benchtime 5x -count 8 -timeout 20m ./internal/integration/ | tee tracing.txt
	go tool benchstat -col /tracing tracing.txt

.PHONY: bench-run
bench-run: ## A scripted 10-step run against a plain Temporal workflow making the same 10 inserts, side by side on one server.
	go test -run '^$$' -bench BenchmarkScriptedRunVsPlainWorkflow -benchtime 10x -count 3 -timeout 20m ./internal/integration/

.PHONY: bench-handover
bench-handover: ## One of two workers cut off from PostgreSQL for 40 s, then 150 s, 20 runs each: how long after the cut every run had ended, and how soon after the heal the cut worker polled again (about 4 minutes).
	go test -run '^$$' -bench BenchmarkHandOver -benchtime 1x -timeout 20m ./internal/integration/

.PHONY: bench-events
bench-events: ## 1,000 subscribers follow 40 working runs on one service over Server-Sent Events: the time from a fact's commit to each subscriber (p50, p99) and what an idle subscriber costs (about 1 minute).
	go test -run '^$$' -bench BenchmarkEventSubscribers -benchtime 40x -count 1 -timeout 10m ./approvals/

.PHONY: bench-history
bench-history: ## A 10-step scripted run's history per step (events, bytes, -v for each event type), and a scripted run of 1,100 steps: its history's size, every Continue-As-New generation included.
	go test -run '^$$' -bench BenchmarkTenStepRunHistory -benchtime 5x -v -timeout 10m ./internal/integration/
	go test -run '^$$' -bench BenchmarkScriptedRunHistory -benchtime 1x -timeout 30m ./internal/integration/

.PHONY: fuzz
fuzz: ## Fuzz keys, escaping, plan files, planner output, MCP tool results, currencies and amounts (calls, edits, caps, budgets), the approvals API (decisions, edits, answers, trace headers) and the inbox's forms, FUZZTIME inputs each.
	go test -run '^$$' -fuzz '^FuzzKeyRoundTrip$$' -fuzztime $(FUZZTIME) ./internal/keys/
	go test -run '^$$' -fuzz '^FuzzKeyCollision$$' -fuzztime $(FUZZTIME) ./internal/keys/
	go test -run '^$$' -fuzz '^FuzzCanonicalize$$' -fuzztime $(FUZZTIME) ./internal/keys/
	go test -run '^$$' -fuzz '^FuzzEscape$$' -fuzztime $(FUZZTIME) ./internal/untrusted/
	go test -run '^$$' -fuzz '^FuzzPlanFile$$' -fuzztime $(FUZZTIME) ./internal/cli/
	go test -run '^$$' -fuzz '^FuzzPlannerOutput$$' -fuzztime $(FUZZTIME) ./activities/
	go test -run '^$$' -fuzz '^FuzzMCPToolResult$$' -fuzztime $(FUZZTIME) ./activities/
	go test -run '^$$' -fuzz '^FuzzTraceHeaders$$' -fuzztime $(FUZZTIME) ./approvals/
	go test -run '^$$' -fuzz '^FuzzCurrencyRules$$' -fuzztime $(FUZZTIME) ./internal/spend/
	go test -run '^$$' -fuzz '^FuzzApprovalsAPI$$' -fuzztime $(FUZZTIME) -timeout 30m ./internal/integration/
	go test -run '^$$' -fuzz '^FuzzEditAndResolveAPI$$' -fuzztime $(FUZZTIME) -timeout 30m ./internal/integration/
	go test -run '^$$' -fuzz '^FuzzInboxForms$$' -fuzztime $(FUZZTIME) -timeout 30m ./internal/integration/
