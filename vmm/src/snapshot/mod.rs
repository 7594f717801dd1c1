//! Snapshot and restore (docs/snapshot.md): the KVM state of the vCPUs and the VM
//! (`kvm_state.rs`).

pub mod kvm_state;
