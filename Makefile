# retry-operator. `make help` lists the targets.
#
# Nothing here downloads a binary: Go tools are built through the Go module proxy
# into ./bin (pinned by version), Kubernetes itself is built from source by
# hack/kube-binaries.sh into bin/k8s/<version> (git-ignored, reused when present).

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

KUBE_VERSION ?= v1.37.2
ETCD_VERSION ?= v3.6.16
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.1
# The kustomize kubectl 1.32 embeds, the oldest the overlays must render with
# (config/overlays_test.go renders them with both).
KUBECTL_KUSTOMIZE_VERSION ?= v5.5.0
GOLANGCI_LINT_VERSION ?= v2.15.0
CRD_REF_DOCS_VERSION ?= v0.3.0
HELM_VERSION ?= v3.22.0

LOCALBIN ?= $(shell pwd)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
KUBECTL_KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUBECTL_KUSTOMIZE_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
CRD_REF_DOCS ?= $(LOCALBIN)/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)
KUBE_BIN ?= $(LOCALBIN)/k8s/$(KUBE_VERSION)
# install, uninstall, deploy and undeploy need a kubectl only: the one on PATH,
# else kubectl alone built from source into KUBE_BIN (no API server, no etcd).
KUBECTL ?= $(or $(shell command -v kubectl 2>/dev/null),$(KUBE_BIN)/kubectl)

# The two images, one scheme everywhere: IMG is the manager, SIDECAR_IMG the
# injected sidecar. build-images names its tarballs with them, push-images pushes
# them there, deploy and build-installer render them into the manifests. The
# checked-in dist/ uses these defaults. A reference may carry a digest
# (name@sha256:…) everywhere but build-images.
IMG ?= retry.dev/manager:dev
SIDECAR_IMG ?= retry.dev/retry-sidecar:dev
# push-images: plain HTTP to a registry that is not local (localhost, 127.0.0.0/8,
# ::1, *.local and private addresses fall back to HTTP anyway).
INSECURE_REGISTRY ?= false
# docker-build/docker-push: the container tool, for those with one.
CONTAINER_TOOL ?= docker
# config/default uses cert-manager for webhook certificates; config/local has the
# manager generate its own (clusters without cert-manager: the local one, kind).
DEPLOY_OVERLAY ?= config/default

# Files that `make manifests generate` writes; `make test` fails if they are stale.
GENERATED = api/v1alpha1/zz_generated.deepcopy.go api/v1alpha1/zz_generated.defaults.go internal/policyset/zz_generated.wire.go config/crd/bases config/rbac/role.yaml config/webhook/manifests.yaml docs/api.md

GO_PACKAGES = $$(go list ./... | grep -v /test/e2e)
GO_FILES = $$(find . -name '*.go' -not -path './bin/*' -not -path './.git/*' -not -path './.local-cluster/*')

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD, RBAC and webhook configuration from markers.
	"$(CONTROLLER_GEN)" rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases
	go run ./hack/gendefaults config/crd/bases/policy.retry.dev_retrypolicies.yaml api/v1alpha1/zz_generated.defaults.go

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy methods and the wire form of an upstream (policies.json).
	"$(CONTROLLER_GEN)" object:headerFile="hack/boilerplate.go.txt",year=2026 paths="./..."
	go run ./hack/genwire internal/policyset/zz_generated.wire.go

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $(GO_FILES)

.PHONY: vet
vet: ## Run go vet.
	go vet ./...
	if [ -d test/e2e ]; then go vet -tags e2e ./test/e2e/...; fi

.PHONY: lint
lint: vet check-fmt $(GOLANGCI_LINT) ## Lint: go vet, gofmt and golangci-lint (.golangci.yml), e2e code included.
	"$(GOLANGCI_LINT)" run --allow-parallel-runners --build-tags e2e ./...

.PHONY: api-docs
api-docs: $(CRD_REF_DOCS) ## Generate docs/api.md from the API types.
	"$(CRD_REF_DOCS)" --source-path=./api --config=hack/crd-ref-docs.yaml --renderer=markdown --output-path=docs/api.md >/dev/null

