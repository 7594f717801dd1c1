//! Snapshot and restore (docs/snapshot.md): the KVM state of the vCPUs and the VM
//! (`kvm_state.rs`), the legacy devices' registers (`legacy.rs`), what a snapshot holds and its checks against the host (`state.rs`), the
//! state file's format and checks (`file.rs`), the memory file's trailer that pairs it with its
//! state file (`mem_file.rs`), the create's names, checks and crash-safe renames (`commit.rs`),
//! opening a snapshot's files without blocking (`open.rs`), the restored VM's lease on its
//! memory file (`mem_lease.rs`).

pub mod commit;
pub mod create;
pub mod file;
pub mod kvm_state;
pub mod legacy;
pub mod mem_file;
pub mod mem_lease;
pub mod open;
pub mod restore;
pub mod state;
