//! What the Redis runners share for their tables (included by path from
//! `examples/redis_coalesce.rs` and `examples/redis_lease.rs`): medians
//! over rounds, and one row of a side-by-side table.

/// The median of `xs` (NaN for none).
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One row: `name`, the median checks/s one call per check (`off`) and
/// the other way (`on`), the median of the rounds' ratios, and the median
/// round trips per check each way; each round a (checks/s, round trips
/// per check) pair, the two ways' rounds in the same order.
pub fn row(name: &str, off: &[(f64, f64)], on: &[(f64, f64)]) -> String {
    let rate = |xs: &[(f64, f64)]| median(xs.iter().map(|c| c.0).collect());
    let trips = |xs: &[(f64, f64)]| median(xs.iter().map(|c| c.1).collect());
    let ratios = on.iter().zip(off).map(|(on, off)| on.0 / off.0).collect();
    format!(
        "| {name} | {:.0} | {:.0} | {:.2} | {:.5} / {:.5} |",
        rate(off),
        rate(on),
        median(ratios),
        trips(off),
        trips(on)
    )
}
