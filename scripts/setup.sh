#!/bin/bash
# Installs what building, testing and the demo need on Debian 12: the Debian
# packages (through apt-get, with sudo when not root) and, if cargo is
# missing, a Rust toolchain through rustup. Safe to run again.
set -euo pipefail
packages="build-essential pkg-config patchelf ca-certificates curl unzip python3 python3-pip python3-venv fonts-dejavu-core valgrind
 libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
 gstreamer1.0-tools gstreamer1.0-plugins-base-apps gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
 python3-gi gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0
 libucx-dev ucx-utils iproute2 prometheus"
missing=""
for p in $packages; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "installing Debian packages:$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -f "$HOME/.cargo/env" ] || curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
  # shellcheck disable=SC1091
  source "$HOME/.cargo/env"
fi
