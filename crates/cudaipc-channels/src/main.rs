// SPDX-License-Identifier: MPL-2.0

//! Lists the cudaipc channels in the shm folder (live or stale, producer
//! pid and user, transport, consumers, caps) and the consumers waiting for
//! a producer, watches their producers and consumers live (or serves that
//! to Prometheus), and removes what dead processes left.
//!
//! usage: cudaipc-channels [list]
//!        cudaipc-channels watch [--once] [--json] [--interval SECONDS] [CHANNEL...]
//!        cudaipc-channels serve-metrics [--listen ADDRESS:PORT] [--interval SECONDS]
//!        cudaipc-channels remove-stale CHANNEL...
//!        cudaipc-channels remove-stale --all
//!
//! It removes only this user's files (another user's are that user's to
//! remove): `--all` is every stale channel and marker of this user, and
//! names the other users' it leaves.

mod interrupt;

/// What the tool reads of the channel crate: the shm folder's channels and
/// waiting consumers, and their producers' and consumers' records.
mod channels {
    pub use cudaipc_channel::directory::{
        ChannelState, list_channels, list_waiters, remove_if_stale, remove_stale_waiters,
    };
    pub use cudaipc_channel::shm::{shm_dir, validate_channel_name};
    pub use cudaipc_channel::watch;
}
mod metrics;
mod watch;

use crate::channels::{self as directory, ChannelState};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        None | Some("list") => list(),
        Some("watch") => watch::run(&args[1..]),
        Some("serve-metrics") => metrics::run(&args[1..]),
        Some("remove-stale") => remove_stale(&args[1..]),
        Some("-h" | "--help") => {
            usage();
            0
        }
        Some(other) => {
            eprintln!("unknown command {other:?}");
            usage();
            2
        }
    };
    std::process::exit(code);
}

fn usage() {
    eprintln!(
        "usage: cudaipc-channels [list]\n       {}\n       {}   (serve-metrics --help says more)\n       cudaipc-channels remove-stale CHANNEL...\n       cudaipc-channels remove-stale --all   (this user's stale channels and markers)\n\
         Channels are files in {} (CUDAIPC_SHM_DIR overrides it).",
        watch::USAGE,
        metrics::USAGE,
        directory::shm_dir().display()
    );
}

fn list() -> i32 {
    let channels = directory::list_channels();
    let waiters = directory::list_waiters(None);
    if channels.is_empty() {
        println!("no channels in {}", directory::shm_dir().display());
    } else {
        println!(
            "{:<24} {:<6} {:>8} {:>6} {:<9} {:>9} {:>5} {:>12}  caps",
            "CHANNEL", "STATE", "PID", "UID", "TRANSPORT", "CONSUMERS", "SLOTS", "SLOT-BYTES"
        );
    }
    for c in &channels {
        let state = match &c.state {
            ChannelState::Live => "live",
            ChannelState::Stale => "stale",
            ChannelState::Unreadable(_) => "?",
        };
        // The owner of the control block is the producer's user: the one
        // who made the channel, whatever it claims.
        let uid = c
            .owner_uid
            .map_or_else(|| "?".to_string(), |u| u.to_string());
        println!(
            "{:<24} {:<6} {:>8} {:>6} {:<9} {:>9} {:>5} {:>12}  {}",
            c.name,
            state,
            c.producer_pid,
            uid,
            c.transport,
            c.consumers,
            c.slot_count,
            c.slot_size,
            c.caps.as_deref().unwrap_or("-")
        );
        if let ChannelState::Unreadable(why) = &c.state {
            println!("    {}: {why}", c.path.display());
        }
    }
    if !waiters.is_empty() {
        // Stale: the consumer was killed while it waited.
        println!("\nconsumers waiting for a producer:");
        println!("{:<24} {:<6} {:>6}  MARKER", "CHANNEL", "STATE", "UID");
        for w in &waiters {
            let state = if w.live { "live" } else { "stale" };
            let path = w.path.display();
            println!("{:<24} {state:<6} {:>6}  {path}", w.channel, w.owner_uid);
        }
    }
    0
}

