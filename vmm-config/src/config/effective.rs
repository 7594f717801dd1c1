//! The effective config: what start-up chooses where the file says nothing, written into the
//! config so `--check-config` and `GET /vm/config` show every value in force (the iothread a
//! drive runs on, the implicit `io0` thread).

use super::{IoThreadConfig, VmConfig, DEFAULT_IOTHREAD};

impl VmConfig {
    /// Fills in the defaults start-up would choose: with drives or a vsock and no iothreads, one
    /// iothread `io0` with default parameters; a drive without `iothread` runs on the first iothread.
    pub fn fill_defaults(&mut self) {
        if self.iothreads.is_empty()
            && !(self.drives.is_empty()
                && self.network_interfaces.is_empty()
                && self.vsock.is_none())
        {
            self.iothreads
                .push(IoThreadConfig::with_id(DEFAULT_IOTHREAD));
        }
        if let Some(first) = self.iothreads.first().map(|t| t.id.clone()) {
            for d in &mut self.drives {
                d.iothread.get_or_insert_with(|| first.clone());
            }
            for n in &mut self.network_interfaces {
                n.iothread.get_or_insert_with(|| first.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drives_learn_their_iothread() {
        let json = r#"{"boot-source":{"kernel_image_path":"/k"},
            "drives":[{"drive_id":"a","path_on_host":"/a"},{"drive_id":"b","path_on_host":"/b"}]}"#;
        let mut c = VmConfig::from_json(json, "vm.json").expect("parse");
        c.fill_defaults();
        assert_eq!(c.iothreads, vec![IoThreadConfig::with_id("io0")]);
        assert_eq!(c.iothreads[0].poll_max_ns, 32768);
        assert_eq!(c.drives[0].iothread.as_deref(), Some("io0"));
        assert_eq!(c.drives[1].iothread.as_deref(), Some("io0"));

        let json = r#"{"boot-source":{"kernel_image_path":"/k"},"iothreads":[{"id":"x"},{"id":"y"}],
            "drives":[{"drive_id":"a","path_on_host":"/a"},{"drive_id":"b","path_on_host":"/b","iothread":"y"}]}"#;
        let mut c = VmConfig::from_json(json, "vm.json").expect("parse");
        c.fill_defaults();
        assert_eq!(c.iothreads.len(), 2);
        assert_eq!(c.drives[0].iothread.as_deref(), Some("x"));
        assert_eq!(c.drives[1].iothread.as_deref(), Some("y"));
    }
}
