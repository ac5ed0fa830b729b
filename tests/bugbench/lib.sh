# Shared helpers of the bug benchmark's produce scripts (tests/bugbench/*/produce).
# shellcheck shell=bash
#
# A produce script does, in this order:
#   source "$(dirname "$0")/../lib.sh"
#   bb_init "$@"                      # root, packages, build, PATH, OUT_DIR, FUNCTIONS_FILE
#   bb_attempts 3 attempt             # calls `attempt` until it succeeds (fresh state each time)
# and its `attempt` function uses bb_workdir, bb_net_up, bb_tracerd_start, bb_node (the
# nodes: traced), bb_start (helpers: not traced), bb_wait_for, bb_dump. Everything it starts is stopped, and every namespace and interface
# it creates is removed, by bb_cleanup: after every attempt, on exit, on failure and on
# Ctrl-C.
#
# Several hosts: a case whose case.toml has `hosts = ["HOST=NODE+NODE...", ...]` runs one
# tracerd per host, each tracing only that host's nodes (bb_node starts a node through
# `bbnode-HOST`, the tracerd of HOST targets that comm) under the host name HOST (its own
# UTS namespace), and bb_dump asks every one of them: one dump per host.
#
# Environment:
#   BB_BUILD   where programs are built (default target/bugbench, relative to the repo root);
#              the binaries go to $BB_BUILD/bin, which is put first on PATH
#   TRACERD    the tracerd binary (default: target/release/tracerd of this checkout, else PATH)
#   BB_KEEP=1  keep the production work directory (node logs) instead of removing it

BB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$BB_DIR/../.." && pwd)"
# say, die, need_root, install_packages
# shellcheck source=../../scripts/lib.sh
source "$REPO_ROOT/scripts/lib.sh"

