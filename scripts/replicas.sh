#!/usr/bin/env bash
# Several `halo serve` replicas on one machine, behind HAProxy, watched by
# Prometheus (Debian 12's haproxy 2.6 and prometheus 2.42 packages).
#
#   scripts/replicas.sh N [options] [-- halo serve args...]   start N replicas
#   scripts/replicas.sh stop --dir DIR                        stop a --detach'ed set
#   scripts/replicas.sh status --dir DIR                      processes and HAProxy's view
#
# Replica i listens on 127.0.0.1:(base port + i - 1) with --threads 1 and
# --shutdown-delay 2 unless the halo args say otherwise. HAProxy balances by
# least connections, checks GET /health every 500 ms (one failure takes a
# replica out, two successes bring it back) and retries a request elsewhere
# only when the replica did not take it (connection refused, or 503 from a
# replica that is shutting down); a request in flight on a replica that dies
# fails with HAProxy's 502 or a cut stream, and is never sent twice.
# HAProxy closes each client connection after its answer (option httpclose:
# see haproxy.cfg). Responses carry X-Halo-Replica (the replica that
# answered). Prometheus scrapes every replica's /metrics and HAProxy's every
# second.
#
# Without --detach the script stays in the foreground until Ctrl-C or SIGTERM,
# then stops everything: SIGTERM to every replica (/health turns 503, HAProxy
# takes it out, the requests in flight finish), then HAProxy and Prometheus.
#
# Options:
#   --port P             HAProxy's port, where clients connect (default 8000)
#   --bind ADDR          HAProxy's address (default 127.0.0.1)
#   --base-port P        first replica's port (default 8100)
#   --stats-port P       HAProxy's stats page /stats and Prometheus exporter /metrics (default 8404)
#   --prometheus-port P  Prometheus's port (default 9090)
#   --no-prometheus      no Prometheus
#   --shutdown-delay S   each replica's --shutdown-delay (default 2; 0: none)
#   --halo PATH          halo binary (default: $HALO_BIN, else build/bin/halo of this repository)
#   --dir DIR            state directory: configs, logs, pid and exit files (default: a new mktemp -d)
#   --start-timeout S    seconds to wait for everything to be up (default 120)
#   --detach             return once everything is up; stop later with `stop --dir DIR`
#   -h, --help           this text
#
# HALO_PLUGIN_PATH and the rest of the environment pass through to the replicas.
# HAPROXY_BIN and PROMETHEUS_BIN name other haproxy and prometheus binaries
# (default: from PATH, else /usr/sbin).
# In DIR: haproxy.cfg, prometheus.yml, prometheus-data/, and per process
# (replica-1 .. replica-N, haproxy, prometheus) NAME.log, NAME.pid (its pid)
# and NAME.exit (its exit status, once it has exited).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
me="replicas.sh"

die() { echo "$me: $*" >&2; exit 2; }
say() { echo "$me: $*"; }

usage() { sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; }

# --- Processes --------------------------------------------------------------

# Runs "$@" in a session of its own (a Ctrl-C on the terminal reaches only
# this script, which stops the processes in order), output to DIR/NAME.log.
# A small bash supervisor waits for it and writes its exit status to
# DIR/NAME.exit; DIR/NAME.pid holds the process's own pid.
start_process() {
  local name=$1
  shift
  rm -f "$dir/$name.pid" "$dir/$name.exit"
  # shellcheck disable=SC2016 # expanded by the supervisor, not here
  setsid bash -c '
    pidf=$1 exitf=$2; shift 2
    "$@" &
    echo $! > "$pidf.tmp" && mv "$pidf.tmp" "$pidf"
    wait $!
    echo $? > "$exitf.tmp" && mv "$exitf.tmp" "$exitf"' \
    "halo-replicas-supervisor" "$dir/$name.pid" "$dir/$name.exit" "$@" \
    </dev/null >"$dir/$name.log" 2>&1 &
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -s "$dir/$name.pid" ]] && return 0
    sleep 0.05
  done
  die "$name did not start (see $dir/$name.log)"
}

# The text that names a process as ours in its command line (so that a pid
# file left behind never makes us signal someone else's process).
marker() {
  case "$1" in
    replica-*) echo " --port $((base_port + ${1#replica-} - 1)) " ;;
    haproxy) echo " $dir/haproxy.cfg " ;;
    prometheus) echo " --config.file=$dir/prometheus.yml " ;;
  esac
}

