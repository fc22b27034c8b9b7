// SPDX-License-Identifier: MPL-2.0

//! Lists the cudaipc channels in the shm folder (live or stale, producer
//! pid and user, transport, consumers, caps) and removes the stale ones.
//!
//! usage: cudaipc-channels [list]
//!        cudaipc-channels remove-stale [CHANNEL...]

use gstcudaipc::channels::{self as directory, ChannelState};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        None | Some("list") => list(),
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
        "usage: cudaipc-channels [list]\n       cudaipc-channels remove-stale [CHANNEL...]\n\
         Channels are files in {} (CUDAIPC_SHM_DIR overrides it).",
        directory::shm_dir().display()
    );
}

fn list() -> i32 {
    let channels = directory::list_channels();
    if channels.is_empty() {
        println!("no channels in {}", directory::shm_dir().display());
        return 0;
    }
    println!(
        "{:<24} {:<6} {:>8} {:>6} {:<9} {:>9} {:>5} {:>12}  caps",
        "CHANNEL", "STATE", "PID", "UID", "TRANSPORT", "CONSUMERS", "SLOTS", "SLOT-BYTES"
    );
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
    0
}

fn remove_stale(names: &[String]) -> i32 {
    let names: Vec<String> = if names.is_empty() {
        directory::list_channels()
            .into_iter()
            .filter(|c| c.state == ChannelState::Stale)
            .map(|c| c.name)
            .collect()
    } else {
        names.to_vec()
    };
    let mut failed = 0;
    for name in names {
        match directory::remove_if_stale(&name) {
            Ok(true) => println!("removed stale channel '{name}'"),
            Ok(false) => println!("kept channel '{name}': its producer is alive"),
            Err(e) => {
                eprintln!("cannot remove channel '{name}': {e}");
                failed += 1;
            }
        }
    }
    i32::from(failed > 0)
}
