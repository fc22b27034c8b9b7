// SPDX-License-Identifier: MPL-2.0

// A private shm folder for one test, and commands run as another user
// (nobody), for the tests of hostile folders and of credentials.

use std::path::PathBuf;
use std::process::Command;

/// A private shm folder for one test, writable by every user (sticky, as
/// /dev/shm is), removed at the end.
pub struct ShmDir(pub PathBuf);

impl ShmDir {
    pub fn new(tag: &str) -> Self {
        let dir = PathBuf::from("/dev/shm").join(format!(
            "cudaipc-test-{tag}-{:x}",
            cudaipc_channel::shm::random_u64()
        ));
        std::fs::create_dir(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Self(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn env(&self) -> [(&str, &str); 1] {
        [("CUDAIPC_SHM_DIR", self.0.to_str().unwrap())]
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const OTHER_USER: [&str; 4] = [
    "setpriv",
    "--reuid=nobody",
    "--regid=nogroup",
    "--clear-groups",
];

/// Runs a shell command as another user (nobody); `false` when that is
/// impossible here (not root, no setpriv).
pub fn as_other_user(script: &str) -> bool {
    Command::new(OTHER_USER[0])
        .args(&OTHER_USER[1..])
        .args(["sh", "-c", script])
        .status()
        .is_ok_and(|s| s.success())
}

pub fn other_user_or_skip(test: &str) -> bool {
    if as_other_user("true") {
        return true;
    }
    eprintln!("SKIPPED: {test}: cannot run commands as another user (needs root and setpriv)");
    false
}
