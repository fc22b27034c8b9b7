// SPDX-License-Identifier: MPL-2.0

// Probes of processes (/proc) and of channels (/dev/shm or
// $CUDAIPC_SHM_DIR) that tests read from outside.

use std::time::{Duration, Instant};

/// What each thread of a process is doing (state and kernel wait channel),
/// for the message of a test that found it stuck.
pub fn proc_threads(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let comm = read("comm");
        let state = state_of(&read("stat"));
        out.push(format!(
            "{}:{} {} {}",
            task.file_name().to_string_lossy(),
            comm.trim(),
            state,
            read("wchan")
        ));
    }
    out.join("; ")
}

/// The state letter of a process (/proc/PID/stat: `R`, `S`, `T` stopped
/// ...), empty once it is gone.
pub fn proc_state(pid: u32) -> String {
    state_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// The state field of a stat line: the first after the command's closing
/// parenthesis (the command itself may hold any character).
fn state_of(stat: &str) -> String {
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

/// Open file descriptors of a process.
pub fn proc_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of a process, in KiB.
pub fn proc_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The memory mappings of a process (/proc/PID/maps).
pub fn proc_maps(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

/// Waits until the channel's control file exists.
pub fn wait_for_channel(channel: &str, limit: Duration) -> bool {
    let path = cudaipc_channel::shm::control_path(channel);
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Waits until `n` consumers wait for a producer on `channel` (they have
/// started and announced themselves), so a producer started now owes them
/// every frame from the first. Consumers started this way wait longer than
/// `limit` (`connect-timeout=120000`): under emulation their starts can take
/// tens of seconds, and the first must not give up before the last is there.
pub fn wait_for_waiting_consumers(channel: &str, n: usize, limit: Duration) {
    assert!(
        consumers_wait(channel, n, limit),
        "{n} consumers did not start waiting on '{channel}' within {limit:?} ({} did)",
        cudaipc_channel::shm::count_live_waiters(channel)
    );
}

/// Whether `n` consumers wait for a producer on `channel` within `limit`.
pub fn consumers_wait(channel: &str, n: usize, limit: Duration) -> bool {
    let start = Instant::now();
    while cudaipc_channel::shm::count_live_waiters(channel) < n {
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Names of the host data files of `channel` in the shm folder.
pub fn data_files(channel: &str) -> Vec<String> {
    let prefix = cudaipc_channel::shm::channel_data_file_prefix(channel);
    let mut names: Vec<String> = std::fs::read_dir(cudaipc_channel::shm::shm_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// Holds the producer liveness lock of a file, as a live producer does, so
/// that consumers take a hand-made control block for a live channel.
pub fn hold_producer_lock(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    if cudaipc_channel::shm::try_lock_byte(&file, cudaipc_channel::layout::PRODUCER_LOCK_BYTE)? {
        Ok(file)
    } else {
        Err(std::io::Error::other("the producer lock is already held"))
    }
}

/// The processes that have `path` open or mapped (any of them can keep an
/// open-file-description lock on it alive), each with its parent and
/// command line: for the message of a test that found a dead process's
/// channel still locked.
pub fn processes_holding(path: &std::path::Path) -> String {
    let Ok(target) = std::fs::canonicalize(path) else {
        return format!("{} is gone", path.display());
    };
    let target_text = target.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let by_fd = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == target));
        let by_map = proc_maps(pid)
            .lines()
            .any(|l| l.ends_with(target_text.as_str()));
        if !by_fd && !by_map {
            continue;
        }
        let read =
            |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
        let ppid = read("stat")
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1).map(str::to_string))
            .unwrap_or_default();
        found.push(format!(
            "pid {pid} (parent {ppid}, {}{}): {}",
            if by_fd { "open" } else { "" },
            if by_map { " mapped" } else { "" },
            read("cmdline").replace('\0', " ").trim()
        ));
    }
    match found.is_empty() {
        true => format!("no process has {} open or mapped", path.display()),
        false => format!("{} is held by: {}", path.display(), found.join("; ")),
    }
}

/// The descriptors of process `pid` that lead to a channel: files under
/// `shm_dir`, sealed memory files (memfd) and sockets bound under `shm_dir`;
/// each as (its target, whether it is close-on-exec).
pub fn channel_descriptors(pid: u32, shm_dir: &std::path::Path) -> Vec<(String, bool)> {
    const O_CLOEXEC: u32 = 0o2_000_000;
    // Unix sockets by inode, with the path they are bound to (an accepted
    // connection shows its listener's).
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let socket_under_dir = |inode: &str| {
        unix.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 8 && f[6] == inode && std::path::Path::new(f[7]).starts_with(shm_dir)
        })
    };
    let mut out = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let text = target.to_string_lossy().into_owned();
        let ours = target.starts_with(shm_dir)
            || text.starts_with("/memfd:")
            || text
                .strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .is_some_and(socket_under_dir);
        if !ours {
            continue;
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .unwrap_or(0);
        out.push((text, flags & O_CLOEXEC != 0));
    }
    out
}
