//! Reading Prometheus's text format back, for the suites that check the
//! `metrics` feature's series through `metrics-exporter-prometheus`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's recorder, installed once for all the tests of a suite
/// (each test names its limiters apart).
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("the suite's one recorder")
    })
}

/// Every sample in `text`: name, labels, value.
pub fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let value: f64 = value.parse().expect("a number");
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, rest)) => {
                    let rest = rest.strip_suffix('}').expect("labels end with }");
                    let labels = rest
                        .split(',')
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) = pair.split_once('=').expect("key=value");
                            (key.to_owned(), value.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            (name, labels, value)
        })
        .collect()
}

/// The value of the one sample of `name` whose labels are exactly
/// `labels`, if `text` has it.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let found: Vec<f64> = samples(text)
        .into_iter()
        .filter(|(n, l, _)| n == name && *l == want)
        .map(|(_, _, v)| v)
        .collect();
    assert!(
        found.len() <= 1,
        "{name}{labels:?} appears {} times",
        found.len()
    );
    found.first().copied()
}

/// Every sample of `name` whose `limiter` label is `limiter`.
#[allow(dead_code)] // Used by some suites only.
pub fn series_of(text: &str, name: &str, limiter: &str) -> Vec<BTreeMap<String, String>> {
    samples(text)
        .into_iter()
        .filter(|(n, l, _)| n == name && l.get("limiter").map(String::as_str) == Some(limiter))
        .map(|(_, l, _)| l)
        .collect()
}
