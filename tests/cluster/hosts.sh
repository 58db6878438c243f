# shellcheck shell=bash
# hosts.sh — a Slurm cluster of several hosts on one machine, for the tests;
# sourced, not run (tests/cluster/run.sh).
#
# Each host is a network namespace of its own (an address on a private
# subnet, a veth pair to a bridge), a UTS namespace (its own hostname), an
# IPC namespace and a /dev/shm of its own (so that UCX, which decides
# shared-memory reachability by IPC namespace, talks TCP between hosts, and
# ranks of one host share memory) and a mount namespace (its own
# /etc/hosts, bind-mounted, naming the cluster's hosts; and room for a
# mount only that host sees). The bridge and
# slurmctld live in one more namespace, the "hub"; munged's socket is a file
# every host sees, as is the rest of the file system (the shared
# checkpoint/data directory a cluster's parallel file system would be).
# Traffic between hosts crosses the veths as TCP; nothing leaves the
# machine (no address outside these namespaces, no route out).
#
#   cl_start DIR N   N hosts node1..nodeN, each its own slurmd; slurmctld and
#                    munged in the hub. Returns 0, or 77 with the reason in
#                    cl_why (not root, no namespaces, no packages).
#   cl_do CMD...     run a client command (sbatch, squeue, scontrol, scancel,
#                    sinfo) in the hub, where slurmctld listens
#   cl_on I CMD...   run CMD inside host I's namespaces (net, UTS, mount, IPC)
#   cl_ns I          host I's network namespace name; cl_veth I: host I's
#                    veth end on the bridge (its counters: traffic of host I)
#   cl_kill_host I   SIGKILL every process in host I's network namespace
#                    (its slurmd, slurmstepd and ranks): a node lost
#   cl_stop          cancel every job, stop exactly what cl_start started,
#                    kill what is left inside the namespaces, delete them.
#                    Safe to call twice; call it from an EXIT trap.
cl_pids=()
cl_names=()
cl_ns_list=()
cl_why=


cl_spawn() { # cl_spawn NAME LOG CMD... — start CMD in the background, record its PID
  local name=$1 log=$2
  shift 2
  "$@" >>"$log" 2>&1 </dev/null &
  cl_pids+=($!)
  cl_names+=("$name")
}

cl_ns() { echo "td${cl_tag}n$1"; }
cl_veth() { echo "td${cl_tag}v$1"; }
cl_do() { nsenter --net="/run/netns/$cl_hub" "$@"; }
# a host's namespaces are those of its slurmd
cl_on() {
  local i=$1
  shift
  nsenter -t "${cl_host_pid[$i]}" -n -u -m -i "$@"
}

