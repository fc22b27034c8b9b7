#!/bin/bash
# Build a portable GStreamer runtime from Debian packages, with that suite's
# own glibc and loader, to run the plugin built on Debian 12 (1.22) under a
# newer GStreamer beside nvcodec's elements of that version (including
# upstream's own cudaipcsink/cudaipcsrc, for side-by-side benchmarks):
#   1.26: Debian 13 "trixie"      1.28: Debian "testing"
# (GST_RUNTIME_SUITE overrides the suite; the packages' version is checked.)
#
# usage: make-runtime.sh VERSION DIR     (DIR ignored by git, e.g. .gpu-host128)
# DIR gets gstNNN.tgz and envNNN.sh (NNN: 126 for 1.26). From the repo root:
#   source DIR/envNNN.sh   # unpacks to /tmp/gstNNN, puts wrappers first on PATH
# gst-launch-1.0 / gst-inspect-1.0 / gst-device-monitor-1.0 are wrappers that
# start the runtime's loader. Programs of your own (test binaries, the
# benchmark) that must run on it need the same loader: either start them as
#   $GST_RT_LOADER --library-path $GST_RT_LIBS:/usr/lib/x86_64-linux-gnu PROGRAM ...
# (then /proc/self/exe is the loader: programs that re-run themselves break), or
# give them the loader as interpreter once (Debian's patchelf):
#   patchelf --set-interpreter /tmp/gstNNN/root/lib/ld-linux-x86-64.so.2 \
#            --set-rpath /tmp/gstNNN/root/lib:/usr/lib/x86_64-linux-gnu PROGRAM
# Such programs, when they scan plugins in a child (the default), need
# GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner and GST_REGISTRY_FORK unset.
# Runs on Debian 12 itself too (host transport, no GPU): gst-launch-1.0 of the
# runtime with the plugin built here passes frames between two processes.
# cudaconvert/cudascale (nvcodec 1.26.2) compile their kernels with NVRTC at start; the GPU host's
# NVRTC 13 rejects the architecture option they pass, so they are not registered. With NVRTC12=1 this
# script also puts libnvrtc.so.12 (PyPI's nvidia-cuda-nvrtc-cu12 wheel) into DIR/nvrtc12.tar.xz (about
# 32 MB: carry DIR in a call of its own if the 64 MiB carry limit bites), and envNNN.sh then points
# GST_CUDA_NVRTC_LIBNAME at it.
# With PYGI=1 the runtime also carries the suite's Python with PyGObject and the typelibs of GLib and
# GStreamer (1.26: Python 3.13, without NumPy; docs/python.md says what it adds): envNNN.sh then makes
# $GST_RT/wrap/python3-gi, which starts it through the runtime's loader, importing the runtime's
# GStreamer (`gi.require_version('Gst', '1.0')`) and the plugin of GST_PLUGIN_PATH; packages of
# your own go on PYTHONPATH (`pip install --target`, or an unzipped wheel); DIR/python comes first
# (scripts/gpu-host/stage.sh unpacks the cudaipc abi3 wheel there).
# Proven on the H200 host (1.26): the plugin built on Debian 12 loads and
# passes 4K frames between two gst-launch-1.0 processes, with nvcodec's
# cudaupload/cudadownload, and upstream's cudaipc elements run beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 2 ] || { echo "usage: $0 1.26|1.28 DIR" >&2; exit 2; }
version=$1
case $version in
  1.26) suite=trixie ;;
  1.28) suite=testing ;;
  *) echo "unknown GStreamer version $version (1.26 or 1.28)" >&2; exit 2 ;;
