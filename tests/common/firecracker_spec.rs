//! Firecracker v1.16.1's REST API as a table, written from its swagger file
//! (src/firecracker/swagger/firecracker.yaml) and the phase rules of its controller
//! (src/vmm/src/rpc_interface.rs): every path and method, a request body the spec accepts, the
//! status codes the spec lists, the shape of each 200 body, the phase Firecracker serves it in, and
//! what Osprey does with it. `tests/swagger_conformance.rs` walks it against a live `osprey`.
//!
//! Request bodies name the walk's files with `$KERNEL`, `$DISK`, `$DIR` and `$TAP`, replaced before they
//! are sent. Every operation in the swagger also has a `default` response, an `Error` body with
//! any other status: so any error status is within the spec as long as its body is
//! `{"fault_message": string}`, and the walk expects Firecracker's own 400 where the spec leaves it
//! open.

#![allow(dead_code)]

/// The JSON shape of a value, as far as the swagger defines it.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// A JSON string.
    String,
    /// A JSON integer.
    Integer,
    /// A JSON boolean.
    Boolean,
    /// A string from a closed set (compared as the spec spells it).
    OneOf(&'static [&'static str]),
    /// An object: its required fields must be there, every named field (when present and not
    /// `null`) must have its shape; other fields are allowed (Osprey's additions).
    Object(&'static [Field]),
    /// An array whose items all have the shape.
    ArrayOf(&'static Shape),
    /// Any JSON object (MMDS contents).
    AnyObject,
}

/// A named field of an [`Shape::Object`].
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub required: bool,
    pub shape: Shape,
}

const fn req(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        required: true,
        shape,
    }
}

const fn opt(name: &'static str, shape: Shape) -> Field {
    Field {
        name,
        required: false,
        shape,
    }
}

use Shape::{AnyObject, ArrayOf, Boolean, Integer, Object, OneOf, String as Str};

pub const TOKEN_BUCKET: Shape = Object(&[
    req("size", Integer),
    req("refill_time", Integer),
    opt("one_time_burst", Integer),
]);
pub const RATE_LIMITER: Shape = Object(&[opt("bandwidth", TOKEN_BUCKET), opt("ops", TOKEN_BUCKET)]);
pub const INSTANCE_INFO: Shape = Object(&[
    req("app_name", Str),
    req("id", Str),
    req("state", OneOf(&["Not started", "Running", "Paused"])),
    req("vmm_version", Str),
]);
pub const FIRECRACKER_VERSION: Shape = Object(&[req("firecracker_version", Str)]);
pub const MACHINE_CONFIGURATION: Shape = Object(&[
    opt(
        "cpu_template",
        OneOf(&["C3", "T2", "T2S", "T2CL", "T2A", "V1N1", "None"]),
    ),
    opt("smt", Boolean),
    req("mem_size_mib", Integer),
    opt("track_dirty_pages", Boolean),
    req("vcpu_count", Integer),
    opt("huge_pages", OneOf(&["None", "2M"])),
]);
pub const BALLOON: Shape = Object(&[
    req("amount_mib", Integer),
    req("deflate_on_oom", Boolean),
    opt("stats_polling_interval_s", Integer),
    opt("free_page_hinting", Boolean),
    opt("free_page_reporting", Boolean),
]);
pub const BALLOON_STATS: Shape = Object(&[
    req("target_pages", Integer),
    req("actual_pages", Integer),
    req("target_mib", Integer),
    req("actual_mib", Integer),
    opt("swap_in", Integer),
    opt("swap_out", Integer),
    opt("major_faults", Integer),
    opt("minor_faults", Integer),
    opt("free_memory", Integer),
    opt("total_memory", Integer),
    opt("available_memory", Integer),
    opt("disk_caches", Integer),
    opt("hugetlb_allocations", Integer),
    opt("hugetlb_failures", Integer),
    opt("oom_kill", Integer),
    opt("alloc_stall", Integer),
    opt("async_scan", Integer),
    opt("direct_scan", Integer),
    opt("async_reclaim", Integer),
    opt("direct_reclaim", Integer),
]);
pub const BALLOON_HINTING_STATUS: Shape =
    Object(&[req("host_cmd", Integer), opt("guest_cmd", Integer)]);
