//! `machine.thread_placement`: where the VM's iothreads run relative to its vCPUs. `Apart`, the
//! default, keeps each iothread that has no `cpu_affinity` of its own and serves only NICs off
//! the CPUs the vCPUs are running on, when Osprey may use more CPUs than the VM has vCPUs (see
//! [`dataplane::iothread::placement`]); `Scheduler` leaves every thread to the kernel.

use serde::{Deserialize, Serialize};

/// `machine.thread_placement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub enum ThreadPlacement {
    /// Iothreads without `cpu_affinity` that serve only NICs keep off the CPUs where vCPUs run
    /// (re-checked every 10 ms) where a CPU is left for them; with every iothread apart, the
    /// vCPUs keep the process's weight.
    #[default]
    Apart,
    /// The kernel places every thread.
    Scheduler,
}

impl ThreadPlacement {
    /// Whether iothreads keep apart from `vcpus` vCPUs when the process may use `cpus` CPUs.
    pub fn keeps_apart(self, vcpus: usize, cpus: usize) -> bool {
        self == ThreadPlacement::Apart && cpus > vcpus
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apart_needs_a_cpu_to_spare() {
        assert!(ThreadPlacement::Apart.keeps_apart(1, 2));
        assert!(!ThreadPlacement::Apart.keeps_apart(2, 2));
        assert!(!ThreadPlacement::Scheduler.keeps_apart(1, 8));
        assert_eq!(ThreadPlacement::default(), ThreadPlacement::Apart);
    }
}