BB_BUILD="${BB_BUILD:-target/bugbench}"
case "$BB_BUILD" in /*) ;; *) BB_BUILD="$REPO_ROOT/$BB_BUILD" ;; esac
export BB_BUILD
case ":$PATH:" in *":$BB_BUILD/bin:"*) ;; *) export PATH="$BB_BUILD/bin:$PATH" ;; esac

BB_WORK=""          # the current attempt's work directory (like a reproducer run's {workdir})
BB_NETNS=()         # namespaces created by bb_net_up
BB_VETHS=()         # host-side veths created by bb_net_up
BB_BRIDGE=""
BB_MOUNTS=()        # mount points to unmount on cleanup (bb_track_mount)
declare -A BB_PIDS=()   # node name -> pid (also its process group: nodes run under setsid)
BB_REASON=""        # why the last attempt failed (one line)
BB_DUMP=""          # the dump of the successful attempt (the first host's)
BB_DUMPS=()         # every host's dump of the successful attempt, in case.toml's order
BB_HOSTS=()         # case.toml's hosts, in order (empty: one host, one tracerd)
declare -A BB_HOST_OF=()        # node -> its host
declare -A BB_TRACERD_PIDS=()   # host (_: the only one) -> its tracerd

bb_log() { printf '[%s] %s\n' "${BB_CASE:-bugbench}" "$*" >&2; }

# bb_build: compiles programs/*.c into $BB_BUILD/bin when the source is newer than the binary.
bb_build() {
  command -v gcc >/dev/null || install_packages gcc libc6-dev
  mkdir -p "$BB_BUILD/bin"
  local src name bin
  for src in "$BB_DIR"/programs/*.c; do
    name="$(basename "$src" .c)"
    bin="$BB_BUILD/bin/$name"
    if [ ! -x "$bin" ] || [ "$src" -nt "$bin" ]; then
      gcc -O1 -g -Wall -o "$bin.tmp.$$" "$src" || die "building $src failed"
      mv -f "$bin.tmp.$$" "$bin"
    fi
  done
}

bb_tracerd_bin() {
  if [ -n "${TRACERD:-}" ]; then
    echo "$TRACERD"
  elif [ -x "$REPO_ROOT/target/release/tracerd" ]; then
    echo "$REPO_ROOT/target/release/tracerd"
  elif command -v tracerd >/dev/null; then
    command -v tracerd
  else
    die "tracerd not found: build it (cargo build --release) or set TRACERD"
  fi
}

# bb_init "$@": the common start of every produce script. Sets OUT_DIR and FUNCTIONS_FILE
# (absolute; FUNCTIONS_FILE empty when not given), installs packages named in
# BB_PACKAGES, builds the programs and installs the cleanup trap.
bb_init() {
  if [ $# -lt 1 ] || [ $# -gt 2 ]; then echo "usage: $0 OUT_DIR [FUNCTIONS_FILE]" >&2; exit 2; fi
  need_root "$@"
  FUNCTIONS_FILE=""
  if [ $# -eq 2 ]; then
    [ -r "$2" ] || die "functions file $2 is not readable"
    FUNCTIONS_FILE="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
  fi
  mkdir -p "$1"
  OUT_DIR="$(cd "$1" && pwd)"
  # shellcheck disable=SC2086
  install_packages iproute2 procps util-linux gcc libc6-dev ${BB_PACKAGES:-}
  bb_build
  TRACERD_BIN="$(bb_tracerd_bin)"
  bb_read_hosts "$(cd "$(dirname "$0")" && pwd)/case.toml"
  trap 'bb_log interrupted; bb_cleanup; exit 130' INT TERM
  trap 'bb_cleanup' EXIT
}

# bb_read_hosts CASE_TOML: reads the case's `hosts` (none: one host) into BB_HOSTS and
# BB_HOST_OF, and makes each host's node starter bbnode-HOST (a link to bbnode: its comm is
# what that host's tracerd targets). A host name is at most 8 of [a-z0-9-], so that
# "bbnode-HOST" fits a comm (15 characters).
bb_read_hosts() {
  local spec host node nodes
  BB_HOSTS=()
  BB_HOST_OF=()
  [ -f "$1" ] || return 0
  for spec in $(sed -n 's/^hosts[[:space:]]*=[[:space:]]*//p' "$1" | head -n 1 | tr -d '[],"'); do
    host="${spec%%=*}"
    nodes="${spec#*=}"
    [[ "$spec" == *=* && "$host" =~ ^[a-z0-9-]{1,8}$ && -n "$nodes" ]] \
      || die "$1: hosts entry '$spec' is not HOST=NODE[+NODE...] with HOST at most 8 of [a-z0-9-]"
    BB_HOSTS+=("$host")
    for node in ${nodes//+/ }; do
      [ -z "${BB_HOST_OF[$node]:-}" ] || die "$1: node $node is on two hosts"
      BB_HOST_OF[$node]="$host"
    done
    ln -sfn bbnode "$BB_BUILD/bin/bbnode-$host"
  done
}

# bb_workdir: a fresh work directory with one subdirectory per node name given.
bb_workdir() {
  BB_WORK="$(mktemp -d "/tmp/bb-${BB_CASE:-case}.XXXXXX")"
  chmod 755 "$BB_WORK"
  local n
  for n in "$@"; do mkdir -p "$BB_WORK/$n"; done
}

# bb_wait_for SECONDS CMD...: runs CMD every 50 ms until it succeeds; fails after SECONDS.
bb_wait_for() {
  local _bb_limit=$(( $1 * 20 )) _bb_i=0
  shift
  while ! "$@" >/dev/null 2>&1; do
    _bb_i=$((_bb_i + 1))
    [ "$_bb_i" -ge "$_bb_limit" ] && return 1
    sleep 0.05
  done
}

# bb_log_has NODE TEXT: the node's log contains TEXT (fixed string).
bb_log_has() { grep -qF -- "$2" "$BB_WORK/$1.log" 2>/dev/null; }