pub const MEMORY_HOTPLUG_CONFIG: Shape = Object(&[
    opt("total_size_mib", Integer),
    opt("slot_size_mib", Integer),
    opt("block_size_mib", Integer),
]);
pub const MEMORY_HOTPLUG_STATUS: Shape = Object(&[
    opt("total_size_mib", Integer),
    opt("slot_size_mib", Integer),
    opt("block_size_mib", Integer),
    opt("plugged_size_mib", Integer),
    opt("requested_size_mib", Integer),
]);
pub const BOOT_SOURCE: Shape = Object(&[
    opt("boot_args", Str),
    opt("initrd_path", Str),
    req("kernel_image_path", Str),
]);
pub const DRIVE: Shape = Object(&[
    req("drive_id", Str),
    opt("partuuid", Str),
    req("is_root_device", Boolean),
    opt("cache_type", OneOf(&["Unsafe", "Writeback"])),
    opt("is_read_only", Boolean),
    opt("path_on_host", Str),
    opt("rate_limiter", RATE_LIMITER),
    // The swagger's enum is Sync/Async; Osprey reports its own engine names here too.
    opt("io_engine", Str),
    opt("socket", Str),
]);
pub const PMEM: Shape = Object(&[
    req("id", Str),
    req("path_on_host", Str),
    opt("root_device", Boolean),
    opt("read_only", Boolean),
    opt("rate_limiter", RATE_LIMITER),
]);
pub const LOGGER: Shape = Object(&[
    // Case-insensitive in the spec, so only its type is checked.
    opt("level", Str),
    opt("log_path", Str),
    opt("show_level", Boolean),
    opt("show_log_origin", Boolean),
    opt("module", Str),
]);
pub const METRICS: Shape = Object(&[req("metrics_path", Str)]);
pub const MMDS_CONFIG: Shape = Object(&[
    opt("version", OneOf(&["V1", "V2"])),
    req("network_interfaces", ArrayOf(&Str)),
    opt("ipv4_address", Str),
    opt("imds_compat", Boolean),
]);
pub const NETWORK_INTERFACE: Shape = Object(&[
    opt("guest_mac", Str),
    req("host_dev_name", Str),
    req("iface_id", Str),
    opt("mtu", Integer),
    opt("rx_rate_limiter", RATE_LIMITER),
    opt("tx_rate_limiter", RATE_LIMITER),
]);
pub const VSOCK: Shape = Object(&[
    req("guest_cid", Integer),
    req("uds_path", Str),
    opt("vsock_id", Str),
]);
pub const ENTROPY_DEVICE: Shape = Object(&[opt("rate_limiter", RATE_LIMITER)]);
const ADDR_BITMAP: Shape = Object(&[req("addr", Str), req("bitmap", Str)]);
pub const CPU_CONFIG: Shape = Object(&[
    opt("kvm_capabilities", ArrayOf(&Str)),
    opt(
        "cpuid_modifiers",
        ArrayOf(&Object(&[
            req("leaf", Str),
            req("subleaf", Str),
            req("flags", Integer),
            req(
                "modifiers",
                ArrayOf(&Object(&[
                    req("register", OneOf(&["eax", "ebx", "ecx", "edx"])),
                    req("bitmap", Str),
                ])),
            ),
        ])),
    ),
    opt("msr_modifiers", ArrayOf(&ADDR_BITMAP)),
    opt("reg_modifiers", ArrayOf(&ADDR_BITMAP)),
    opt(
        "vcpu_features",
        ArrayOf(&Object(&[req("index", Integer), req("bitmap", Str)])),
    ),
]);
pub const FULL_VM_CONFIGURATION: Shape = Object(&[
    opt("balloon", BALLOON),
    opt("drives", ArrayOf(&DRIVE)),
    opt("boot-source", BOOT_SOURCE),
    opt("cpu-config", CPU_CONFIG),
    opt("logger", LOGGER),
    opt("machine-config", MACHINE_CONFIGURATION),
    opt("metrics", METRICS),
    opt("memory-hotplug", MEMORY_HOTPLUG_CONFIG),
    opt("mmds-config", MMDS_CONFIG),
    opt("network-interfaces", ArrayOf(&NETWORK_INTERFACE)),
    opt("pmem", ArrayOf(&PMEM)),
    opt("vsock", VSOCK),
    opt("entropy", ENTROPY_DEVICE),
]);