# Prints the pid of process NAME if it is running (not a zombie) and ours.
running_pid() {
  local name=$1 pid cmd state
  [[ -s "$dir/$name.pid" ]] || return 1
  pid=$(<"$dir/$name.pid")
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmd=" $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") " || return 1
  [[ "$cmd" == *"$(marker "$name")"* ]] || return 1
  state=$(sed 's/^.*) \(.\).*/\1/' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ "$state" != Z ]] || return 1
  echo "$pid"
}

exit_status() {
  if [[ -s "$dir/$1.exit" ]]; then cat "$dir/$1.exit"; else echo "?"; fi
}

# Sends SIGNAL to NAMEs, waits up to SECONDS for them to exit, then SIGKILLs
# what is left. Returns 1 if something had to be killed.
signal_and_wait() {
  local sig=$1 seconds=$2 name pid ok=0 deadline i
  shift 2
  for name in "$@"; do
    if pid=$(running_pid "$name"); then kill "-$sig" "$pid" 2>/dev/null || true; fi
  done
  deadline=$((SECONDS + seconds))
  for name in "$@"; do
    [[ -s "$dir/$name.pid" ]] || continue
    pid=$(<"$dir/$name.pid")
    # Gone once its supervisor has reaped it (then all its threads and
    # sockets are gone too; the main thread alone may be a zombie earlier).
    while ((SECONDS < deadline)); do
      if ! running_pid "$name" >/dev/null && [[ -s "$dir/$name.exit" || ! -e "/proc/$pid" ]]; then break; fi
      sleep 0.05
    done
    if pid=$(running_pid "$name"); then
      say "$name (pid $pid) still running after ${seconds} s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      ok=1
      for ((i = 0; i < 40; i++)); do
        [[ -s "$dir/$name.exit" ]] && break
        sleep 0.05
      done
    fi
  done
  return "$ok"
}

# SIGTERM to every replica at once (each drains: /health 503 for its
# --shutdown-delay, HAProxy takes it out, its requests in flight finish), then
# HAProxy's soft stop (SIGUSR1: stop listening, finish the open connections),
# then Prometheus.
stop_all() {
  local replicas=() name rc=0 i
  for ((i = 1; i <= count; i++)); do replicas+=("replica-$i"); done
  signal_and_wait TERM "$stop_timeout" "${replicas[@]}" || rc=1
  signal_and_wait USR1 10 haproxy || rc=1
  if [[ -s "$dir/prometheus.pid" ]]; then signal_and_wait TERM 20 prometheus || rc=1; fi
  for name in "${replicas[@]}" haproxy prometheus; do
    [[ -s "$dir/$name.pid" ]] || continue
    say "$name (pid $(<"$dir/$name.pid")) exited with status $(exit_status "$name")"
  done
  return "$rc"
}

# --- State directory --------------------------------------------------------

write_conf() {
  {
    echo "count=$count"
    echo "port=$port"
    echo "bind=$bind"
    echo "base_port=$base_port"
    echo "stats_port=$stats_port"
    echo "prometheus_port=$prometheus_port"
    echo "stop_timeout=$stop_timeout"
  } >"$dir/replicas.conf"
}

read_conf() {
  [[ -f "$dir/replicas.conf" ]] || die "$dir is not a replicas.sh state directory (no replicas.conf)"
  local key value
  while IFS='=' read -r key value; do
    case "$key" in
      count) count=$value ;;
      port) port=$value ;;
      bind) bind=$value ;;
      base_port) base_port=$value ;;
      stats_port) stats_port=$value ;;
      prometheus_port) prometheus_port=$value ;;
      stop_timeout) stop_timeout=$value ;;
    esac
  done <"$dir/replicas.conf"
}

# HAProxy's view of the replicas: "NAME STATUS" lines from its stats CSV
# (pxname,svname,...; the 18th field is the status: UP, DOWN, "UP 1/2", ...).
haproxy_view() {
  curl -fsS --max-time 2 "http://127.0.0.1:$stats_port/stats;csv" 2>/dev/null |
    awk -F, '$1 == "replicas" && $2 ~ /^replica-/ { print $2, $18 }'
}

# --- stop / status ----------------------------------------------------------

