SHELL := /bin/bash
.DEFAULT_GOAL := help

CLUSTER_DIR ?= .local/cluster

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{ printf "  %-16s %s\n", $$1, $$2 }'

## control plane

.PHONY: deps tools cluster-up cluster-down cluster-status

deps: ## install missing system packages (openssl, curl, python3, promtool, blackbox exporter, skopeo, docker-registry, the node's)
	hack/install-deps.sh

tools: ## build kube-apiserver, kubectl, etcd, helm into the cache (prints the bin dir)
	hack/build-tools.sh

cluster-up: ## start etcd + kube-apiserver (state in .local/cluster, kubeconfig .local/kubeconfig)
	@set -euo pipefail; \
	kubeconfig=$$(hack/cluster.sh up $(CLUSTER_DIR) | tail -n 1); \
	. $(CLUSTER_DIR)/cluster.env; \
	mkdir -p .local/bin; \
	for t in kube-apiserver etcd kubectl helm; do ln -sfn "$$BIN/$$t" .local/bin/$$t; done; \
	ln -sfn "$$kubeconfig" .local/kubeconfig; \
	echo "cluster up: https://127.0.0.1:$$APISERVER_PORT (state in $(CLUSTER_DIR))"; \
	echo "use it with:"; \
	echo '  export KUBECONFIG=$$PWD/.local/kubeconfig PATH=$$PWD/.local/bin:$$PATH'

cluster-down: ## stop the cluster and delete its state
	hack/cluster.sh down $(CLUSTER_DIR)
	rm -f .local/kubeconfig

cluster-status: ## show whether the cluster runs
	@hack/cluster.sh status $(CLUSTER_DIR)

## image and node

NODE_DIR ?= .local/node

.PHONY: image node-up node-down node-status node-test

image: ## the operator's image without a container engine -> target/oci/*.oci.tar (IMAGE_TAG=x sets the tag)
	hack/image.sh

node-up: image ## a real node on a local control plane: kubelet, containerd, CNI, kube-proxy, the images loaded (root)
	@set -euo pipefail; \
	hack/install-deps.sh --node >/dev/null; \
	kubeconfig=$$(hack/node.sh up $(NODE_DIR) | tail -n 1); \
	. $(NODE_DIR)/cluster.env; \
	mkdir -p .local/bin; \
	for t in kubectl helm; do ln -sfn "$$BIN/$$t" .local/bin/$$t; done; \
	ln -sfn "$$kubeconfig" .local/node-kubeconfig; \
	echo "node up: $$("$$BIN/kubectl" --kubeconfig "$$kubeconfig" get nodes --no-headers)"; \
	echo "use it with:"; \
	echo '  export KUBECONFIG=$$PWD/.local/node-kubeconfig PATH=$$PWD/.local/bin:$$PATH'

node-down: ## stop the node and its control plane; remove every pod, mount, netns, bridge, nftables table
	hack/node.sh down $(NODE_DIR)
	rm -f .local/node-kubeconfig

node-status: ## show whether the node runs
	@hack/node.sh status $(NODE_DIR)

node-test: image ## the whole node suite (tests/node/main.rs, --ignored too): helm install, pod faults, rollout, upgrade, scale, eviction, helm test (~15 min)
	hack/install-deps.sh --node >/dev/null
	cargo test --locked --test node -- --include-ignored --test-threads=1 --nocapture

## operator

.PHONY: demo demo-down build test lint

demo: ## the main job: local control plane, 3 replicas, demo targets, sample checkers, kubectl get wc
	hack/demo.sh

demo-down: ## stop the demo (replicas, targets, control plane)
	hack/demo.sh down

build: ## build the operator and crdgen (release)
	cargo build --release --locked

lint: ## rustfmt, clippy over the workspace (operator, crates/, kit/, bench/; warnings are errors), hack/check-structure.py (no function above 100 lines, no import circle between files, folders or crates)
	cargo fmt --all -- --check
	python3 hack/check-structure.py
	cargo clippy --locked --workspace --all-targets -- -D warnings

test: ## every test: install what is missing, lint (in the test build), unit, end-to-end (real control plane), chart, observability, node, chaos (one deck: every fault kind once)
	hack/install-deps.sh
	hack/test.sh

## generated files

CHART_DIR := deploy/helm/webchecker-operator

.PHONY: crds chart-sync

crds: ## regenerate crds/ from the types in crates/api (crdgen), then chart-sync
	cargo run -q --bin crdgen > crds/webcheckers.test.network.io.yaml.tmp
	mv crds/webcheckers.test.network.io.yaml.tmp crds/webcheckers.test.network.io.yaml
	cargo run -q --bin crdgen maintenance > crds/webcheckermaintenances.test.network.io.yaml.tmp
	mv crds/webcheckermaintenances.test.network.io.yaml.tmp crds/webcheckermaintenances.test.network.io.yaml
	$(MAKE) --no-print-directory chart-sync

