// SPDX-License-Identifier: MPL-2.0

// What the metrics test reads of docs/: the Grafana dashboard's PromQL,
// the alert rules (checked by promtool, and given short `for:` durations so
// that they fire within the test) and the metrics page's table.

use crate::common::*;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::prometheus::TempFolder;

pub const DASHBOARD: &str = "docs/dashboards/cudaipc-grafana.json";
pub const ALERT_RULES: &str = "docs/dashboards/cudaipc-alerts.yml";

/// The rules file as shipped passes `promtool check rules`.
pub fn assert_promtool_passes_the_rules() {
    let check = Command::new("promtool")
        .args(["check", "rules"])
        .arg(repo_file(ALERT_RULES))
        .output()
        .expect("promtool comes with prometheus");
    assert!(check.status.success(), "promtool check rules: {check:?}");
}

/// The alert rules file with every `for:` cut to 1 s, in `folder`.
pub fn rules_firing_at_once(folder: &TempFolder) -> PathBuf {
    let text = std::fs::read_to_string(repo_file(ALERT_RULES)).unwrap();
    let mut cut = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            match line.trim_start().starts_with("for:") {
                true => {
                    cut += 1;
                    format!("{}for: 1s", &line[..indent])
                }
                false => line.to_owned(),
            }
        })
        .collect();
    assert!(cut > 0, "the rules have `for:` durations");
    let path = folder.0.join("rules.yml");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo_file(DASHBOARD)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// The PromQL of every panel of the dashboard, `(panel title, expr)`, with
/// its variables replaced: `channels` (a regular expression) for
/// `$channel`, `window` for `$__rate_interval`.
pub fn dashboard_queries(channels: &str, window: &str) -> Vec<(String, String)> {
    let dashboard = dashboard();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    let mut queries = Vec::new();
    while let Some(panel) = panels.pop() {
        // A row's panels are inside it.
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let expr = expr
                .replace("$__rate_interval", window)
                .replace("$channel", channels);
            assert!(!expr.contains('$'), "a variable the test knows: {expr}");
            queries.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    assert!(queries.len() >= 8, "the dashboard's panels: {queries:?}");
    queries
}

/// The dashboard's channel variable, `label_values(METRIC, LABEL)`:
/// `(METRIC, LABEL)`.
pub fn channel_variable() -> (String, String) {
    let dashboard = dashboard();
    let variable = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "channel")
        .expect("a channel variable");
    let query = variable["definition"].as_str().unwrap();
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("label_values(METRIC, LABEL): {query}"));
    let (metric, label) = inner.split_once(',').unwrap();
    (metric.trim().to_owned(), label.trim().to_owned())
}

/// Every family of the exporter's page `metrics` is in docs/metrics.md,
/// with its type on its line.
pub fn assert_documented(metrics: &str) {
    let docs = std::fs::read_to_string(repo_file("docs/metrics.md")).unwrap();
    let families: Vec<(&str, &str)> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert!(families.len() >= 20, "{metrics}");
    for (name, kind) in families {
        let line = docs
            .lines()
            .find(|l| l.contains(&format!("`{name}`")))
            .unwrap_or_else(|| panic!("docs/metrics.md lists {name}"));
        assert!(
            line.contains(&format!("| {kind} |")),
            "docs/metrics.md: {name} is a {kind}: {line}"
        );
    }
}