.PHONY: check-fmt
check-fmt: ## Fail if any Go file is not gofmt-ed.
	@out=$$(gofmt -l $(GO_FILES)); \
	if [ -n "$$out" ]; then echo "not gofmt-ed (run make fmt):"; echo "$$out"; exit 1; fi

.PHONY: check-generated
check-generated: ## Fail if `make manifests generate` changes any generated file.
	@before=$$(find $(GENERATED) -type f -print0 | sort -z | xargs -0 sha256sum); \
	$(MAKE) --no-print-directory manifests generate api-docs; \
	after=$$(find $(GENERATED) -type f -print0 | sort -z | xargs -0 sha256sum); \
	if [ "$$before" != "$$after" ]; then \
		echo "generated files were stale; regenerated them: commit the result"; \
		diff <(echo "$$before") <(echo "$$after") || true; exit 1; fi; \
	echo "generated files are up to date"

.PHONY: kube-binaries
kube-binaries: ## Build kube-apiserver, kubectl and etcd from source into bin/k8s/<version> (reused).
	KUBE_VERSION=$(KUBE_VERSION) ETCD_VERSION=$(ETCD_VERSION) hack/kube-binaries.sh

$(KUBE_BIN)/kubectl:
	KUBE_VERSION=$(KUBE_VERSION) KUBE_BIN_DIR="$(KUBE_BIN)" hack/kube-binaries.sh --kubectl >/dev/null

.PHONY: check-dist
check-dist: ## Fail if `make build-installer` (default images) changes anything under dist/.
	@before=$$(find dist -type f -print0 | sort -z | xargs -0 sha256sum); \
	$(MAKE) --no-print-directory build-installer IMG=retry.dev/manager:dev SIDECAR_IMG=retry.dev/retry-sidecar:dev >/dev/null; \
	after=$$(find dist -type f -print0 | sort -z | xargs -0 sha256sum); \
	if [ "$$before" != "$$after" ]; then \
		echo "dist/ was stale; regenerated it: commit the result"; \
		diff <(echo "$$before") <(echo "$$after") || true; exit 1; fi; \
	echo "dist/ is up to date"

CHART_MONITORS_ON = --set prometheus.serviceMonitor.enabled=true --set prometheus.podMonitor.enabled=true

.PHONY: lint-chart
lint-chart: $(HELM) ## helm lint and helm template of dist/chart, in both certificate modes.
	"$(HELM)" lint --strict dist/chart --kube-version $(KUBE_VERSION)
	"$(HELM)" lint --strict dist/chart --kube-version $(KUBE_VERSION) --set certificates.mode=self-signed $(CHART_MONITORS_ON)
	"$(HELM)" template retry-operator dist/chart --kube-version $(KUBE_VERSION) --namespace retry-operator-system >/dev/null
	"$(HELM)" template retry-operator dist/chart --kube-version $(KUBE_VERSION) --namespace retry-operator-system --set certificates.mode=self-signed $(CHART_MONITORS_ON) >/dev/null

.PHONY: test
test: lint check-generated check-dist lint-chart kube-binaries $(KUBECTL_KUSTOMIZE) ## Every test that needs no cluster of pods: unit, envtest, sidecar; dist/ fresh, chart linted and compared with dist/install*.yaml, overlays rendered by old and new kustomize.
	KUBEBUILDER_ASSETS="$$(KUBE_VERSION=$(KUBE_VERSION) hack/kube-binaries.sh 2>/dev/null | tail -1)" HELM="$(HELM)" \
		KUSTOMIZE_BINARIES="$(KUSTOMIZE) $(KUBECTL_KUSTOMIZE)" go test -count=1 $(GO_PACKAGES)
	$(MAKE) --no-print-directory test-race
	$(MAKE) --no-print-directory test-bench

# Every package that declares a benchmark (found, not listed: a new one joins).
BENCH_PACKAGES = $$(grep -rl --include='*_test.go' -e '^func Benchmark' $$(go list -f '{{.Dir}}' ./... | grep -v /test/e2e) | xargs -n1 dirname | sort -u)

.PHONY: test-bench
test-bench: ## Every benchmark once (-benchtime=1x): a benchmark is code, and one that no longer runs fails here.
	go test -count=1 -run '^$$' -bench . -benchtime=1x $(BENCH_PACKAGES)

