# holdfast — see README.md. `make run` and `make test` are the two set-up
# commands; the rest are optional, longer runs.
GO        ?= go
TEST_FLAGS ?= -race -count=1 -timeout 20m
FUZZTIME  ?= 60s

.PHONY: run test build install image image-run vet fmt fuzz bench-proxy bench-attribution bench-overload bench-reserve bench-rollout bench-switchover soak load-data-big client-memory chaos clean

## run: build holdfast and holdfastctl into bin/ and start holdfast on the local default
## (starts a private MariaDB when none answers)
run:
	scripts/run-local.sh

# The modules of the repository: holdfast's, the browser tests', the
# container image's and the Kubernetes manifests' tests, each of the last
# three kept in a module of its own so that the browser driver, the image
# library and the Kubernetes API types stay out of holdfast's module graph.
MODULES := . internal/browsertest internal/imagebuild internal/manifesttest

## test: every test of every module, against a private MariaDB with binary logging on
## that it starts for the run and stops after it (scripts/test-mariadb.sh)
test:
	@scripts/tools-up.sh && addr=$$(scripts/test-mariadb.sh up) && \
	  trap 'scripts/test-mariadb.sh down' EXIT && \
	  echo "test: MariaDB (binary logging on) at $$addr" && \
	  for m in $(MODULES); do \
	    (cd $$m && HOLDFAST_TEST_DSN="root@tcp($$addr)/" $(GO) test $(TEST_FLAGS) ./...) || exit 1; \
	  done

# The version stamp of every build (holdfast version): git describe, the
# commit and the build date; VERSION=, COMMIT=, BUILD_DATE= override them.
LDFLAGS = $(shell scripts/ldflags.sh)

## build: every command into bin/ (holdfast, holdfastctl, the bench drivers)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

## install: holdfast and holdfastctl into $(go env GOPATH)/bin (or GOBIN)
install:
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/holdfast ./cmd/holdfastctl

# The container image (README.md, "A container image"): a static holdfast
# (CGO_ENABLED=0, -trimpath) on an empty base, user 65532, no shell,
# written as an image archive by internal/imagebuild: no container engine
# is needed or used. IMAGE= names the archive, IMAGE_ROOT= where image-run
# unpacks it.
IMAGE      ?= .local/image/holdfast.tar
IMAGE_ROOT ?= .local/image/root
IMAGE_TOOL := .local/image/holdfast-image
CA_CERTS   := $(wildcard /etc/ssl/certs/ca-certificates.crt)

## image: the container image, as an archive at $(IMAGE) (docker load, podman load, skopeo, crane push)
image:
	@mkdir -p .local/image
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o .local/image/holdfast ./cmd/holdfast
	cd internal/imagebuild && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/$(IMAGE_TOOL) ./cmd/holdfast-image
	$(IMAGE_TOOL) build -binary .local/image/holdfast -config config.yaml $(if $(CA_CERTS),-ca-certs $(CA_CERTS)) -out $(IMAGE)

## image-run: make image, then run it here as a container runtime would (needs root: its root
## directory, its user, its entrypoint and environment), serving make run's example
image-run: image
	scripts/run-local.sh --image $(IMAGE) $(IMAGE_ROOT) $(IMAGE_TOOL)

vet:
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

fmt:
	gofmt -w $$(git ls-files '*.go')

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@addr=$$(scripts/mariadb-up.sh) && for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "== $$pkg $$f"; HOLDFAST_TEST_DSN="root@tcp($$addr)/" $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; done

## bench-proxy: sysbench direct / TCP relay / holdfast, and 5,000 connections through holdfast (~15 min)
bench-proxy:
	@addr=$$(scripts/mariadb-up.sh) && scripts/tools-up.sh && \
	  $(GO) run ./cmd/holdfast-bench -go $(GO) -mariadb $$addr $(BENCH_FLAGS)

## bench-overload: checkout's latency beside a background flood, overload classes off and on (~2 min)
bench-overload:
	@addr=$$(scripts/mariadb-up.sh) && scripts/tools-up.sh && \
	  $(GO) run ./cmd/holdfast-bench -mode overload -time 30s -go $(GO) -mariadb $$addr $(BENCH_FLAGS)

## bench-replica: sysbench oltp_read_only through holdfast before a private primary and replica, reads on the primary vs routed to the replica (~4 min)
bench-replica:
	@scripts/mariadb-up.sh >/dev/null && scripts/tools-up.sh && \
	  $(GO) run ./cmd/holdfast-bench -mode replica -rounds 3 -time 20s -go $(GO) $(BENCH_FLAGS)

