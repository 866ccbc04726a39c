# signagent: see README.md.
GO      ?= go
BIN     := bin/signagent
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The commit, stamped with -X main.commit: signagent version --json and
# signagent_build_info say it even where Go's own VCS stamp is missing (a
# build from a source archive).
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
# The container image (make image) and its test: buildah builds it, skopeo
# reads the OCI archive back, podman (with runc: crun refuses this kind of
# machine's cgroups) runs it, and docker-compose runs deploy/compose.yaml
# through podman's API socket. About 30 s to install on a fresh machine.
# Set before DEPS, which takes it in where it is written (:=): set after,
# it was empty there and a fresh machine's make test installed none of it.
IMAGE_DEPS := buildah podman runc skopeo docker-compose gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user jq
# What the tests and the demo run besides Go: SoftHSM, OpenSC's pkcs11-tool,
# GnuTLS's certtool, OpenSSL, curl and pkill (procps) for the agent's scripts,
# and a software TPM 2.0 with tpm2-pkcs11 as the second PKCS#11 implementation
# the tests run on (swtpm, the tpm2-abrmd resource manager on a private D-Bus
# session bus, tpm2_ptool to make its token and keys), and chromium for the
# identity provider's pages driven by chromedp, and redis-server for the
# shared store (the tests start their own, on loopback), and zsh, fish and
# groff to load the completion scripts and render the manual page, and
# lintian for the Debian package, and GnuTLS's headers (with pkg-config) to
# build the GOST test token and OpenSSL's gost engine to verify its
# signatures independently, and libgcrypt's headers for the token's key
# agreement and GOST 28147 side (nettle's and GMP's for the tests' second
# VKO), and the smart-card rig of pkcs11/pkcs11test/card.go
# (pcscd with vsmartcard's vpcd reader driver, a card emulated by libcacard
# over an NSS database that certutil makes, in namespaces set up with
# iproute2; pcsc-tools to look at it by hand; the GOST card of
# pkcs11/pkcs11test/gostcard.go, personalised by opensc's pkcs15-init), and duktape (the JavaScript
# engine polkitd links) to check the package's polkit rule, logrotate to run
# its logrotate snippet, and mmdebstrap
# for the Debian 12 root podman boots systemd in to install, upgrade and
# remove the package (scripts/package-install-test.sh), and the
# interpreters and compilers of the partner examples (examples/: python3,
# nodejs, a JDK 17, mono's mcs), and Prometheus's promtool (package
# prometheus: 2.42 on Debian 12) for the monitoring kit's alert rules and
# their unit tests (deploy/monitoring; the package also enables its
# server's unit, which on a machine running systemd starts it on :9090:
# systemctl disable --now prometheus).
DEPS    := softhsm2 opensc gnutls-bin openssl curl procps chromium systemd redis-server \
           swtpm tpm2-abrmd libtss2-tcti-tabrmd0 dbus-daemon tpm2-tools libtpm2-pkcs11-1 libtpm2-pkcs11-tools \
           zsh fish groff-base lintian libgnutls28-dev libgcrypt20-dev nettle-dev libgmp-dev pkg-config libengine-gost-openssl \
           pcscd vsmartcard-vpcd libcacard-dev libnss3-tools pcsc-tools iproute2 duktape mmdebstrap logrotate \
           python3 nodejs openjdk-17-jdk-headless mono-devel prometheus \
           $(IMAGE_DEPS)
# make bench also compares with openssl's PKCS#11 engine.
BENCH_DEPS := $(DEPS) libengine-pkcs11-openssl nginx
BENCH_ARGS ?=

# staticcheck, pinned: run from the module proxy, not a dependency of the
# code (goreleaser is pinned in tools/goreleaser, a module of its own).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.6.1

.PHONY: demo test check lint deps build bench gobench clean package image release-check release-snapshot

demo: deps build
	@scripts/demo.sh

# lint: the static checks (gofmt, go mod tidy, go vet, staticcheck, the
# OpenAPI document validated by kin-openapi).
lint:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')); \
	  if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	@$(GO) mod tidy -diff >/dev/null || { echo "go mod tidy would change go.mod or go.sum: run go mod tidy"; exit 1; }
	$(GO) vet ./...
	@for m in tools/helm tools/release tools/cosign tools/registry; do \
	  (cd $$m && $(GO) mod tidy -diff >/dev/null) || { echo "go mod tidy would change $$m/go.mod or go.sum"; exit 1; }; done
	$(GO) run $(STATICCHECK) ./...
	$(GO) test -count=1 -run 'TestOpenAPI' ./agent

# test: the static checks (beside the tests), every test under the race detector, the
# proxy's upstream client fuzzed for a few seconds (its corpus is in
# agent/proxy/testdata/fuzz), the Helm chart (tools/helm: a module of its own,
# helm and client-go pinned there; docs/deploy.md) beside them
# (scripts/test.sh), then the release (make release-snapshot, checked by
# scripts/release-test.sh) and, once it has built, beside its checks, the
# Debian package it built unpacked into a scratch root, run and linted,
# then installed, upgraded and removed under systemd in a container, and
# the container image it built run as deploy/compose.yaml sets it up
# (docs/testing.md, docs/deploy.md).
test: deps
	@GO=$(GO) MAKE=$(MAKE) scripts/test.sh

# image: the container images for amd64 and arm64 (the arm64 binary
# cross-compiled by Debian's gcc-aarch64-linux-gnu, its root from Debian's
# arm64 packages), localhost/signagent:VERSION-ARCH in podman's storage, an
# OCI archive for each and one with the OCI index over both in dist/ (see
# scripts/image.sh and docs/deploy.md).
image:
	@scripts/deps.sh $(IMAGE_DEPS)
	@scripts/image.sh

# package: the Debian package in dist/ (nfpm; see scripts/package.sh).
package: deps
	@scripts/package.sh

# release-snapshot: everything a release holds, in dist/, without the
# release key (a throwaway key signs): archives, the Debian packages (amd64,
# arm64), the images and their index, SBOMs, checksums.txt and its
# signature, the chart's package (scripts/release.sh; docs/releases.md).
release-snapshot:
	@scripts/deps.sh $(IMAGE_DEPS)
	@scripts/release.sh

# release-check: goreleaser's own check of .goreleaser.yaml (goreleaser
# v2.15.1, tools/goreleaser: about 9 minutes to build cold, so it is not part of test).
release-check:
	$(GO) -C tools/goreleaser tool goreleaser check -f ../../.goreleaser.yaml

# check: the loop while working, a few minutes: the static checks and every
# test once, without the race detector, the fuzzing and the package (test
# runs those, and is what CI runs).
check: deps
	@GO=$(GO) MAKE=$(MAKE) scripts/test.sh check

deps:
	@scripts/deps.sh $(DEPS)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN) ./cmd/signagent
	$(GO) build -o bin/signagent-emulator ./cmd/signagent-emulator
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/signagent-bench ./cmd/signagent-bench

bench: build
	@scripts/deps.sh $(BENCH_DEPS)
	@scripts/bench.sh $(BENCH_ARGS)

gobench:
	@scripts/deps.sh $(BENCH_DEPS)
	$(GO) test -run '^$$' -bench . -benchtime 2s ./canonical ./signer ./pkcs11 ./trusted ./agent

clean:
	rm -rf bin .demo .bench dist build
