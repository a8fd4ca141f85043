# GovFS. The first two targets are all the set-up a fresh Debian machine
# with Go needs: `make dev` runs a local cluster, `make test` runs every test.
GO ?= go
BIN := bin/govfs

.PHONY: dev dev-clean test build proto bench-meta bench-fio vet clean fuse3 testtools chromium

dev: build fuse3
	./$(BIN) dev --dir ./govfs-dev

# Removes the dev cluster's data, logs and certificates (stop make dev
# first); a mount left under it is detached.
dev-clean:
	@if pgrep -f "govfs (meta|chunk) .*$(CURDIR)/govfs-dev" >/dev/null; then \
		echo "a dev cluster is running on govfs-dev: stop it (Ctrl-C) first"; exit 1; fi
	@awk '{print $$2}' /proc/self/mounts | grep "^$(CURDIR)/govfs-dev" | while read m; do umount -l "$$m" 2>/dev/null || fusermount3 -uz "$$m"; done; true
	rm -rf govfs-dev

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/govfs

# Every test, then the concurrent cores again under the race detector.
test: fuse3 testtools chromium
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	$(GO) test -count=1 -timeout 10m -race ./internal/multiraft/... ./internal/metanode ./internal/chunkserver ./internal/chunkstore ./internal/nemesis ./internal/gctest ./client

# Regenerates internal/wire from internal/wire/govfs.proto. Installs protoc
# (Debian package) and the Go plugins when missing.
proto:
	@command -v protoc >/dev/null || (apt-get update && apt-get install -y protobuf-compiler)
	@command -v protoc-gen-go >/dev/null || $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	@command -v protoc-gen-go-grpc >/dev/null || $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" protoc -I internal/wire \
		--go_out=internal/wire --go_opt=paths=source_relative \
		--go-grpc_out=internal/wire --go-grpc_opt=paths=source_relative \
		internal/wire/govfs.proto

# FUSE mounts (govfs mount, dev --mount, the mount tests): root mounts with
# mount(2) and needs only /dev/fuse; other users need fusermount3, from the
# Debian package fuse3, installed here when missing.
# The dashboard's browser test (internal/e2e dashboard_test.go) drives
# Debian's chromium; installed when missing (the test skips without it).
chromium:
	@command -v chromium >/dev/null || \
		( [ "$$(id -u)" = 0 ] && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) || \
		  (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) ) || \
		echo "warning: chromium missing and not installed: the dashboard's browser test will be skipped"

fuse3:
	@[ "$$(id -u)" = 0 ] || command -v fusermount3 >/dev/null || \
		(sudo apt-get update -qq && sudo apt-get install -y fuse3) || \
		echo "warning: fusermount3 missing and fuse3 not installed: FUSE tests will be skipped"

# Programs the mount's tests run: git and sqlite3 (realworld_test.go),
# from their Debian packages, and pjdfstest (pjdfstest_test.go, the POSIX
# conformance suite) and fsx (fsx_test.go, the File System eXerciser),
# built from crates.io with cargo (found on $PATH or in ~/.cargo/bin, where
# rustup puts it) into .tools/bin; each is installed here when missing,
# and without it its test is skipped.
PJDFSTEST_VERSION := 0.2.2
FSX_VERSION := 0.3.2
testtools:
	@for p in git sqlite3; do command -v $$p >/dev/null || \
		( [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y $$p) || (sudo apt-get update -qq && sudo apt-get install -y $$p) ) || \
		echo "warning: $$p missing and not installed: its mount test will be skipped"; done
	@[ -x .tools/bin/pjdfstest ] || ( PATH="$$PATH:$$HOME/.cargo/bin"; command -v cargo >/dev/null && \
		cargo install --quiet --locked pjdfstest --version $(PJDFSTEST_VERSION) --root .tools ) || \
		echo "warning: pjdfstest not installed (needs cargo): the POSIX conformance test will be skipped"
	@[ -x .tools/bin/fsx ] || ( PATH="$$PATH:$$HOME/.cargo/bin"; command -v cargo >/dev/null && \
		cargo install --quiet --locked fsx --version $(FSX_VERSION) --root .tools ) || \
		echo "warning: fsx not installed (needs cargo): the file system exerciser test will be skipped"

bench-meta: build
	./$(BIN) bench meta

# fio through a dev-cluster mount and on a local directory (installs fio).
bench-fio: build fuse3
	scripts/bench-fio.sh

vet:
	$(GO) vet ./...

clean:
	rm -rf bin
