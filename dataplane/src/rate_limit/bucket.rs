//! The token bucket: a pure function of its configuration, the tokens asked for and the time
//! (ns on any monotonic clock), with Firecracker's meaning of `size`, `one_time_burst` and
//! `refill_time`.
//!
//! The bucket starts full and refills continuously at `size` tokens per `refill_time`, never
//! above `size`. `one_time_burst` tokens are spent first and never come back. A request larger
//! than the bucket passes once the bucket is full and leaves it in debt, which the refill pays
//! off before the next request passes: over time the rate holds whatever the request sizes.
//!
//! Arithmetic is exact: the budget is kept in token·ns (tokens × `refill_time` in ns) in 128-bit
//! integers, so neither slow rates nor runs of years lose or gain tokens.

/// What a bucket is told: `size` tokens per `refill_time_ms`, plus a one-off `one_time_burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketConfig {
    /// Tokens the bucket holds when full (and refills per `refill_time_ms`).
    pub size: u64,
    /// Extra tokens spent before the bucket's own, once.
    pub one_time_burst: u64,
    /// Milliseconds to refill an empty bucket.
    pub refill_time_ms: u64,
}

impl BucketConfig {
    /// Whether the bucket limits anything (Firecracker: a size or refill time of 0 turns it off).
    pub fn is_limited(&self) -> bool {
        self.size > 0 && self.refill_time_ms > 0
    }
}

/// A bucket's fill, as a snapshot saves it: the budget in token·ns (negative while in debt) and
/// what is left of the one-time burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketLevel {
    /// Tokens × `refill_time` in ns.
    pub budget: i128,
    /// One-time burst tokens left.
    pub burst: u64,
}