/// Removes the stale files of the channels named, or with `--all` of every
/// stale channel and waiter marker of this user, saying what it removes and
/// which other users' it leaves (it can remove only this user's files; on a
/// shared host the others are theirs). Without either it only lists what
/// `--all` would remove.
fn remove_stale(args: &[String]) -> i32 {
    let me = cudaipc_channel::shm::effective_uid();
    let (stale_channels, others_channels): (Vec<_>, Vec<_>) = directory::list_channels()
        .into_iter()
        .filter(|c| c.state == ChannelState::Stale)
        .partition(|c| c.owner_uid == Some(me));
    let (stale_waiters, others_waiters): (Vec<_>, Vec<_>) = directory::list_waiters(None)
        .into_iter()
        .filter(|w| !w.live)
        .partition(|w| w.owner_uid == me);
    // What another user's stale files are, and that they stay.
    let others = || {
        for c in &others_channels {
            let uid = c
                .owner_uid
                .map_or_else(|| "?".to_string(), |u| u.to_string());
            println!(
                "left the stale channel '{}' of user {uid}: only that user can remove it",
                c.name
            );
        }
        for w in &others_waiters {
            let path = w.path.display();
            println!(
                "left the stale marker of a consumer of '{}' of user {}: {path}: only that user can remove it",
                w.channel, w.owner_uid
            );
        }
    };
    let names: Vec<String> = match args {
        [] => {
            if stale_channels.is_empty() && stale_waiters.is_empty() {
                println!(
                    "nothing stale of this user (uid {me}) in {}",
                    directory::shm_dir().display()
                );
                others();
                return 0;
            }
            for c in &stale_channels {
                println!("stale channel '{}'", c.name);
            }
            for w in &stale_waiters {
                let path = w.path.display();
                println!("stale marker of a consumer of '{}': {path}", w.channel);
            }
            others();
            eprintln!(
                "remove-stale removes only what it is given: name the channels, or --all for all of this user's above"
            );
            return 2;
        }
        [all] if all == "--all" => {
            let mut names: Vec<String> = stale_channels.into_iter().map(|c| c.name).collect();
            names.extend(stale_waiters.into_iter().map(|w| w.channel));
            names.sort();
            names.dedup();
            if names.is_empty() {
                println!(
                    "nothing stale of this user (uid {me}) in {}",
                    directory::shm_dir().display()
                );
            }
            others();
            names
        }
        names => names.to_vec(),
    };
    let mut failed = 0;
    for name in names {
        if !remove_stale_channel(&name) {
            failed += 1;
        }
    }
    i32::from(failed > 0)
}

/// Removes what dead processes left of `name`: a dead producer's files and
/// the markers of consumers that died waiting. `false`: it failed, or there
/// is nothing of that name.
fn remove_stale_channel(name: &str) -> bool {
    if let Err(e) = crate::channels::validate_channel_name(name) {
        eprintln!("cannot remove channel '{name}': {e}");
        return false;
    }
    let mut found = false;
    let mut ok = true;
    if directory::list_channels().iter().any(|c| c.name == name) {
        found = true;
        match directory::remove_if_stale(name) {
            Ok(true) => println!("removed stale channel '{name}'"),
            Ok(false) => println!("kept channel '{name}': its producer is alive"),
            Err(e) => {
                eprintln!("cannot remove channel '{name}': {e}");
                ok = false;
            }
        }
    }
    for path in directory::remove_stale_waiters(Some(name)) {
        found = true;
        let path = path.display();
        println!("removed the marker of a consumer of '{name}' that died waiting: {path}");
    }
    for w in directory::list_waiters(Some(name)) {
        found = true;
        let path = w.path.display();
        if w.live {
            println!("kept the marker of a consumer still waiting on '{name}': {path}");
        } else {
            eprintln!("cannot remove {path}: it belongs to user {}", w.owner_uid);
            ok = false;
        }
    }
    if !found {
        let dir = directory::shm_dir();
        eprintln!("no channel '{name}' in {}", dir.display());
        return false;
    }
    ok
}
