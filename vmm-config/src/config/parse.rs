//! Reading a config: JSON text to [`VmConfig`], with errors naming the file and the JSON path in
//! the config's own words; the old spelling of a section accepted with a warning; and every
//! relative path in a file made absolute: from the file's folder for Osprey's `--config`, so a
//! config starts from any directory, or from the working directory for Firecracker's
//! `--config-file`, as Firecracker takes them ([`RelativeTo`]).

use std::path::{Path, PathBuf};

use super::{words, ConfigError, ConfigWarning, VmConfig};

/// Top-level sections once spelled in snake_case: `(old, current)`. The old name still parses
/// (a serde alias) and draws a warning.
pub const OLD_SECTION_NAMES: &[(&str, &str)] = &[("rate_limit_groups", "rate-limit-groups")];

/// Where a config file's relative paths are taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelativeTo {
    /// The file's folder (Osprey's `--config`): the file works from any directory.
    FileFolder,
    /// The working directory (Firecracker's `--config-file`, as Firecracker reads it).
    WorkingDirectory,
}

impl VmConfig {
    /// Reads and parses a config file; relative paths in it are taken from the file's folder.
    /// The error names the file and the bad field; warnings say what the file should change.
    pub fn from_file(path: &Path) -> Result<(Self, Vec<ConfigWarning>), ConfigError> {
        Self::from_file_relative_to(path, RelativeTo::FileFolder)
    }

    /// [`VmConfig::from_file`], with relative paths taken from `relative_to`.
    pub fn from_file_relative_to(
        path: &Path,
        relative_to: RelativeTo,
    ) -> Result<(Self, Vec<ConfigWarning>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let origin = path.display().to_string();
        let (mut config, warnings) = Self::from_json_with_warnings(&text, &origin)?;
        let base = match relative_to {
            RelativeTo::FileFolder => path.parent().unwrap_or(Path::new("")),
            RelativeTo::WorkingDirectory => Path::new(""),
        };
        config.resolve_paths(base);
        Ok((config, warnings))
    }

    /// Parses JSON text; `origin` names it in errors. Paths stay as written.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, ConfigError> {
        Self::from_json_with_warnings(text, origin).map(|(c, _)| c)
    }

    /// [`VmConfig::from_json`], also returning what the text should change (old section names).
    pub fn from_json_with_warnings(
        text: &str,
        origin: &str,
    ) -> Result<(Self, Vec<ConfigWarning>), ConfigError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let config: VmConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            // serde_path_to_error marks a position it could not name with `?`: drop it.
            let raw = e.path().to_string();
            let path = match raw.trim_end_matches(".?") {
                "?" | "" => ".".to_string(),
                p => p.to_string(),
            };
            // serde_json appends " at line L column C"; keep it, it helps find the spot.
            let mut message = words::in_json_words(&e.into_inner().to_string());
            if message.is_empty() {
                message = "invalid value".into();
            }
            ConfigError::Parse {
                file: origin.to_owned(),
                path,
                message,
            }
        })?;
        Ok((config, old_section_warnings(text, origin)))
    }

    /// Makes every path absolute: a relative one is taken from `base` (a config file's folder;
    /// the working directory when `base` is empty).
    pub fn resolve_paths(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.as_os_str().is_empty() {
                return;
            }
            let joined = if p.is_relative() {
                base.join(&*p)
            } else {
                p.clone()
            };
            *p = normalise(&std::path::absolute(&joined).unwrap_or(joined));
        };
        fix(&mut self.boot.kernel_image_path);
        if let Some(i) = &mut self.boot.initrd_path {
            fix(i);
        }
        for d in &mut self.drives {
            fix(&mut d.path_on_host);
        }
        if let Some(a) = &mut self.api {
            fix(&mut a.socket);
        }
        if let Some(m) = &mut self.metrics {
            fix(&mut m.path);
        }
        if let Some(v) = &mut self.vsock {
            fix(&mut v.uds_path);
        }
        if let Some(s) = &mut self.snapshot {
            fix(&mut s.folder);
        }
        for f in &mut self.sandbox.allowed_folders {
            fix(f);
        }
        if let Some(p) = self.logger.as_mut().and_then(|l| l.log_path.as_mut()) {
            fix(p);
        }
    }
}

