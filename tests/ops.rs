//! Every file under `ops/` parses, and every `loopguard_*` metric it names is one the
//! crate publishes (a name constant in `src/emit/mod.rs`; `_bucket`, `_sum` and `_count`
//! only on histograms) or a series recorded by a rule in `ops/prometheus/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The published names, and which of them are histograms, read from the crate's file of
/// metric name constants.
fn published() -> (BTreeSet<String>, BTreeSet<String>) {
    let path = root().join("src/emit/mod.rs");
    let source = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the metric name constants live in {path:?}: {e}"));
    let mut consts = Vec::new();
    for line in source.lines() {
        let Some(rest) = line.trim().strip_prefix("pub(crate) const ") else {
            continue;
        };
        let Some((name, value)) = rest.split_once(": &str = \"") else {
            continue;
        };
        let value = value.trim_end_matches("\";");
        if value.starts_with("loopguard_") {
            consts.push((name.to_string(), value.to_string()));
        }
    }
    let mut histograms = BTreeSet::new();
    for (_, after) in source
        .match_indices("describe_histogram!(")
        .map(|(i, _)| source.split_at(i))
    {
        let args = &after["describe_histogram!(".len()..];
        let ident: String = args
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let (_, value) = consts
            .iter()
            .find(|(name, _)| *name == ident)
            .unwrap_or_else(|| panic!("describe_histogram!({ident}) names no metric constant"));
        histograms.insert(value.clone());
    }
    let names = consts.into_iter().map(|(_, value)| value).collect();
    (names, histograms)
}

/// Whether `c` can be part of a Prometheus metric name (recorded names hold colons).
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Every metric name in `text` that holds `loopguard_`: the crate's own names, and
/// recorded ones such as `instance_pool:loopguard_pool_offered_load:rate2m`.
fn metric_tokens(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("loopguard_") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let start = text[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| name_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let token: String = text[start..]
            .chars()
            .take_while(|c| name_char(*c))
            .collect();
        // A colon that ends a word (`loopguard_pool:` in prose) is not part of a name.
        found.insert(token.trim_matches(':').to_string());
    }
    found
}

/// The series recorded by the rules under `ops/prometheus/` (`record:` fields).
fn recorded() -> BTreeSet<String> {
    let mut all = Vec::new();
    files(&root().join("ops/prometheus"), &mut all);
    let mut names = BTreeSet::new();
    for path in all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(path).unwrap();
        for line in text.lines() {
            if let Some(name) = line.trim().trim_start_matches("- ").strip_prefix("record:") {
                names.insert(name.trim().to_string());
            }
        }
    }
    names
}

/// The query strings of a JSON document: every string under an `expr` or `query` key.
fn json_queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => json_queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| json_queries(v, out)),
        _ => {}
    }
}

/// The values of the fields of a YAML document that hold PromQL or series names (`expr`,
/// `query`, `record`, and promtool tests' `series` and `labels`), block scalars included.
fn yaml_queries(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let field = line
            .trim_start()
            .trim_start_matches("- ")
            .split_once(':')
            .filter(|(key, _)| matches!(*key, "expr" | "query" | "record" | "series" | "labels"));
        i += 1;
        let Some((_, value)) = field else { continue };
        let value = value.trim();
        if value.starts_with('|') || value.starts_with('>') {
            let mut block = String::new();
            while i < lines.len()
                && (lines[i].trim().is_empty()
                    || lines[i].len() - lines[i].trim_start().len() > indent)
            {
                block.push_str(lines[i].trim());
                block.push('\n');
                i += 1;
            }
            out.push(block);
        } else {
            out.push(value.trim_matches(|c| c == '"' || c == '\'').to_string());
        }
    }
    out
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_metric_queried_under_ops_is_published_by_the_crate() {
    let (names, histograms) = published();
    assert!(names.contains("loopguard_pool_demand_avg"));
    assert!(histograms.contains("loopguard_pool_job_seconds"));
    let recorded = recorded();
    assert!(recorded.contains("instance_pool:loopguard_pool_offered_load:rate2m"));
    let published = |token: &str| {
        names.contains(token)
            || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                token
                    .strip_suffix(suffix)
                    .is_some_and(|base| histograms.contains(base))
            })
    };
    // A recorded series is built only from published ones (checked on its rule's `expr`).
    let known = |token: &str| published(token) || recorded.contains(token);

    let mut all = Vec::new();
    files(&root().join("ops"), &mut all);
    all.sort();
    assert!(
        all.len() >= 5,
        "ops/ holds a dashboard, alerts and Kubernetes files: {all:?}"
    );
    let mut queried_anywhere = BTreeSet::new();
    for path in &all {
        let text = std::fs::read_to_string(path).unwrap();
        let shown = path.strip_prefix(root()).unwrap().display().to_string();
        let queries = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => {
                let doc: serde_json::Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{shown} is not JSON: {e}"));
                let mut queries = Vec::new();
                json_queries(&doc, &mut queries);
                queries
            }
            Some("yaml" | "yml") => yaml_queries(&text),
            // Prose and proxy configurations: no queries, but their tokens are checked below.
            Some("md" | "cfg") => Vec::new(),
            _ => panic!("{shown}: unexpected file type under ops/"),
        };
        for query in &queries {
            for token in metric_tokens(query) {
                assert!(
                    known(&token),
                    "{shown} queries `{token}`, which the crate does not publish"
                );
                queried_anywhere.insert(token);
            }
        }
        // Prose, comments and annotations name only real series too.
        for token in metric_tokens(&text) {
            assert!(
                known(&token),
                "{shown} mentions `{token}`, which the crate does not publish"
            );
        }
    }
    for required in [
        "loopguard_pool_capacity",
        "loopguard_pool_rejected_total",
        "loopguard_pool_job_seconds_sum",
        "loopguard_pool_job_seconds_count",
        "loopguard_orphaned_failures_total",
        "loopguard_pool_stuck_jobs_total",
        "loopguard_pool_oldest_job_seconds",
        "loopguard_pool_demand_avg",
        "loopguard_refresh_runs_total",
        "loopguard_operation_duration_seconds_count",
        "instance_pool:loopguard_pool_offered_load:rate2m",
    ] {
        assert!(
            queried_anywhere.contains(required),
            "ops/ never queries {required}"
        );
    }
}

#[test]
fn the_yaml_extractor_reads_inline_and_block_fields() {
    let text = "rules:\n  - alert: A\n    expr: |\n      rate(loopguard_a[5m])\n        > 1\n    for: 5m\n  - query: \"loopguard_b\"\n";
    let queries = yaml_queries(text);
    assert_eq!(
        queries,
        vec![
            "rate(loopguard_a[5m])\n> 1\n".to_string(),
            "loopguard_b".to_string()
        ]
    );
    assert_eq!(
        metric_tokens("x_loopguard_no + loopguard_yes_bucket / a:loopguard_b:rate2m loopguard_c:"),
        BTreeSet::from([
            "a:loopguard_b:rate2m".to_string(),
            "loopguard_c".to_string(),
            "loopguard_yes_bucket".to_string(),
        ])
    );
}
