//! A tap of a test's own (tests/net.rs, tests/gosdk.rs, tests/orchestrator_replay.rs):
//! made with `ip tuntap`, the host's end addressed and up, deleted when dropped (also when the
//! test fails); whether iputils' `ping` is there; and `ping` itself. `None` where no tap can be
//! made (not root, no /dev/net/tun): the caller prints a NOT RUN line for the network part.

use std::process::Command;
use std::time::Duration;

/// A tap with the host's end at `host_ip`/30; the guest's address is `guest_ip`.
pub struct TestTap {
    pub name: String,
    pub host_ip: String,
    pub guest_ip: String,
    /// The MAC the guest is given (locally administered, from the address).
    pub guest_mac: String,
}

impl TestTap {
    /// The process's `n`th tap (0..4): its own name and /30 in 172.29.0.0/16.
    pub fn create(n: u32) -> Option<TestTap> {
        Self::create_with(n, &[])
    }

    /// As [`TestTap::create`], a multi-queue tap (`ip tuntap ... multi_queue`), for a NIC
    /// with `num_queues` > 2.
    #[allow(dead_code)]
    pub fn create_multi_queue(n: u32) -> Option<TestTap> {
        Self::create_with(n, &["multi_queue"])
    }

    fn create_with(n: u32, flags: &[&str]) -> Option<TestTap> {
        let id = std::process::id();
        let (a, b) = ((id >> 4) % 250, ((id % 16) * 4 + n) * 4);
        let tap = TestTap {
            name: format!("osptap{}{n}", id % 100_000),
            host_ip: format!("172.29.{a}.{}", b + 1),
            guest_ip: format!("172.29.{a}.{}", b + 2),
            guest_mac: format!("06:00:ac:1d:{a:02x}:{:02x}", b + 2),
        };
        let mut add = vec!["tuntap", "add", "dev", &tap.name, "mode", "tap"];
        add.extend_from_slice(flags);
        if !ip(&add) {
            return None;
        }
        // From here on, a failure deletes the tap (Drop).
        let cidr = format!("{}/30", tap.host_ip);
        let ok =
            ip(&["addr", "add", &cidr, "dev", &tap.name]) && ip(&["link", "set", &tap.name, "up"]);
        ok.then_some(tap)
    }

    /// `ping -c count -i 0.2 -W 2 guest_ip`: (transmitted, received, ping's output).
    pub fn ping(&self, count: u32) -> (u64, u64, String) {
        let count = count.to_string();
        ping(
            &["-c", &count, "-i", "0.2", "-W", "2", "-q"],
            &self.guest_ip,
            Duration::from_secs(60),
        )
    }
}

/// `ping args... guest`, stopped after `limit`: (transmitted, received, ping's output); zeros
/// when it printed no summary.
pub fn ping(args: &[&str], guest: &str, limit: Duration) -> (u64, u64, String) {
    let out = super::output_within(
        {
            let mut c = Command::new("ping");
            c.args(args).arg(guest);
            c
        },
        limit,
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_default()
        .to_string();
    let num = |word: &str| -> u64 {
        line.split(',')
            .find(|p| p.contains(word))
            .and_then(|p| p.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (num("transmitted"), num("received"), text)
}

impl Drop for TestTap {
    fn drop(&mut self) {
        // `ip link del`, not `ip tuntap del ... mode tap`: the latter refuses a multi-queue tap
        // (TUNSETIFF without IFF_MULTI_QUEUE: EINVAL) and left it behind after every run.
        let _ = Command::new("ip")
            .args(["link", "del", "dev", &self.name])
            .output();
    }
}

/// `ip args...` succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether iputils' `ping` is installed (`.ci/run` installs it).
pub fn have_ping() -> bool {
    Command::new("ping")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}