cl_start() {
  local dir=$1 n=$2 src t i
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [ "$(id -u)" != 0 ]; then
    cl_why="not root: network namespaces, veths and a bridge need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    return 77
  fi
  local tool
  for tool in ip nsenter unshare; do
    command -v "$tool" >/dev/null || { cl_why="'$tool' is not installed (iproute2, util-linux)"; return 77; }
  done
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
     ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
    # shellcheck source=jobs/deps.sh
    source "$src/../../jobs/deps.sh"
    td_deps slurm-wlm munge iproute2 >&2 || true
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
      cl_why="slurm-wlm and munge are not installed and could not be installed"
      return 77
    fi
  fi
  # a tag of this run in every name (namespaces, interfaces), a subnet of
  # 10.200-254.x.0/24 from it: two runs side by side do not meet
  cl_tag=$(printf '%04x' $(($$ % 65536)))
  cl_net="10.$((200 + $$ % 55)).$((($$ / 55) % 256))"
  cl_hub=td${cl_tag}hub
  rm -rf "$dir"
  mkdir -p "$dir/state" || { cl_why="cannot create $dir"; return 77; }
  chmod 700 "$dir"
  if ! ip netns add "$cl_hub" 2>"$dir/netns.err"; then
    cl_why="cannot create a network namespace: $(tr '\n' ' ' <"$dir/netns.err")"
    return 77
  fi
  cl_ns_list+=("$cl_hub")
  ip -n "$cl_hub" link set lo up &&
    ip -n "$cl_hub" link add br0 type bridge &&
    ip -n "$cl_hub" addr add "$cl_net.1/24" dev br0 &&
    ip -n "$cl_hub" link set br0 up ||
    { cl_why="cannot make the bridge in $cl_hub"; return 77; }
  {
    echo "127.0.0.1 localhost"
    echo "$cl_net.1 ctl"
    for ((i = 1; i <= n; ++i)); do echo "$cl_net.$((10 + i)) node$i"; done
  } >"$dir/hosts"
  for ((i = 1; i <= n; ++i)); do
    local ns veth
    ns=$(cl_ns "$i") veth=$(cl_veth "$i")
    ip netns add "$ns" || { cl_why="cannot create the namespace $ns"; return 77; }
    cl_ns_list+=("$ns")
    ip -n "$cl_hub" link add "$veth" type veth peer name eth0 netns "$ns" &&
      ip -n "$cl_hub" link set "$veth" master br0 &&
      ip -n "$cl_hub" link set "$veth" up &&
      ip -n "$ns" link set lo up &&
      ip -n "$ns" addr add "$cl_net.$((10 + i))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up ||
      { cl_why="cannot connect $ns to the bridge"; return 77; }
  done
  # the hosts reach each other (and the hub) over the bridge
  for ((t = 0; t < 50; ++t)); do
    ip netns exec "$(cl_ns 1)" ping -c1 -W1 "$cl_net.1" >/dev/null 2>&1 && break
    sleep 0.1
  done
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge.key"
  local nodes="node[1-$n]"
  sed -e "s|@DIR@|$dir|g" -e "s|@NET@|$cl_net|g" -e "s|@NODES@|$nodes|g" \
    -e "s|@CPUS@|${CL_CPUS:-4}|" "$src/slurm.conf.in" >"$dir/slurm.conf"
  for ((i = 1; i <= n; ++i)); do
    echo "NodeName=node$i NodeAddr=$cl_net.$((10 + i)) CPUs=${CL_CPUS:-4} State=UNKNOWN" >>"$dir/slurm.conf"
  done
  echo "PartitionName=test Nodes=$nodes Default=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  cl_spawn munged "$dir/munged.out" nsenter --net="/run/netns/$cl_hub" munged --foreground --force \
    --socket="$dir/munge.socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"
  for ((t = 0; t < 100; ++t)); do
    [ -S "$dir/munge.socket" ] && break
    kill -0 "${cl_pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -S "$dir/munge.socket" ]; then
    cl_why="munged did not start: $(tail -n 3 "$dir/munged.out" "$dir/munged.log" 2>/dev/null | tr '\n' ' ')"
    return 77
  fi
  cl_spawn slurmctld "$dir/slurmctld.out" nsenter --net="/run/netns/$cl_hub" unshare -u -m sh -c \
    'hostname ctl && mount --bind "$1" /etc/hosts && exec slurmctld -D -i -f "$2"' sh \
    "$dir/hosts" "$dir/slurm.conf"
  # a host: its netns (nsenter; ip netns exec would remount /sys without
  # the cgroup tree slurmd looks for), then its own hostname, mount and IPC
  # namespaces (unshare) with its /etc/hosts and /dev/shm, then slurmd — one
  # process, exec after exec, so the recorded PID is slurmd's and its
  # namespaces are the host's
  cl_host_pid=()
  for ((i = 1; i <= n; ++i)); do
    mkdir -p "$dir/spool-node$i"
    cl_spawn "slurmd node$i" "$dir/slurmd$i.out" nsenter --net="/run/netns/$(cl_ns "$i")" unshare -u -m -i sh -c \
      'hostname "$1" && mount --bind "$2" /etc/hosts && mount -t tmpfs -o size=1g tmpfs /dev/shm && exec slurmd -D -N "$1" -f "$3"' sh \
      "node$i" "$dir/hosts" "$dir/slurm.conf"
    cl_host_pid[$i]=${cl_pids[-1]}
  done
  local idle=0 state=
  for ((t = 0; t < 300; ++t)); do
    state=$(cl_do sinfo -h -o '%T %D' 2>/dev/null | tr '\n' ' ')
    idle=$(cl_do sinfo -h -t idle -o %D 2>/dev/null | head -n 1)
    [ "${idle:-0}" = "$n" ] && break
    for i in "${!cl_pids[@]}"; do
      kill -0 "${cl_pids[$i]}" 2>/dev/null || { state="${cl_names[$i]} exited"; t=300; }
    done
    sleep 0.1
  done
  if [ "${idle:-0}" != "$n" ]; then
    cl_why="the $n hosts did not become idle (${state:-no state}): $(tail -n 3 "$dir"/*.out "$dir/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
    return 77
  fi
  return 0
}

cl_kill_host() {
  local ns pid
  ns=$(cl_ns "$1")
  for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null; done
}

cl_stop() {
  local i t any pid ns
  if [ ${#cl_pids[@]} -gt 1 ] && kill -0 "${cl_pids[1]}" 2>/dev/null; then
    # no job may outlive the daemons: cancel pending and running ones
    cl_do scontrol update PartitionName=test State=DOWN 2>/dev/null
    for ((t = 0; t < 100; ++t)); do
      [ -z "$(cl_do squeue -h -o %i 2>/dev/null)" ] && break
      cl_do scancel --quiet --partition=test 2>/dev/null
      sleep 0.2
    done
  fi
  for ((i = ${#cl_pids[@]} - 1; i >= 0; --i)); do kill -TERM "${cl_pids[$i]}" 2>/dev/null; done
  for ((t = 0; t < 100; ++t)); do
    any=0
    for i in "${!cl_pids[@]}"; do kill -0 "${cl_pids[$i]}" 2>/dev/null && any=1; done
    [ $any = 0 ] && break
    sleep 0.1
  done
  for i in "${!cl_pids[@]}"; do
    if kill -0 "${cl_pids[$i]}" 2>/dev/null; then
      echo "cluster: ${cl_names[$i]} (pid ${cl_pids[$i]}) ignored SIGTERM; SIGKILL" >&2
      kill -KILL "${cl_pids[$i]}" 2>/dev/null
    fi
    wait "${cl_pids[$i]}" 2>/dev/null
  done
  # whatever still runs inside our namespaces (slurmstepd, ranks of a
  # killed job) was started by this cluster
  for ns in "${cl_ns_list[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  for ns in "${cl_ns_list[@]}"; do ip netns del "$ns" 2>/dev/null; done
  cl_pids=()
  cl_names=()
  cl_ns_list=()
}