# bb_net_up TAG NODE=ADDRESS...: the reproducer's test network, with bb names: a bridge
# bb<TAG>br with address .254 of the nodes' /24 (IPv4) or ::fe of their /64 (IPv6, written
# PREFIX::ID with at most four groups before the ::), and per node a namespace bb<TAG>-<NODE>
# joined by a veth whose bridge end is bb<TAG>n<I> (I counts from 0 in argument order). As on
# the test bed, IPv6 addresses skip duplicate address detection and the bridge floods
# multicast. Stale leftovers of an interrupted earlier run with the same names are removed
# first.
bb_net_up() {
  local tag="$1" i=0 spec node addr
  shift
  BB_BRIDGE="bb${tag}br"
  bb_net_remove_stale "$tag" "$@"
  addr="${1#*=}"
  ip link add "$BB_BRIDGE" type bridge mcast_snooping 0
  if [[ "$addr" == *:* ]]; then
    ip addr add "${addr%::*}::fe/64" dev "$BB_BRIDGE" nodad
  else
    ip addr add "${addr%.*}.254/24" dev "$BB_BRIDGE"
  fi
  ip link set "$BB_BRIDGE" up
  for spec in "$@"; do
    node="${spec%%=*}"
    addr="${spec#*=}"
    ip netns add "bb${tag}-${node}"
    BB_NETNS+=("bb${tag}-${node}")
    ip link add "bb${tag}n${i}" type veth peer name eth0 netns "bb${tag}-${node}"
    BB_VETHS+=("bb${tag}n${i}")
    ip link set "bb${tag}n${i}" master "$BB_BRIDGE" up
    if [[ "$addr" == *:* ]]; then
      ip -n "bb${tag}-${node}" addr add "$addr/64" dev eth0 nodad
    else
      ip -n "bb${tag}-${node}" addr add "$addr/24" dev eth0
    fi
    ip -n "bb${tag}-${node}" link set eth0 up
    ip -n "bb${tag}-${node}" link set lo up
    i=$((i + 1))
  done
}

bb_net_remove_stale() {
  local tag="$1" i=0 spec
  shift
  for spec in "$@"; do
    ip link del "bb${tag}n${i}" 2>/dev/null || true
    ip netns del "bb${tag}-${spec%%=*}" 2>/dev/null || true
    i=$((i + 1))
  done
  ip link del "bb${tag}br" 2>/dev/null || true
}

bb_net_down() {
  local v n
  for v in "${BB_VETHS[@]}"; do ip link del "$v" 2>/dev/null || true; done
  for n in "${BB_NETNS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  [ -n "$BB_BRIDGE" ] && { ip link del "$BB_BRIDGE" 2>/dev/null || true; }
  BB_VETHS=()
  BB_NETNS=()
  BB_BRIDGE=""
}