esac
suite=${GST_RUNTIME_SUITE:-$suite}
nnn=${version/./}
out=$(mkdir -p "$2" && cd "$2" && pwd)
# The packages are unpacked beside DIR, not in /tmp (often a small tmpfs), one at a time, each .deb
# deleted once unpacked, without the documentation, translations and data files no runtime needs.
work=$(mktemp -d "$out.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
st=$work/apt; mkdir -p $st/lists/partial $st/cache/archives/partial $work/debs
# the Debian mirror this machine already uses, with the runtime's suite
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)
echo "deb $uri $suite main" > $st/sources.list
o="-oDir::Etc::SourceList=$st/sources.list -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists=$st/lists -oDir::Cache=$st/cache -oDir::State::status=/dev/null"
apt-get $o update >/dev/null
packaged=$(apt-cache $o show --no-all-versions gstreamer1.0-plugins-bad | awk '/^Version:/ && !v {v = $2} END {print v}')
case $packaged in
  $version.*) ;;
  *) echo "Debian $suite has GStreamer $packaged, not $version (set GST_RUNTIME_SUITE)" >&2; exit 1 ;;
esac
python=
pygi_pkgs=
if [ "${PYGI:-0}" = 1 ]; then
  python=$(apt-cache $o depends python3-minimal | awk '/Depends: python3\.[0-9]+-minimal/{sub(/-minimal/, "", $2); print $2; exit}')
  [ -n "$python" ] || { echo "Debian $suite: no python3.X-minimal found" >&2; exit 1; }
  pygi_pkgs="$python-minimal lib$python-minimal lib$python-stdlib python3-gi gir1.2-glib-2.0 gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0"
fi
pkgs=$(apt-cache $o depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad $pygi_pkgs \
  | grep -v '^ ' | grep -v '^<' | sort -u | grep -Ev '^(debconf|dpkg|perl-base|tzdata|base-files|usrmerge|init-system-helpers|sensible-utils|debianutils)$' \
  | grep -Ev 'soundfont|^fonts-')
