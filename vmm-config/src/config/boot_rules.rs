//! Firecracker's boot rules, applied to every config before the preflight opens its drives: the
//! root drive (`is_root_device`) becomes the first virtio-blk device, the guest's `/dev/vda`,
//! and `root=/dev/vda rw|ro` (or `root=PARTUUID=… rw|ro`) joins the boot args; `pci=off`, which
//! Firecracker's examples pass and which would hide Osprey's virtio-pci disks, is removed.

use super::{ConfigWarning, VmConfig};

impl VmConfig {
    /// Puts the root drive first and completes the boot args as Firecracker does; returns what
    /// it changed that the user should know. A `root=` already in the boot args is kept.
    pub fn apply_boot_rules(&mut self) -> Vec<ConfigWarning> {
        let mut warnings = Vec::new();
        let args: Vec<&str> = self.boot.boot_args.split_whitespace().collect();
        if args.contains(&"pci=off") {
            warnings.push(ConfigWarning {
                file: None,
                field: "boot-source.boot_args".into(),
                message: "pci=off removed: Osprey's disks are virtio-pci devices, which the \
                          guest would not see"
                    .into(),
            });
            self.boot.boot_args = args
                .iter()
                .filter(|a| **a != "pci=off")
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
        }
        let Some(i) = self.drives.iter().position(|d| d.is_root_device) else {
            return warnings;
        };
        let root = self.drives.remove(i);
        let has_root_arg = self
            .boot
            .boot_args
            .split_whitespace()
            .any(|a| a.starts_with("root="));
        if !has_root_arg {
            let device = match &root.partuuid {
                Some(uuid) => format!("PARTUUID={uuid}"),
                None => "/dev/vda".into(),
            };
            let mode = if root.is_read_only { "ro" } else { "rw" };
            let arg = format!("root={device} {mode}");
            self.boot.boot_args = if self.boot.boot_args.trim().is_empty() {
                arg
            } else {
                format!("{} {arg}", self.boot.boot_args.trim_end())
            };
        }
        self.drives.insert(0, root);
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &str, drives: &str) -> VmConfig {
        let json = format!(
            r#"{{"boot-source":{{"kernel_image_path":"/k","boot_args":"{args}"}},"drives":[{drives}]}}"#
        );
        VmConfig::from_json(&json, "vm.json").expect("parse")
    }

    #[test]
    fn the_root_drive_goes_first_and_names_itself_in_the_boot_args() {
        let mut c = config(
            "console=ttyS0 pci=off panic=1",
            r#"{"drive_id":"data","path_on_host":"/d","is_read_only":true},
               {"drive_id":"root","path_on_host":"/r","is_root_device":true}"#,
        );
        let warnings = c.apply_boot_rules();
        assert_eq!(c.drives[0].drive_id, "root");
        assert_eq!(c.drives[1].drive_id, "data");
        assert_eq!(c.boot.boot_args, "console=ttyS0 panic=1 root=/dev/vda rw");
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].message.contains("pci=off"));
    }

    #[test]
    fn partuuid_read_only_and_a_users_root_arg() {
        let mut c = config(
            "",
            r#"{"drive_id":"r","path_on_host":"/r","is_root_device":true,"is_read_only":true,
                "partuuid":"0eaa91a0-01"}"#,
        );
        assert!(c.apply_boot_rules().is_empty());
        assert_eq!(c.boot.boot_args, "root=PARTUUID=0eaa91a0-01 ro");

        let mut c = config(
            "root=/dev/vdb",
            r#"{"drive_id":"r","path_on_host":"/r","is_root_device":true}"#,
        );
        c.apply_boot_rules();
        assert_eq!(c.boot.boot_args, "root=/dev/vdb", "the user's root= wins");

        let mut c = config("quiet", r#"{"drive_id":"a","path_on_host":"/a"}"#);
        assert!(c.apply_boot_rules().is_empty());
        assert_eq!(c.boot.boot_args, "quiet", "no root drive, no change");
    }
}
