//! Contention benchmarks (in progress).
fn main() {}