if [[ "${1:-}" == stop || "${1:-}" == status ]]; then
  cmd=$1
  shift
  dir=""
  while (($#)); do
    case "$1" in
      --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown argument to $cmd: $1" ;;
    esac
  done
  [[ -n "$dir" ]] || die "$cmd needs --dir DIR"
  read_conf
  if [[ "$cmd" == stop ]]; then
    stop_all && exit 0
    exit 1
  fi
  for name in $(seq -f 'replica-%g' 1 "$count") haproxy prometheus; do
    [[ -s "$dir/$name.pid" ]] || continue
    if pid=$(running_pid "$name"); then
      echo "$name: running (pid $pid)"
    else
      echo "$name: exited (status $(exit_status "$name"))"
    fi
  done
  echo "HAProxy's view:"
  haproxy_view | sed 's/^/  /' || echo "  (HAProxy's stats page does not answer)"
  exit 0
fi

# --- Start ------------------------------------------------------------------

count="" port=8000 bind=127.0.0.1 base_port=8100 stats_port=8404 prometheus_port=9090
use_prometheus=1 shutdown_delay=2 halo=${HALO_BIN:-$repo/build/bin/halo} dir="" start_timeout=120 detach=0
halo_args=()
while (($#)); do
  case "$1" in
    --port) port=${2:?}; shift 2 ;;
    --bind) bind=${2:?}; shift 2 ;;
    --base-port) base_port=${2:?}; shift 2 ;;
    --stats-port) stats_port=${2:?}; shift 2 ;;
    --prometheus-port) prometheus_port=${2:?}; shift 2 ;;
    --no-prometheus) use_prometheus=0; shift ;;
    --shutdown-delay) shutdown_delay=${2:?}; shift 2 ;;
    --halo) halo=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    --start-timeout) start_timeout=${2:?}; shift 2 ;;
    --detach) detach=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; halo_args=("$@"); break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ -z "$count" ]] || die "one replica count, not '$count' and '$1'"; count=$1; shift ;;
  esac
done

[[ "$count" =~ ^[1-9][0-9]*$ ]] || die "the first argument is the number of replicas (see --help)"
for p in "$port" "$base_port" "$stats_port" "$prometheus_port"; do
  if ! [[ "$p" =~ ^[0-9]+$ ]] || ((p < 1 || p > 65535)); then die "bad port $p"; fi
