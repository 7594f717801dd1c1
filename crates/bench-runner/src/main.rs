//! `osprey-bench`: the workload matrix runner (being written).

fn main() {}
