//! The machine a matrix ran on, for the report: kernel, CPU model, core count, the KVM flavour
//! Osprey logged, Osprey's commit, and the UTC date.

use std::path::Path;
use std::process::Command;

/// A UTC wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// Year.
    pub year: i32,
    /// Month 1–12.
    pub month: u32,
    /// Day 1–31.
    pub day: u32,
    /// Hour.
    pub hour: u32,
    /// Minute.
    pub minute: u32,
    /// Second.
    pub second: u32,
}

impl UtcTime {
    /// Now.
    pub fn now() -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self::from_unix(secs)
    }

    /// From seconds since the epoch (civil-from-days, proleptic Gregorian).
    pub fn from_unix(secs: u64) -> Self {
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
        UtcTime {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    /// `20261121-094730`, for directory names.
    pub fn stamp(&self) -> String {
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `2026-11-21 09:47:30 UTC`.
    pub fn display(&self) -> String {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// What the report says about the host.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// `uname -r`.
    pub kernel: String,
    /// First `model name` of /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cores: usize,
    /// Osprey's `KVM: …` start-up line.
    pub kvm: String,
    /// `git describe`-ish commit of the tree, if known.
    pub commit: String,
    /// When the run started.
    pub date: String,
}

/// The `model name` field of a /proc/cpuinfo text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

impl Machine {
    /// Reads the host; `kvm` comes from Osprey's log.
    pub fn describe(root: &Path, kvm: &str, started: UtcTime) -> Self {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| cpu_model(&s))
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let commit = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["describe", "--always", "--dirty"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        Machine {
            kernel,
            cpu_model,
            cores,
            kvm: kvm.to_string(),
            commit,
            date: started.display(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_from_unix_seconds() {
        let t = UtcTime::from_unix(0);
        assert_eq!(t.display(), "1970-01-01 00:00:00 UTC");
        // 2024-02-29 12:34:56 UTC (a leap day).
        let t = UtcTime::from_unix(1_709_210_096);
        assert_eq!(t.display(), "2024-02-29 12:34:56 UTC");
        assert_eq!(t.stamp(), "20240229-123456");
    }

    #[test]
    fn reads_the_cpu_model() {
        let info = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n";
        assert_eq!(cpu_model(info).as_deref(), Some("AMD EPYC"));
        assert_eq!(cpu_model(""), None);
    }
}

/// Which KVM the host has, from `/sys/module` (the same test Osprey logs at start): only
/// hardware virtualization runs a Linux guest's kernel at full speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKvm {
    /// kvm_intel or kvm_amd.
    Hardware(&'static str),
    /// kvm_pvm: guest ring 0 is emulated.
    Pvm,
    /// No KVM module the runner knows.
    Unknown,
}

impl HostKvm {
    /// Looks in `/sys/module`.
    pub fn detect() -> Self {
        Self::detect_in(Path::new("/sys/module"))
    }

    fn detect_in(sys_module: &Path) -> Self {
        let has = |m: &str| sys_module.join(m).exists();
        if has("kvm_pvm") {
            Self::Pvm
        } else if has("kvm_intel") {
            Self::Hardware("kvm_intel (hardware VMX)")
        } else if has("kvm_amd") {
            Self::Hardware("kvm_amd (hardware SVM)")
        } else {
            Self::Unknown
        }
    }

    /// True with hardware virtualization.
    pub fn is_hardware(self) -> bool {
        matches!(self, Self::Hardware(_))
    }

    /// In words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Hardware(what) => what,
            Self::Pvm => "kvm_pvm (software nested KVM: guest ring 0 is emulated)",
            Self::Unknown => "an unknown KVM module",
        }
    }
}

#[cfg(test)]
mod host_kvm_tests {
    use super::*;

    #[test]
    fn pvm_wins_over_the_hardware_modules_it_stands_on() {
        let dir = std::env::temp_dir().join(format!("osprey-bench-kvm-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("kvm_intel")).expect("mkdir");
        assert!(HostKvm::detect_in(&dir).is_hardware());
        std::fs::create_dir_all(dir.join("kvm_pvm")).expect("mkdir");
        assert_eq!(HostKvm::detect_in(&dir), HostKvm::Pvm);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            HostKvm::detect_in(Path::new("/nonexistent")),
            HostKvm::Unknown
        );
    }
}
