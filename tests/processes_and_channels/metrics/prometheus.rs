// SPDX-License-Identifier: MPL-2.0

// A Prometheus server of the test's own (Debian's `prometheus`: its own
// folder, a free loopback port, scraping every second), asked through its
// HTTP API; and a plain HTTP/1.0 GET, which is all the exporter and the
// API need.

use crate::common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// Whether `program --version` runs.
pub fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// A folder of the test's, removed with everything in it on drop.
pub struct TempFolder(pub PathBuf);

impl TempFolder {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cudaipc-{tag}-{:x}",
            cudaipc_channel::shm::random_u64()
        ));
        std::fs::create_dir(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port nobody listened on a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:`port`: the status and the body.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP status line: {head}"));
    Ok((status, body.to_owned()))
}

/// `text` as a URL's query value.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One sample of an instant vector: its labels and its value.
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: serde_json::Map<String, Value>,
    pub value: f64,
}

impl Series {
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// An alert rule as Prometheus loaded it.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub query: String,
    /// `ok` once it evaluated without error.
    pub health: String,
}

/// Stopped (SIGINT, as every `Launch` on drop) before its folder goes:
/// fields drop in order.
pub struct Prometheus {
    pub port: u16,
    server: Option<Launch>,
    _folder: TempFolder,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (host:port) every second and
    /// evaluating `rules` (a rules file) every second; returns once it is
    /// ready.
    pub fn start(target: &str, rules: &Path) -> Self {
        let folder = TempFolder::new("prometheus");
        let config = folder.0.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: cudaipc\n    static_configs:\n      - targets: ['{target}']\n",
                rules.display()
            ),
        )
        .unwrap();
        let port = free_port();
        let args = [
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", folder.0.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--log.level=warn".to_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = start_program(Path::new("prometheus"), &args, &[]);
        let mut prometheus = Self {
            port,
            server: Some(server),
            _folder: folder,
        };
        wait_until(Duration::from_secs(30), "Prometheus is ready", || {
            prometheus.assert_running();
            http_get(port, "/-/ready").is_ok_and(|(status, _)| status == 200)
        });
        prometheus
    }

    fn assert_running(&mut self) {
        if let Some(server) = self.server.as_mut()
            && let Ok(Some(status)) = server.child.try_wait()
        {
            let stderr = self.server.take().unwrap().finish(Duration::from_secs(5));
            panic!("prometheus ended ({status}): {}", stderr.stderr);
        }
    }

    /// `GET /api/v1/<path>`: its `data`, once Prometheus said `success`.
    pub fn api(&self, path: &str) -> Value {
        let (status, body) = http_get(self.port, &format!("/api/v1/{path}"))
            .unwrap_or_else(|e| panic!("Prometheus answers {path}: {e}"));
        let answer: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {status} {body}"));
        assert_eq!(answer["status"], "success", "{path}: {status} {body}");
        answer["data"].clone()
    }

    /// The instant vector `expr` evaluates to now.
    pub fn query(&self, expr: &str) -> Vec<Series> {
        let data = self.api(&format!("query?query={}", url_encoded(expr)));
        assert_eq!(data["resultType"], "vector", "{expr}: {data}");
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| Series {
                labels: s["metric"].as_object().cloned().unwrap_or_default(),
                value: s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{expr}: a value in {s}")),
            })
            .collect()
    }

    /// The value of `expr`'s only series.
    pub fn value(&self, expr: &str) -> f64 {
        let result = self.query(expr);
        assert_eq!(result.len(), 1, "one series for {expr}: {result:?}");
        result[0].value
    }

    /// Every value of `expr`'s series over the last `seconds`, a second
    /// apart.
    pub fn range_values(&self, expr: &str, seconds: u64) -> Vec<f64> {
        let end = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let data = self.api(&format!(
            "query_range?query={}&start={}&end={end}&step=1",
            url_encoded(expr),
            end - seconds
        ));
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
            .map(|point| point[1].as_str().and_then(|v| v.parse().ok()).unwrap())
            .collect()
    }

    /// The alert rules it loaded.
    pub fn alert_rules(&self) -> Vec<Rule> {
        let data = self.api("rules");
        data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["type"] == "alerting")
            .map(|r| {
                let text = |key: &str| r[key].as_str().unwrap_or_default().to_owned();
                Rule {
                    name: text("name"),
                    query: text("query"),
                    health: text("health"),
                }
            })
            .collect()
    }

    /// Waits until `expr` has a series, failing with `what` after `limit`;
    /// its series then.
    pub fn wait_for(&mut self, limit: Duration, what: &str, expr: &str) -> Vec<Series> {
        let mut result = Vec::new();
        wait_until(limit, &format!("{what}: {expr}"), || {
            self.assert_running();
            result = self.query(expr);
            if result.is_empty() {
                std::thread::sleep(Duration::from_millis(200));
            }
            !result.is_empty()
        });
        result
    }
}
