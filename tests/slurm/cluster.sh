# shellcheck shell=bash
# cluster.sh — a one-machine Slurm for the tests; sourced, not run.
#   sl_start DIR   install slurm-wlm and munge when missing (root, apt-get),
#                  write DIR/slurm.conf from slurm.conf.in, start munged,
#                  slurmctld and slurmd in the foreground of background
#                  jobs (so their PIDs are known exactly), wait until the
#                  node is idle. Exports SLURM_CONF. Returns 0, or 77 with
#                  the reason in sl_why when Slurm cannot run here.
#   sl_stop        cancel every job of this cluster, then stop exactly the
#                  daemons sl_start started (SIGTERM, SIGKILL after 10 s).
#                  Safe to call twice; call it from an EXIT trap.
sl_pids=()
sl_names=()
sl_why=

sl_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# sl_ports: two free TCP ports for slurmctld and slurmd
sl_ports() {
  local p=$((20000 + ($$ % 4000) * 2)) n
  for ((n = 0; n < 200; ++n, p += 2)); do
    if sl_port_free "$p" && sl_port_free $((p + 1)); then
      sl_ctld_port=$p sl_slurmd_port=$((p + 1))
      return 0
    fi
  done
  return 1
}

sl_spawn() { # sl_spawn NAME LOG CMD... — start CMD in the background, record its PID
  local name=$1 log=$2
  shift 2
  "$@" >>"$log" 2>&1 </dev/null &
  sl_pids+=($!)
  sl_names+=("$name")
}

sl_alive() { # sl_alive INDEX
  kill -0 "${sl_pids[$1]}" 2>/dev/null
}

sl_start() {
  local dir=$1 src
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [ "$(id -u)" != 0 ]; then
    sl_why="not root: slurmd and munged of a private test cluster need root"
    return 77
  fi
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
     ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
    # shellcheck source=jobs/deps.sh
    source "$src/../../jobs/deps.sh"
    td_deps slurm-wlm munge >&2 || true
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
      sl_why="slurm-wlm and munge are not installed and could not be installed"
      return 77
    fi
  fi
  sl_ports || { sl_why="no two free TCP ports for slurmctld and slurmd"; return 77; }
  rm -rf "$dir"
  mkdir -p "$dir/state" "$dir/spool" || { sl_why="cannot create $dir"; return 77; }
  chmod 700 "$dir"
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge.key"
  sed -e "s|@DIR@|$dir|g" -e "s|@CTLD_PORT@|$sl_ctld_port|" -e "s|@SLURMD_PORT@|$sl_slurmd_port|" \
    -e "s|@CPUS@|${SL_CPUS:-16}|" "$src/slurm.conf.in" >"$dir/slurm.conf"
  printf 'NodeName=localhost Name=gpu File=/dev/null\nNodeName=localhost Name=gpu File=/dev/zero\n' \
    >"$dir/gres.conf"
  export SLURM_CONF=$dir/slurm.conf
  sl_dir=$dir
  sl_spawn munged "$dir/munged.out" munged --foreground --force --socket="$dir/munge.socket" \
    --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
    --seed-file="$dir/munged.seed"
  local t
  for ((t = 0; t < 100; ++t)); do
    [ -S "$dir/munge.socket" ] && break
    sl_alive 0 || break
    sleep 0.1
  done
  if [ ! -S "$dir/munge.socket" ]; then
    sl_why="munged did not start: $(tail -n 3 "$dir/munged.out" "$dir/munged.log" 2>/dev/null | tr '\n' ' ')"
    return 77
  fi
  sl_spawn slurmctld "$dir/slurmctld.out" slurmctld -D -i -f "$dir/slurm.conf"
  sl_spawn slurmd "$dir/slurmd.out" slurmd -D -N localhost -f "$dir/slurm.conf"
  local state=
  for ((t = 0; t < 300; ++t)); do
    state=$(sinfo -h -n localhost -o %T 2>/dev/null | head -n 1)
    [ "$state" = idle ] && break
    if ! sl_alive 1 || ! sl_alive 2; then break; fi
    sleep 0.1
  done
  if [ "$state" != idle ]; then
    sl_why="the node did not become idle (state '${state:-none}'): $(tail -n 3 "$dir"/slurm*.out "$dir/slurmctld.log" "$dir/slurmd.log" 2>/dev/null | tr '\n' ' ')"
    return 77
  fi
  return 0
}

sl_stop() {
  [ ${#sl_pids[@]} = 0 ] && return 0
  if [ -n "${SLURM_CONF:-}" ] && kill -0 "${sl_pids[1]:-0}" 2>/dev/null; then
    # no job may outlive the daemons (its processes would run on unmanaged):
    # cancel pending and running ones and wait until none is left
    scontrol update PartitionName=test State=DOWN 2>/dev/null
    local t
    for ((t = 0; t < 150; ++t)); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      scancel --quiet --partition=test 2>/dev/null
      sleep 0.2
    done
  fi
  local i
  for ((i = ${#sl_pids[@]} - 1; i >= 0; --i)); do
    kill -TERM "${sl_pids[$i]}" 2>/dev/null
  done
  for ((t = 0; t < 100; ++t)); do
    local any=0
    for i in "${!sl_pids[@]}"; do kill -0 "${sl_pids[$i]}" 2>/dev/null && any=1; done
    [ $any = 0 ] && break
    sleep 0.1
  done
  for i in "${!sl_pids[@]}"; do
    if kill -0 "${sl_pids[$i]}" 2>/dev/null; then
      echo "cluster: ${sl_names[$i]} (pid ${sl_pids[$i]}) ignored SIGTERM; SIGKILL" >&2
      kill -KILL "${sl_pids[$i]}" 2>/dev/null
    fi
    wait "${sl_pids[$i]}" 2>/dev/null
  done
  sl_pids=()
  sl_names=()
}
