//! Every file under `ops/` parses, and every `loopguard_*` metric it queries is one the
//! crate publishes (a name constant in `src/telemetry.rs`; `_bucket`, `_sum` and `_count`
//! only on histograms).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The published names, and which of them are histograms, read from `src/telemetry.rs`.
fn published() -> (BTreeSet<String>, BTreeSet<String>) {
    let source = std::fs::read_to_string(root().join("src/telemetry.rs")).unwrap();
    let mut consts = Vec::new();
    for line in source.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const ") else {
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

/// Every `loopguard_*` identifier in `text`.
fn metric_tokens(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("loopguard_") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let token: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        found.insert(token);
    }
    found
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

/// The values of `expr:` and `query:` fields of a YAML document, block scalars included.
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
            .filter(|(key, _)| matches!(*key, "expr" | "query"));
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
    let known = |token: &str| {
        names.contains(token)
            || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                token
                    .strip_suffix(suffix)
                    .is_some_and(|base| histograms.contains(base))
            })
    };

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
            _ => panic!("{shown}: unexpected file type under ops/"),
        };
        let mut queried = BTreeSet::new();
        for query in &queries {
            for token in metric_tokens(query) {
                assert!(
                    known(&token),
                    "{shown} queries `{token}`, which the crate does not publish"
                );
                queried.insert(token);
            }
        }
        // Nothing outside a query names a metric that the extraction above missed.
        for token in metric_tokens(&text) {
            assert!(
                queried.contains(&token),
                "{shown} mentions `{token}` outside an expr/query field"
            );
        }
        queried_anywhere.extend(queried);
    }
    for required in [
        "loopguard_pool_in_use",
        "loopguard_pool_rejected_total",
        "loopguard_orphaned_failures_total",
        "loopguard_pool_stuck_jobs_total",
        "loopguard_pool_oldest_job_seconds",
        "loopguard_pool_demand_avg",
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
        metric_tokens("x_loopguard_no + loopguard_yes_bucket"),
        BTreeSet::from(["loopguard_yes_bucket".to_string()])
    );
}
