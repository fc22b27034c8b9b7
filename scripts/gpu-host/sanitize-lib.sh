# shellcheck shell=bash
# Sourced by scripts/gpu-host/sanitize.sh: finding compute-sanitizer, the
# kernels pipeline, and reading the sanitizer's reports and cudaprocess's
# totals (functions only, so that they can be tried on saved logs).
runs=0
failed=0

# find_sanitizer: the path of compute-sanitizer (PATH, then the usual toolkit
# places), or status 1.
find_sanitizer() {
  local c
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
      /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    if [ -n "$c" ] && [ -x "$c" ]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

# san_errors LOG TOOL: the errors the sanitizer counted, summed over its
# summary lines (one per target process); racecheck: hazards, errors and
# warnings alike. Nothing when LOG has no summary.
san_errors() {
  [ -f "$1" ] || return 0
  if [ "$2" = racecheck ] && grep -q "RACECHECK SUMMARY:" "$1"; then
    sed -n 's/.*RACECHECK SUMMARY: [0-9]* hazards* displayed (\([0-9]*\) errors*, \([0-9]*\) warnings*).*/\1 \2/p' "$1" \
      | awk '{ e += $1 + $2; n++ } END { if (n) print e }'
  else
    sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors*.*/\1/p' "$1" | awk '{ e += $1; n++ } END { if (n) print e }'
  fi
}

# san_text LOG TOOL: the errors column: "0 errors", racecheck "0 hazards (0
# errors, 0 warnings)", or "no summary".
san_text() {
  local e
  e=$(san_errors "$1" "$2")
  if [ -z "$e" ]; then
    echo "no summary"
  elif [ "$2" = racecheck ] && grep -q "RACECHECK SUMMARY:" "$1"; then
    sed -n 's/.*RACECHECK SUMMARY: [0-9]* hazards* displayed (\([0-9]*\) errors*, \([0-9]*\) warnings*).*/\1 \2/p' "$1" \
      | awk '{ e += $1; w += $2 } END { printf "%d hazards (%d errors, %d warnings)\n", e + w, e, w }'
  else
    echo "$e errors"
  fi
}

# san_kinds LOG: the kinds of report in LOG, addresses and numbers masked,
# most frequent first, at most 4 (for a failed run).
san_kinds() {
  [ -f "$1" ] || return 0
  grep -E '^========= +(Invalid|Program hit|Uninitialized|Barrier|Error|Warning|Race|Misaligned|Out-of-range|Illegal|Malloc|Free|Leaked|Unused|Cuda|CUDA|Internal|Target)' "$1" \
    | grep -v 'SUMMARY' \
    | sed -e 's/^========= *//' -e 's/0x[0-9a-fA-F]*/ADDR/g' -e 's/\b[0-9][0-9]*\b/N/g' \
    | sort | uniq -c | sort -k1,1nr | sed -n 1,4p | sed 's/^ */    /'
}

# verify_totals LOG: "NAME FRAMES CORRUPT MISSING" for each cudaprocess of LOG
# (GST_DEBUG=cudaprocess:5: its "verification totals" line at EOS and stop;
# the last of each element), sorted by name.
verify_totals() {
  sed -n 's/.*<\([^>]*\)> verification totals: VerifyReport { frames: \([0-9]*\), corrupt: \([0-9]*\), missing: \([0-9]*\),.*/\1 \2 \3 \4/p' "$1" \
    | awk '{ t[$1] = $0 } END { for (n in t) print t[n] }' | sort
}

# check_consumer LOG FRAMES: sets $check_wrong empty when the consumer's
# cudaprocess (name=verify) verified FRAMES frames, none corrupt or missing,
# and posted no cudaprocess-verify message, else to what is wrong; its
# totals in $check_note.
check_consumer() {
  local log=$1 want=$2 t frames corrupt missing messages
  t=$(verify_totals "$log" | awk '$1 == "verify"')
  messages=$(grep -c 'cudaprocess-verify,' "$log")
  check_wrong='' check_note=''
  if [ -z "$t" ]; then
    check_wrong="no verification totals of cudaprocess in $(basename "$log")"
    return
  fi
  read -r _ frames corrupt missing <<<"$t"
  check_note="verified $frames of $want, $corrupt corrupt, $missing missing"
  if [ "$frames" != "$want" ] || [ "$corrupt" != 0 ] || [ "$missing" != 0 ]; then
    check_wrong=$check_note
  elif [ "$messages" != 0 ]; then
    check_wrong="$check_note, but $messages cudaprocess-verify message(s)"
  fi
}

# check_kernels LOG FRAMES OK BAD: sets $check_wrong empty when OK elements
# named ok_* verified FRAMES frames each, none corrupt or missing, and BAD
# elements named bad_* FRAMES frames each, all corrupt (gradient frames);
# else to what is wrong.
check_kernels() {
  local log=$1 want=$2 nok=$3 nbad=$4
  check_note="$nok intact and $nbad corrupt streams verified as expected"
  check_wrong=$(verify_totals "$log" | awk -v want="$want" -v nok="$nok" -v nbad="$nbad" '
    $1 ~ /^ok_/ { ok++; if ($2 != want || $3 != 0 || $4 != 0) { bad_ok++; if (!first) first = $0 } }
    $1 ~ /^bad_/ { bd++; if ($2 != want || $3 != want) { bad_bd++; if (!first) first = $0 } }
    END {
      if (ok != nok || bd != nbad) printf "totals of %d of %d intact and %d of %d corrupt streams\n", ok, nok, bd, nbad
      else if (bad_ok || bad_bd) printf "%d intact streams not clean, %d corrupt streams not caught (first: name frames corrupt missing = %s)\n", bad_ok, bad_bd, first
    }')
}

# kernel_pipeline FRAMES: the gst-launch-1.0 arguments of the kernels run in
# ${kp[@]}; the number of verifying elements on intact and on corrupt frames
# in $kp_ok and $kp_bad. For each format and size:
#   ok_a_*: counter, in place: verification fused with invert, then brightness
#           (up and down), gamma, grayscale;
#   ok_b_*: counter: verification alone, then gamma in place;
#   gradient after a tee (shared buffers: out of place): bad_c_* verification
#           fused with invert, brightness, gamma, grayscale, bad_d_*
#           verification alone then brightness;
# and, at 322x242, cudatestsrc into system memory.
kernel_pipeline() {
  local frames=$1 sizes=${2:-640x360 322x242} formats=${3:-RGB RGBA BGRA RGBx BGRx GRAY8 NV12 I420}
  local size w h f id caps
  kp=()
  kp_ok=0
  kp_bad=0
  for size in $sizes; do
    w=${size%x*} h=${size#*x}
    for f in $formats; do
      id=${f}_$size
      caps="video/x-raw(memory:CUDAMemory),format=$f,width=$w,height=$h"
      kp+=(cudatestsrc num-buffers="$frames" pattern=counter ! "$caps"
        ! cudaprocess name="ok_a_$id" verify=true operation=invert
        ! cudaprocess operation=brightness brightness=0.2 ! cudaprocess operation=brightness brightness=-0.3
        ! cudaprocess operation=gamma gamma=2.2 ! cudaprocess operation=grayscale ! fakesink)
      kp+=(cudatestsrc num-buffers="$frames" pattern=counter ! "$caps"
        ! cudaprocess name="ok_b_$id" verify=true ! cudaprocess operation=gamma gamma=0.5 ! fakesink)
      kp+=(cudatestsrc num-buffers="$frames" pattern=gradient ! "$caps" ! tee name="t_$id"
        "t_$id." ! queue ! cudaprocess name="bad_c_$id" verify=true operation=invert ! fakesink
        "t_$id." ! queue ! cudaprocess operation=brightness ! fakesink
        "t_$id." ! queue ! cudaprocess operation=gamma ! fakesink
        "t_$id." ! queue ! cudaprocess operation=grayscale ! fakesink
        "t_$id." ! queue ! cudaprocess name="bad_d_$id" verify=true ! cudaprocess operation=brightness ! fakesink)
      kp_ok=$((kp_ok + 2))
      kp_bad=$((kp_bad + 2))
      [ "$size" = 322x242 ] && kp+=(cudatestsrc num-buffers="$frames" ! "video/x-raw,format=$f,width=$w,height=$h" ! fakesink)
    done
  done
}

# line TOOL PROCESS MODE ERRORS RESULT: one line of the table.
line() {
  printf '%-9s | %-8s | %-6s | %-32s | %s\n' "$@"
}

# judge TOOL PROCESS MODE RC LIMIT SANLOG OUTLOG [CHECK] [EXTRA]: the line of
# one sanitized process, counted in $runs and $failed. CHECK: "consumer
# FRAMES" or "kernels FRAMES OK BAD" (what cudaprocess must have seen); EXTRA:
# a further problem (the plain producer's failure), if any.
judge() {
  local tool=$1 proc=$2 mode=$3 rc=$4 limit=$5 sanlog=$6 out=$7 check=${8:-} extra=${9:-}
  local errors text problem='' want
  runs=$((runs + 1))
  errors=$(san_errors "$sanlog" "$tool")
  text=$(san_text "$sanlog" "$tool")
  check_note=
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    if [ "$tool" = initcheck ]; then
      line "$tool" "$proc" "$mode" "$text" "initcheck did not finish in $limit s (not counted as a failure)"
      return
    fi
    problem="did not finish in $limit s"
  elif [ -z "$errors" ]; then
    problem="no $tool summary in $(basename "$sanlog") (exit $rc)"
  elif [ "$errors" != 0 ]; then
    problem="$tool found errors (exit $rc)"
  elif [ "$rc" != 0 ]; then
    problem="exit $rc"
  fi
  check_wrong=
  case $check in
    consumer\ *) check_consumer "$out" "${check#consumer }" ;;
    kernels\ *) read -r -a want <<<"${check#kernels }"; check_kernels "$out" "${want[@]}" ;;
  esac
  [ -n "$check_wrong" ] && problem=${problem:+$problem; }$check_wrong
  [ -n "$extra" ] && problem=${problem:+$problem; }$extra
  if [ -n "$problem" ]; then
    failed=$((failed + 1))
    line "$tool" "$proc" "$mode" "$text" "FAIL: $problem ($(basename "$out"))"
    san_kinds "$sanlog"
  else
    line "$tool" "$proc" "$mode" "$text" "ok${check_note:+ ($check_note)}"
  fi
}
