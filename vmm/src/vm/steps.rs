//! How long each step of building a VM took ([`StepClock`]), for the `Started …` / `Restored …`
//! log line: where a boot's or a snapshot load's milliseconds go, from one run's log.

use std::fmt;
use std::time::Instant;

/// The time since the previous mark, per named step.
#[derive(Debug)]
pub(crate) struct StepClock {
    last: Instant,
    steps: Vec<(&'static str, f64)>,
}

impl StepClock {
    /// Starts timing at `start`.
    pub(crate) fn new(start: Instant) -> Self {
        Self {
            last: start,
            steps: Vec::with_capacity(12),
        }
    }

    /// Step `name` ended now.
    pub(crate) fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.steps
            .push((name, now.duration_since(self.last).as_secs_f64() * 1e3));
        self.last = now;
    }
}

impl fmt::Display for StepClock {
    /// `name ms, name ms, …` (0.1 ms resolution).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, ms)) in self.steps.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name} {ms:.1}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_is_the_time_since_the_previous_mark() {
        let mut clock = StepClock::new(Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(3));
        clock.mark("first");
        clock.mark("second");
        assert!(clock.steps[0].1 >= 3.0, "{clock}");
        assert!(clock.steps[1].1 < clock.steps[0].1, "{clock}");
        let line = clock.to_string();
        assert!(
            line.starts_with("first ") && line.contains(", second "),
            "{line}"
        );
    }
}