## bench-attribution: sysbench point_select@16/@64 through holdfast, attribution on vs off, in turn and in concurrent pairs (~15 min)
bench-attribution:
	@addr=$$(scripts/mariadb-up.sh) && scripts/tools-up.sh && \
	  $(GO) run ./cmd/holdfast-bench -mode attribution -go $(GO) -mariadb $$addr $(BENCH_FLAGS)

## bench-reserve: (a) txn counter / (b) autocommit UPDATE / (c) CALL holdfast.reserve on one hot item, 8/64/256 clients, via a 0.5 ms relay (~7 min)
bench-reserve:
	@addr=$$(scripts/mariadb-up.sh) && \
	  $(GO) run ./cmd/holdfast-bench-reserve -go $(GO) -mariadb $$addr $(BENCH_FLAGS)

## bench-rollout: a fleet of three instances of the release before (ROLLOUT_FLAGS=-base COMMIT; default
## f22f59f) replaced one at a time by this version's, under checkout and engine traffic with a drain and
## a fleet-wide cap in force, after this version's migrate; checks every answer and both controls (~2 min)
bench-rollout:
	@scripts/mariadb-up.sh >/dev/null && $(GO) run ./cmd/holdfast-rollout -go $(GO) $(ROLLOUT_FLAGS)

## bench-switchover: 32 writers through holdfast and 32 straight to a VIP, on two private MariaDB servers
## with GTID replication, 25 s of load per scenario: a planned switchover at 6 s; the same with holdfast's
## pause set before the flip and lifted after; the primary killed and its replica promoted 2 s later (relay
## log applied first); a table of errors by code, 9010s, writes lost, latency, and the acceptance checks (~2 min)
bench-switchover:
	$(GO) run ./cmd/holdfast-bench-switchover -go $(GO) $(BENCH_FLAGS)

## soak: the reservation engine's concurrency tests for a minute each (reserve, claim,
## release, expiry, refill together; no deadlock or lock-wait timeout at REPEATABLE READ)
soak:
	@addr=$$(scripts/mariadb-up.sh) && \
	  HOLDFAST_SOAK=1 HOLDFAST_TEST_DSN="root@tcp($$addr)/" $(GO) test -race -count=1 -timeout 30m -v \
	    -run 'TestNoDeadlockAtRepeatableRead|TestMixedWorkloadConservation' ./reservation/

## load-data-big: a 100 MiB LOAD DATA LOCAL INFILE through a holdfast process, which must stream it
## in constant memory; prints holdfast's peak RSS (~1 min)
load-data-big:
	@addr=$$(scripts/mariadb-up.sh) && $(GO) build -o bin/holdfast ./cmd/holdfast && \
	  HOLDFAST_BIN=$(CURDIR)/bin/holdfast HOLDFAST_TEST_DSN="root@tcp($$addr)/" $(GO) test -count=1 -timeout 20m -v \
	    -run '^TestLoadDataLocalBig$$' ./proxy/

## client-memory: holdfast's resident memory with 2,000 and 5,000 idle clients, plain and over
## TLS (HOLDFAST_CLIENT_STEPS=N,M for others): the cost behind sessions.max_clients (~1 min)
client-memory:
	@addr=$$(scripts/mariadb-up.sh) && $(GO) build -o bin/holdfast ./cmd/holdfast && \
	  HOLDFAST_BIN=$(CURDIR)/bin/holdfast HOLDFAST_CLIENT_MEMORY=1 HOLDFAST_TEST_DSN="root@tcp($$addr)/" $(GO) test -count=1 -timeout 20m -v \
	    -run '^TestIdleClientMemory$$' ./proxy/

## chaos: the fault harness: 256 clients of checkout traffic through CALL holdfast.* against a
## private MariaDB while backend connections, MariaDB and holdfast are killed, then three
## instances on one database, then three instances while on-call controls change and instances
## and backend connections are killed, reads on a killed replica, planned switchovers of a primary
## and replica behind a VIP, and the primary killed with its replica promoted 2 s later; checks every
## answer and every unit on the database (~20 min). One scenario: CHAOS_FLAGS='-scenarios failover'
chaos:
	@scripts/mariadb-up.sh >/dev/null && $(GO) run ./cmd/holdfast-chaos -go $(GO) $(CHAOS_FLAGS)

clean:
	rm -rf bin
