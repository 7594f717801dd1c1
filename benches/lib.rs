//! Shared set-up for Osprey's criterion benches (being written).
