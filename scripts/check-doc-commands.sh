#!/bin/bash
# Runs every command of README.md and docs/*.md that can run without a GPU,
# parses the GPU pipelines, and fails on a command block that is neither run
# nor marked (scripts/check_doc_commands.py says how blocks are marked).
# Builds the plugin first (target/release/libgstcudaipc.so).
# usage (repo root): scripts/check-doc-commands.sh [--list] [FILE...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
source scripts/nvrtc.sh
cargo build --quiet --release --lib
export GST_PLUGIN_PATH="$(pwd)/target/release"
# Channels of the checked commands live in a folder of their own, so that
# they meet no other process's channel of the same name.
shm_dir=$(mktemp -d /dev/shm/doc-commands-XXXXXX)
trap 'rm -rf "$shm_dir"' EXIT
export CUDAIPC_SHM_DIR=$shm_dir
# python3 in the docs is a Debian one, with python3-gi (not a pyenv or venv one).
export PATH=/usr/bin:$PATH
args=("$@")
if [ ${#args[@]} -eq 0 ] || { [ ${#args[@]} -eq 1 ] && [ "${args[0]}" = --list ]; }; then
  args+=(README.md docs/*.md)
fi
/usr/bin/python3 scripts/check_doc_commands.py "${args[@]}"
