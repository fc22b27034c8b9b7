#!/bin/bash
# Builds the release plugin (target/release/libgstcudaipc.so) and installs it
# like any GStreamer plugin: into GStreamer's system plugin folder
# (pkg-config's pluginsdir of gstreamer-1.0, with sudo when not root), or with
# --prefix DIR into DIR/lib/<multiarch>/gstreamer-1.0, and prints the
# GST_PLUGIN_PATH line that makes GStreamer look there. The channel tool
# cudaipc-channels and the UCX bridge cudaipc-bridge go into /usr/local/bin
# (DIR/bin with --prefix). The C library libcudaipc.so (crates/cudaipc-c, with its soname
# links), its headers cudaipc.h and cudaipc.hpp and cudaipc.pc for
# pkg-config go under /usr/local (DIR with --prefix): lib/<multiarch>,
# include/, lib/<multiarch>/pkgconfig; with --prefix it prints the
# PKG_CONFIG_PATH line too. --uninstall removes those files again (and,
# under a prefix, the folders it created, when left empty). Installing first
# runs scripts/setup.sh (Debian packages, Rust).
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
bridge=cudaipc-bridge
# The C library: the real file carries the version, the soname (what
# programs load) and the link-time name point to it.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$(dirname "$0")/../Cargo.toml" | head -1)
clib=libcudaipc.so
soname=$clib.0
headers="cudaipc.h cudaipc.hpp"
# An absolute path (the GST_PLUGIN_PATH line must work from anywhere),
# relative to where the command was given.
case $prefix in /* | "") ;; *) prefix=$(pwd -P)/$prefix ;; esac
prefix=${prefix%/}
cd "$(dirname "$0")/.."

[ $uninstall = 1 ] || scripts/setup.sh
multiarch=$(gcc -print-multiarch 2>/dev/null || true)
[ -n "$multiarch" ] || multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
if [ -n "$prefix" ]; then
  dir=$prefix/lib/$multiarch/gstreamer-1.0
  bindir=$prefix/bin
  cprefix=$prefix
else
  dir=$(pkg-config --variable=pluginsdir gstreamer-1.0) ||
    { echo "GStreamer's plugin folder unknown (pkg-config gstreamer-1.0): run scripts/setup.sh" >&2; exit 1; }
  bindir=/usr/local/bin
  # Where the dynamic loader and pkg-config of Debian look by default.
  cprefix=/usr/local
fi
libdir=$cprefix/lib/$multiarch
includedir=$cprefix/include
pcdir=$libdir/pkgconfig

# sudo only where this user cannot write: a folder or the nearest one that
# exists above it.
sudo=
for target in "$dir" "$bindir" "$libdir" "$includedir"; do
  writable=$target
  while [ ! -e "$writable" ]; do writable=$(dirname "$writable"); done
  if [ ! -w "$writable" ] && [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
done

if [ $uninstall = 1 ]; then
  removed=0
  for file in "$dir/$plugin" "$bindir/$tool" "$bindir/$bridge" "$libdir/$clib" "$libdir/$soname" "$libdir/$clib.$version" \
      "$pcdir/cudaipc.pc" "$includedir/cudaipc.h" "$includedir/cudaipc.hpp"; do
    [ -e "$file" ] || [ -L "$file" ] || continue
    $sudo rm -f "$file"
    echo "removed $file"
    removed=1
  done
  [ $removed = 1 ] || echo "not installed: $dir/$plugin"
  if [ -n "$prefix" ]; then
    # The folders install made under the prefix, where nothing else is left.
    for d in "$dir" "$bindir" "$pcdir" "$includedir"; do
      while [ "$d" != "$prefix" ] && $sudo rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done
    done
  fi
  exit 0
fi

[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
echo "building the release plugin, the channel tool, the bridge and the C library (cargo build --release --lib --bin $tool --bin $bridge)"
# --lib builds every default member's library: the plugin's and libcudaipc.so.
cargo build --release --lib --bin $tool --bin $bridge --quiet
$sudo install -D -m 0644 target/release/$plugin "$dir/$plugin"
echo "installed $dir/$plugin"
$sudo install -D -m 0755 target/release/$tool "$bindir/$tool"
echo "installed $bindir/$tool (list the channels: $tool; remove what your dead processes left: $tool remove-stale --all)"
$sudo install -D -m 0755 target/release/$bridge "$bindir/$bridge"
echo "installed $bindir/$bridge (a channel to another host over UCX: docs/scaling.md)"
$sudo install -D -m 0755 target/release/$clib "$libdir/$clib.$version"
$sudo ln -sfn "$clib.$version" "$libdir/$soname"
$sudo ln -sfn "$soname" "$libdir/$clib"
for h in $headers; do
  $sudo install -D -m 0644 "crates/cudaipc-c/include/$h" "$includedir/$h"
done
sed -e "s|@PREFIX@|$cprefix|; s|@LIBDIR@|$libdir|; s|@INCLUDEDIR@|$includedir|; s|@VERSION@|$version|" \
  crates/cudaipc-c/cudaipc.pc.in > target/release/cudaipc.pc
$sudo install -D -m 0644 target/release/cudaipc.pc "$pcdir/cudaipc.pc"
echo "installed $libdir/$clib (C library; headers in $includedir; pkg-config --cflags --libs cudaipc)"
# A system-wide library is found by the loader once its cache knows it.
[ -n "$prefix" ] || $sudo ldconfig 2>/dev/null || true
if [ -n "$prefix" ]; then
  echo "GStreamer finds it with:"
  echo "  export GST_PLUGIN_PATH=$dir\${GST_PLUGIN_PATH:+:\$GST_PLUGIN_PATH}"
  case ":$PATH:" in
    *":$bindir:"*) ;;
    *) echo "and the shell finds $tool and $bridge with:"
       echo "  export PATH=$bindir:\$PATH" ;;
  esac
  echo "pkg-config finds libcudaipc with (programs linked to it find it through LD_LIBRARY_PATH or -Wl,-rpath,$libdir):"
  echo "  export PKG_CONFIG_PATH=$pcdir\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
fi