.PHONY: test-race
test-race: ## The concurrent packages (decision core, sidecar, upstream client, app-side server, rehearsal scheduler) under the race detector.
	go test -count=1 -race ./pkg/... ./internal/policyset/... ./internal/sidecar/... ./internal/retrysim/...

.PHONY: fuzz
FUZZ_PACKAGES = ./pkg/retrypolicy ./internal/ratelimitheader ./internal/gatewayroute ./internal/sidecar/h1client ./internal/sidecar/h1server ./internal/policyset ./internal/sidecar/config

fuzz: ## Run each fuzz target for FUZZTIME (default 30s).
	@for p in $(FUZZ_PACKAGES); do for f in $$(go test -list '^Fuzz' $$p | grep ^Fuzz); do \
		go test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-30s} $$p || exit 1; done; done

.PHONY: bench-controller
bench-controller: ## Manager scale benchmark: 1,000 RetryPolicies in 100 namespaces, steady-state writes, pod admission latency.
	bench/controller/run.sh

.PHONY: bench-quota
bench-quota: ## Shared quota with N real retry-sidecar processes and a real redis-server: 10 and 50 pods, 10:1 skew, 1.2 R, growth, Redis stopped, vs the per-pod split (about 6 min; ARGS="-duration 60s -outage 30s" for the targets, about 10 min; nothing else running).
	go run ./bench/quota $(ARGS)

.PHONY: bench-sidecar
bench-sidecar: ## Sidecar vs HAProxy vs nginx vs direct on loopback (apt-installs haproxy nginx wrk if missing); writes docs/benchmarks.md.
	bench/sidecar/run.sh

.PHONY: bench-grpc
bench-grpc: ## gRPC unary calls: sidecar vs HAProxy (h2c both sides) vs direct on loopback, calls/s and CPU per call (apt-installs haproxy if missing); writes docs/benchmarks-grpc.md.
	bench/grpc/run.sh

.PHONY: bench
bench: ## Micro-benchmarks of the decision core.
	go test -run '^$$' -bench . -benchmem ./pkg/retrypolicy

##@ Build

.PHONY: build
build: ## Build the manager, the sidecar and the kubectl plugin (kubectl-retry) into ./bin.
	CGO_ENABLED=0 go build -trimpath -o bin/manager ./cmd/manager
	CGO_ENABLED=0 go build -trimpath -o bin/retry-sidecar ./cmd/retry-sidecar
	CGO_ENABLED=0 go build -trimpath -o bin/kubectl-retry ./cmd/kubectl-retry

.PHONY: run
run: manifests generate ## Run the manager against the cluster in KUBECONFIG, without webhooks.
	ENABLE_WEBHOOKS=false go run ./cmd/manager

.PHONY: build-images
build-images: ## Write image tarballs (no Docker) into bin/images: the manager as IMG, the sidecar as SIDECAR_IMG, and the e2e test images.
	IMG="$(IMG)" SIDECAR_IMG="$(SIDECAR_IMG)" hack/build-images.sh

.PHONY: push-images
push-images: ## Push bin/images/manager.tar to IMG and retry-sidecar.tar to SIDECAR_IMG, in any OCI registry, without Docker (INSECURE_REGISTRY=true: plain HTTP).
	go run ./hack/pushimages $(if $(filter true,$(INSECURE_REGISTRY)),-insecure) \
		bin/images/manager.tar="$(IMG)" bin/images/retry-sidecar.tar="$(SIDECAR_IMG)"

.PHONY: docker-build
docker-build: ## Build IMG and SIDECAR_IMG with Docker (CONTAINER_TOOL) from the Dockerfile.
	$(CONTAINER_TOOL) build --target manager -t "$(IMG)" .
	$(CONTAINER_TOOL) build --target retry-sidecar -t "$(SIDECAR_IMG)" .

.PHONY: docker-push
docker-push: ## Push IMG and SIDECAR_IMG with Docker (CONTAINER_TOOL).
	$(CONTAINER_TOOL) push "$(IMG)"
	$(CONTAINER_TOOL) push "$(SIDECAR_IMG)"

