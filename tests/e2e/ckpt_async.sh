#!/usr/bin/env bash
# ckpt_async.sh TRIDENT WORKDIR [GRID] — asynchronous checkpoints
# (checkpoint.async: true; docs/checkpoints.md "Asynchronous saves") on GRID
# (default 2,1,1,1: two data-parallel ranks, ZeRO-1, so each rank writes its
# own shard):
#   1. the same run saved synchronously and asynchronously (8 steps, a save
#      every 2): identical losses, grad norms and final parameters; each
#      checkpoint of steps 2, 4 and 6 is the same file as the synchronous
#      one: same size, objects, attributes, tensors bit for bit at the same
#      file addresses, and the bytes that differ lie outside every tensor's
#      data (the object headers' timestamps); the saves of steps 2, 4 and 6
#      were written in the background, the last one synchronously;
#   2. a run resumed from the asynchronous checkpoint of step 4 equals the
#      run resumed from the synchronous one, bit for bit, on GRID and on
#      two other grids (resharding: 1,1,1,0 and 1,2,1,0);
#   3. kill -9 of a rank while the background write of step 4 is in flight
#      (TD_TEST_SAVE_DELAY_MS holds it there), 5 times: `latest` still
#      names step 2, which verifies, no half-written file is taken for a
#      checkpoint, and the same command resumes from step 2;
#   4. SIGUSR1 to mpiexec while the background write of step 4 is in
#      flight: every rank exits 75 (mpiexec reporting 0 is XFAIL,
#      pmodels/mpich#7057),
#      step 4 committed, `latest` names the stop step's checkpoint, both
#      verify, and the same command resumes and ends bit-identical to the
#      uninterrupted run.
# A failing background write is tests/e2e/fault_enospc.sh --async.
# Arguments after GRID (--set k=v ...) go to parts 1 and 2's runs;
# TD_ASYNC_PARTS (default "2 3 4") picks parts 2-4 (part 1 always runs), and
# when set, part 2 resumes on GRID only (the emulated GPU runs parts 1 and 2
# with run.device=cuda: pinned staging filled on the copy stream).
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
grid=${3:-2,1,1,1}
shift $(($# < 3 ? $# : 3))
extra=("$@")
parts=${TD_ASYNC_PARTS:-2 3 4}
part() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
dir=$work/async_${grid//,/}
mkdir -p "$dir"
args=(--set training.steps=8 --set checkpoint.every=2 --set checkpoint.keep=0 "${extra[@]}")
echo "ckpt_async: grid $grid${extra[*]:+ (${extra[*]})}, parts $parts"

# ---- 1. the same files --------------------------------------------------------------
# both runs in one folder (run.out_dir is part of the deck a checkpoint stores)
run=$dir/run
for mode in sync async; do
  a=false
  [ $mode = async ] && a=true
  ck_train_ok "$grid" "$run" "$mode saves, 8 steps" "${args[@]}" --set checkpoint.resume=never \
    --set checkpoint.async=$a
  rm -rf "${dir:?}/$mode" && mv "$run" "$dir/$mode" && mv "$run.log" "$dir/$mode.log"
done
nbg=$(grep -c "checkpoint: step [246] being written in the background" "$dir/async.log")
if [ "$nbg" = 3 ] && grep -q "checkpoint: step 8 saved to .* in [0-9.]* s$" "$dir/async.log" &&
  ! grep -q "being written in the background" "$dir/sync.log"; then
  pass "the async run wrote steps 2, 4, 6 in the background and step 8 (the last) at once"
else
  fail "background saves: $nbg of steps 2, 4, 6 (expected 3; the last synchronous)"
  ck_show_log "$dir/async.log" 30
fi
ck_compare_bitwise "$dir/sync" "$dir/async" \
  "async saves leave training unchanged (losses, grad norms, final /model bit for bit)"
for s in 2 4 6; do
  cf=$(printf 'step_%08d.h5' $s)
  if out=$("$py" - "$dir/sync/ckpt/$cf" "$dir/async/ckpt/$cf" 2>&1 <<'EOF'
import sys
import h5py
import numpy as np

def walk(path):
    objs, regions = {}, []
    with h5py.File(path, "r") as f:
        objs["/"] = sorted((k, repr(f.attrs[k])) for k in f.attrs)
        def visit(name, o):
            attrs = sorted((k, repr(o.attrs[k])) for k in o.attrs)
            if isinstance(o, h5py.Dataset):
                data = o[()]
                raw = data.tobytes() if isinstance(data, np.ndarray) else repr(data)
                off = o.id.get_offset()
                objs[name] = (attrs, o.dtype.str, o.shape, raw, off)
                if off is not None and isinstance(data, np.ndarray):
                    regions.append((off, off + data.nbytes))
            else:
                objs[name] = (attrs,)
        f.visititems(visit)
    return objs, regions

a, ra = walk(sys.argv[1])
b, rb = walk(sys.argv[2])
bad = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
if bad:
    sys.exit(f"objects differ: {bad[:5]}")
x = np.fromfile(sys.argv[1], dtype=np.uint8)
y = np.fromfile(sys.argv[2], dtype=np.uint8)
if x.size != y.size:
    sys.exit(f"sizes differ: {x.size} and {y.size} bytes")
diff = np.nonzero(x != y)[0]
inside = [int(d) for d in diff if any(lo <= d < hi for lo, hi in ra)]
if inside:
    sys.exit(f"{len(inside)} differing bytes inside tensor data, first at {inside[0]}")
print(f"{len(a)} objects and {len(ra)} tensors' data identical at the same addresses; "
      f"{diff.size} of {x.size} bytes differ, all in object headers (timestamps)")
EOF
  ); then
    pass "$cf: the same file as the synchronous save's: $out"
  else
    fail "$cf differs from the synchronous save's: $out"
  fi
done

# ---- 2. resumed from either, on three grids -----------------------------------------
grids=("$grid" 1,1,1,0 1,2,1,0)
[ -z "${TD_ASYNC_PARTS:-}" ] || grids=("$grid")
for g in "${grids[@]}"; do
  part 2 || break
  for mode in sync async; do
    ck_train_ok "$g" "$dir/resume_${g//,/}_$mode" "resume from the $mode step 4 on $g" \
      "${args[@]}" --set "checkpoint.resume=$dir/$mode/ckpt/step_00000004.h5"
  done
  ck_compare_bitwise "$dir/resume_${g//,/}_sync" "$dir/resume_${g//,/}_async" \
    "on grid $g the run resumed from the async step 4 equals the one resumed from the sync step 4"
done

# ---- 3. kill -9 while the background write is in flight -----------------------------
ck_grid "$grid"
ok=0
for i in 1 2 3 4 5; do
  part 3 || break
  r=$dir/kill$i
  rm -rf "$r" "$r.log"
  mkdir -p "$r"
  kcmd=("$trident" train "$deck" --set "data.train=$corpus" "${g_args[@]}" --set "run.out_dir=$r"
        --set training.steps=40 --set checkpoint.every=2 --set checkpoint.keep=0
        --set checkpoint.async=true --set checkpoint.resume=auto)
  TD_TEST_SAVE_DELAY_MS=4000 timeout -k 5 "$run_timeout" "$mpiexec" -n "$g_np" "${kcmd[@]}" \
    >"$r.log" 2>&1 </dev/null &
  pid=$!
  killed=""
  for _ in $(seq 1 300); do
    if grep -q "checkpoint: step 4 being written in the background" "$r.log"; then
      # a rank: a trident process with this run's folder (not mpiexec, not the proxy)
      victim=$(pgrep -f "^$trident train .*run.out_dir=$r " | tail -1)
      [ -n "$victim" ] && kill -KILL "$victim" && killed=$victim
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  wait "$pid"
  rc=$?
  latest=$(ck_latest "$r")
  if [ -z "$killed" ]; then
    fail "kill $i: never saw step 4 written in the background (exit $rc)"
    ck_show_log "$r.log"
  elif [ "$rc" = 0 ]; then
    fail "kill $i: the job exited 0 after rank $killed was killed"
  elif [ "$latest" != step_00000002.h5 ]; then
    fail "kill $i: latest is '$latest', expected step_00000002.h5 ($(ls "$r/ckpt" | tr '\n' ' '))"
  elif ! "$trident" ckpt info "$r/ckpt/step_00000002.h5" >"$r.info" 2>&1; then
    fail "kill $i: step_00000002.h5 does not verify"
    ck_show_log "$r.info"
  else
    ck_train "$grid" "$r" "$r.resume.log" --set training.steps=6 --set checkpoint.every=2 \
      --set checkpoint.keep=0 --set checkpoint.resume=auto
    if [ "$ck_rc" = 0 ] && grep -q "resuming at step 2" "$r.resume.log"; then
      ok=$((ok + 1))
    else
      fail "kill $i: the same command did not resume from step 2 (exit $ck_rc)"
      ck_show_log "$r.resume.log"
    fi
  fi
done
part 3 && [ $ok = 5 ] && pass "kill -9 of a rank during the background write of step 4: latest stayed step 2, verified and resumed, 5 of 5"

# ---- 4. SIGUSR1 while the background write is in flight ----------------------------
part 4 || ck_finish
ck_train_ok "$grid" "$dir/straight12" "uninterrupted 12 steps" --set training.steps=12 \
  --set checkpoint.every=2 --set checkpoint.keep=0 --set checkpoint.resume=never
r=$dir/usr1
rm -rf "$r" "$r.log"
mkdir -p "$r"
ucmd=("$trident" train "$deck" --set "data.train=$corpus" "${g_args[@]}" --set "run.out_dir=$r"
      --set training.steps=12 --set checkpoint.every=2 --set checkpoint.keep=0
      --set checkpoint.async=true --set checkpoint.resume=auto)
# each rank under a wrapper that records its exit status (as ckpt_signal.sh)
rcdir=$r.rc
rm -rf "$rcdir" && mkdir -p "$rcdir"
wrap='trap "kill -USR1 \$c 2>/dev/null" USR1; "$@" & c=$!
while :; do wait $c; rc=$?; kill -0 $c 2>/dev/null || break; done
echo $rc >"$TD_RCDIR/rank.${PMI_RANK:-$OMPI_COMM_WORLD_RANK}"; exit $rc'
env "$CK_EVERY_RANK_EXITS" TD_TEST_SAVE_DELAY_MS=3000 "TD_RCDIR=$rcdir" \
  "$mpiexec" -n "$g_np" bash -c "$wrap" bash "${ucmd[@]}" >"$r.log" 2>&1 </dev/null &
pid=$!
sent=0
t0=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
  if [ $((SECONDS - t0)) -ge "$run_timeout" ]; then
    kill -KILL "$pid" 2>/dev/null
    fail "SIGUSR1: mpiexec still running after ${run_timeout}s (killed)"
    break
  fi
  if [ $sent = 0 ] && grep -q "checkpoint: step 4 being written in the background" "$r.log"; then
    kill -USR1 "$pid" && sent=1
  fi
  sleep 0.1
done
wait "$pid"
rc=$?
stop=$(grep -oE "stopped by SIGUSR1 at step [0-9]+" "$r.log" | grep -oE "[0-9]+$" | head -1)
ck_rank_statuses "$rcdir" "$g_np"
if [ $sent = 1 ] && [ $all75 = 1 ] && [ -n "$stop" ]; then
  pass "SIGUSR1 during the background write of step 4: every rank exited 75 (${ranks[*]}) at step $stop"
  # the launcher may report 0 for ranks that all exited 75
  [ "$rc" = 75 ] || echo "XFAIL mpiexec exited $rc although every rank exited 75 (MPICH: pmodels/mpich#7057; Open MPI under orte_abort_on_non_zero_status=0)"
else
  fail "SIGUSR1 during the background write: sent $sent, ranks exited ${ranks[*]}, mpiexec $rc, stop step '${stop:-none}'"
  ck_show_log "$r.log" 25
fi
if [ -n "$stop" ]; then
  sf=$(printf 'step_%08d.h5' "$stop")
  if [ "$(ck_latest "$r")" = "$sf" ] && [ "$stop" -gt 4 ] &&
    grep -q "checkpoint: step 4 saved to" "$r.log"; then
    pass "step 4 committed before the stop; latest names $sf"
  else
    fail "after the stop: latest '$(ck_latest "$r")', expected $sf (> step 4), step 4 committed?"
    ck_show_log "$r.log" 20
  fi
  for f in step_00000004.h5 "$sf"; do
    if "$trident" ckpt info "$r/ckpt/$f" >"$r.$f.info" 2>&1; then
      pass "$f verifies"
    else
      fail "trident ckpt info $f"
      ck_show_log "$r.$f.info"
    fi
  done
fi
tmps=$(find "$r/ckpt" -name '*.tmp' | wc -l)
if [ "$tmps" = 0 ]; then pass "no .tmp left"; else fail "$tmps .tmp files left in $r/ckpt"; fi
ck_resumed_at "$r" "$r.resume.log" "${stop:-?}" --set training.steps=12 --set checkpoint.every=2 \
  --set checkpoint.keep=0 --set checkpoint.async=true
ck_compare_bitwise "$dir/straight12" "$r" \
  "stopped + resumed async run is bitwise identical to the uninterrupted one"
ck_finish
