//! The workload matrix: what one point is (rw × bs × qd × queues × engine × polling × max_batch ×
//! irq), parsing each dimension's values, and expanding the lists into points, setting aside the
//! points the test guest cannot run (its 8 MiB data pool; the Linux guest has no such limit).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

pub use crate::poll_setting::PollSetting;
use crate::units::{format_size, parse_size};

/// The test guest's data pool: `bs · qd · queues` must fit.
pub const GUEST_POOL_BYTES: u64 = 8 << 20;

/// A matrix value that does not parse or is out of the guest's range.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MatrixError {
    /// Unknown access pattern.
    #[error("Unknown rw {0:?}: expected randread, randwrite, read or write")]
    Rw(String),
    /// Unknown I/O engine.
    #[error("Unknown engine {0:?}: expected IoUring, LinuxAio, Sync or Null")]
    Engine(String),
    /// Unknown polling configuration.
    #[error(
        "Bad poll config {0:?}: expected off, classic, classic:<window> (e.g. classic:200us) or weighted:<W> (W 1-16)"
    )]
    Poll(String),
    /// A number outside what the guest or Osprey accepts.
    #[error("{what} {value} is out of range ({range})")]
    Range {
        /// Which dimension.
        what: &'static str,
        /// The value given.
        value: u64,
        /// What is allowed.
        range: &'static str,
    },
    /// A size that does not parse.
    #[error(transparent)]
    Units(#[from] crate::units::UnitsError),
}

/// The guest's access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rw {
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
}

impl Rw {
    /// The name both the test guest and fio use.
    pub fn as_str(self) -> &'static str {
        match self {
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::Read => "read",
            Rw::Write => "write",
        }
    }

    /// True for reads.
    pub fn is_read(self) -> bool {
        matches!(self, Rw::RandRead | Rw::Read)
    }
}

impl FromStr for Rw {
    type Err = MatrixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "randread" => Ok(Rw::RandRead),
            "randwrite" => Ok(Rw::RandWrite),
            "read" => Ok(Rw::Read),
            "write" => Ok(Rw::Write),
            _ => Err(MatrixError::Rw(s.to_string())),
        }
    }
}

impl fmt::Display for Rw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Osprey's I/O engines (`drives[].io_engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// io_uring, one ring per queue.
    IoUring,
    /// Linux AIO (io_submit).
    LinuxAio,
    /// preadv/pwritev on the iothread.
    Sync,
    /// Completes at once: Osprey's own overhead.
    Null,
    /// Osprey's default: inline where it will not block, io_uring for the rest.
    Auto,
}

impl Engine {
    /// The config file's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::IoUring => "IoUring",
            Engine::LinuxAio => "LinuxAio",
            Engine::Sync => "Sync",
            Engine::Null => "Null",
            Engine::Auto => "Auto",
        }
    }
}

impl FromStr for Engine {
    type Err = MatrixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s
            .trim()
            .to_ascii_lowercase()
            .replace(['_', '-'], "")
            .as_str()
        {
            "iouring" => Ok(Engine::IoUring),
            "linuxaio" | "aio" | "libaio" => Ok(Engine::LinuxAio),
            "sync" => Ok(Engine::Sync),
            "null" => Ok(Engine::Null),
            "auto" => Ok(Engine::Auto),
            _ => Err(MatrixError::Engine(s.to_string())),
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A block size from the command line: a multiple of 512 in 512 B–1 MiB.
pub fn parse_bs(s: &str) -> Result<u64, MatrixError> {
    let v = parse_size(s)?;
    if !(512..=1 << 20).contains(&v) || v % 512 != 0 {
        return Err(MatrixError::Range {
            what: "bs",
            value: v,
            range: "a multiple of 512 from 512 to 1m",
        });
    }
    Ok(v)
}

/// A queue depth: 1–256.
pub fn parse_qd(s: &str) -> Result<u32, MatrixError> {
    parse_ranged(s, "qd", 1, 256, "1-256")
}

/// A queue count: 1–8 (the test guest's limit).
pub fn parse_queues(s: &str) -> Result<u32, MatrixError> {
    parse_ranged(s, "queues", 1, 8, "1-8")
}

/// `max_batch`: 0–1024 (0 means Osprey's default, 32).
pub fn parse_max_batch(s: &str) -> Result<u32, MatrixError> {
    parse_ranged(s, "max_batch", 0, 1024, "0-1024")
}

/// Guest interrupts: 0 (poll the used rings) or 1 (MSI-X).
pub fn parse_irq(s: &str) -> Result<bool, MatrixError> {
    parse_ranged(s, "irq", 0, 1, "0 or 1").map(|v| v == 1)
}

/// `hog`: 0–64 CPU-bound processes beside the VM.
pub fn parse_hog(s: &str) -> Result<u32, MatrixError> {
    parse_ranged(s, "hog", 0, 64, "0-64")
}

fn parse_ranged(
    s: &str,
    what: &'static str,
    lo: u32,
    hi: u32,
    range: &'static str,
) -> Result<u32, MatrixError> {
    let v = parse_size(s)?;
    if v < u64::from(lo) || v > u64::from(hi) {
        return Err(MatrixError::Range {
            what,
            value: v,
            range,
        });
    }
    // In range of u32 by the check above.
    Ok(v as u32)
}

/// One workload point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Point {
    /// Access pattern.
    pub rw: Rw,
    /// Bytes per request.
    pub bs: u64,
    /// Requests in flight per queue.
    pub qd: u32,
    /// Virtqueues driven (and fio jobs on the host).
    pub queues: u32,
    /// Osprey's engine.
    pub engine: Engine,
    /// The iothread's polling.
    pub poll: PollSetting,
    /// The iothread's `max_batch`.
    pub max_batch: u32,
    /// Guest takes MSI-X interrupts instead of polling the used rings.
    pub irq: bool,
    /// CPU-bound processes running beside the VM (a busy host).
    pub hog: u32,
}

impl Point {
    /// A point with every field away from its default, for the config builders' tests.
    #[cfg(test)]
    pub fn example() -> Point {
        Point {
            rw: Rw::RandWrite,
            bs: 4096,
            qd: 32,
            queues: 2,
            engine: Engine::LinuxAio,
            poll: PollSetting::Weighted(3),
            max_batch: 128,
            irq: false,
            hog: 0,
        }
    }

