//! Firecracker's features Osprey does not have, in ONE place: what each is called in a refusal
//! ([`AbsentFeature::what`], the API's 400 for its routes says the same), and the config file's
//! sections for them ([`AbsentSection`]): Firecracker writes them out even when unused
//! (`"vsock": null`, `"network-interfaces": []`), so null or empty is accepted and anything else
//! is refused naming the feature. Switching a feature on means giving its section a real type in
//! [`super::VmConfig`] and taking its line out of [`VmConfig::absent_sections`].

use serde::{Deserialize, Serialize};

use super::{invalid, ConfigError, VmConfig};

/// A feature of Firecracker v1.16.1 that Osprey lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbsentFeature {
    /// virtio-net (`network-interfaces`, `/network-interfaces/{id}`).
    NetworkInterfaces,
    /// virtio-vsock (`vsock`, `/vsock`).
    Vsock,
    /// The balloon (`balloon`, `/balloon…`).
    Balloon,
    /// The microVM metadata service (`mmds-config`, `/mmds…`).
    Mmds,
    /// virtio-rng (`entropy`, `/entropy`).
    Entropy,
    /// Serial console configuration (`/serial`).
    Serial,
    /// virtio-pmem (`pmem`, `/pmem/{id}`).
    Pmem,
    /// Memory hot-plug (`memory-hotplug`, `/hotplug/memory`).
    MemoryHotplug,
    /// Custom CPU templates (`cpu-config`, `/cpu-config`).
    CpuConfig,
    /// vhost-user block devices (`drives[].socket`).
    VhostUserDrive,
    /// `DELETE /drives/{id}` on a running VM.
    DriveUnplug,
}

impl AbsentFeature {
    /// The refusal's words: what is missing.
    pub const fn what(self) -> &'static str {
        match self {
            Self::NetworkInterfaces => {
                "network interfaces (virtio-net) are not supported by Osprey"
            }
            Self::Vsock => "vsock is not supported by Osprey",
            Self::Balloon => "the balloon device is not supported by Osprey",
            Self::Mmds => {
                "MMDS (the microVM metadata service) is not supported by Osprey: it needs a \
                 network interface"
            }
            Self::Entropy => "the entropy device (virtio-rng) is not supported by Osprey",
            Self::Serial => {
                "configuring the serial console is not supported by Osprey: the guest's COM1 \
                 goes to Osprey's standard output"
            }
            Self::Pmem => "pmem devices are not supported by Osprey",
            Self::MemoryHotplug => "memory hot-plug is not supported by Osprey",
            Self::CpuConfig => "custom CPU templates are not supported by Osprey",
            Self::VhostUserDrive => {
                "vhost-user block devices (a drive's `socket`) are not supported by Osprey's \
                 VMM; give the drive a path_on_host"
            }
            Self::DriveUnplug => "removing a drive from a running VM is not supported by Osprey",
        }
    }

    /// The refusal of a config value for this feature, at `field`.
    pub fn refused(self, field: impl Into<String>) -> ConfigError {
        invalid(
            field,
            format!(
                "{} (docs/orchestration.md lists what Osprey implements); only null or empty \
                 is accepted",
                self.what()
            ),
        )
    }
}

/// A section for an absent feature, kept as read so the check can refuse it by name: `null`,
/// left out, or an empty list means unused (read as `None`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct AbsentSection(pub Option<serde_json::Value>);

impl<'de> Deserialize<'de> for AbsentSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Option::<serde_json::Value>::deserialize(d)?;
        Ok(match value {
            Some(serde_json::Value::Array(items)) if items.is_empty() => Self(None),
            other => Self(other),
        })
    }
}

impl AbsentSection {
    /// Left out, `null`, or `[]`: the feature is not asked for.
    pub fn is_unused(&self) -> bool {
        match &self.0 {
            None | Some(serde_json::Value::Null) => true,
            Some(serde_json::Value::Array(items)) => items.is_empty(),
            Some(_) => false,
        }
    }

    /// For `skip_serializing_if`: an unused section is not written out.
    pub fn skip(&self) -> bool {
        self.is_unused()
    }