# (apt-cache lists every alternative of a dependency: without that filter, all of fluidsynth's
# sound fonts, 1.5 GB unpacked, data no element here loads.)
(cd $work/debs && apt-get $o download $pkgs >/dev/null 2>&1 || true)
(cd $work/debs && apt-get $o download libc6 libstdc++6 libgcc-s1 >/dev/null)
mkdir -p $work/stage
for f in $work/debs/*.deb; do
  dpkg-deb --fsys-tarfile "$f" | tar -x -C $work/stage --exclude=./usr/share/doc --exclude=./usr/share/man \
    --exclude=./usr/share/locale --exclude=./usr/share/sounds --exclude=./usr/share/info --exclude=./usr/share/fonts \
    --exclude=./usr/share/icons --exclude=./usr/share/zoneinfo --exclude=./usr/share/i18n
  rm -f "$f"
done
extra_libs="libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libgstcheck-1.0.so.0 libgstcuda-1.0.so.0 libgstapp-1.0.so.0 libgstvideo-1.0.so.0"
# The libraries of the typelibs, which PyGObject opens by name.
[ -z "$python" ] || extra_libs="$extra_libs libgio-2.0.so.0 libgmodule-2.0.so.0 libgstbase-1.0.so.0"
EXTRA_LIBS="$extra_libs" PYTHON="$python" python3 "$here/mkroot.py" $work/stage $work/root \
  coreelements coretracers videotestsrc videoconvertscale videorate app nvcodec imagefreeze debugutilsbad debug videoparsersbad jpeg png shm inter
cp -L $work/stage/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 $work/root/lib/ 2>/dev/null || cp -L $work/stage/lib64/ld-linux-x86-64.so.2 $work/root/lib/
echo "GStreamer $packaged (Debian $suite)" > $work/root/VERSION
tar czf "$out/gst$nnn.tgz" -C $work root
if [ "${NVRTC12:-0}" = 1 ]; then
  mkdir -p $work/whl $work/nvrtc
  pip download --no-deps -q -d $work/whl 'nvidia-cuda-nvrtc-cu12>=12.4,<13'
  python3 - "$work/whl" "$work/nvrtc" <<'PY'
import os, sys, zipfile
whl = [f for f in os.listdir(sys.argv[1]) if f.endswith('.whl')][0]
z = zipfile.ZipFile(os.path.join(sys.argv[1], whl))
for n in z.namelist():
    b = os.path.basename(n)
    if b.startswith(('libnvrtc.so.', 'libnvrtc-builtins.so.')):
        open(os.path.join(sys.argv[2], b), 'wb').write(z.read(n))
PY
  tar cJf "$out/nvrtc12.tar.xz" -C $work/nvrtc .
fi
sed "s/@NNN@/$nnn/g; s/@VERSION@/$version/g" > "$out/env$nnn.sh" <<'ENV'
# Source from the repo root on a GPU host: GStreamer @VERSION@ first on PATH (wrappers).
_gh=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GST_RT=/tmp/gst@NNN@
mkdir -p $GST_RT && tar xzf "$_gh/gst@NNN@.tgz" -C $GST_RT
export GST_RT_LOADER=$GST_RT/root/lib/ld-linux-x86-64.so.2 GST_RT_LIBS=$GST_RT/root/lib
if [ -f "$_gh/nvrtc12.tar.xz" ]; then
  mkdir -p $GST_RT/nvrtc && tar xJf "$_gh/nvrtc12.tar.xz" -C $GST_RT/nvrtc
  GST_RT_LIBS=$GST_RT_LIBS:$GST_RT/nvrtc
  export GST_CUDA_NVRTC_LIBNAME=$GST_RT/nvrtc/libnvrtc.so.12
fi
export GST@NNN@_LOADER=$GST_RT_LOADER GST@NNN@_LIBS=$GST_RT_LIBS
mkdir -p $GST_RT/wrap
# gst-plugin-scanner: for programs given the loader as interpreter, which
# scan plugins in a child (GST_PLUGIN_SCANNER=$GST_RT/wrap/gst-plugin-scanner).
for b in bin/gst-launch-1.0 bin/gst-inspect-1.0 bin/gst-device-monitor-1.0 bin/gst-plugin-scanner; do
  printf '#!/bin/sh\nexec %s --library-path %s %s "$@"\n' "$GST_RT_LOADER" "$GST_RT_LIBS:/usr/lib/x86_64-linux-gnu" "$GST_RT/root/$b" > $GST_RT/wrap/${b#bin/}
  chmod +x $GST_RT/wrap/${b#bin/}
done
if [ -d $GST_RT/root/python ]; then
  # The runtime's Python with PyGObject. Packages of your own go on PYTHONPATH, after
  # DIR/python (the cudaipc package that scripts/gpu-host/stage.sh puts there).
  _py=$(cd $GST_RT/root/python/bin && echo python3.*)
  printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} PYTHONHOME=%s GI_TYPELIB_PATH=%s exec %s --library-path %s %s "$@"\n' \
    "$_gh/python" "$GST_RT/root/python" "$GST_RT/root/python/girepository-1.0" "$GST_RT_LOADER" \
    "$GST_RT_LIBS:/usr/lib/x86_64-linux-gnu" "$GST_RT/root/python/bin/$_py" > $GST_RT/wrap/python3-gi
  chmod +x $GST_RT/wrap/python3-gi
fi
export PATH=$GST_RT/wrap:$PATH
unset LD_LIBRARY_PATH
export GST_PLUGIN_SYSTEM_PATH=$GST_RT/root/gst GST_REGISTRY=$GST_RT/registry.bin GST_REGISTRY_FORK=no
export GST_PLUGIN_SCANNER=/nonexistent
[ -d "$_gh/build" ] && export GST_PLUGIN_PATH=$_gh/build
# sed reads every line: head would exit early and, under pipefail, the
# SIGPIPE it gives gst-launch-1.0 would fail the sourcing script (exit 141).
gst-launch-1.0 --version | sed -n 1p
ENV
ls -la "$out"
