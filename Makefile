# Tessera: the two commands a fresh machine needs are `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PROTO_SRC := kubelet_plugin/proto
PROTO_GEN := kubelet_plugin/proto/gen
STAMP := $(VENV)/.installed
# import-linter (`make lint`) has a venv of its own: it pulls in `rich`, which structlog loads wherever it is
# installed (~100 ms of every tessera process's start); .venv, like the image, stays without it
LINT_VENV := .venv-lint
LINT_STAMP := $(LINT_VENV)/.installed
# The Kubernetes release of the e2e control plane and the real node: e2e/cluster/k8s/default-version unless
# K8S_VERSION=1.36.3 (or v1.36.3) is given; KV is it with its "v".
KV = $(if $(K8S_VERSION),v$(patsubst v%,%,$(K8S_VERSION)))
# The newest release whose default gates lack shared counters: `make test` runs the degraded path on it.
LEGACY_KV = $$(K8S_VERSION=$(KV) $(BIN)/python -W ignore::RuntimeWarning -m e2e.controlplane.releases)
# make test-k8s: the gates the matrix run switches on; `sharing` = what a user of that release must enable
GATES ?= sharing
# SMOKE=1: a benchmark's (or the demo's) smoke form, every part once on a tiny scale, its figures meaningless;
# `make test` runs each documented command so (tests/README.md, "Smoke forms")
SMOKE_FLAG = $(if $(SMOKE),--smoke)
# pytest-xdist workers for `make test` and `make test-e2e` (tests/README.md, "Running in parallel": a third
# worker fills the second core while the others wait on the cluster); 0: one
# process, as pytest runs by default
TEST_WORKERS ?= 3
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)
# Python may keep its bytecode (a machine may set PYTHONDONTWRITEBYTECODE): without it every run compiles, and
# pytest rewrites the assertions of, every test module again, about 40 s of each run's collection on 2 cores
unexport PYTHONDONTWRITEBYTECODE

.PHONY: dev lint test test-unit test-integration test-interceptor test-e2e demo demo-down \
        bench-prepare bench-metrics bench-interceptor bench-e2e bench-scale bench-order bench-trace bench-trace-offline bench-extender bench-upgrade bench-webhook proto interceptor cluster realnode volcano helm promtool \
        manifests clean image test-k8s

dev: $(STAMP) proto interceptor

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	# a venv made before import-linter moved to $(LINT_VENV) still holds it, and rich
	$(BIN)/pip uninstall -q -y import-linter rich 2>/dev/null || true
	touch $@

$(LINT_STAMP): lint-requirements.txt
	test -x $(LINT_VENV)/bin/python || $(PY) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/pip install -q -r lint-requirements.txt
	touch $@

proto: $(STAMP) $(PROTO_GEN)/.stamp

