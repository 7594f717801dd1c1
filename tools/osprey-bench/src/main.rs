//! `osprey-bench`: Osprey's workload matrix runner. Boots a guest (Osprey's test guest, or fio in
//! the Linux kit with `--guest linux`) once per run of every point of a matrix (rw × bs × queue
//! depth × queues × engine × polling × max_batch), runs host fio on the same store as the native
//! reference, and writes `results.csv`, `results.md` and SVG plots. See docs/benchmarks.md.

mod blk_report;
mod cli;
mod fio;
mod guest;
mod guest_linux;
mod guest_test;
mod hog;
mod interrupt;
mod kit_report;
mod machine;
mod matrix;
mod point_run;
mod poll_setting;
mod prereq;
mod progress;
mod report;
mod runner;
mod sample;
mod series;
mod store;
mod summary;
mod units;
mod vm_config;
mod vm_run;
mod vmm_log;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let settings = match cli.settings() {
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