/// `a/./b/../c` as `a/c`, by the text alone (as `os.path.abspath` does): paths read as written.
fn normalise(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A warning for each top-level section spelled the old way.
fn old_section_warnings(text: &str, origin: &str) -> Vec<ConfigWarning> {
    let Ok(serde_json::Value::Object(top)) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    OLD_SECTION_NAMES
        .iter()
        .filter(|(old, _)| top.contains_key(*old))
        .map(|(old, new)| ConfigWarning {
            file: Some(origin.to_owned()),
            field: (*old).to_string(),
            message: format!("the section is now spelled `{new}`; `{old}` is still read"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_taken_from_the_files_folder() {
        let dir = std::env::temp_dir().join(format!("osprey-cfg-rel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("vm.json");
        std::fs::write(
            &file,
            r#"{"boot-source":{"kernel_image_path":"../k.elf","initrd_path":"i.img"},
               "drives":[{"drive_id":"d","path_on_host":"disks/d.img"}],
               "api":{"socket":"/run/o.sock"}, "metrics":{"path":"m.jsonl"},
               "snapshot":{"folder":"snaps"}}"#,
        )
        .expect("write");
        let (c, warnings) = VmConfig::from_file(&file).expect("parse");
        assert!(warnings.is_empty());
        let parent = dir.parent().expect("parent");
        assert_eq!(normalise(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(c.boot.kernel_image_path, parent.join("k.elf"));
        assert_eq!(c.boot.initrd_path, Some(dir.join("i.img")));
        assert_eq!(c.drives[0].path_on_host, dir.join("disks/d.img"));
        assert_eq!(c.api.map(|a| a.socket), Some(PathBuf::from("/run/o.sock")));
        assert_eq!(c.metrics.map(|m| m.path), Some(dir.join("m.jsonl")));
        assert_eq!(c.snapshot.map(|s| s.folder), Some(dir.join("snaps")));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn firecrackers_relative_paths_are_taken_from_the_working_directory() {
        let dir = std::env::temp_dir().join(format!("osprey-cfg-cwd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("vm.json");
        std::fs::write(
            &file,
            r#"{"boot-source":{"kernel_image_path":"vmlinux.bin"},
               "drives":[{"drive_id":"d","path_on_host":"rootfs.ext4"}],
               "logger":{"log_path":"fc.log"}}"#,
        )
        .expect("write");
        let cwd = std::env::current_dir().expect("cwd");
        let (c, _) =
            VmConfig::from_file_relative_to(&file, RelativeTo::WorkingDirectory).expect("parse");
        assert_eq!(c.boot.kernel_image_path, cwd.join("vmlinux.bin"));
        assert_eq!(c.drives[0].path_on_host, cwd.join("rootfs.ext4"));
        let log = c.logger.and_then(|l| l.log_path);
        assert_eq!(log, Some(cwd.join("fc.log")));
        let (c, _) = VmConfig::from_file(&file).expect("parse");
        assert_eq!(c.boot.kernel_image_path, dir.join("vmlinux.bin"));
        assert_eq!(c.logger.and_then(|l| l.log_path), Some(dir.join("fc.log")));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn the_old_section_name_is_read_with_a_warning() {
        let old = r#"{"boot-source":{"kernel_image_path":"/k"},
                      "rate_limit_groups":[{"id":"g","ops":{"size":10,"refill_time":100}}]}"#;
        let (c, warnings) = VmConfig::from_json_with_warnings(old, "vm.json").expect("old name");
        assert_eq!(c.rate_limit_groups.len(), 1);
        assert_eq!(warnings.len(), 1);
        assert_eq!(
            warnings[0].to_string(),
            "vm.json: rate_limit_groups: the section is now spelled `rate-limit-groups`; \
             `rate_limit_groups` is still read"
        );
        let new = old.replace("rate_limit_groups", "rate-limit-groups");
        let (c, warnings) = VmConfig::from_json_with_warnings(&new, "vm.json").expect("new");
        assert_eq!(c.rate_limit_groups.len(), 1);
        assert!(warnings.is_empty());
        let v = serde_json::to_value(&c).expect("json");
        assert!(v.get("rate-limit-groups").is_some(), "written the new way");
    }
}
