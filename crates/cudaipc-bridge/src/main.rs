// SPDX-License-Identifier: MPL-2.0

//! Carries a cudaipc channel to a channel on another host over UCX.
//!
//! usage: cudaipc-bridge receive --listen ADDRESS:PORT --channel NAME (--allow IP[,IP...] | --secret-file FILE) [options]
//!        cudaipc-bridge send --to ADDRESS:PORT --channel NAME [--frames auto|every|latest] [--secret-file FILE]
//!        cudaipc-bridge version
//!
//! The receiver listens and publishes the frames on its host's channel;
//! the sender, on the producer's host, reads the channel at its own pace
//! and sends each frame it takes. docs/scaling.md says how UCX picks the
//! network and what was measured.

#[cfg(unix)]
mod auth;
#[cfg(unix)]
mod cli;
#[cfg(unix)]
mod incoming;
#[cfg(unix)]
mod link;
#[cfg(unix)]
mod receive;
#[cfg(unix)]
mod send;
#[cfg(unix)]
mod wire;

#[cfg(unix)]
fn main() {
    std::process::exit(cli::main(std::env::args().skip(1).collect()));
}

#[cfg(not(unix))]
fn main() {
    eprintln!("cudaipc-bridge runs on Linux, where UCX does");
    std::process::exit(1);
}