/// When Firecracker serves an operation (`handle_preboot_request` vs the runtime controller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Only before `InstanceStart`; after it, 400.
    BeforeBoot,
    /// Only once the VM runs (or is paused); before, 400.
    AfterBoot,
    /// Only while the VM is paused (`PUT /snapshot/create`); before boot and while it runs, 400.
    Paused,
    /// In every state.
    Any,
}

impl Phase {
    /// Whether the operation is served with the VM booted (`true`) or not yet started, and
    /// paused or not.
    pub fn allows(self, booted: bool, paused: bool) -> bool {
        match self {
            Phase::BeforeBoot => !booted,
            Phase::AfterBoot => booted,
            Phase::Paused => paused,
            Phase::Any => true,
        }
    }
}

/// What Osprey does with an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Osprey {
    /// Served as Firecracker serves it, in the same phase.
    Implemented,
    /// Refused in every state with 400 and a `fault_message` containing one of these words
    /// (compared case-insensitively), which name the feature.
    Refused(&'static [&'static str]),
    /// Not in the swagger (Firecracker's parser has it) and not served: any error with a fault
    /// body, 400 as Firecracker answers a bad request or 405 as Osprey answers a method a path
    /// does not take.
    Unrouted,
}

/// One operation of the API.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    pub method: &'static str,
    /// The path as the swagger writes it.
    pub path: &'static str,
    /// Where the walk sends it: the path with its id filled in.
    pub at: &'static str,
    /// A request body the spec accepts (`$KERNEL`, `$DISK`, `$DIR` replaced); `None`: no body.
    pub body: Option<&'static str>,
    /// The success status: 204 (no body) for PUT/PATCH/DELETE, 200 for GET.
    pub success: u16,
    /// The error statuses the swagger lists by number (besides `default`).
    pub errors: &'static [u16],
    /// The shape of the 200 body (GETs only).
    pub reply: Option<Shape>,
    /// When Firecracker serves it.
    pub phase: Phase,
    /// Whether it changes the VM's state (start, pause/resume, Ctrl+Alt+Del): the walk sends it
    /// only where it must fail; the test's script sends it where it must succeed.
    pub transition: bool,
    /// What Osprey does with it.
    pub osprey: Osprey,
    /// In the swagger (`false`: only in Firecracker's parser).
    pub documented: bool,
}

const fn op(method: &'static str, path: &'static str) -> Operation {
    Operation {
        method,
        path,
        at: path,
        body: None,
        success: if matches!(method.as_bytes(), b"GET") {
            200
        } else {
            204
        },
        errors: &[400],
        reply: None,
        phase: Phase::Any,
        transition: false,
        osprey: Osprey::Implemented,
        documented: true,
    }
}

impl Operation {
    const fn at(mut self, at: &'static str) -> Self {
        self.at = at;
        self
    }
    const fn body(mut self, body: &'static str) -> Self {
        self.body = Some(body);
        self
    }
    const fn errors(mut self, errors: &'static [u16]) -> Self {
        self.errors = errors;
        self
    }
    const fn reply(mut self, shape: Shape) -> Self {
        self.reply = Some(shape);
        self
    }
    const fn phase(mut self, phase: Phase) -> Self {
        self.phase = phase;
        self
    }
    const fn transition(mut self) -> Self {
        self.transition = true;
        self
    }
    const fn refused(mut self, names: &'static [&'static str]) -> Self {
        self.osprey = Osprey::Refused(names);
        self
    }
    const fn undocumented(mut self) -> Self {
        self.documented = false;
        self.osprey = Osprey::Unrouted;
        self
    }

    /// `METHOD path` for messages.
    pub fn name(&self) -> String {
        match self.body {
            Some(b) if self.path == "/actions" || self.path == "/vm" => {
                format!("{} {} {b}", self.method, self.path)
            }
            _ => format!("{} {}", self.method, self.at),
        }
    }
}

use Phase::{AfterBoot, BeforeBoot};

const BALLOON_WORDS: &[&str] = &["balloon"];
const HOTPLUG_WORDS: &[&str] = &["hotplug", "hot-plug", "hot plug"];
const SNAPSHOT_WORDS: &[&str] = &["snapshot"];
const MMDS_WORDS: &[&str] = &["mmds"];
const PMEM_WORDS: &[&str] = &["pmem"];