    /// `Ok` when unused, else `feature`'s refusal at `field`.
    pub fn check(&self, field: &str, feature: AbsentFeature) -> Result<(), ConfigError> {
        if self.is_unused() {
            Ok(())
        } else {
            Err(feature.refused(field))
        }
    }
}

impl VmConfig {
    /// Every config section of an absent feature: `(its key, its value, the feature)`.
    pub fn absent_sections(&self) -> [(&'static str, &AbsentSection, AbsentFeature); 6] {
        [
            ("cpu-config", &self.cpu_config, AbsentFeature::CpuConfig),
            ("balloon", &self.balloon, AbsentFeature::Balloon),
            ("mmds-config", &self.mmds_config, AbsentFeature::Mmds),
            ("entropy", &self.entropy, AbsentFeature::Entropy),
            ("pmem", &self.pmem, AbsentFeature::Pmem),
            (
                "memory-hotplug",
                &self.memory_hotplug,
                AbsentFeature::MemoryHotplug,
            ),
        ]
    }

    /// Each absent feature's section is unused (a drive's `socket` is checked with the drive:
    /// [`check_drive_socket`]).
    pub fn check_absent_features(&self) -> Result<(), ConfigError> {
        for (key, section, feature) in self.absent_sections() {
            section.check(key, feature)?;
        }
        Ok(())
    }
}

/// `drives[i].socket`: Firecracker's vhost-user drive, absent here (null or left out only).
pub fn check_drive_socket(i: usize, d: &super::DriveConfig) -> Result<(), ConfigError> {
    match &d.socket {
        None => Ok(()),
        Some(_) => Err(AbsentFeature::VhostUserDrive.refused(format!("drives[{i}].socket"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> VmConfig {
        VmConfig::from_json(
            &format!(r#"{{"boot-source":{{"kernel_image_path":"/k"}}{extra}}}"#),
            "vm.json",
        )
        .expect("parses")
    }

    #[test]
    fn firecrackers_unused_sections_are_accepted() {
        let c = parse(
            r#","cpu-config":null,"balloon":null,"network-interfaces":[],"vsock":null,
               "logger":null,"metrics":null,"mmds-config":null,"entropy":null,"pmem":[],
               "memory-hotplug":null"#,
        );
        c.check_absent_features()
            .expect("null and empty are unused");
        assert_eq!(
            c,
            parse(""),
            "the same config as with the sections left out"
        );
        let v = serde_json::to_value(&c).expect("json");
        assert!(v.get("vsock").is_none() && v.get("pmem").is_none(), "{v}");
    }

    #[test]
    fn firecrackers_nulls_for_plain_fields_are_their_defaults() {
        let c = VmConfig::from_json(
            r#"{"boot-source":{"kernel_image_path":"/k","boot_args":null,"initrd_path":null},
               "drives":[{"drive_id":"d","path_on_host":"/d","is_read_only":null,
                          "rate_limiter":{"ops":{"size":1,"one_time_burst":null,"refill_time":1}}}]}"#,
            "vm.json",
        )
        .expect("parses");
        assert_eq!(c.boot.boot_args, "");
        assert!(!c.drives[0].is_read_only);
    }

    #[test]
    fn a_real_value_is_refused_naming_the_feature() {
        for (extra, field, words) in [
            (
                r#","balloon":{"amount_mib":1}"#,
                "balloon",
                "balloon device",
            ),
            (
                r#","mmds-config":{"network_interfaces":["eth0"]}"#,
                "mmds-config",
                "MMDS",
            ),
            (r#","entropy":{}"#, "entropy", "virtio-rng"),
            (r#","pmem":[{"id":"p"}]"#, "pmem", "pmem devices"),
            (
                r#","memory-hotplug":{"total_size_mib":1}"#,
                "memory-hotplug",
                "hot-plug",
            ),
            (r#","cpu-config":"t.json""#, "cpu-config", "CPU templates"),
            (
                r#","drives":[{"drive_id":"d","path_on_host":"/d","socket":"/s.sock"}]"#,
                "drives[0].socket",
                "vhost-user",
            ),
        ] {
            let e = parse(extra).check_values(u64::MAX).expect_err(extra);
            let text = e.to_string();
            assert!(text.starts_with(&format!("{field}: ")), "{text}");
            assert!(text.contains(words), "{text}");
        }
    }
}
