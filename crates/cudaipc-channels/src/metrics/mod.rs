// SPDX-License-Identifier: MPL-2.0

//! `cudaipc-channels serve-metrics`: what `watch` shows, as a Prometheus
//! exporter. A thread samples the channels every interval (sampler.rs);
//! each scrape of `/metrics` encodes the latest sample (families.rs) in the
//! Prometheus text format. Loopback by default: the metrics name channels,
//! pids and caps, and the server has no authentication.

mod caps;
mod families;
mod sampler;

use std::net::{SocketAddr, TcpListener};
use std::str::FromStr;
use std::time::Duration;

use crate::channels as directory;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use tiny_http::{Header, Method, Request, Response, Server};

use crate::interrupt::{end_on_interrupt, interrupted};

pub const USAGE: &str =
    "cudaipc-channels serve-metrics [--listen ADDRESS:PORT] [--interval SECONDS]";

const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

fn help() -> String {
    format!(
        "usage: {USAGE}\n\
         Serves every channel's and consumer's frames, rates, misses, lag and slots at\n\
         http://ADDRESS:PORT/metrics in the Prometheus text format, sampled every\n\
         --interval seconds (default 1, 0.1 to 3600) from the control blocks this user may\n\
         read, read only as `watch` reads them. Ctrl-C or SIGTERM ends it (status 0).\n\
         \n\
         --listen ADDRESS:PORT  where to listen; default {DEFAULT_LISTEN} (port 0: a free port,\n\
         \x20                      printed at start). Loopback unless you choose otherwise:\n\
         \x20                      any other address (0.0.0.0, [::], a LAN address) shows\n\
         \x20                      channel names, pids and caps to whoever reaches the port,\n\
         \x20                      with no authentication and no TLS.\n\
         \n\
         Channels are files in {} (CUDAIPC_SHM_DIR overrides it). The metrics, a\n\
         Grafana dashboard and alert rules: docs/metrics.md.\n\
         Exit status: 0 when stopped, 1 when it cannot listen or serve, 2 for bad arguments.",
        directory::shm_dir().display()
    )
}

struct Options {
    listen: SocketAddr,
    interval: Duration,
}

/// `Ok(None)`: help was asked for.
fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut options = Options {
        listen: listen_address(DEFAULT_LISTEN)?,
        interval: Duration::from_secs(1),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => {
                let value = args.next().ok_or("--listen needs an ADDRESS:PORT")?;
                options.listen = listen_address(value)?;
            }
            "--interval" => {
                let value = args.next().ok_or("--interval needs a number of seconds")?;
                let seconds: f64 = value
                    .parse()
                    .ok()
                    .filter(|s: &f64| (0.1..=3600.0).contains(s))
                    .ok_or_else(|| format!("--interval {value:?}: seconds from 0.1 to 3600"))?;
                options.interval = Duration::from_secs_f64(seconds);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(options))
}

/// An IP address and port; `localhost:PORT` is 127.0.0.1 (no name is
/// looked up: a name that resolves elsewhere would leave loopback unseen).
fn listen_address(value: &str) -> Result<SocketAddr, String> {
    let literal = match value.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => value.to_owned(),
    };
    SocketAddr::from_str(&literal).map_err(|_| {
        format!("--listen {value:?}: not an ADDRESS:PORT such as 127.0.0.1:9464 or [::1]:9464")
    })
}

/// Why a listen failed, in words a user can act on.
fn listen_error(address: SocketAddr, e: &std::io::Error) -> String {
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            ": another program (another exporter?) listens on that port; choose another with --listen"
        }
        std::io::ErrorKind::AddrNotAvailable => ": no interface of this host has that address",
        std::io::ErrorKind::PermissionDenied => {
            ": ports below 1024 need privileges; choose another with --listen"
        }
        _ => "",
    };
    format!("cannot listen on {address}: {e}{hint}")
}

pub fn run(args: &[String]) -> i32 {
    let options = match parse(args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{}", help());
            return 0;
        }
        Err(e) => {
            eprintln!("{e}\nusage: {USAGE}");
            return 2;
        }
    };
    let listener = match TcpListener::bind(options.listen) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("{}", listen_error(options.listen, &e));
            return 1;
        }
    };
    // Port 0 became a real one.
    let address = listener.local_addr().unwrap_or(options.listen);
    let server = match Server::from_listener(listener, None) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("cannot serve on {address}: {e}");
            return 1;
        }
    };
    end_on_interrupt();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(families::ChannelCollector(sampler::start(
        options.interval,
    ))));
    // The first line says where: with port 0, the only way to know.
    println!(
        "serving the metrics of the channels in {} at http://{address}/metrics",
        directory::shm_dir().display()
    );
    if !address.ip().is_loopback() {
        eprintln!(
            "note: {address} is not a loopback address: whoever reaches this port reads the channels' names, pids and caps (no authentication, no TLS)"
        );
    }
    while !interrupted() {
        match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(request)) => respond(&registry, request),
            Ok(None) => {}
            Err(e) => {
                eprintln!("cannot serve on {address}: {e}");
                return 1;
            }
        }
    }
    0
}

fn content_type(value: &'static str) -> Header {
    Header::from_bytes(&b"Content-Type"[..], value.as_bytes()).expect("a constant, valid header")
}

fn respond(registry: &Registry, request: Request) {
    let path = request.url().split('?').next().unwrap_or_default();
    let response = match (request.method(), path) {
        (Method::Get | Method::Head, "/metrics") => {
            let mut text = String::new();
            match prometheus_text::encode(&mut text, registry) {
                Ok(()) => Response::from_string(text)
                    .with_header(content_type(prometheus_text::CONTENT_TYPE)),
                Err(_) => Response::from_string("cannot encode the metrics\n").with_status_code(500),
            }
        }
        (Method::Get | Method::Head, "/") => Response::from_string(
            "<html><body><h1>cudaipc channels</h1><p><a href=\"/metrics\">metrics</a></p></body></html>\n",
        )
        .with_header(content_type("text/html; charset=utf-8")),
        (Method::Get | Method::Head, _) => {
            Response::from_string("not found: the metrics are at /metrics\n").with_status_code(404)
        }
        _ => Response::from_string("only GET and HEAD\n").with_status_code(405),
    };
    // A scraper that went away gets nothing more: nothing to do about it.
    let _ = request.respond(response);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            listen_address("localhost:9464"),
            Ok("127.0.0.1:9464".parse().unwrap())
        );
        assert_eq!(listen_address("[::1]:0"), Ok("[::1]:0".parse().unwrap()));
        for bad in ["127.0.0.1", "example.com:9464", "127.0.0.1:99999", ""] {
            assert!(listen_address(bad).is_err(), "{bad}");
        }
    }
}
