//! Naming plot series and point annotations after the dimensions that vary in a matrix (a
//! dimension with one value is left out of every label).

use crate::matrix::{MatrixSpec, Point};
use crate::units::format_size;

impl MatrixSpec {
    /// Which dimensions have more than one value, for picking plot series.
    pub fn varying(&self) -> Varying {
        fn many<T: PartialEq>(v: &[T]) -> bool {
            v.iter().any(|x| *x != v[0])
        }
        Varying {
            rw: many(&self.rw),
            bs: many(&self.bs),
            qd: many(&self.qd),
            queues: many(&self.queues),
            engine: many(&self.engine),
            poll: many(&self.poll),
            max_batch: many(&self.max_batch),
            irq: many(&self.irq),
            hog: many(&self.hog),
        }
    }
}

/// Which dimensions have more than one value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Varying {
    /// rw varies.
    pub rw: bool,
    /// bs varies.
    pub bs: bool,
    /// qd varies.
    pub qd: bool,
    /// queues varies.
    pub queues: bool,
    /// engine varies.
    pub engine: bool,
    /// poll varies.
    pub poll: bool,
    /// max_batch varies.
    pub max_batch: bool,
    /// irq varies.
    pub irq: bool,
    /// hog varies.
    pub hog: bool,
}

/// A dimension of the matrix, for labelling series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// rw.
    Rw,
    /// bs.
    Bs,
    /// qd.
    Qd,
    /// queues.
    Queues,
    /// engine.
    Engine,
    /// poll.
    Poll,
    /// max_batch.
    MaxBatch,
    /// irq.
    Irq,
    /// hog.
    Hog,
}

impl Varying {
    fn has(&self, d: Dim) -> bool {
        match d {
            Dim::Rw => self.rw,
            Dim::Bs => self.bs,
            Dim::Qd => self.qd,
            Dim::Queues => self.queues,
            Dim::Engine => self.engine,
            Dim::Poll => self.poll,
            Dim::MaxBatch => self.max_batch,
            Dim::Irq => self.irq,
            Dim::Hog => self.hog,
        }
    }

    /// A series label for `p`: `lead` dimensions always, then every other varying dimension
    /// except those in `exclude`.
    pub fn series_label(&self, p: &Point, lead: &[Dim], exclude: &[Dim]) -> String {
        let all = [
            Dim::Engine,
            Dim::Poll,
            Dim::Rw,
            Dim::Bs,
            Dim::Qd,
            Dim::Queues,
            Dim::MaxBatch,
            Dim::Irq,
            Dim::Hog,
        ];
        let mut parts: Vec<String> = lead.iter().map(|d| dim_value(p, *d)).collect();
        for d in all {
            if !lead.contains(&d) && !exclude.contains(&d) && self.has(d) {
                parts.push(dim_value(p, d));
            }
        }
        if parts.is_empty() {
            "all".to_string()
        } else {
            parts.join(" ")
        }
    }
}

fn dim_value(p: &Point, d: Dim) -> String {
    match d {
        Dim::Rw => p.rw.to_string(),
        Dim::Bs => format_size(p.bs),
        Dim::Qd => format!("qd{}", p.qd),
        Dim::Queues => format!("q{}", p.queues),
        Dim::Engine => p.engine.to_string(),
        Dim::Poll => format!("poll={}", p.poll),
        Dim::MaxBatch => format!("mb={}", p.max_batch),
        Dim::Irq => format!("irq={}", u8::from(p.irq)),
        Dim::Hog => format!("hog={}", p.hog),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Engine;

    #[test]
    fn labels_name_only_varying_dimensions() {
        let mut s = MatrixSpec::single();
        s.engine = vec![Engine::IoUring, Engine::Sync];
        s.qd = vec![1, 8];
        let v = s.varying();
        let p = s.expand().points[0];
        assert_eq!(v.series_label(&p, &[], &[Dim::Qd]), "IoUring");
        assert_eq!(
            v.series_label(&p, &[Dim::Poll], &[Dim::Qd]),
            "poll=off IoUring"
        );
        assert_eq!(v.series_label(&p, &[], &[Dim::Qd, Dim::Engine]), "all");
    }
}