# bb_tracerd_start: starts tracerd targeting the processes started with bb_node (comm
# "bbnode" at their start; see programs/bbnode.c) and their descendants, dumping to
# $OUT_DIR, tracing the functions of $FUNCTIONS_FILE if given; waits until it is ready.
# Gaps and pauses count from 1 s, like the reproducer's own trace of a run. With several
# hosts: one tracerd per host, each targeting comm "bbnode-HOST" under host name HOST.
bb_tracerd_start() {
  if [ ${#BB_HOSTS[@]} -eq 0 ]; then
    bb_tracerd_launch "" bbnode
    return 0
  fi
  local host
  for host in "${BB_HOSTS[@]}"; do bb_tracerd_launch "$host" "bbnode-$host"; done
}

# bb_tracerd_conf HOST: the config of HOST's tracerd ("": the only one).
bb_tracerd_conf() { echo "$BB_WORK/tracerd${1:+-$1}.toml"; }

# bb_tracerd_launch HOST COMM: one tracerd targeting COMM; HOST "" runs it as it is, else
# in a UTS namespace of its own whose host name is HOST (the dump's `host`).
bb_tracerd_launch() {
  local host="$1" cfg log pid
  cfg="$(bb_tracerd_conf "$host")"
  log="$BB_WORK/tracerd${host:+-$host}.log"
  {
    echo "dump_dir = \"$OUT_DIR\""
    echo "control_socket = \"$BB_WORK/tracerd${host:+-$host}.sock\""
    echo "ring_events = 200000"
    echo "gap_ms = 1000"
    echo "pause_ms = 1000"
    # the incident's dump is the one bb_dump asks for; a dump at stop would be a second,
    # later dump of the same host beside it in OUT_DIR
    echo "dump_on_stop = false"
    echo "target_comm = [\"$2\"]"
    [ -n "$FUNCTIONS_FILE" ] && echo "functions = \"$FUNCTIONS_FILE\""
  } > "$cfg"
  if [ -z "$host" ]; then
    "$TRACERD_BIN" run --config "$cfg" > "$log" 2>&1 &
  else
    # /proc/sys/kernel/hostname is the host name of the writer's UTS namespace: the new one
    # shellcheck disable=SC2016
    unshare --uts sh -c 'echo "$1" > /proc/sys/kernel/hostname && shift && exec "$@"' sh "$host" \
      "$TRACERD_BIN" run --config "$cfg" > "$log" 2>&1 &
  fi
  pid=$!
  BB_TRACERD_PIDS[${host:-_}]=$pid
  local i
  for i in $(seq 600); do
    grep -q 'ready' "$log" && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  die "tracerd${host:+ of host $host} did not start: $(tail -n 3 "$log" | tr '\n' ' ')"
}

# bb_dump: asks tracerd (every host's) for a dump; sets BB_DUMPS to their paths, in
# case.toml's order, and BB_DUMP to the first. Fails (BB_REASON set) when a tracerd cannot
# be reached or writes no dump.
bb_dump() {
  local host out hosts=("${BB_HOSTS[@]}")
  [ ${#hosts[@]} -gt 0 ] || hosts=("")
  BB_DUMPS=()
  for host in "${hosts[@]}"; do
    if ! out="$("$TRACERD_BIN" dump --config "$(bb_tracerd_conf "$host")" 2>&1)"; then
      local state="running" log="$BB_WORK/tracerd${host:+-$host}.log"
      kill -0 "${BB_TRACERD_PIDS[${host:-_}]}" 2>/dev/null || state="not running"
      bb_fail "tracerd${host:+ of host $host} dump failed (tracerd $state): $out; tracerd log: $(tail -n 2 "$log" | tr '\n' ' ')"
      return 1
    fi
    [ -f "$out" ] || { bb_fail "tracerd printed $out, which is not a file"; BB_DUMPS=(); return 1; }
    BB_DUMPS+=("$out")
  done
  BB_DUMP="${BB_DUMPS[0]}"
}

bb_tracerd_stop() {
  local host pid i
  for host in "${!BB_TRACERD_PIDS[@]}"; do
    pid="${BB_TRACERD_PIDS[$host]}"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  BB_TRACERD_PIDS=()
}

# bb_start NAME NETNS|- CMD...: starts a process like the reproducer starts a node: cwd
# the work directory, stdout and stderr appended to $BB_WORK/NAME.log, its own session and
# process group, in network namespace NETNS unless "-". Sets BB_PIDS[NAME] (the process's
# own pid: ip netns exec and setsid exec the command in the same process). Not traced
# unless CMD runs bbnode: use bb_node for nodes, bb_start for helpers (clients, storage).
bb_start() {
  local node="$1" ns="$2"
  shift 2
  if [ "$ns" = "-" ]; then
    ( cd "$BB_WORK" && exec setsid "$@" ) >> "$BB_WORK/$node.log" 2>&1 < /dev/null &
  else
    ( cd "$BB_WORK" && exec ip netns exec "$ns" setsid "$@" ) >> "$BB_WORK/$node.log" 2>&1 < /dev/null &
  fi
  BB_PIDS[$node]=$!
}

# bb_node NODE NETNS|- CMD...: bb_start of a node, traced by tracerd (through bbnode; with
# several hosts, through bbnode-HOST of the node's host: traced by that host's tracerd only).
bb_node() {
  local node="$1" ns="$2" starter=bbnode
  shift 2
  if [ ${#BB_HOSTS[@]} -gt 0 ]; then
    [ -n "${BB_HOST_OF[$node]:-}" ] || die "node $node is on none of case.toml's hosts"
    starter="bbnode-${BB_HOST_OF[$node]}"
  fi
  bb_start "$node" "$ns" "$starter" "$@"
}

# bb_alive NODE: the node's process is running (not a zombie).
bb_alive() {
  local pid="${BB_PIDS[$1]:-}"
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null
}

# bb_reap NODE: waits for the node's process to be gone (after a kill); at most 5 s.
bb_reap() {
  local pid="${BB_PIDS[$1]:-}" i
  [ -n "$pid" ] || return 0
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    # a zombie child of ours: collect it
    grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && break
    sleep 0.05
  done
  wait "$pid" 2>/dev/null || true
}

# bb_stop_nodes: SIGKILL to every node's process group (and the node itself).
bb_stop_nodes() {
  local node pid
  for node in "${!BB_PIDS[@]}"; do
    pid="${BB_PIDS[$node]}"
    kill -KILL -- "-$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  for node in "${!BB_PIDS[@]}"; do wait "${BB_PIDS[$node]}" 2>/dev/null || true; done
  BB_PIDS=()
}

# bb_track_mount PATH: PATH is (about to be) a mount point; bb_cleanup unmounts it.
bb_track_mount() { BB_MOUNTS+=("$1"); }

bb_unmount_all() {
  local m
  for m in "${BB_MOUNTS[@]}"; do
    mountpoint -q "$m" 2>/dev/null && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
  done
  BB_MOUNTS=()
}

# bb_cleanup: stops nodes and tracerd, unmounts, removes the network and the work directory.
bb_cleanup() {
  bb_unmount_all
  bb_stop_nodes
  bb_tracerd_stop
  bb_net_down
  if [ -n "$BB_WORK" ] && [ -d "$BB_WORK" ]; then
    if [ "${BB_KEEP:-0}" = 1 ]; then
      bb_log "kept the work directory $BB_WORK"
    else
      rm -rf "$BB_WORK"
    fi
  fi
  BB_WORK=""
}

# bb_attempts N FUNCTION: calls FUNCTION up to N times, cleaning up after each attempt,
# until it returns 0 with BB_DUMP set; prints the dump's path on stdout (one line per
# host's dump with several hosts). FUNCTION returns
# non-zero after setting BB_REASON when the bug did not show.
bb_attempts() {
  # (names that cannot shadow the caller's: bash scoping is dynamic)
  local _bb_n="$1" _bb_fn="$2" _bb_i
  for _bb_i in $(seq "$_bb_n"); do
    BB_REASON="" BB_DUMP="" BB_DUMPS=()
    if "$_bb_fn" && [ -n "$BB_DUMP" ]; then
      bb_cleanup
      printf '%s\n' "${BB_DUMPS[@]}"
      return 0
    fi
    bb_log "attempt $_bb_i/$_bb_n: ${BB_REASON:-failed}"
    bb_cleanup
  done
  echo "${BB_CASE:-produce}: the bug did not show in $_bb_n attempts: ${BB_REASON:-unknown}" >&2
  exit 1
}

# bb_call_offset BINARY FUNCTION CALLEE N: the offset (decimal bytes from FUNCTION's
# start) of the Nth call of CALLEE (a PLT entry or a function) inside FUNCTION -- what a
# schedule's `offset` names to crash right before that call. Needs objdump (binutils).
bb_call_offset() {
  local found
  found="$(objdump -d --no-show-raw-insn "$1" | awk -v fn="<$2>:" -v callee="$3" -v n="$4" '
    $2 == fn { start = $1; inside = 1; next }
    inside && /^$/ { exit }
    inside && $2 == "call" && ($NF == "<" callee "@plt>" || $NF == "<" callee ">") {
      if (++seen == n) { addr = $1; sub(":", "", addr); print start, addr; exit }
    }')"
  [ -n "$found" ] || return 1
  echo $(( 16#${found#* } - 16#${found% *} ))
}

# bb_fail REASON: sets BB_REASON and returns 1 (use as `cond || { bb_fail "..."; return 1; }`).
bb_fail() { BB_REASON="$*"; return 1; }
