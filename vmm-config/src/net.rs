//! Network interfaces: Firecracker's `network-interfaces` section and
//! `PUT /network-interfaces/{iface_id}` body (`iface_id`, `host_dev_name`, `guest_mac`,
//! `rx_rate_limiter`, `tx_rate_limiter`), their checks (each error names its field), and opening
//! the taps, which start-up's preflight does before the sandbox (`crate::preflight`).

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

use crate::rate_limit::RateLimiterConfig;
pub use devices::net::Tap;

/// One network interface: a virtio-net device over a host tap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkInterfaceConfig {
    /// Unique id of the interface.
    pub iface_id: String,
    /// The host tap (opened, or created with CAP_NET_ADMIN, at start-up; 1 to 15 bytes).
    pub host_dev_name: String,
    /// The guest's MAC address (`aa:bb:cc:dd:ee:ff`); null or absent: the guest picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_mac: Option<String>,
    /// Limits on the frames the guest receives (`{}` or null: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_rate_limiter: Option<RateLimiterConfig>,
    /// Limits on the frames the guest sends (`{}` or null: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_rate_limiter: Option<RateLimiterConfig>,
    /// The iothread that serves it (an id from `iothreads`); absent: the first one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iothread: Option<String>,
    /// Virtqueues, rx and tx together (Cloud Hypervisor's name): even, 2 to
    /// [`MAX_NET_QUEUES`]. Above 2 the tap is opened multi-queue (IFF_MULTI_QUEUE, one queue
    /// per pair) and VIRTIO_NET_F_MQ and the control queue are offered; absent: one pair, no
    /// MQ, no control queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 2, maximum = 16)]
    pub num_queues: Option<u16>,
}

/// The most virtqueues (rx and tx together) a network interface may ask for.
pub const MAX_NET_QUEUES: u16 = 16;

/// `PATCH /network-interfaces/{iface_id}` body (Firecracker's `PartialNetworkInterface`): each
/// limiter absent: kept; `{}` or null: removed; a value: set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkInterfaceUpdate {
    /// Firecracker names the interface again: when given, it must equal the path's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iface_id: Option<String>,
    /// The new receive limits.
    #[serde(default, deserialize_with = "crate::field_update::present")]
    #[schema(value_type = Option<RateLimiterConfig>)]
    pub rx_rate_limiter: Option<Option<RateLimiterConfig>>,
    /// The new transmit limits.
    #[serde(default, deserialize_with = "crate::field_update::present")]
    #[schema(value_type = Option<RateLimiterConfig>)]
    pub tx_rate_limiter: Option<Option<RateLimiterConfig>>,
}

/// `network-interfaces`: a list, or null (Firecracker writes `[]` when unused).
pub fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<NetworkInterfaceConfig>, D::Error> {
    Ok(Option::<Vec<NetworkInterfaceConfig>>::deserialize(d)?.unwrap_or_default())
}

/// Parses `aa:bb:cc:dd:ee:ff` (hex digits, either case).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for byte in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

impl NetworkInterfaceConfig {
    /// The guest's MAC, parsed (after [`NetworkInterfaceConfig::check`]).
    pub fn mac(&self) -> Option<[u8; 6]> {
        self.guest_mac.as_deref().and_then(parse_mac)
    }

    /// Its rx/tx queue pairs (1 unless `num_queues` asks for more).
    pub fn queue_pairs(&self) -> u16 {
        self.num_queues.map_or(1, |n| (n / 2).max(1))
    }