.PHONY: build-installer
build-installer: manifests $(KUSTOMIZE) ## Write dist/install.yaml (cert-manager), dist/install-selfsigned.yaml and dist/chart's generated parts, with IMG and SIDECAR_IMG.
	KUSTOMIZE="$(KUSTOMIZE)" IMG="$(IMG)" SIDECAR_IMG="$(SIDECAR_IMG)" hack/build-installer.sh

##@ Deployment

.PHONY: install
install: manifests $(KUBECTL) ## Install the CRD into the cluster in KUBECONFIG.
	"$(KUBECTL)" apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: $(KUBECTL) ## Remove the CRD from the cluster in KUBECONFIG.
	"$(KUBECTL)" delete --ignore-not-found -f config/crd/bases

.PHONY: deploy
deploy: manifests $(KUSTOMIZE) $(KUBECTL) ## Deploy the operator (DEPLOY_OVERLAY, default config/default) with IMG and SIDECAR_IMG.
	KUSTOMIZE="$(KUSTOMIZE)" IMG="$(IMG)" SIDECAR_IMG="$(SIDECAR_IMG)" hack/render.sh $(DEPLOY_OVERLAY) | \
		"$(KUBECTL)" apply --server-side -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) $(KUBECTL) ## Remove the operator (DEPLOY_OVERLAY) from the cluster in KUBECONFIG.
	KUSTOMIZE="$(KUSTOMIZE)" hack/render.sh $(DEPLOY_OVERLAY) | "$(KUBECTL)" delete --ignore-not-found -f -

E2E_CLUSTER ?= local

.PHONY: cluster-up
cluster-up: build-images ## Start the local single-node cluster from source-built binaries (first run builds Kubernetes, ~20 min on 2 cores).
	hack/local-cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove everything it created.
	hack/local-cluster.sh down

.PHONY: test-e2e
test-e2e: build-images $(HELM) ## End-to-end suite on E2E_CLUSTER=local (default, started if needed; installed as README.md's "On your cluster" says) or kind, or on KUBECONFIG with E2E_CLUSTER=existing.
	HELM="$(HELM)" hack/test-e2e.sh $(E2E_CLUSTER)

.PHONY: test-chaos
test-chaos: build-images $(HELM) ## Chaos run on the local cluster: 20 cycles of one fault each (API server restart, leader killed, sidecar killed, quota store restarted, a manager replica cut off, the certificate Secret deleted, a caBundle emptied) under traffic, the control plane's promises checked after each; prints the table (E2E_CHAOS_CYCLES).
	E2E_CHAOS=1 E2E_RUN=TestChaos E2E_TIMEOUT=$${E2E_TIMEOUT:-25m} HELM="$(HELM)" hack/test-e2e.sh $(E2E_CLUSTER)

.PHONY: test-e2e-chart
test-e2e-chart: build-images $(HELM) ## The end-to-end suite with the operator installed from dist/chart instead of dist/install-selfsigned.yaml.
	E2E_HELM="$(HELM)" hack/test-e2e.sh $(E2E_CLUSTER)

.PHONY: demo
demo: ## The main job: a local control plane, the operator, a policy, a flaky upstream, retries to watch.
	hack/demo.sh

##@ Tools

$(CONTROLLER_GEN):
	@mkdir -p "$(LOCALBIN)"
	GOBIN="$(LOCALBIN)" go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv "$(LOCALBIN)/controller-gen" "$@"

$(HELM):
	@mkdir -p "$(LOCALBIN)"
	GOBIN="$(LOCALBIN)" go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv "$(LOCALBIN)/helm" "$@"

$(LOCALBIN)/kustomize-%:
	@mkdir -p "$(LOCALBIN)"
	GOBIN="$(LOCALBIN)" go install sigs.k8s.io/kustomize/kustomize/v5@$*
	mv "$(LOCALBIN)/kustomize" "$@"

$(GOLANGCI_LINT):
	@mkdir -p "$(LOCALBIN)"
	GOBIN="$(LOCALBIN)" go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv "$(LOCALBIN)/golangci-lint" "$@"

$(CRD_REF_DOCS):
	@mkdir -p "$(LOCALBIN)"
	GOBIN="$(LOCALBIN)" go install github.com/elastic/crd-ref-docs@$(CRD_REF_DOCS_VERSION)
	mv "$(LOCALBIN)/crd-ref-docs" "$@"