$(PROTO_GEN)/.stamp: $(wildcard $(PROTO_SRC)/*.proto) kubelet_plugin/proto/generate.py
	$(BIN)/python kubelet_plugin/proto/generate.py
	touch $@

interceptor:
	$(MAKE) -C interceptor

lint: dev $(LINT_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy dra_driver kubelet_plugin cdi admission scheduler_extender e2e tests conftest.py interceptor/fake/gen_products.py
	$(LINT_VENV)/bin/lint-imports  # reads the sources from here (it puts the working directory on its path)
	$(BIN)/pytest -q tests/unit/test_house_rules.py

test-unit: dev helm promtool
	$(BIN)/pytest -q tests/unit

test-integration: dev
	$(BIN)/pytest -q tests/integration

test-interceptor: dev
	$(MAKE) -C interceptor test

cluster:
	K8S_VERSION=$(KV) bash e2e/cluster/build.sh

# vc-scheduler and vc-controller-manager from the snapshot in ../shared/volcano, and its CRDs (e2e/volcano);
# a cold build takes about 30 min on 2 cores, a no-op run well under a second
volcano:
	bash e2e/volcano/build.sh

# Without the Volcano snapshot beside the checkout (build.sh exits 4), its scenarios are skipped and say why;
# any other failure stops make test.
VOLCANO_OR_SKIP = bash e2e/volcano/build.sh || { rc=$$?; [ $$rc -eq 4 ] && echo "make: no Volcano snapshot to build \
from (see above); the Volcano scenarios will be skipped" >&2 || exit $$rc; }

# kubelet, containerd, runc, CNI plugins and the test images for the real e2e node (e2e/realnode)
realnode: interceptor
	K8S_VERSION=$(KV) bash e2e/realnode/build.sh

# When the real node does not build, its scenarios (marker realnode) are skipped and say why.
REALNODE_OR_SKIP = K8S_VERSION=$(KV) bash e2e/realnode/build.sh || echo "make: the real node did not build (see above); \
its scenarios will be skipped" >&2

helm:
	bash deploy/helm/build-helm.sh

# promtool from the upstream Go module, for `promtool test rules` over the chart's alerts (e2e/prometheus)
promtool:
	bash e2e/prometheus/build.sh

# the node plugin image as an OCI archive for `ctr images import`, built without a container engine (deploy/image)
image: dev
	bash deploy/image/build.sh

manifests: helm
	bash deploy/render-manifests.sh

test-e2e: dev cluster
	$(VOLCANO_OR_SKIP)
	K8S_VERSION=$(LEGACY_KV) bash e2e/cluster/build.sh
	$(REALNODE_OR_SKIP)
	bash deploy/helm/build-helm.sh
	bash deploy/image/build.sh
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m e2e e2e

# lint and the C library's tests side by side: the library's tests mostly wait (fixed-length runs, arbiter
# start-ups) while mypy works
test: dev promtool
	$(MAKE) -j2 --output-sync=target lint test-interceptor
	$(VOLCANO_OR_SKIP)
	K8S_VERSION=$(KV) bash e2e/cluster/build.sh
	K8S_VERSION=$(LEGACY_KV) bash e2e/cluster/build.sh
	$(REALNODE_OR_SKIP)
	bash deploy/helm/build-helm.sh
	bash deploy/image/build.sh
	$(BIN)/pytest -q $(PYTEST_PARALLEL) tests e2e

# One release of the version matrix (docs/install.md, "Tested releases"): the e2e cluster tests and the
# simulated-node scenarios of every family on it, e.g. make test-k8s K8S_VERSION=1.35.4 [GATES=default].
# On 1.34, where Tessera can publish whole GPUs only, the degraded path (Release.suite). The real node stays
# on the default release (make test).
test-k8s: dev
	@test -n "$(K8S_VERSION)" || { echo "make test-k8s: name a release, e.g. K8S_VERSION=1.35.4" >&2; exit 2; }
	K8S_VERSION=$(KV) bash e2e/cluster/build.sh
	K8S_VERSION=$(LEGACY_KV) bash e2e/cluster/build.sh
	K8S_VERSION=$(KV) TESSERA_K8S_GATES=$(GATES) $(BIN)/pytest -q -m e2e $(if $(SMOKE),--collect-only) \
		$$(K8S_VERSION=$(KV) $(BIN)/python -W ignore::RuntimeWarning -m e2e.controlplane.releases suite) --ignore=e2e/scenarios/realnode

# make demo NVML=fake: the node plugins on the NVML backend over the fake libnvidia-ml (interceptor/build/fake);
# DEMO_STATE=DIR: where it keeps its state (default .state/demo)
DEMO_STATE_FLAG = $(if $(DEMO_STATE),--state-dir $(DEMO_STATE))
demo: dev cluster
	$(BIN)/python -m e2e.demo up $(if $(NVML),--nvml $(NVML)) $(DEMO_STATE_FLAG) $(SMOKE_FLAG)

demo-down:
	$(BIN)/python -m e2e.demo down $(DEMO_STATE_FLAG)

bench-prepare: dev
	$(BIN)/python -m tests.bench.prepare $(SMOKE_FLAG)

# a scrape of /metrics with 256 prepared vgpu claims whose regions a fake-driver program filled
bench-metrics: dev
	$(BIN)/python -m e2e.benches.scrape $(SMOKE_FLAG)

bench-interceptor: interceptor
	$(MAKE) -C interceptor bench SMOKE=$(SMOKE)

# 4 nodes, 200 vGPU pods at once: the upstream client QPS/burst defaults next to production values
bench-e2e: dev cluster
	$(BIN)/python -m e2e.benches.pods $(SMOKE_FLAG)

# the admission webhook at 50 pods/s: AdmissionReview latency p50/p99 (client and in-webhook), pod creates
# through the API server with and without a HAMi GPU request, and the webhook's memory; templates made by
# forged reviews; time from a pod's create to its claim (WEBHOOK_ARGS="--webhook-source DIR" for another checkout)
bench-webhook: dev cluster helm
	$(BIN)/python -m e2e.benches.admission $(WEBHOOK_ARGS) $(SMOKE_FLAG)

# make bench-scale NODES=100 FAMILIES=vgpu,mig-1g runs just that part (docs/performance.md);
# SCHEDULERS=default,volcano runs each family through kube-scheduler, then vc-scheduler, and a Volcano gang
NODES ?= 10,50,100
FAMILIES ?= whole,vgpu,mig-1g,mix
LAYOUTS ?= all,fewer,vgpu-only,mig-1g-only
bench-scale: dev cluster $(if $(findstring volcano,$(SCHEDULERS)),volcano)
	$(BIN)/python -m e2e.benches.scale $(if $(SMOKE),--smoke,--nodes $(NODES) --families $(FAMILIES) --layouts $(LAYOUTS)) \
		$(if $(SCHEDULERS),--schedulers $(SCHEDULERS))

# a production trace replayed on the real scheduler (docs/performance.md, "A production trace"): make bench-trace
# [TRACE=pods.csv] [NODES=nodes.csv] [SEEDS=42-44] [SAMPLE=0.1] [SETTINGS=node-settings.yaml]
# [SCHEDULER_CONFIG=deploy/scheduler/kube-scheduler-config.yaml] [EXTENDER=1]; without them Alibaba's openb trace in
# ../shared/traces. NODES is bench-scale's node counts unless given, so only a NODES given is passed on.
TRACE_ARGS = $(if $(TRACE),--trace $(TRACE)) $(if $(filter-out file,$(origin NODES)),--nodes $(NODES)) \
	$(if $(SEEDS),--seeds $(SEEDS)) $(if $(SAMPLE),--sample $(SAMPLE)) $(if $(SETTINGS),--settings $(SETTINGS))
SCHEDULER_ARGS = $(if $(SCHEDULER_CONFIG),--scheduler-config $(SCHEDULER_CONFIG)) $(if $(EXTENDER),--extender)
bench-trace: dev cluster
	$(BIN)/python -m e2e.benches.trace $(if $(SMOKE),--smoke $(SCHEDULER_ARGS),$(TRACE_ARGS) $(SCHEDULER_ARGS))

# the scheduler extender's levers on an offline replay of the same protocol, no control plane (docs/performance.md):
# make bench-trace-offline [TRACE=…] [NODES=…] [SEEDS=42-44] [SAMPLE=0.1] [LEVERS=default,fgd-u100-w5] [MIX=mix.csv]
OFFLINE_ARGS = $(if $(TRACE),--trace $(TRACE)) $(if $(filter-out file,$(origin NODES)),--nodes $(NODES)) \
	$(if $(SEEDS),--seeds $(SEEDS)) $(if $(SAMPLE),--sample $(SAMPLE)) $(if $(LEVERS),--levers $(LEVERS)) \
	$(if $(MIX),--mix $(MIX))
bench-trace-offline: dev
	$(BIN)/python -m e2e.benches.trace.levers $(if $(SMOKE),--smoke $(if $(LEVERS),--levers $(LEVERS)),$(OFFLINE_ARGS))

# the scheduler extender's cost per prioritize call at 121 and 1,213 trace nodes, in process (docs/performance.md):
# make bench-extender [NODES=node-list.csv] [CALLS=50]
bench-extender: dev
	$(BIN)/python -m e2e.benches.extender_cost $(if $(SMOKE),--smoke,$(if $(filter-out file,$(origin NODES)),--nodes $(NODES)) $(if $(CALLS),--calls $(CALLS)))

# the device order against fragmentation: seeded arrivals and departures on one node, by-gpu vs the default
bench-order: dev cluster
	$(BIN)/python -m e2e.benches.scale.fragmentation --mix default --mix aligned $(SMOKE_FLAG)

bench-upgrade: dev cluster realnode helm image
	$(BIN)/python -m e2e.realnode upgrade $(SMOKE_FLAG)

clean:
	rm -rf $(VENV) $(LINT_VENV) $(PROTO_GEN) build *.egg-info
	$(MAKE) -C interceptor clean
