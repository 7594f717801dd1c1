//! Validation: every value against its range and against the other sections (ids unique,
//! references defined), each error naming the field's JSON path. Pure: nothing here opens a file
//! or asks the host anything but its memory size, passed in; what the config asks of the host is
//! start-up's preflight ([`crate::preflight`]).

use std::collections::HashSet;

use super::{
    invalid, ConfigError, DriveConfig, IoThreadConfig, VmConfig, MAX_QUEUES, MAX_QUEUE_SIZE,
    MAX_VCPUS, MIN_MEM_MIB,
};

impl VmConfig {
    /// Checks every value against its range and the others, without touching the host: no
    /// file is opened. `host_mem_mib` bounds the guest memory.
    pub fn check_values(&self, host_mem_mib: u64) -> Result<(), ConfigError> {
        self.check_absent_features()?;
        self.check_machine(host_mem_mib)?;
        self.sandbox.check()?;
        self.check_boot_source()?;
        let iothreads = self.check_iothreads()?;
        self.check_metrics()?;
        self.check_snapshot()?;
        if let Some(v) = &self.vsock {
            v.check("vsock")?;
        }
        let groups = self.check_rate_limit_groups()?;
        let mut drive_ids = HashSet::new();
        let mut root: Option<&str> = None;
        for (i, d) in self.drives.iter().enumerate() {
            if d.is_root_device {
                if let Some(first) = root {
                    return Err(invalid(
                        format!("drives[{i}].is_root_device"),
                        format!("drive `{first}` is already the root device; there can be one"),
                    ));
                }
                root = Some(&d.drive_id);
            } else if d.partuuid.is_some() {
                return Err(invalid(
                    format!("drives[{i}].partuuid"),
                    "only the root device (is_root_device: true) takes a partuuid",
                ));
            }
            if !drive_ids.insert(d.drive_id.as_str()) {
                return Err(invalid(
                    format!("drives[{i}].drive_id"),
                    format!("duplicate id `{}`", d.drive_id),
                ));
            }
            self.check_drive(i, d, &iothreads, &groups)?;
        }
        let ids: Vec<&str> = iothreads.iter().copied().collect();
        crate::net::check_all(&self.network_interfaces, &ids)?;
        Ok(())
    }

    /// `machine-config`: the vCPU count and a memory size the host has.
    pub fn check_machine(&self, host_mem_mib: u64) -> Result<(), ConfigError> {
        let m = &self.machine;
        if m.vcpu_count == 0 || m.vcpu_count > MAX_VCPUS {
            return Err(invalid(
                "machine-config.vcpu_count",
                format!("must be between 1 and {MAX_VCPUS}, got {}", m.vcpu_count),
            ));
        }
        if m.mem_size_mib < MIN_MEM_MIB {
            return Err(invalid(
                "machine-config.mem_size_mib",
                format!("must be at least {MIN_MEM_MIB} MiB, got {}", m.mem_size_mib),
            ));
        }
        check_firecracker_machine(m)?;
        check_vcpu_affinity(m)?;
        if m.mem_size_mib > host_mem_mib {
            return Err(invalid(
                "machine-config.mem_size_mib",
                format!(
                    "{} MiB is more than the host's {host_mem_mib} MiB",
                    m.mem_size_mib
                ),
            ));
        }
        Ok(())
    }

    /// `boot-source`: a kernel is named and the command line is one the guest can take.
    pub fn check_boot_source(&self) -> Result<(), ConfigError> {
        if self.boot.kernel_image_path.as_os_str().is_empty() {
            return Err(invalid("boot-source.kernel_image_path", "must name a file"));
        }
        match arch::boot::kernel_cmdline(&self.boot.boot_args) {
            Ok(_) => Ok(()),
            Err(arch::boot::BootError::CmdlineTooLong(n)) => Err(invalid(
                "boot-source.boot_args",
                format!(
                    "{n} bytes is longer than the {}-byte limit",
                    arch::layout::CMDLINE_MAX_SIZE - 1
                ),
            )),
            Err(_) => Err(invalid(
                "boot-source.boot_args",
                "only printable ASCII (space to `~`) is allowed: no NUL, tab, newline or \
                 non-ASCII character",
            )),
        }
    }

