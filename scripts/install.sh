#!/bin/bash
# Builds the release plugin (target/release/libgstcudaipc.so) and installs it
# like any GStreamer plugin: into GStreamer's system plugin folder
# (pkg-config's pluginsdir of gstreamer-1.0, with sudo when not root), or with
# --prefix DIR into DIR/lib/<multiarch>/gstreamer-1.0, and prints the
# GST_PLUGIN_PATH line that makes GStreamer look there. The channel tool
# cudaipc-channels goes beside it, into /usr/local/bin (DIR/bin with
# --prefix). --uninstall removes those two files again (and, under a prefix,
# the folders it created, when left empty). Installing first runs
# scripts/setup.sh (Debian packages, Rust).
# usage (repo root or anywhere): scripts/install.sh [--prefix DIR]
#                                scripts/install.sh --uninstall [--prefix DIR]
set -euo pipefail
usage() { echo "usage: $0 [--uninstall] [--prefix DIR]" >&2; exit 2; }
uninstall=0 prefix=
while [ $# -gt 0 ]; do
  case $1 in
    --uninstall) uninstall=1 ;;
    --prefix) [ $# -ge 2 ] && [ -n "$2" ] || usage; prefix=$2; shift ;;
    --prefix=?*) prefix=${1#--prefix=} ;;
    *) usage ;;
  esac
  shift
done
plugin=libgstcudaipc.so
tool=cudaipc-channels
# An absolute path (the GST_PLUGIN_PATH line must work from anywhere),
# relative to where the command was given.
case $prefix in /* | "") ;; *) prefix=$(pwd -P)/$prefix ;; esac
prefix=${prefix%/}
cd "$(dirname "$0")/.."

[ $uninstall = 1 ] || scripts/setup.sh
if [ -n "$prefix" ]; then
  multiarch=$(gcc -print-multiarch 2>/dev/null || true)
  [ -n "$multiarch" ] || multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
  dir=$prefix/lib/$multiarch/gstreamer-1.0
  bindir=$prefix/bin
else
  dir=$(pkg-config --variable=pluginsdir gstreamer-1.0) ||
    { echo "GStreamer's plugin folder unknown (pkg-config gstreamer-1.0): run scripts/setup.sh" >&2; exit 1; }
  bindir=/usr/local/bin
fi

# sudo only where this user cannot write: a folder or the nearest one that
# exists above it.
sudo=
for target in "$dir" "$bindir"; do
  writable=$target
  while [ ! -e "$writable" ]; do writable=$(dirname "$writable"); done
  if [ ! -w "$writable" ] && [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
done

if [ $uninstall = 1 ]; then
  removed=0
  for file in "$dir/$plugin" "$bindir/$tool"; do
    [ -e "$file" ] || continue
    $sudo rm -f "$file"
    echo "removed $file"
    removed=1
  done
  [ $removed = 1 ] || echo "not installed: $dir/$plugin"
  if [ -n "$prefix" ]; then
    # The folders install made under the prefix, where nothing else is left.
    for d in "$dir" "$bindir"; do
      while [ "$d" != "$prefix" ] && $sudo rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done
    done
  fi
  exit 0
fi

[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
echo "building the release plugin and the channel tool (cargo build --release --lib --bin $tool)"
cargo build --release --lib --bin $tool --quiet
$sudo install -D -m 0644 target/release/$plugin "$dir/$plugin"
echo "installed $dir/$plugin"
$sudo install -D -m 0755 target/release/$tool "$bindir/$tool"
echo "installed $bindir/$tool (list the channels: $tool; remove what dead processes left: $tool remove-stale --all)"
if [ -n "$prefix" ]; then
  echo "GStreamer finds it with:"
  echo "  export GST_PLUGIN_PATH=$dir\${GST_PLUGIN_PATH:+:\$GST_PLUGIN_PATH}"
  case ":$PATH:" in
    *":$bindir:"*) ;;
    *) echo "and the shell finds $tool with:"
       echo "  export PATH=$bindir:\$PATH" ;;
  esac
fi