    /// Checks the values; errors name the field under `at` (e.g. `network-interfaces[0]`).
    pub fn check(&self, at: &str) -> Result<(), ConfigError> {
        let f = |name: &str| format!("{at}.{name}");
        if self.iface_id.is_empty() {
            return Err(invalid(f("iface_id"), "must not be empty"));
        }
        let name = self.host_dev_name.as_bytes();
        if name.is_empty() || name.len() > 15 || name.iter().any(|&b| b == 0 || b == b'/') {
            return Err(invalid(
                f("host_dev_name"),
                format!(
                    "`{}` is not an interface name (1 to 15 bytes, no NUL or /)",
                    self.host_dev_name.escape_debug()
                ),
            ));
        }
        if let Some(mac) = &self.guest_mac {
            match parse_mac(mac) {
                None => {
                    return Err(invalid(
                        f("guest_mac"),
                        format!(
                            "`{}` is not a MAC address like 06:00:ac:10:00:02",
                            mac.escape_debug()
                        ),
                    ))
                }
                Some(m) if m[0] & 1 != 0 => {
                    return Err(invalid(
                        f("guest_mac"),
                        format!("{mac} is a multicast address; a NIC needs a unicast one"),
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some(n) = self.num_queues {
            if !(2..=MAX_NET_QUEUES).contains(&n) || n % 2 != 0 {
                return Err(invalid(
                    f("num_queues"),
                    format!("must be an even number from 2 to {MAX_NET_QUEUES}, got {n}"),
                ));
            }
        }
        if let Some(r) = &self.rx_rate_limiter {
            r.check(&f("rx_rate_limiter"))?;
        }
        if let Some(r) = &self.tx_rate_limiter {
            r.check(&f("tx_rate_limiter"))?;
        }
        Ok(())
    }
}

/// Checks every interface and that ids and taps are unique; `iothreads` are the ids defined.
pub fn check_all(nics: &[NetworkInterfaceConfig], iothreads: &[&str]) -> Result<(), ConfigError> {
    for (i, n) in nics.iter().enumerate() {
        let at = format!("network-interfaces[{i}]");
        n.check(&at)?;
        if nics[..i].iter().any(|o| o.iface_id == n.iface_id) {
            return Err(invalid(
                format!("{at}.iface_id"),
                format!("duplicate id `{}`", n.iface_id),
            ));
        }
        if nics[..i].iter().any(|o| o.host_dev_name == n.host_dev_name) {
            return Err(invalid(
                format!("{at}.host_dev_name"),
                format!(
                    "tap `{}` is already used by another interface",
                    n.host_dev_name
                ),
            ));
        }
        if let Some(t) = &n.iothread {
            if !iothreads.contains(&t.as_str()) {
                return Err(invalid(
                    format!("{at}.iothread"),
                    format!("no iothread `{t}` in `iothreads`"),
                ));
            }
        }
    }
    Ok(())
}

/// Opens each interface's tap, in order, one queue per pair (before the sandbox: a new network namespace would not
/// see the host's taps, and seccomp does not allow `/dev/net/tun`'s ioctls).
pub fn open_taps(nics: &[NetworkInterfaceConfig]) -> Result<Vec<devices::net::Tap>, ConfigError> {
    nics.iter()
        .enumerate()
        .map(|(i, n)| {
            devices::net::Tap::open_queues(&n.host_dev_name, n.queue_pairs()).map_err(|source| {
                ConfigError::Tap {
                    field: format!("network-interfaces[{i}].host_dev_name"),
                    source,
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(json: &str) -> NetworkInterfaceConfig {
        serde_json::from_str(json).expect("parse")
    }

    #[test]
    fn firecrackers_body_parses_with_null_and_empty_limiters() {
        let n = nic(
            r#"{"iface_id":"eth0","host_dev_name":"tap0","guest_mac":null,
            "rx_rate_limiter":{},"tx_rate_limiter":null}"#,
        );
        assert_eq!(n.mac(), None);
        assert_eq!(n.rx_rate_limiter, Some(RateLimiterConfig::default()));
        n.check("n").expect("valid");
        let n =
            nic(r#"{"iface_id":"eth0","host_dev_name":"tap0","guest_mac":"06:00:AC:10:00:02"}"#);
        assert_eq!(n.mac(), Some([6, 0, 0xac, 0x10, 0, 2]));
    }

    #[test]
    fn num_queues_counts_rx_and_tx_and_absent_is_one_pair_and_not_shown() {
        let n = nic(r#"{"iface_id":"eth0","host_dev_name":"tap0"}"#);
        assert_eq!((n.num_queues, n.queue_pairs()), (None, 1));
        let shown = serde_json::to_string(&n).expect("json");
        assert!(!shown.contains("num_queues"), "{shown}");
        let n = nic(r#"{"iface_id":"eth0","host_dev_name":"tap0","num_queues":8}"#);
        n.check("n").expect("valid");
        assert_eq!(n.queue_pairs(), 4);
        let shown = serde_json::to_string(&n).expect("json");
        assert!(shown.contains(r#""num_queues":8"#), "{shown}");
        nic(r#"{"iface_id":"eth0","host_dev_name":"tap0","num_queues":2}"#)
            .check("n")
            .expect("one pair, said out loud");
    }

    #[test]
    fn errors_name_the_field() {
        let at = |json: &str| match nic(json).check("network-interfaces[0]") {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            at(r#"{"iface_id":"e","host_dev_name":"tap0","guest_mac":"06:00:ac:10:00"}"#),
            "network-interfaces[0].guest_mac"
        );
        assert_eq!(
            at(r#"{"iface_id":"e","host_dev_name":"tap0","guest_mac":"07:00:ac:10:00:02"}"#),
            "network-interfaces[0].guest_mac"
        );
        assert_eq!(
            at(r#"{"iface_id":"e","host_dev_name":"a-name-too-long-for-linux"}"#),
            "network-interfaces[0].host_dev_name"
        );
        assert_eq!(
            at(r#"{"iface_id":"","host_dev_name":"tap0"}"#),
            "network-interfaces[0].iface_id"
        );
        let dup = [
            nic(r#"{"iface_id":"e","host_dev_name":"tap0"}"#),
            nic(r#"{"iface_id":"e","host_dev_name":"tap1"}"#),
        ];
        assert!(matches!(check_all(&dup, &[]),
            Err(ConfigError::Invalid { field, .. }) if field == "network-interfaces[1].iface_id"));
        for bad in ["0", "1", "3", "18", "65535"] {
            assert_eq!(
                at(&format!(
                    r#"{{"iface_id":"e","host_dev_name":"tap0","num_queues":{bad}}}"#
                )),
                "network-interfaces[0].num_queues"
            );
        }
        assert!(parse_mac("06:00:ac:10:00:02:03").is_none());
        assert!(parse_mac("0g:00:ac:10:00:02").is_none());
    }
}
