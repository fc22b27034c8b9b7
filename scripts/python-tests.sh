#!/bin/bash
# Builds the Python package (crates/cudaipc-python) into a virtual
# environment under target/ and runs its tests (tests/python) against the
# plugin in target/debug, on the host transport; GPU tests print SKIPPED
# without a GPU. Installs what it needs: a venv from Debian's python3
# (/usr/bin/python3) that sees its system packages (PyGObject, python3-gi,
# for the GStreamer application tests), with maturin, numpy (>= 2.1:
# versioned DLPack, read-only arrays) and pytest from PyPI. The package is built in its own target folder (target/python),
# so that target/debug, a GStreamer plugin folder, holds no Python module.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
venv=target/python-venv
system_python=python3
[ -x /usr/bin/python3 ] && system_python=/usr/bin/python3
# A venv made before by another python, or without the system packages.
if [ -x "$venv/bin/python" ] && ! grep -qx "include-system-site-packages = true" "$venv/pyvenv.cfg"; then
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  "$system_python" -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c "import maturin, numpy, pytest" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2" "numpy>=2.1" pytest
fi
rm -rf target/python/wheels
"$venv/bin/maturin" build --quiet -m crates/cudaipc-python/Cargo.toml -i "$venv/bin/python" \
  --target-dir target/python -o target/python/wheels
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps target/python/wheels/cudaipc-*.whl
# The plugin the tests launch (cargo test leaves it in deps/ only), and the
# channel tool that removes what a killed producer left (conftest.py).
cargo build --quiet --lib --bin cudaipc-channels
GST_PLUGIN_PATH="$PWD/target/debug" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python "$@"
