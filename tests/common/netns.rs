// SPDX-License-Identifier: MPL-2.0

// Two network namespaces joined by a veth pair, removed when dropped: two
// hosts on one machine. Shared, as this one file, by the bridge's tests
// (two_hosts.rs) and its benchmark rows (bench/src/rows/bridge.rs includes
// it by path), which use addresses of their own so that both may run at
// once.

use std::process::{Command, Stdio};

pub struct NamespacePair {
    pub a: String,
    pub b: String,
    /// Host A's end of the veth pair.
    veth_a: String,
}

/// Runs `ip` with `args`; whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl NamespacePair {
    /// Namespaces `{names}-{n}-a` and `-b` joined by veth `{veth}{n}a` /
    /// `{veth}{n}b` (interface names are at most 15 bytes), with host A at
    /// `addresses[0]` and host B at `addresses[1]` (/24), loopback up.
    pub fn new(names: &str, veth: &str, n: u32, addresses: [&str; 2]) -> Result<Self, String> {
        let (veth_a, veth_b) = (format!("{veth}{n}a"), format!("{veth}{n}b"));
        let pair = Self {
            a: format!("{names}-{n}-a"),
            b: format!("{names}-{n}-b"),
            veth_a: veth_a.clone(),
        };
        let made = ip(&["netns", "add", &pair.a])
            && ip(&["netns", "add", &pair.b])
            && ip(&[
                "link", "add", &veth_a, "type", "veth", "peer", "name", &veth_b,
            ])
            && ip(&["link", "set", &veth_a, "netns", &pair.a])
            && ip(&["link", "set", &veth_b, "netns", &pair.b])
            && [
                (&pair.a, &veth_a, addresses[0]),
                (&pair.b, &veth_b, addresses[1]),
            ]
            .iter()
            .all(|(ns, veth, address)| {
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{address}/24"),
                    "dev",
                    veth,
                ]) && ip(&["-n", ns, "link", "set", veth, "up"])
                    && ip(&["-n", ns, "link", "set", "lo", "up"])
            });
        match made {
            true => Ok(pair),
            false => Err("network namespaces cannot be made here (ip netns, as root)".into()),
        }
    }

    /// Shapes host A's side of the link to `mbit` Mbit/s; whether it could.
    #[allow(dead_code)]
    pub fn shape_a(&self, mbit: u32) -> bool {
        let rate = format!("{mbit}mbit");
        let tc = [
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.veth_a,
            "root",
            "tbf",
            "rate",
            &rate,
        ];
        ip(&[
            &["netns", "exec", &self.a][..],
            &tc,
            &["burst", "32kbit", "latency", "400ms"],
        ]
        .concat())
    }

    /// The prefix that runs a command on host `ns`.
    pub fn on<'a>(&'a self, ns: &'a str) -> [&'a str; 4] {
        ["ip", "netns", "exec", ns]
    }
}

impl Drop for NamespacePair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            ip(&["netns", "del", ns]);
        }
    }
}