done
((base_port + count - 1 < 65536)) || die "ports $base_port.. do not fit $count replicas"
[[ "$shutdown_delay" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "bad --shutdown-delay $shutdown_delay"
[[ "$start_timeout" =~ ^[0-9]+$ ]] || die "bad --start-timeout $start_timeout"
((use_prometheus)) || prometheus_port=""

[[ -x "$halo" ]] || die "no halo binary at $halo (build it, or give --halo PATH or HALO_BIN)"
# A program in PATH, else in /usr/sbin (where Debian puts haproxy, outside a user's PATH).
find_program() { command -v "$1" 2>/dev/null || { [[ -x "/usr/sbin/$1" ]] && echo "/usr/sbin/$1"; }; }
haproxy_bin=${HAPROXY_BIN:-$(find_program haproxy || true)}
[[ -n "$haproxy_bin" ]] || die "haproxy not found: install Debian's package haproxy (sudo apt-get install haproxy)"
if ((use_prometheus)); then
  prometheus_bin=${PROMETHEUS_BIN:-$(find_program prometheus || true)}
  [[ -n "$prometheus_bin" ]] ||
    die "prometheus not found: install Debian's package prometheus (sudo apt-get install prometheus), or pass --no-prometheus"
fi
command -v curl >/dev/null || die "curl not found: install Debian's package curl"

# The replicas' own flags: this script owns --host and --port; --threads 1
# (the replicas share the machine's cores) and --shutdown-delay unless given.
has_arg() {
  local a
  for a in "${halo_args[@]}"; do [[ "$a" == "$1" || "$a" == "$1="* ]] && return 0; done
  return 1
}
arg_value() {
  local i
  for ((i = 0; i < ${#halo_args[@]}; i++)); do
    case "${halo_args[i]}" in
      "$1") echo "${halo_args[i + 1]:-}"; return ;;
      "$1="*) echo "${halo_args[i]#*=}"; return ;;
    esac
  done
}
for a in --host --port --sagemaker; do
  has_arg "$a" && die "the halo args must not set $a: replicas.sh gives each replica 127.0.0.1 and its port (--base-port)"
done
extra=()
has_arg --threads || extra+=(--threads 1)
if ! has_arg --shutdown-delay && [[ "$shutdown_delay" != 0 ]]; then
  # (Not `| grep -q`: grep leaving early would fail the pipeline under pipefail.)
  serve_help=$("$halo" serve --help 2>/dev/null || true)
  if [[ "$serve_help" == *--shutdown-delay* ]]; then
    extra+=(--shutdown-delay "$shutdown_delay")
  else
    say "warning: $halo has no --shutdown-delay; a stopping replica refuses connections at once (HAProxy retries them elsewhere)"
    shutdown_delay=0
  fi
fi
has_arg --shutdown-delay && shutdown_delay=$(arg_value --shutdown-delay)
shutdown_timeout=$(arg_value --shutdown-timeout)
# How long `stop` waits for a replica before SIGKILL: its delay, its drain, a margin.
stop_timeout=$(awk -v d="${shutdown_delay:-0}" -v t="${shutdown_timeout:-30}" 'BEGIN { printf "%d", d + t + 15 }')

# Every port must be free: a connection that succeeds means someone listens.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports=("$port" "$stats_port")
[[ -n "$prometheus_port" ]] && ports+=("$prometheus_port")
for ((i = 0; i < count; i++)); do ports+=($((base_port + i))); done
if [[ $(printf '%s\n' "${ports[@]}" | sort | uniq -d) ]]; then
  die "the ports overlap: ${ports[*]} (HAProxy, its stats, Prometheus, replicas)"
fi
for p in "${ports[@]}"; do
  port_in_use "$p" && die "port $p is in use (choose others with --port, --base-port, --stats-port, --prometheus-port)"
done

if [[ -z "$dir" ]]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/halo-replicas.XXXXXX")
else
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  for f in "$dir"/*.pid; do
    [[ -e "$f" ]] || continue
    name=$(basename "$f" .pid)
    if [[ -f "$dir/replicas.conf" ]] && (read_conf && running_pid "$name" >/dev/null); then
      die "$dir is in use: $name is running (scripts/replicas.sh stop --dir $dir)"
    fi
  done
  rm -f "$dir"/*.pid "$dir"/*.exit
fi
write_conf

# --- Configurations ---------------------------------------------------------

{
  cat <<EOF
# Written by scripts/replicas.sh; HAProxy runs in the foreground as the
# caller (haproxy -db -f THIS), not as Debian's service.
global
  maxconn 4096
  log stdout format raw local0 info

defaults
  mode http
  timeout connect 2s
  # Streams and long generations: the client and server timeouts are
  # inactivity timers, and a non-streaming answer sends nothing until done.
  timeout client 10m
  timeout server 10m
  timeout http-request 30s
  timeout queue 60s
  timeout check 2s
  # Retry only what the replica did not take: a refused connection (stopped
  # or dead) or a 503 (halo answers it before doing any work when it is
  # shutting down). Never on an empty response: that request may have run,
  # so it fails with a 502 instead of being sent twice.
  retries 3
  option redispatch 1
  retry-on conn-failure 503
  # Every request on a connection of its own: a refused connection then
  # always means "not taken", never a reused idle connection that the
  # replica closed (stopping) or lost (killed) as the request went out.
  http-reuse never

frontend halo
  bind $bind:$port
  log global
  option httplog
  option dontlognull
  # One request per client connection. On a kept-alive client connection
  # HAProxy answers a replica that died before responding by closing the
  # connection silently, unlogged, for the client to retry; a POST then
  # fails without a word. Closed after each request, it is a logged 502.
  option httpclose
  default_backend replicas

backend replicas
  balance leastconn
  option httpchk GET /health
  http-check expect status 200
  # Out after one failed check (a stopping replica answers 503), back in after two.
  default-server check inter 500ms fall 1 rise 2
  # Which replica answered (also on HAProxy's own errors: <NOSRV> if none).
  http-after-response set-header X-Halo-Replica %s
EOF
  for ((i = 1; i <= count; i++)); do
    echo "  server replica-$i 127.0.0.1:$((base_port + i - 1))"
  done
  cat <<EOF

frontend stats
  bind 127.0.0.1:$stats_port
  http-request use-service prometheus-exporter if { path /metrics }
  stats enable
  stats uri /stats
  stats refresh 2s
EOF
} >"$dir/haproxy.cfg"
"$haproxy_bin" -c -q -f "$dir/haproxy.cfg" || die "HAProxy rejects $dir/haproxy.cfg (above)"

if ((use_prometheus)); then
  mkdir -p "$dir/prometheus-data"
  {
    cat <<EOF
# Written by scripts/replicas.sh.
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: halo
    static_configs:
EOF
    for ((i = 1; i <= count; i++)); do
      echo "      - targets: ['127.0.0.1:$((base_port + i - 1))']"
      echo "        labels: {replica: replica-$i}"
    done
    cat <<EOF
  - job_name: haproxy
    static_configs:
      - targets: ['127.0.0.1:$stats_port']
EOF
  } >"$dir/prometheus.yml"
fi

# --- Start and wait ---------------------------------------------------------

started=0
# shellcheck disable=SC2317 # called by the EXIT trap
on_exit() {
  # A failed start (or a foreground run that ends) leaves nothing running.
  if ((started)); then stop_all >/dev/null 2>&1 || true; fi
}
trap on_exit EXIT
# A signal while starting: exit (normally, so that on_exit stops what started).
trap 'exit 130' INT
trap 'exit 143' TERM

fail_start() {
  local name=$1
  echo "$me: $2; the end of $dir/$name.log:" >&2
  tail -n 20 "$dir/$name.log" >&2 || true
  exit 1
}

started=1
for ((i = 1; i <= count; i++)); do
  start_process "replica-$i" "$halo" serve --host 127.0.0.1 --port $((base_port + i - 1)) "${extra[@]}" "${halo_args[@]}"
done
start_process haproxy "$haproxy_bin" -db -f "$dir/haproxy.cfg"
if ((use_prometheus)); then
  start_process prometheus "$prometheus_bin" --config.file="$dir/prometheus.yml" \
    --storage.tsdb.path="$dir/prometheus-data" --web.listen-address="127.0.0.1:$prometheus_port"
fi

deadline=$((SECONDS + start_timeout))
wait_for() {  # NAME WHAT URL: until URL answers 200
  local name=$1 what=$2 url=$3
  until curl -fsS -o /dev/null --max-time 2 "$url" 2>/dev/null; do
    running_pid "$name" >/dev/null || fail_start "$name" "$name exited (status $(exit_status "$name")) before $what"
    ((SECONDS < deadline)) || fail_start "$name" "$what: no answer within $start_timeout s"
    sleep 0.2
  done
}
for ((i = 1; i <= count; i++)); do
  wait_for "replica-$i" "replica-$i's /health answered 200" "http://127.0.0.1:$((base_port + i - 1))/health"
done
while [[ $(haproxy_view | awk '$2 == "UP"' | wc -l) -ne $count ]]; do
  running_pid haproxy >/dev/null || fail_start haproxy "HAProxy exited (status $(exit_status haproxy))"
  ((SECONDS < deadline)) || fail_start haproxy "HAProxy does not see every replica up: $(haproxy_view | tr '\n' ' ')"
  sleep 0.2
done
if ((use_prometheus)); then
  wait_for prometheus "Prometheus was ready" "http://127.0.0.1:$prometheus_port/-/ready"
fi

url_host=$bind
[[ "$bind" == 0.0.0.0 || "$bind" == "*" ]] && url_host=127.0.0.1
echo "halo replicas: $count up behind HAProxy"
echo "  API:        http://$url_host:$port/v1"
printf '  replicas:  '
for ((i = 1; i <= count; i++)); do printf ' http://127.0.0.1:%d' $((base_port + i - 1)); done
echo
echo "  HAProxy:    http://127.0.0.1:$stats_port/stats (Prometheus format: /metrics)"
if ((use_prometheus)); then
  echo "  Prometheus: http://127.0.0.1:$prometheus_port (e.g. /api/v1/query?query=vllm:num_requests_running)"
fi
echo "  state:      $dir (configs, logs, pid files)"

if ((detach)); then
  echo "  stop:       $0 stop --dir $dir"
  started=0
  exit 0
fi
echo "  stop:       Ctrl-C"

stop_requested=""
trap 'stop_requested=1' INT TERM
declare -A reported=()
names=()
for ((i = 1; i <= count; i++)); do names+=("replica-$i"); done
names+=(haproxy)
((use_prometheus)) && names+=(prometheus)
while [[ -z "$stop_requested" ]]; do
  sleep 1 &
  wait $! || true
  for name in "${names[@]}"; do
    if [[ -z "${reported[$name]:-}" ]] && ! running_pid "$name" >/dev/null; then
      say "$name exited (status $(exit_status "$name")); see $dir/$name.log"
      reported[$name]=1
    fi
  done
done
say "stopping"
started=0
rc=0
stop_all || rc=1
wait || true
exit "$rc"
