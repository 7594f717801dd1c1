//! `osprey-bench`: Osprey's workload matrix runner. Boots Osprey's test guest for every run of
//! every point of a matrix (rw × bs × qd × queues × engine × polling × max_batch × irq × hog),
//! runs host fio on the same store as the native reference, and writes `results.csv`,
//! `results.md` and SVG plots. See docs/benchmarks.md.

mod cli;
mod fio;
mod matrix;
mod measure;
mod plots;
mod report;
mod runner;
mod sample;
mod store;
mod units;
mod vm;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let settings = match cli::Cli::parse().settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("osprey-bench: error: {e}");
            return ExitCode::from(2);
        }
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    match runner::run(&settings, &command) {
        Ok(runner::Outcome::AllOk) => ExitCode::SUCCESS,
        Ok(runner::Outcome::SomeFailed) => ExitCode::from(1),
        Ok(runner::Outcome::Interrupted) => ExitCode::from(130),
        Err(e) => {
            eprintln!("osprey-bench: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