chart-sync: ## the chart's generated parts: copies of the CRD, rules and dashboards, Cargo.toml's version (Chart.yaml, Dockerfile labels), the README's values table, its sizing table (tests/chart/main.rs, tests/generated/main.rs check them)
	cp crds/*.yaml $(CHART_DIR)/crds/
	cp alerts/webchecker.rules.yaml $(CHART_DIR)/files/alerts.yaml
	cp alerts/blackbox.rules.yaml $(CHART_DIR)/files/blackbox.rules.yaml
	mkdir -p $(CHART_DIR)/files/dashboards
	rm -f $(CHART_DIR)/files/dashboards/*.json
	cp dashboards/*.json $(CHART_DIR)/files/dashboards/
	python3 hack/sync-version.py
	python3 hack/chart-values-doc.py
	python3 hack/sizing-table.py

CHART_OUT := target/charts

.PHONY: package chart-package push

package: chart-sync ## the chart as target/charts/webchecker-operator-<version>.tgz (chart-sync, then chart-package)
	@$(MAKE) --no-print-directory chart-package

# helm of hack/build-tools.sh (what the tests use), with its state under
# target/ so nothing is written to $$HOME. image.repository has no default
# (the templates fail without it): lint with the name `make image` gives.
chart-package: ## the chart as it is in the tree (no chart-sync), helm lint --strict before and after
	@set -euo pipefail; \
	bin=$$(hack/build-tools.sh | tail -n 1); \
	export HELM_CACHE_HOME=$$PWD/target/helm-home/cache HELM_CONFIG_HOME=$$PWD/target/helm-home/config HELM_DATA_HOME=$$PWD/target/helm-home/data; \
	"$$bin/helm" lint --strict $(CHART_DIR) --set image.repository=webchecker-operator; \
	mkdir -p $(CHART_OUT); \
	"$$bin/helm" package $(CHART_DIR) --destination $(CHART_OUT); \
	"$$bin/helm" lint --strict $(CHART_OUT)/webchecker-operator-$$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["package"]["version"])').tgz --set image.repository=webchecker-operator

# Before the images build, not after.
ifneq ($(filter push,$(MAKECMDGOALS)),)
ifeq ($(REGISTRY),)
$(error make push needs REGISTRY, e.g. make push REGISTRY=registry.example.com/team)
endif
endif

push: image chart-package ## REGISTRY=host/path: push both images (skopeo) and the chart (helm push, to REGISTRY/charts), tagged with the crate version
	hack/push.sh '$(REGISTRY)'

## benchmarks

.PHONY: bench sim overload busy discovery-scale

bench: ## benchmarks -> docs/benchmarks.md, docs/img/*.png, the chart README's sizing table (unattended; the last run's wall time is in docs/benchmarks.md; BENCH_LARGE=1 adds 30,000 checkers; BENCH_PARTS=prom,... updates only those parts)
	hack/install-deps.sh
	hack/build-tools.sh >/dev/null
	cargo build --release --locked -p webchecker-bench -p webchecker-operator --features webchecker-bench/ring --bin bench --bin webchecker-operator
	BENCH_COMMAND="$(if $(BENCH_PARTS),BENCH_PARTS=$(BENCH_PARTS) )make bench$(if $(BENCH_LARGE), BENCH_LARGE=$(BENCH_LARGE))" $${CARGO_TARGET_DIR:-target}/release/bench
	python3 hack/sizing-table.py

sim: ## part 7 of the bench alone: the rebalancing cost curve by simulation (real sharder, fake API server; 10,000 and 100,000 checkers; no control plane; ~10 min; BENCH_SIM_LARGE=1 adds 1,000,000 checkers 10 -> 100, some 10 min more) -> docs/benchmarks.md
	cargo build --release --locked -p webchecker-bench --bin bench
	BENCH_PARTS=sim BENCH_COMMAND="make sim$(if $(BENCH_SIM_LARGE), BENCH_SIM_LARGE=$(BENCH_SIM_LARGE))" $${CARGO_TARGET_DIR:-target}/release/bench
	python3 hack/sizing-table.py

overload: ## load scenario: 50,000 checkers on 3 replicas, then recovery (minutes; figures in README)
	hack/build-tools.sh >/dev/null
	cargo test --release --locked --test overload -- --ignored --nocapture

discovery-scale: ## route discovery of 5,000 Ingresses on a control plane of its own: time to all their checkers (minutes; figures in README, docs/discovery.md; DISCOVERY_SCALE_INGRESSES=n)
	hack/build-tools.sh >/dev/null
	cargo test --locked --test probe discovery_scale -- --ignored --nocapture

busy: ## a busy API server (a share of 429s) for 5 minutes with nothing to do, then failover of a silent replica and of the leader (figures in README)
	hack/build-tools.sh >/dev/null
	BUSY_STEADY_SECS=300 cargo test --locked --test reliability busy::a_busy_api_server_moves -- --nocapture

## fault campaign

.PHONY: chaos

CHAOS_MINUTES ?= 60

chaos: ## randomized fault campaign -> target/chaos-report.md (CHAOS_MINUTES=60; CHAOS_SEED=n replays; CHAOS_FAULTS=etcd-freeze,proxy:blip,... focuses)
	hack/build-tools.sh >/dev/null
	CHAOS_MINUTES='$(CHAOS_MINUTES)' CHAOS_SEED='$(CHAOS_SEED)' CHAOS_FAULTS='$(CHAOS_FAULTS)' \
		cargo test --locked --test chaos randomized_fault_campaign -- --exact --nocapture