    /// `iothreads`: unique ids, then each thread's values; returns the ids.
    fn check_iothreads(&self) -> Result<HashSet<&str>, ConfigError> {
        let mut ids = HashSet::new();
        for (i, t) in self.iothreads.iter().enumerate() {
            if t.id.is_empty() {
                return Err(invalid(format!("iothreads[{i}].id"), "must not be empty"));
            }
            if !ids.insert(t.id.as_str()) {
                return Err(invalid(
                    format!("iothreads[{i}].id"),
                    format!("duplicate id `{}`", t.id),
                ));
            }
            check_iothread(i, t)?;
        }
        Ok(ids)
    }

    /// `metrics`: an interval the control loop can keep.
    pub fn check_metrics(&self) -> Result<(), ConfigError> {
        match &self.metrics {
            Some(m) if m.interval_ms < 100 => Err(invalid(
                "metrics.interval_ms",
                format!("must be at least 100, got {}", m.interval_ms),
            )),
            _ => Ok(()),
        }
    }

    /// `snapshot`: a folder named, and not one whose files are the host's devices or kernel
    /// interfaces (nor the whole file system): the sandbox lets Osprey create and overwrite
    /// files beneath it.
    pub(crate) fn check_snapshot(&self) -> Result<(), ConfigError> {
        let Some(snapshot) = &self.snapshot else {
            return Ok(());
        };
        let folder = &snapshot.folder;
        if folder.as_os_str().is_empty() {
            return Err(invalid("snapshot.folder", "must name a folder"));
        }
        if crate::snapshot_folder::is_off_limits(folder) {
            return Err(invalid(
                "snapshot.folder",
                format!(
                    "{}: not the root folder nor a folder under /dev, /proc or /sys: Osprey may \
                     create and overwrite any file beneath it",
                    folder.display()
                ),
            ));
        }
        Ok(())
    }

    /// `rate-limit-groups`: unique ids and buckets in range; returns the ids.
    fn check_rate_limit_groups(&self) -> Result<HashSet<&str>, ConfigError> {
        let mut groups = HashSet::new();
        for (i, g) in self.rate_limit_groups.iter().enumerate() {
            let at = format!("rate-limit-groups[{i}]");
            if g.id.is_empty() {
                return Err(invalid(format!("{at}.id"), "must not be empty"));
            }
            if !groups.insert(g.id.as_str()) {
                return Err(invalid(
                    format!("{at}.id"),
                    format!("duplicate id `{}`", g.id),
                ));
            }
            g.limits().check(&at)?;
        }
        Ok(groups)
    }

    /// `drives[i]`: its own values, and the iothread and group it names are defined.
    fn check_drive(
        &self,
        i: usize,
        d: &DriveConfig,
        iothreads: &HashSet<&str>,
        groups: &HashSet<&str>,
    ) -> Result<(), ConfigError> {
        let f = |name: &str| format!("drives[{i}].{name}");
        check_drive_values(i, d)?;
        if let Some(g) = &d.rate_limit_group {
            if !groups.contains(g.as_str()) {
                let known = self.rate_limit_groups.iter().map(|g| g.id.as_str());
                return Err(invalid(
                    f("rate_limit_group"),
                    format!(
                        "unknown group `{g}` (defined in rate-limit-groups: {})",
                        listed(known)
                    ),
                ));
            }
        }
        if let Some(t) = &d.iothread {
            if !iothreads.contains(t.as_str()) {
                let known = self.iothreads.iter().map(|t| t.id.as_str());
                return Err(invalid(
                    f("iothread"),
                    format!("unknown iothread `{t}` (defined: {})", listed(known)),
                ));
            }
        }
        Ok(())
    }
}

/// `machine-config.vcpu_affinity`: at most one entry per vCPU, each CPU one Osprey may use.
fn check_vcpu_affinity(m: &super::MachineConfig) -> Result<(), ConfigError> {
    if m.vcpu_affinity.len() > usize::from(m.vcpu_count) {
        return Err(invalid(
            "machine-config.vcpu_affinity",
            format!(
                "{} entries for {} vCPU(s): entry i pins vCPU i",
                m.vcpu_affinity.len(),
                m.vcpu_count
            ),
        ));
    }
    let allowed = crate::affinity::allowed_cpus();
    for (i, cpus) in m.vcpu_affinity.iter().enumerate() {
        if let Err(e) = crate::affinity::check(cpus, &allowed) {
            return Err(invalid(
                format!("machine-config.vcpu_affinity[{i}]"),
                e.to_string(),
            ));
        }
    }
    Ok(())
}

