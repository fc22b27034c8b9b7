# Sourced by test-arm64.sh and test-windows.sh: the start they share. Each
# builds this project for another platform and tests it under emulation
# (qemu-user, Wine). Set before sourcing:
#   step         the prefix of this step's lines ("arm64", "windows")
#   skip_what    what a SKIPPED line says is skipped
#   require_var  the variable that, set to 1, makes a skip a failure
# It enters the repository root and defines repo, sudo, stage (notes how
# long the stage that ends now took), skip (prints SKIPPED and exits 0) and
# report_timings.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -f "$HOME/.cargo/env" ] && source "$HOME/.cargo/env"
repo=$(pwd)
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
start=$SECONDS
stage_start=$SECONDS
timings=""
stage() { timings="$timings $1 $((SECONDS - stage_start)) s,"; stage_start=$SECONDS; }

skip() {
  if [ "${!require_var:-}" = 1 ]; then
    echo "$step: $require_var=1 but $1" >&2
    exit 1
  fi
  echo "SKIPPED: $skip_what: $1"
  exit 0
}

report_timings() {
  timings=${timings%,}
  echo "$step: took $((SECONDS - start)) s (${timings# })"
}
