//! Reading Prometheus text expositions, to compare what two registries encode (the
//! `metrics` facade's recorder and the prometheus-client collector): samples by series,
//! families' help and type.

use std::collections::{BTreeMap, BTreeSet};

/// A sample line's series: its name and its labels, sorted, `le` as a number.
pub fn series(line: &str) -> (String, BTreeSet<(String, String)>) {
    let (name, labels) = match line.split_once('{') {
        Some((name, rest)) => (name, rest.rsplit_once('}').unwrap().0),
        None => (line.split_once(' ').unwrap().0, ""),
    };
    let labels = labels
        .split(',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap();
            let value = value.trim_matches('"');
            let value = match key {
                "le" if value == "+Inf" => "inf".to_string(),
                "le" => value.parse::<f64>().unwrap().to_string(),
                _ => value.to_string(),
            };
            (key.to_string(), value)
        })
        .collect();
    (name.to_string(), labels)
}

/// Samples by series.
pub type Samples = BTreeMap<(String, BTreeSet<(String, String)>), f64>;

/// Every `loopguard_` sample labelled `key="value"` in `text`, with its value.
pub fn samples(text: &str, key: &str, value: &str) -> Samples {
    let label = (key.to_string(), value.to_string());
    text.lines()
        .filter(|line| line.starts_with("loopguard_"))
        .map(|line| {
            let value = line.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap();
            (series(line), value)
        })
        .filter(|((_, labels), _)| labels.contains(&label))
        .collect()
}

/// Asserts that both registries have the same series with the same values (a histogram's
/// `_sum` within 1e-6: one adds `f64`s, the other nanoseconds).
#[track_caller]
pub fn assert_same_samples(theirs: &Samples, mine: &Samples, texts: (&str, &str)) {
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        mine.keys().collect::<Vec<_>>(),
        "facade:\n{}\nprometheus-client:\n{}",
        texts.0,
        texts.1
    );
    for (key, theirs) in theirs {
        let mine = mine[key];
        let close = if key.0.ends_with("_sum") {
            (mine - theirs).abs() < 1e-6
        } else {
            mine == *theirs
        };
        assert!(close, "{key:?}: facade {theirs}, prometheus-client {mine}");
    }
}

/// Each `loopguard_` family's help text, named by its samples' stem (`_total` stripped:
/// OpenMetrics names a counter family without it, the Prometheus text format with it).
pub fn helps(text: &str) -> BTreeSet<(String, String)> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# HELP loopguard_"))
        .map(|rest| {
            let (name, help) = rest.split_once(' ').unwrap();
            let name = name.strip_suffix("_total").unwrap_or(name);
            (format!("loopguard_{name}"), help.to_string())
        })
        .collect()
}

/// Each `loopguard_` family's type, named as in [`helps`].
pub fn types(text: &str) -> BTreeSet<(String, String)> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE loopguard_"))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').unwrap();
            let name = name.strip_suffix("_total").unwrap_or(name);
            (format!("loopguard_{name}"), kind.to_string())
        })
        .collect()
}