/// Firecracker's `machine-config` fields Osprey reads but does not implement: each must keep
/// the value that means "off", so no client believes it got what Osprey does not do.
fn check_firecracker_machine(m: &super::MachineConfig) -> Result<(), ConfigError> {
    if m.smt {
        return Err(invalid(
            "machine-config.smt",
            "Osprey gives every vCPU its own core: only false is supported",
        ));
    }
    if m.track_dirty_pages {
        return Err(invalid(
            "machine-config.track_dirty_pages",
            "dirty-page tracking (for diff snapshots) is not supported: only false",
        ));
    }
    if let Some(v) = m.cpu_template.as_deref().filter(|v| *v != "None") {
        return Err(invalid(
            "machine-config.cpu_template",
            format!(
                "`{v}` is not supported: Osprey has no CPU templates (the guest sees the host's \
                 CPUID as KVM reports it); set \"None\" or leave the field out. \
                 firecracker-containerd sends \"T2\" by default on Intel hosts: set \
                 \"cpu_template\": \"\" in /etc/containerd/firecracker-runtime.json \
                 (docs/orchestration.md)"
            ),
        ));
    }
    if let Some(v) = m.huge_pages.as_deref().filter(|v| *v != "None") {
        return Err(invalid(
            "machine-config.huge_pages",
            format!("`{v}` is not supported: only \"None\""),
        ));
    }
    Ok(())
}

/// `iothreads[i]`'s CPUs, poll parameters and batch size.
pub fn check_iothread(i: usize, t: &IoThreadConfig) -> Result<(), ConfigError> {
    if let Err(e) = crate::affinity::check(&t.cpu_affinity, &crate::affinity::allowed_cpus()) {
        return Err(invalid(
            format!("iothreads[{i}].cpu_affinity"),
            e.to_string(),
        ));
    }
    if let Err(e) = t.poll_params().validate() {
        return Err(invalid(format!("iothreads[{i}].{}", e.field), e.reason));
    }
    if t.max_batch as usize > dataplane::iothread::MAX_MAX_BATCH {
        return Err(invalid(
            format!("iothreads[{i}].max_batch"),
            format!(
                "must be at most {} (0 means the default, {}), got {}",
                dataplane::iothread::MAX_MAX_BATCH,
                dataplane::iothread::DEFAULT_MAX_BATCH,
                t.max_batch
            ),
        ));
    }
    Ok(())
}

/// `drives[i]`'s id, queues, fault injection and rate limiter, each on its own.
pub fn check_drive_values(i: usize, d: &DriveConfig) -> Result<(), ConfigError> {
    let f = |name: &str| format!("drives[{i}].{name}");
    let id_ok = !d.drive_id.is_empty()
        && d.drive_id.len() <= 64
        && d.drive_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !id_ok {
        return Err(invalid(
            f("drive_id"),
            "must be 1-64 characters of A-Z, a-z, 0-9, - and _",
        ));
    }
    if let Some(p) = &d.partuuid {
        if p.is_empty() || p.len() > 64 || !p.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Err(invalid(
                f("partuuid"),
                "must be 1-64 characters of hex digits and -",
            ));
        }
    }
    super::absent::check_drive_socket(i, d)?;
    if d.num_queues == 0 || d.num_queues > MAX_QUEUES {
        return Err(invalid(
            f("num_queues"),
            format!("must be between 1 and {MAX_QUEUES}, got {}", d.num_queues),
        ));
    }
    if !d.queue_size.is_power_of_two() || !(2..=MAX_QUEUE_SIZE).contains(&d.queue_size) {
        return Err(invalid(
            f("queue_size"),
            format!(
                "must be a power of two from 2 to {MAX_QUEUE_SIZE}, got {}",
                d.queue_size
            ),
        ));
    }
    if let Some(fi) = &d.fault_injection {
        fi.check(&f("fault_injection"))?;
    }
    if let Some(r) = &d.rate_limiter {
        r.check(&f("rate_limiter"))?;
    }
    Ok(())
}

/// `a, b` or `none`.
fn listed<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let ids: Vec<&str> = ids.collect();
    if ids.is_empty() {
        "none".to_string()
    } else {
        ids.join(", ")
    }
}
