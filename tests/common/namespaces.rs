// SPDX-License-Identifier: MPL-2.0

// A consumer in other PID and mount namespaces (a container, as far as
// `unshare` makes one) that sees nothing of the producer's /dev/shm but the
// channel's folder, for the descriptor-channel tests (host transport in CI,
// cuda on the GPU host).

use std::path::{Path, PathBuf};

const UNSHARE: [&str; 5] = ["unshare", "--pid", "--mount", "--fork", "--mount-proc"];

/// Inside: the channel's folder bind-mounted at `$INSIDE`, an empty tmpfs
/// over /dev/shm, another PID namespace (checked), and the command run with
/// `CUDAIPC_SHM_DIR` naming the folder.
const SCRIPT: &str = r#"set -e
mount --bind "$CHANNEL_FOLDER" "$INSIDE"
mount -t tmpfs tmpfs /dev/shm
test -z "$(ls /dev/shm)"
test "$(cut -d' ' -f4 /proc/self/stat)" != "$OUTER_PID"
CUDAIPC_SHM_DIR="$INSIDE" exec "$@""#;

/// The command prefix and environment that run a child in other namespaces
/// sharing only `channel_folder`; the mount point goes when dropped.
pub struct OtherNamespaces {
    channel_folder: String,
    inside: PathBuf,
    outer_pid: String,
}

impl OtherNamespaces {
    /// `None`, after a `SKIPPED` line for `test`, where unshare and mount
    /// are not permitted (an unprivileged container).
    pub fn new(test: &str, channel_folder: &Path) -> Option<OtherNamespaces> {
        let permitted = std::process::Command::new(UNSHARE[0])
            .args(&UNSHARE[1..])
            .args(["sh", "-c", "mount -t tmpfs tmpfs /dev/shm"])
            .status()
            .is_ok_and(|s| s.success());
        if !permitted {
            eprintln!("SKIPPED: {test}: unshare and mount are not permitted here");
            return None;
        }
        let inside = std::env::temp_dir().join(format!(
            "cudaipc-chan-{:x}",
            cudaipc_channel::shm::random_u64()
        ));
        std::fs::create_dir(&inside).unwrap();
        Some(OtherNamespaces {
            channel_folder: channel_folder.to_str().unwrap().to_owned(),
            inside,
            outer_pid: std::process::id().to_string(),
        })
    }

    /// The wrapper command for `launch_with`.
    pub fn wrapper(&self) -> Vec<&str> {
        let mut wrapper = UNSHARE.to_vec();
        wrapper.extend(["sh", "-c", SCRIPT, "sh"]);
        wrapper
    }

    /// The environment for `launch_with`.
    pub fn env(&self) -> Vec<(&str, &str)> {
        vec![
            ("CHANNEL_FOLDER", self.channel_folder.as_str()),
            ("INSIDE", self.inside.to_str().unwrap()),
            ("OUTER_PID", self.outer_pid.as_str()),
        ]
    }
}

impl Drop for OtherNamespaces {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.inside);
    }
}