/// The root drive the walk configures: the first virtio-blk device, so the test guest's `mode=blk`
/// finds it.
pub const ROOT_DRIVE_ID: &str = "rootfs";

/// Every operation of Firecracker v1.16.1's swagger, in its order, then the undocumented DELETEs.
/// The pre-boot bodies together configure the test guest to boot with one drive and stay up.
pub const OPERATIONS: &[Operation] = &[
    op("GET", "/").errors(&[]).reply(INSTANCE_INFO),
    op("PUT", "/actions")
        .body(r#"{"action_type": "InstanceStart"}"#)
        .phase(BeforeBoot)
        .transition(),
    op("PUT", "/actions")
        .body(r#"{"action_type": "FlushMetrics"}"#)
        .phase(AfterBoot),
    op("PUT", "/actions")
        .body(r#"{"action_type": "SendCtrlAltDel"}"#)
        .phase(AfterBoot)
        .transition(),
    op("GET", "/balloon")
        .reply(BALLOON)
        .refused(BALLOON_WORDS),
    op("PUT", "/balloon")
        .body(r#"{"amount_mib": 0, "deflate_on_oom": false, "stats_polling_interval_s": 1}"#)
        .phase(BeforeBoot)
        .refused(BALLOON_WORDS),
    op("PATCH", "/balloon")
        .body(r#"{"amount_mib": 1}"#)
        .phase(AfterBoot)
        .refused(BALLOON_WORDS),
    op("GET", "/balloon/statistics")
        .reply(BALLOON_STATS)
        .phase(AfterBoot)
        .refused(BALLOON_WORDS),
    op("PATCH", "/balloon/statistics")
        .body(r#"{"stats_polling_interval_s": 2}"#)
        .phase(AfterBoot)
        .refused(BALLOON_WORDS),
    op("PATCH", "/balloon/hinting/start")
        .body(r#"{"acknowledge_on_stop": true}"#)
        .phase(AfterBoot)
        .refused(BALLOON_WORDS),
    op("GET", "/balloon/hinting/status")
        .reply(BALLOON_HINTING_STATUS)
        .phase(AfterBoot)
        .refused(BALLOON_WORDS),
    op("PATCH", "/balloon/hinting/stop")
        .phase(AfterBoot)
        .refused(BALLOON_WORDS),
    op("PUT", "/boot-source")
        .body(r#"{"kernel_image_path": "$KERNEL", "boot_args": "mode=blk rw=verify count=32 hang=2"}"#)
        .phase(BeforeBoot),
    op("PUT", "/cpu-config")
        .body(r#"{"kvm_capabilities": ["!56"], "cpuid_modifiers": [{"leaf": "0x1", "subleaf": "0x0", "flags": 0, "modifiers": [{"register": "ecx", "bitmap": "0bxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx0"}]}]}"#)
        .phase(BeforeBoot)
        .refused(&["cpu"]),
    op("PUT", "/drives/{drive_id}")
        .at("/drives/rootfs")
        .body(r#"{"drive_id": "rootfs", "path_on_host": "$DISK", "is_root_device": true, "is_read_only": false, "cache_type": "Unsafe", "io_engine": "Sync", "rate_limiter": {"ops": {"size": 100000, "refill_time": 100}}}"#)
        .phase(BeforeBoot),
    op("PATCH", "/drives/{drive_id}")
        .at("/drives/rootfs")
        .body(r#"{"drive_id": "rootfs", "rate_limiter": {"bandwidth": {"size": 104857600, "one_time_burst": 0, "refill_time": 100}}}"#)
        .phase(AfterBoot),
    op("PUT", "/pmem/{id}")
        .at("/pmem/pmem0")
        .body(r#"{"id": "pmem0", "path_on_host": "$DIR/pmem.img", "root_device": false, "read_only": true}"#)
        .phase(BeforeBoot)
        .refused(PMEM_WORDS),
    op("PATCH", "/pmem/{id}")
        .at("/pmem/pmem0")
        .body(r#"{"id": "pmem0", "rate_limiter": {"ops": {"size": 10, "refill_time": 100}}}"#)
        .phase(AfterBoot)
        .refused(PMEM_WORDS),
    op("PUT", "/logger")
        .body(r#"{"level": "Info", "log_path": "$DIR/osprey.log", "show_level": true, "show_log_origin": false}"#)
        .phase(BeforeBoot),
    op("GET", "/machine-config")
        .errors(&[])
        .reply(MACHINE_CONFIGURATION),
    op("PUT", "/machine-config")
        .body(r#"{"vcpu_count": 1, "mem_size_mib": 128, "smt": false, "track_dirty_pages": false}"#)
        .phase(BeforeBoot),
    op("PATCH", "/machine-config")
        .body(r#"{"mem_size_mib": 128}"#)
        .phase(BeforeBoot),
    op("PUT", "/metrics")
        .body(r#"{"metrics_path": "$DIR/metrics.json"}"#)
        .phase(BeforeBoot),
    op("PUT", "/mmds")
        .body(r#"{"latest": {"meta-data": {"ami-id": "ami-12345678"}}}"#)
        .refused(MMDS_WORDS),
    op("PATCH", "/mmds")
        .body(r#"{"latest": {"meta-data": {"ami-id": "ami-87654321"}}}"#)
        .refused(MMDS_WORDS),
    op("GET", "/mmds")
        .errors(&[404])
        .reply(AnyObject)
        .refused(MMDS_WORDS),
    op("PUT", "/mmds/config")
        .body(r#"{"network_interfaces": ["eth0"], "version": "V2"}"#)
        .phase(BeforeBoot)
        .refused(MMDS_WORDS),
    op("PUT", "/entropy")
        .body(r#"{"rate_limiter": {"bandwidth": {"size": 1000, "refill_time": 100}}}"#)
        .errors(&[])
        .phase(BeforeBoot)
        .refused(&["entropy"]),
    op("PUT", "/serial")
        .body(r#"{"serial_out_path": "$DIR/serial.out"}"#)
        .errors(&[])
        .phase(BeforeBoot)
        .refused(&["serial"]),
    op("PUT", "/hotplug/memory")
        .body(r#"{"total_size_mib": 1024, "slot_size_mib": 128, "block_size_mib": 2}"#)
        .errors(&[])
        .phase(BeforeBoot)
        .refused(HOTPLUG_WORDS),
    op("PATCH", "/hotplug/memory")
        .body(r#"{"requested_size_mib": 256}"#)
        .errors(&[])
        .phase(AfterBoot)
        .refused(HOTPLUG_WORDS),
    op("GET", "/hotplug/memory")
        .errors(&[])
        .reply(MEMORY_HOTPLUG_STATUS)
        .phase(AfterBoot)
        .refused(HOTPLUG_WORDS),
    op("PUT", "/network-interfaces/{iface_id}")
        .at("/network-interfaces/eth0")
        .body(r#"{"iface_id": "eth0", "host_dev_name": "$TAP", "guest_mac": "06:00:ac:10:00:02"}"#)
        .phase(BeforeBoot),
    op("PATCH", "/network-interfaces/{iface_id}")
        .at("/network-interfaces/eth0")
        .body(r#"{"iface_id": "eth0", "rx_rate_limiter": {"ops": {"size": 10, "refill_time": 100}}}"#)
        .phase(AfterBoot),
    // Taken in the API socket's folder ($DIR), where the sandbox lets Osprey create files. The
    // walk's VM has a vsock (`PUT /vsock` below), whose virtio-pci state the snapshot keeps
    // (issue 51; tests/vsock.rs restores one); tests/snapshot.rs covers the create itself.
    op("PUT", "/snapshot/create")
        .body(r#"{"mem_file_path": "$DIR/snap.mem", "snapshot_path": "$DIR/snap.vmstate", "snapshot_type": "Full"}"#)
        .phase(Phase::Paused),
    op("PUT", "/snapshot/load")
        .body(r#"{"snapshot_path": "$DIR/snap.vmstate", "mem_backend": {"backend_type": "File", "backend_path": "$DIR/snap.mem"}, "resume_vm": false}"#)
        .phase(BeforeBoot)
        .refused(SNAPSHOT_WORDS),
    op("GET", "/version").errors(&[]).reply(FIRECRACKER_VERSION),
    op("PATCH", "/vm")
        .body(r#"{"state": "Paused"}"#)
        .phase(AfterBoot)
        .transition(),
    op("PATCH", "/vm")
        .body(r#"{"state": "Resumed"}"#)
        .phase(AfterBoot)
        .transition(),
    op("GET", "/vm/config")
        .errors(&[])
        .reply(FULL_VM_CONFIGURATION),
    op("PUT", "/vsock")
        .body(r#"{"guest_cid": 3, "uds_path": "$DIR/vsock.sock"}"#)
        .phase(BeforeBoot),
    // Firecracker's parser also takes these hot-unplug routes (post-boot only); the swagger does
    // not list them and no Firecracker client that Osprey targets sends them.
    op("DELETE", "/drives/{drive_id}")
        .at("/drives/rootfs")
        .phase(AfterBoot)
        .undocumented(),
    op("DELETE", "/pmem/{id}")
        .at("/pmem/pmem0")
        .phase(AfterBoot)
        .undocumented(),
    op("DELETE", "/network-interfaces/{iface_id}")
        .at("/network-interfaces/eth0")
        .phase(AfterBoot)
        .undocumented(),
];

/// The swagger's `(method, path)` pairs, each once: what the walk must cover.
pub const SWAGGER_OPERATIONS: &[(&str, &str)] = &[
    ("GET", "/"),
    ("PUT", "/actions"),
    ("GET", "/balloon"),
    ("PUT", "/balloon"),
    ("PATCH", "/balloon"),
    ("GET", "/balloon/statistics"),
    ("PATCH", "/balloon/statistics"),
    ("PATCH", "/balloon/hinting/start"),
    ("GET", "/balloon/hinting/status"),
    ("PATCH", "/balloon/hinting/stop"),
    ("PUT", "/boot-source"),
    ("PUT", "/cpu-config"),
    ("PUT", "/drives/{drive_id}"),
    ("PATCH", "/drives/{drive_id}"),
    ("PUT", "/pmem/{id}"),
    ("PATCH", "/pmem/{id}"),
    ("PUT", "/logger"),
    ("GET", "/machine-config"),
    ("PUT", "/machine-config"),
    ("PATCH", "/machine-config"),
    ("PUT", "/metrics"),
    ("PUT", "/mmds"),
    ("PATCH", "/mmds"),
    ("GET", "/mmds"),
    ("PUT", "/mmds/config"),
    ("PUT", "/entropy"),
    ("PUT", "/serial"),
    ("PUT", "/hotplug/memory"),
    ("PATCH", "/hotplug/memory"),
    ("GET", "/hotplug/memory"),
    ("PUT", "/network-interfaces/{iface_id}"),
    ("PATCH", "/network-interfaces/{iface_id}"),
    ("PUT", "/snapshot/create"),
    ("PUT", "/snapshot/load"),
    ("GET", "/version"),
    ("PATCH", "/vm"),
    ("GET", "/vm/config"),
    ("PUT", "/vsock"),
];

/// Whether `value` has `shape`; the first mismatch, named by its JSON path, otherwise.
pub fn check_shape(value: &serde_json::Value, shape: &Shape, at: &str) -> Result<(), String> {
    use serde_json::Value;
    let wrong = |expected: &str| Err(format!("{at}: expected {expected}, got {value}"));
    match (shape, value) {
        (Shape::String, Value::String(_)) => Ok(()),
        (Shape::Integer, Value::Number(n)) if n.is_u64() || n.is_i64() => Ok(()),
        (Shape::Boolean, Value::Bool(_)) => Ok(()),
        (Shape::OneOf(values), Value::String(s)) if values.contains(&s.as_str()) => Ok(()),
        (Shape::AnyObject, Value::Object(_)) => Ok(()),
        (Shape::ArrayOf(item), Value::Array(items)) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check_shape(v, item, &format!("{at}[{i}]"))),
        (Shape::Object(fields), Value::Object(map)) => fields.iter().try_for_each(|f| {
            let here = format!("{at}.{}", f.name);
            match map.get(f.name) {
                None | Some(Value::Null) if f.required => {
                    Err(format!("{here}: required by the spec, missing"))
                }
                None | Some(Value::Null) => Ok(()),
                Some(v) => check_shape(v, &f.shape, &here),
            }
        }),
        (Shape::String, _) => wrong("a string"),
        (Shape::Integer, _) => wrong("an integer"),
        (Shape::Boolean, _) => wrong("a boolean"),
        (Shape::OneOf(values), _) => wrong(&format!("one of {values:?}")),
        (Shape::AnyObject | Shape::Object(_), _) => wrong("an object"),
        (Shape::ArrayOf(_), _) => wrong("an array"),
    }
}