    /// Bytes of guest buffers this point needs.
    pub fn guest_pool_bytes(&self) -> u64 {
        self.bs * u64::from(self.qd) * u64::from(self.queues)
    }

    /// Short human label: `randread 4k qd32 q1 IoUring poll=classic mb=32`.
    pub fn label(&self) -> String {
        format!(
            "{} {} qd{} q{} {} poll={} mb={}{}{}",
            self.rw,
            format_size(self.bs),
            self.qd,
            self.queues,
            self.engine,
            self.poll,
            self.max_batch,
            if self.irq { " irq" } else { "" },
            if self.hog > 0 {
                format!(" hog={}", self.hog)
            } else {
                String::new()
            }
        )
    }
}

/// The comma lists of every dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixSpec {
    /// Access patterns.
    pub rw: Vec<Rw>,
    /// Block sizes.
    pub bs: Vec<u64>,
    /// Queue depths.
    pub qd: Vec<u32>,
    /// Queue counts.
    pub queues: Vec<u32>,
    /// Engines.
    pub engine: Vec<Engine>,
    /// Polling configurations.
    pub poll: Vec<PollSetting>,
    /// max_batch values.
    pub max_batch: Vec<u32>,
    /// Interrupt modes.
    pub irq: Vec<bool>,
    /// CPU-bound processes beside the VM (0: an idle host).
    pub hog: Vec<u32>,
}

/// A point set aside and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The point.
    pub point: Point,
    /// Why it cannot run.
    pub reason: String,
}

/// The expanded matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    /// Points to run, in run order.
    pub points: Vec<Point>,
    /// Points the guest cannot run.
    pub skipped: Vec<Skipped>,
}