/// A token bucket (see the module documentation).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    config: BucketConfig,
    /// `refill_time` in ns.
    refill_ns: u128,
    /// Tokens × `refill_ns`; negative while a request larger than the bucket is paid off.
    budget: i128,
    /// `size` × `refill_ns`.
    capacity: i128,
    /// What is left of `one_time_burst`.
    burst: u64,
    /// When `budget` was last brought up to date.
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at time `now_ns`; `None` when `config` limits nothing.
    pub fn new(config: BucketConfig, now_ns: u64) -> Option<Self> {
        if !config.is_limited() {
            return None;
        }
        let refill_ns = u128::from(config.refill_time_ms) * 1_000_000;
        let capacity = u128::from(config.size).saturating_mul(refill_ns);
        let capacity = i128::try_from(capacity).unwrap_or(i128::MAX);
        Some(Self {
            config,
            refill_ns,
            budget: capacity,
            capacity,
            burst: config.one_time_burst,
            last_ns: now_ns,
        })
    }

    /// The configuration.
    pub fn config(&self) -> BucketConfig {
        self.config
    }

    fn refill(&mut self, now_ns: u64) {
        // A clock that went backwards (it cannot, but) adds nothing.
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        if self.budget >= self.capacity {
            return;
        }
        let added = u128::from(elapsed).saturating_mul(u128::from(self.config.size));
        let added = i128::try_from(added).unwrap_or(i128::MAX);
        self.budget = self.budget.saturating_add(added).min(self.capacity);
    }

    /// Takes `tokens` at `now_ns`, or tells how many ns to wait before the same request can
    /// pass (the bucket is unchanged then, burst included).
    pub fn take(&mut self, tokens: u64, now_ns: u64) -> Result<(), u64> {
        let wait = self.wait_for(tokens, now_ns);
        if wait == 0 {
            self.spend(tokens);
            Ok(())
        } else {
            Err(wait)
        }
    }

    /// Ns until `tokens` can be taken (0: now), after refilling to `now_ns`.
    pub fn wait_for(&mut self, tokens: u64, now_ns: u64) -> u64 {
        self.refill(now_ns);
        let from_bucket = tokens.saturating_sub(self.burst);
        if from_bucket == 0 {
            return 0;
        }
        // More than the bucket holds: pass once it is full, then owe the rest.
        let need = self.scaled(from_bucket.min(self.config.size));
        if self.budget >= need {
            return 0;
        }
        let missing = (need - self.budget) as u128;
        // Ceil: after this many ns the refill has added at least `missing`.
        let ns = missing.div_ceil(u128::from(self.config.size));
        u64::try_from(ns).unwrap_or(u64::MAX).max(1)
    }

    /// Spends `tokens` (call only after `wait_for` returned 0 at the same time).
    pub fn spend(&mut self, tokens: u64) {
        let from_burst = tokens.min(self.burst);
        self.burst -= from_burst;
        let rest = self.scaled(tokens - from_burst);
        self.budget = self.budget.saturating_sub(rest);
    }

    fn scaled(&self, tokens: u64) -> i128 {
        i128::try_from(u128::from(tokens).saturating_mul(self.refill_ns)).unwrap_or(i128::MAX)
    }

    /// The bucket's level at `now_ns` (refilled to then), for a snapshot.
    pub fn level(&mut self, now_ns: u64) -> BucketLevel {
        self.refill(now_ns);
        BucketLevel {
            budget: self.budget,
            burst: self.burst,
        }
    }

    /// Sets the level a snapshot saved, as of `now_ns`: the time between the snapshot and now
    /// refills nothing (the guest did not run). Clamped to the bucket's capacity and burst.
    pub fn set_level(&mut self, level: BucketLevel, now_ns: u64) {
        self.budget = level.budget.min(self.capacity);
        self.burst = level.burst.min(self.config.one_time_burst);
        self.last_ns = now_ns;
    }

    /// Tokens available at the last update (burst included; 0 while in debt).
    pub fn tokens(&self) -> u64 {
        let whole = (self.budget.max(0) as u128) / self.refill_ns;
        u64::try_from(whole)
            .unwrap_or(u64::MAX)
            .saturating_add(self.burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_saved_level_carries_over_without_refilling_the_gap() {
        let mut b = bucket(100, 10, 1000);
        b.take(60, 0).expect("burst then bucket");
        let level = b.level(0);
        assert_eq!(b.tokens(), 50);
        // A new bucket, much later (the restore): the same 50 tokens, not a full bucket.
        let mut restored = bucket(100, 10, 1000);
        restored.set_level(level, 5_000 * MS);
        assert_eq!(restored.tokens(), 50);
        assert_eq!(restored.take(51, 5_000 * MS), Err(10 * MS));
        // A level above this bucket's capacity (another config) is clamped.
        let mut small = bucket(10, 0, 1000);
        small.set_level(level, 0);
        assert_eq!(small.tokens(), 10);
    }

    fn bucket(size: u64, burst: u64, refill_ms: u64) -> TokenBucket {
        TokenBucket::new(
            BucketConfig {
                size,
                one_time_burst: burst,
                refill_time_ms: refill_ms,
            },
            0,
        )
        .expect("limited")
    }

    #[test]
    fn size_or_refill_zero_limits_nothing() {
        for (size, refill) in [(0, 100), (100, 0)] {
            let c = BucketConfig {
                size,
                one_time_burst: 5,
                refill_time_ms: refill,
            };
            assert!(TokenBucket::new(c, 0).is_none());
        }
    }

    #[test]
    fn starts_full_then_refills_at_size_per_refill_time() {
        let mut b = bucket(100, 0, 1000);
        assert_eq!(b.tokens(), 100);
        assert_eq!(b.take(100, 0), Ok(()));
        // Empty: one token comes every 10 ms.
        assert_eq!(b.take(1, 0), Err(10 * MS));
        assert_eq!(b.take(1, 9 * MS), Err(MS));
        assert_eq!(b.take(1, 10 * MS), Ok(()));
        // 500 ms later: 50 tokens, not more.
        assert_eq!(b.take(51, 510 * MS), Err(10 * MS));
        assert_eq!(b.take(50, 510 * MS), Ok(()));
        // Never above size, however long it rests.
        b.take(0, 1_000_000 * MS).expect("nothing");
        assert_eq!(b.tokens(), 100);
    }

    #[test]
    fn refill_is_exact_over_many_small_steps() {
        // 3 tokens per 7 ms, asked for one at a time as soon as possible for 7 simulated
        // seconds: exactly 3 per 7 ms, plus the full bucket at the start.
        let mut b = bucket(3, 0, 7);
        let mut now = 0;
        let mut taken = 0;
        while now <= 7000 * MS {
            match b.take(1, now) {
                Ok(()) => taken += 1,
                Err(wait) => now += wait,
            }
        }
        assert_eq!(taken, 3 + 3000);
    }

    #[test]
    fn one_time_burst_is_spent_first_and_once() {
        let mut b = bucket(10, 25, 1000);
        assert_eq!(b.tokens(), 35);
        assert_eq!(b.take(20, 0), Ok(()));
        assert_eq!(
            b.tokens(),
            15,
            "the burst pays first: 5 of it and 10 of the bucket left"
        );
        assert_eq!(b.take(15, 0), Ok(()));
        assert_eq!(b.tokens(), 0);
        // A full refill brings the bucket back, not the burst.
        assert_eq!(b.take(0, 10_000 * MS), Ok(()));
        assert_eq!(b.tokens(), 10);
    }

    #[test]
    fn a_refused_request_changes_nothing() {
        let mut b = bucket(10, 3, 1000);
        assert_eq!(b.take(10, 0), Ok(()));
        assert_eq!(b.tokens(), 3);
        assert!(b.take(8, 0).is_err());
        assert_eq!(b.tokens(), 3, "the burst is not spent by a refusal");
    }

    #[test]
    fn a_request_larger_than_the_bucket_passes_when_full_and_leaves_a_debt() {
        let mut b = bucket(1000, 0, 1000); // 1000 tokens per second
        assert_eq!(b.take(1, 0), Ok(()));
        // 2500 > size: waits until the bucket is full again (1 ms for the one token taken).
        assert_eq!(b.take(2500, 0), Err(MS));
        assert_eq!(b.take(2500, MS), Ok(()));
        assert_eq!(b.tokens(), 0);
        // The 1500 owed are paid off before anything else passes: 1.5 s, then 1 token/ms.
        assert_eq!(b.take(1, MS), Err(1501 * MS));
        assert_eq!(b.take(1, 1502 * MS), Ok(()));
    }

    #[test]
    fn long_runs_and_huge_values_do_not_overflow() {
        // The largest bucket a config can state, and a clock near the end of u64.
        let mut b = bucket(u64::MAX, u64::MAX, u64::MAX);
        assert_eq!(b.take(u64::MAX, u64::MAX - 1), Ok(()));
        assert_eq!(b.take(u64::MAX, u64::MAX), Ok(()));
        assert!(b.take(u64::MAX, u64::MAX).is_err());
        let mut b = bucket(1, 0, 1);
        let late = u64::MAX - 10;
        assert_eq!(b.take(1, 0), Ok(()));
        assert_eq!(
            b.take(1, late),
            Ok(()),
            "a bucket idle for 584 years is full, once"
        );
        assert_eq!(b.tokens(), 0);
        assert_eq!(b.take(1, late), Err(MS));
        // Time going backwards adds nothing and panics nowhere.
        assert!(b.take(1, 5).is_err());
    }
}
