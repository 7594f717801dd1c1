# Osprey's build entry points. `make run` boots the sample VM; `make test` runs every test.

CARGO ?= cargo
GUEST := guest-images/build/test-guest.elf
DISK := guest-images/build/disk.img

.PHONY: all build guest kernel kit run test test-linux test-unit test-guest-check test-snapshot-long test-cloud-hypervisor bench-net lint fmt clean help

help:
	@echo "make run     build everything and boot examples/test-guest.json: a disk workload (the main job)"
	@echo "make test    run every test: unit, guest-booting integration, Linux milestones"
	@echo "make lint    rustfmt check and clippy (warnings are errors)"
	@echo "make guest   build Osprey's test guest ($(GUEST))"
	@echo "make kernel  fetch the Debian cloud kernel into guest-images/cache/linux"
	@echo "make kit     build the Linux kit (initramfs with busybox + fio, ext4 root disk) next to it"
	@echo "make test-linux  the Linux guest tests alone (fio runs only on vmx/svm hosts; elsewhere: NOT RUN)"
	@echo "make fuzz-smoke  run each fuzz target (fuzz/) for about 30 s; needs cargo-fuzz"
	@echo "make test-snapshot-long  snapshot, kill, restore mid-I/O 100 times in a row (make test: 20)"
	@echo "make test-cloud-hypervisor  the vhost-user tests with Cloud Hypervisor as the frontend"
	@echo "             (OSPREY_CLOUD_HYPERVISOR=PATH or cloud-hypervisor on PATH; scripts/build-cloud-hypervisor.sh)"
	@echo "make bench-net  virtio-net side by side with Firecracker, Cloud Hypervisor, QEMU (root; docs/network.md)"

all: build guest

build:
	$(CARGO) build --release --bin osprey

guest:
	$(MAKE) -C guest-images test-guest

kernel:
	bash guest-images/linux/fetch-kernel.sh

kit: kernel
	bash guest-images/linux/build-kit.sh

# Linux guests: kernel milestones everywhere; fio inside Linux where the host has vmx/svm.
test-linux: kit build
	$(CARGO) test --release -p osprey --test linux_fio --test linux_milestones -- --nocapture

$(DISK):
	mkdir -p $(dir $@)
	truncate -s 256M $@

# The guest's BLK JSON line stays for scripts; a summary for people follows it (when python3 is
# installed; without it the output is Osprey's alone). The exit status is Osprey's.
run: build guest $(DISK)
	@if command -v python3 >/dev/null 2>&1; then \
		bash -o pipefail -c './target/release/osprey --config examples/test-guest.json 2>&1 | python3 scripts/blk-summary.py'; \
	else \
		./target/release/osprey --config examples/test-guest.json; \
	fi

test-guest-check: guest
	$(MAKE) -C guest-images check

# The matrix runner's end-to-end test uses the release binary: build it first, visibly.
test: guest test-guest-check build
	$(CARGO) test --workspace -- --test-threads=2

# The issue-43 acceptance run: 20 snapshot/kill/restore rounds, each paused at its own point.
test-snapshot-long: guest
	OSPREY_SNAPSHOT_ROUNDS=100 $(CARGO) test -p osprey --test snapshot restored_in_a_new_process -- --nocapture

# The virtio-net side by side (a benchmark, not in make test): ROUNDS=N (default 3).
bench-net: build guest
	scripts/net-side-by-side.sh $(ROUNDS)

# Cloud Hypervisor as the vhost-user frontend (ignored by make test: CI has no build of it).
test-cloud-hypervisor: guest
	$(CARGO) test -p osprey --test vhost_user cloud_hypervisor -- --ignored --nocapture

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	$(MAKE) -C guest-images clean

# Fuzzing (fuzz/ is its own cargo project, outside the workspace; see fuzz/README.md).
FUZZ_TARGETS := blk_request blk_queue virtio_pci vm_config api_router bzimage_header snapshot_file vsock_queue net_queue net_ctrl
FUZZ_SECONDS ?= 30

.PHONY: fuzz-smoke
fuzz-smoke:
	cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build
	for t in $(FUZZ_TARGETS); do bash fuzz/scripts/fuzz.sh $$t $(FUZZ_SECONDS) || exit 1; done