fn dedup<T: PartialEq + Clone>(v: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    for x in v {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    out
}

impl MatrixSpec {
    /// One value per dimension (4 KiB randread QD1, one queue, IoUring, polling off), for tests
    /// to vary.
    #[cfg(test)]
    pub fn single() -> MatrixSpec {
        MatrixSpec {
            rw: vec![Rw::RandRead],
            bs: vec![4096],
            qd: vec![1],
            queues: vec![1],
            engine: vec![Engine::IoUring],
            poll: vec![PollSetting::Off],
            max_batch: vec![32],
            irq: vec![false],
            hog: vec![0],
        }
    }

    /// Every combination, in the order given (outermost rw, innermost hog), duplicates
    /// removed; points over the test guest's 8 MiB pool go to `skipped`. (The runner uses
    /// [`expand_with`](Self::expand_with) and its guest's limit.)
    #[cfg(test)]
    pub fn expand(&self) -> Matrix {
        self.expand_with(Some(GUEST_POOL_BYTES))
    }

    /// [`expand`](Self::expand) with a pool limit of `pool_limit` bytes (None: none).
    pub fn expand_with(&self, pool_limit: Option<u64>) -> Matrix {
        let (rw, bs, qd, queues) = (
            dedup(&self.rw),
            dedup(&self.bs),
            dedup(&self.qd),
            dedup(&self.queues),
        );
        let (engine, poll, max_batch, irq) = (
            dedup(&self.engine),
            dedup(&self.poll),
            dedup(&self.max_batch),
            dedup(&self.irq),
        );
        let hog = dedup(&self.hog);
        let lens = [
            rw.len(),
            bs.len(),
            qd.len(),
            queues.len(),
            engine.len(),
            poll.len(),
            max_batch.len(),
            irq.len(),
            hog.len(),
        ];
        let mut m = Matrix {
            points: Vec::new(),
            skipped: Vec::new(),
        };
        if lens.contains(&0) {
            return m;
        }
        // An odometer over the nine lists, the last one turning fastest.
        let mut i = [0usize; 9];
        loop {
            let point = Point {
                rw: rw[i[0]],
                bs: bs[i[1]],
                qd: qd[i[2]],
                queues: queues[i[3]],
                engine: engine[i[4]],
                poll: poll[i[5]],
                max_batch: max_batch[i[6]],
                irq: irq[i[7]],
                hog: hog[i[8]],
            };
            if let Some(limit) = pool_limit.filter(|l| point.guest_pool_bytes() > *l) {
                m.skipped.push(Skipped {
                    point,
                    reason: format!(
                        "bs·qd·queues = {} > the guest's {} pool",
                        format_size(point.guest_pool_bytes()),
                        crate::units::format_bytes(limit)
                    ),
                });
            } else {
                m.points.push(point);
            }
            let mut d = lens.len();
            loop {
                if d == 0 {
                    return m;
                }
                d -= 1;
                i[d] += 1;
                if i[d] < lens[d] {
                    break;
                }
                i[d] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> MatrixSpec {
        MatrixSpec::single()
    }

    #[test]
    fn parses_every_dimension() {
        assert_eq!("RandWrite".parse(), Ok(Rw::RandWrite));
        assert!("verify".parse::<Rw>().is_err());
        assert_eq!("io_uring".parse(), Ok(Engine::IoUring));
        assert_eq!("LinuxAio".parse(), Ok(Engine::LinuxAio));
        assert_eq!("null".parse(), Ok(Engine::Null));
        assert!("spdk".parse::<Engine>().is_err());
        assert_eq!("off".parse(), Ok(PollSetting::Off));
        assert_eq!("classic".parse(), Ok(PollSetting::Classic(None)));
        assert_eq!(
            "classic:200us".parse(),
            Ok(PollSetting::Classic(Some(200_000)))
        );
        assert_eq!("weighted:4".parse(), Ok(PollSetting::Weighted(4)));
        assert!("weighted:17".parse::<PollSetting>().is_err());
        assert_eq!("adaptive".parse(), Ok(PollSetting::Adaptive));
        assert!("adaptive:3".parse::<PollSetting>().is_err());
        assert!("fast".parse::<PollSetting>().is_err());
        assert_eq!(parse_bs("128k"), Ok(131072));
        assert!(parse_bs("1000").is_err());
        assert!(parse_bs("2m").is_err());
        assert!(parse_qd("0").is_err());
        assert_eq!(parse_qd("256"), Ok(256));
        assert!(parse_queues("9").is_err());
        assert_eq!(parse_max_batch("0"), Ok(0));
        assert_eq!(parse_irq("1"), Ok(true));
        assert_eq!(parse_hog("2"), Ok(2));
        assert!(parse_hog("65").is_err());
    }

    #[test]
    fn expands_the_cross_product_in_order() {
        let mut s = spec();
        s.rw = vec![Rw::RandRead, Rw::RandWrite];
        s.qd = vec![1, 8, 32];
        s.poll = vec![PollSetting::Off, PollSetting::Classic(None)];
        let m = s.expand();
        assert_eq!(m.points.len(), 2 * 3 * 2);
        assert!(m.skipped.is_empty());
        assert_eq!(m.points[0].rw, Rw::RandRead);
        assert_eq!(m.points[0].qd, 1);
        assert_eq!(m.points[1].poll, PollSetting::Classic(None));
        assert_eq!(m.points[2].qd, 8);
        assert_eq!(m.points[6].rw, Rw::RandWrite);
    }

    #[test]
    fn drops_duplicates() {
        let mut s = spec();
        s.qd = vec![1, 1, 8];
        assert_eq!(s.expand().points.len(), 2);
    }

    #[test]
    fn skips_points_over_the_guest_pool() {
        let mut s = spec();
        s.bs = vec![4096, 131072, 1 << 20];
        s.qd = vec![1, 32, 128];
        s.queues = vec![1, 4];
        let m = s.expand();
        for p in &m.points {
            assert!(p.guest_pool_bytes() <= GUEST_POOL_BYTES, "{p:?}");
        }
        for s in &m.skipped {
            assert!(s.point.guest_pool_bytes() > GUEST_POOL_BYTES, "{s:?}");
            assert!(s.reason.contains("8 MiB"));
        }
        assert_eq!(m.points.len() + m.skipped.len(), 3 * 3 * 2);
        // Exactly 8 MiB fits: 128k·64·1 = 8m.
        let mut edge = spec();
        edge.bs = vec![131072];
        edge.qd = vec![64];
        assert_eq!(edge.expand().points.len(), 1);
        edge.qd = vec![65];
        assert_eq!(edge.expand().skipped.len(), 1);
        // Count by hand: bs 4k: all 6 fit. 128k: qd1 q1/q4, qd32 q1 fit (3); 1m: qd1 q1/q4 (2).
        assert_eq!(m.points.len(), 6 + 3 + 2);
        // Without a limit (the Linux guest) nothing is skipped.
        let all = s.expand_with(None);
        assert_eq!((all.points.len(), all.skipped.len()), (3 * 3 * 2, 0));
    }
}
