//! Snapshot and restore (docs/snapshot.md): the KVM state of the vCPUs and the VM
//! (`kvm_state.rs`), what a snapshot holds and its checks against the host (`state.rs`), the
//! state file's format and checks (`file.rs`).

pub mod create;
pub mod file;
pub mod kvm_state;
pub mod restore;
pub mod state;
