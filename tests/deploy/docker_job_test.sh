#!/usr/bin/env bash
# Builds Lockstep's server and worker images for real and trains through
# them: the base image from Debian's packages (make_base_image.sh), both
# images from deploy/docker/Dockerfile, then
#   1. each image runs as uid 10001 and answers --help;
#   2. one job as containers: the pods that the lockstep-ps runtime with
#      deploy/k8s/trainjobs/trainjob-mlp.yaml creates (tests/deploy/
#      jobset_render.py: the environment exactly as Trainer and the runtime
#      set it), one server and two workers, one epoch of the tutorial MLP;
#      every container must exit 0, rank 0 reach the accuracy floor, and
#      the model equal that of lockstep_launch with that shape;
#   3. the same runtime for a TrainJob of three nodes (numNodes=3), 60
#      steps, to the model of lockstep_launch --workers=3; and the
#      all-reduce runtime (deploy/k8s/overlays/allreduce) to the model of
#      lockstep_launch --sync=allreduce;
#   4. the same with mutual TLS, from deploy/k8s/overlays/mtls and
#      trainjob-mlp-mtls.yaml, with throwaway certificates as its Secrets.
# The overlays' runtimes are what kustomize makes of them (the kubectl of
# validate_manifests.sh's venv).
# The Docker daemon is this test's own: started with --bridge=none
# --iptables=false, containers on --network host (every packet stays on
# loopback; pod names resolve to 127.0.0.1 through --add-host), stopped by
# pid at the end. Its image store and the base image's tarball stay in
# BUILD_DIR/docker, so a rerun reuses what is cached.
#
#   tests/deploy/docker_job_test.sh [--build-dir DIR] [--with-python]
#
# --with-python also builds the python image (Debian's PyTorch: large,
# hence not in the suite) and runs trainjob-python.yaml's pods the same way.
#
# Exits 77 (skipped, with the reason) when no Docker daemon can be started
# here: not root, or docker.io/debootstrap not installable. Prints each
# image's size and build time.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build"
with_python=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --build-dir=*) build="${1#*=}"; shift ;;
    --with-python) with_python=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
readonly kAccuracyFloor=0.80   # one epoch of the MLP on Fashion-MNIST
readonly kJobTimeout=600       # seconds for one job's containers

skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "starting a Docker daemon needs root"
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "Installing ${missing[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
       >"$build/docker-install.log" 2>&1; then
    tail -5 "$build/docker-install.log"
    skip "could not install ${missing[*]} (log: $build/docker-install.log)"
  fi
fi
# The Debian client, which speaks the Debian daemon's API version.
docker_bin=/usr/bin/docker
[[ -x $docker_bin ]] || docker_bin="$(command -v docker)"

state="$build/docker"
mkdir -p "$state/data" "$state/cache"
# Socket paths are short-lived and must stay short (108 bytes).
run_dir="$(mktemp -d /tmp/lockstep-docker.XXXXXX)"
work="$(mktemp -d "${TMPDIR:-/tmp}/lockstep-docker-job.XXXXXX")"
export DOCKER_HOST="unix://$run_dir/docker.sock"
dockerd_pid=""
containers=()
cleanup() {
  for c in "${containers[@]}"; do
    "$docker_bin" rm -f "$c" >/dev/null 2>&1 || true
  done
  if [[ -n $dockerd_pid ]]; then
    kill "$dockerd_pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$dockerd_pid" 2>/dev/null || true
  fi
  # dockerd leaves its default network namespace mounted under exec-root.
  awk -v d="$run_dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts |
    sort -r | xargs -r -n1 umount 2>/dev/null || true
  rm -rf "$run_dir" "$work" 2>/dev/null || true
}
trap 'rc=$?; cleanup; exit $rc' EXIT

dockerd --bridge=none --iptables=false --ip6tables=false \
  --data-root "$state/data" --exec-root "$run_dir/exec" \
  --pidfile "$run_dir/dockerd.pid" -H "$DOCKER_HOST" \
  >"$state/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 1 60); do
  "$docker_bin" info >/dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2>/dev/null || break
  sleep 1
done
if ! "$docker_bin" info >/dev/null 2>&1; then
  tail -5 "$state/dockerd.log"
  skip "the Docker daemon did not start (log: $state/dockerd.log)"
fi
echo "dockerd $("$docker_bin" version -f '{{.Server.Version}}') up (pid $dockerd_pid)"

failures=0
check() {  # check CONDITION-STATUS WHAT
  if [[ $1 -eq 0 ]]; then echo "ok    $2"; else echo "FAIL  $2"; failures=$((failures + 1)); fi
}

DOCKER="$docker_bin" "$root/deploy/docker/make_base_image.sh" --cache "$state/cache"
# The manifests name the images by the project's version (CMakeLists.txt).
version="$(sed -n 's/^project(lockstep VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")"
[[ -n $version ]] || { echo "FAIL  no project VERSION in CMakeLists.txt"; exit 1; }
targets=(server worker)
[[ $with_python -eq 1 ]] && targets+=(python)
for target in "${targets[@]}"; do
  start=$(date +%s)
  if ! DOCKER_BUILDKIT=1 "$docker_bin" build --network host -q \
      -f "$root/deploy/docker/Dockerfile" --target "$target" \
      -t "lockstep-$target:$version" "$root" >"$work/build-$target.log" 2>&1; then
    tail -30 "$work/build-$target.log"
    echo "FAIL  docker build --target $target (log above)"
    exit 1
  fi
  size=$("$docker_bin" image inspect -f '{{.Size}}' "lockstep-$target:$version")
  echo "image lockstep-$target: $((size / 1000000)) MB, built in $(( $(date +%s) - start )) s"
done

for target in "${targets[@]}"; do
  image="lockstep-$target:$version"
  user=$("$docker_bin" image inspect -f '{{.Config.User}}' "$image")
  uid=$("$docker_bin" run --rm --network none --entrypoint id "$image" -u)
  check $([[ $user == 10001:10001 && $uid == 10001 ]]; echo $?) \
    "$image runs as uid 10001 (USER $user, id -u $uid)"
  help_rc=0
  "$docker_bin" run --rm --network none "$image" --help >"$work/help-$target" 2>&1 || help_rc=$?
  check $([[ $help_rc -eq 0 ]] && grep -q -- "--" "$work/help-$target"; echo $?) \
    "$image --help exits 0 and lists flags (exit $help_rc)"
done

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_job NAME RUNTIME TRAINJOB [SECRET=DIR ...]: starts the pods of
# RUNTIME with TRAINJOB as containers, one epoch, and sets job_pods and
# job_port (the servers' port). A Secret volume's files come from the DIR
# given for its name. Set before the call (and reset after it):
#   job_nodes       the TrainJob's numNodes instead of its own
#   job_server_args, job_worker_args  more flags for every server, worker
#   job_out         a folder where the server writes the final model
#                   (model.safetensors; in all-reduce, rank 0 writes
#                   model.bin); rank 0's flags go to NAME.train_args
job_pods=()
job_port=""
job_nodes=""
job_server_args=""
job_worker_args=""
job_out=""
start_job() {
  local name="$1" runtime="$2" trainjob="$3"; shift 3
  local secrets=("$@")
  local spec="$work/$name.pods"
  job_port="$(free_port)"
  [[ -z $job_out ]] || { mkdir -p "$job_out"; chown 10001:10001 "$job_out"; }
  [[ $runtime == /* ]] || runtime="$root/$runtime"
  NODES="$job_nodes" SERVER_ARGS="$job_server_args" \
  WORKER_ARGS="$job_worker_args" OUT="$job_out" TRAIN_ARGS="$work/$name.train_args" \
  python3 - "$here" "$runtime" "$root/$trainjob" "$name" \
      "$job_port" "${secrets[@]}" >"$spec" <<'PY'
import os, shlex, socket, sys
sys.path.insert(0, sys.argv[1])
import jobset_render
runtime, trainjob, name, port = sys.argv[2:6]
secrets = dict(s.split("=", 1) for s in sys.argv[6:])
nodes = int(os.environ["NODES"]) if os.environ["NODES"] else None
pods = jobset_render.render(runtime, trainjob, name, nodes)
hosts = [p["fqdn"] for p in pods]

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

for pod in pods:
    (c,) = pod["containers"]
    args = ["--epochs=1" if a.startswith("--epochs=") else a for a in c["args"]]
    server = pod["replicatedJob"] == "ps"
    args += os.environ["SERVER_ARGS" if server else "WORKER_ARGS"].split()
    rank0 = pod["hostname"].endswith("-node-0-0")
    if rank0:
        with open(os.environ["TRAIN_ARGS"], "w") as f:
            f.writelines(a + "\n" for a in args
                         if not a.startswith("--metrics_port="))
    # Host networking: per-container ports must differ.
    args = [f"{a.split('=', 1)[0]}={free_port()}"
            if a.startswith(("--metrics_port=", "--health_port=")) else a
            for a in args]
    env = {k: v.replace(":2222", f":{port}") for k, v in c["env"].items()}
    opts = ["--network", "host", "--read-only", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges"]
    opts += [f"--add-host={h}:127.0.0.1" for h in hosts]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for m in c["volumeMounts"]:
        v = volumes[m["name"]]
        if "emptyDir" in v:
            opts += ["--tmpfs", f"{m['mountPath']}:rw,mode=1777"]
        elif "secret" in v:
            opts += ["-v", f"{secrets[v['secret']['secretName']]}:{m['mountPath']}:ro"]
        else:
            raise SystemExit(f"{pod['hostname']}: volume {m['name']} is neither "
                             "an emptyDir nor a Secret")
    # The model: the server's, or rank 0's in all-reduce (no server holds it).
    allreduce = any("--sync=allreduce" in (p["containers"][0]["command"] or [])
                    for p in pods if p["replicatedJob"] != "ps")
    if os.environ["OUT"] and (rank0 if allreduce else server):
        opts += ["-v", f"{os.environ['OUT']}:/out"]
        args.append("--dump_weights=/out/model.bin" if allreduce else
                    "--weights_file=/out/model.safetensors")
    for k, v in env.items():
        opts += ["-e", f"{k}={v}"]
    # A container's command replaces the image's ENTRYPOINT, as in a pod.
    if c["command"]:
        opts += ["--entrypoint", c["command"][0]]
        args = c["command"][1:] + args
    line = [pod["hostname"], c["image"]] + opts + ["--"] + args
    print(" ".join(shlex.quote(w) for w in line))
PY
  local line
  job_pods=()
  while IFS= read -r line; do
    local words
    eval "words=($line)"
    local host="${words[0]}" image="${words[1]}" opts=() args=() seen=0 w
    for w in "${words[@]:2}"; do
      if [[ $seen -eq 0 && $w == "--" ]]; then seen=1; continue; fi
      if [[ $seen -eq 0 ]]; then opts+=("$w"); else args+=("$w"); fi
    done
    "$docker_bin" run -d --name "$host" "${opts[@]}" "$image" "${args[@]}" >/dev/null
    containers+=("$host")
    job_pods+=("$host")
  done <"$spec"
  local want=$(( 1 + ${job_nodes:-2} ))
  check $([[ ${#job_pods[@]} -eq $want ]]; echo $?) \
    "$name: started ${#job_pods[@]} containers (1 server, $((want - 1)) workers)"
}

# same_as_launcher NAME WORKERS [FLAG...]: the model the server of NAME's
# containers wrote (job_out) equals the one lockstep_launch's server writes
# (this build's binaries) with WORKERS workers, one server, the same
# training flags, job_server_args and FLAGs (for all-reduce, rank 0's).
same_as_launcher() {
  local name="$1" workers="$2" args=() a; shift 2
  while IFS= read -r a; do args+=("$a"); done <"$work/$name.train_args"
  args+=("$@")
  local ours="$job_out/model.safetensors" theirs="$work/$name.launch.safetensors"
  local output=(--weights_file="$theirs")
  if [[ " ${args[*]} " == *" --sync=allreduce "* ]]; then
    ours="$job_out/model.bin" theirs="$work/$name.launch.w0.bin"
    output=(--dump_weights="$work/$name.launch.w{rank}.bin")
  fi
  local server_flags=()
  for a in $job_server_args; do server_flags+=("--server_flag=$a"); done
  local log="$work/$name.launch.log" rc=0
  timeout "$kJobTimeout" "$build/bin/lockstep_launch" --ps=1 \
    --workers="$workers" "${server_flags[@]}" "${args[@]}" \
    "${output[@]}" >"$log" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || tail -15 "$log"
  check $([[ $rc -eq 0 && -s $ours ]] && cmp -s "$ours" "$theirs"; echo $?) \
    "$name: the model equals lockstep_launch --workers=$workers's, bit for bit (launcher exit $rc)"
}

# finish_job NAME: waits for the containers of start_job, checks every exit
# code and rank 0's accuracy, and removes them.
finish_job() {
  local name="$1" accuracy="${2:-}" pods=("${job_pods[@]}")
  local deadline=$(( $(date +%s) + kJobTimeout )) p code
  for p in "${pods[@]}"; do
    local left=$(( deadline - $(date +%s) ))
    (( left > 0 )) || left=1
    code=$(timeout "$left" "$docker_bin" wait "$p" || echo timeout)
    "$docker_bin" logs "$p" >"$work/$p.log" 2>&1 || true
    check $([[ $code == 0 ]]; echo $?) "$name: container $p exited $code"
    [[ $code == 0 ]] || tail -15 "$work/$p.log"
  done
  local rank0 acc
  rank0="$(printf '%s\n' "${pods[@]}" | grep -- '-node-0-0$')"
  if [[ $accuracy != --no-accuracy ]]; then
    acc=$(grep -o 'Test accuracy [0-9.]*' "$work/$rank0.log" | awk '{print $3}' | tail -1)
    check $(python3 -c "import sys; sys.exit(0 if '$acc' and float('$acc') >= $kAccuracyFloor else 1)"; echo $?) \
      "$name: rank 0's test accuracy ${acc:-(none)} >= $kAccuracyFloor"
  fi
  grep -h "Test accuracy" "$work/$rank0.log" || true
  for p in "${pods[@]}"; do "$docker_bin" rm -f "$p" >/dev/null 2>&1 || true; done
}

job_out="$work/out-2"
start_job lockstep-ci deploy/k8s/trainer/cluster-training-runtime.yaml \
  deploy/k8s/trainjobs/trainjob-mlp.yaml
finish_job lockstep-ci
same_as_launcher lockstep-ci 2

# The same runtime for a TrainJob of three nodes: the server learns the
# count from the workers. With three, the sum order is fixed for equality.
job_nodes=3 job_out="$work/out-3" job_server_args="--sum_order=rank"
job_worker_args="--max_steps=60"
start_job lockstep-ci-3 deploy/k8s/trainer/cluster-training-runtime.yaml \
  deploy/k8s/trainjobs/trainjob-mlp.yaml
finish_job lockstep-ci-3 --no-accuracy
same_as_launcher lockstep-ci-3 3
job_nodes="" job_out="" job_server_args="" job_worker_args=""

# The overlays' runtimes: kustomize makes them (the venv's kubectl).
if ! "$here/validate_manifests.sh" --bin-dir "$build/bin" --setup-only \
    >"$work/venv.log" 2>&1; then
  tail -5 "$work/venv.log"
  echo "FAIL  the venv with kubectl (validate_manifests.sh --setup-only)"
  exit 1
fi
for overlay in mtls allreduce; do
  "$build/deploy-venv/bin/kubectl" kustomize "$root/deploy/k8s/overlays/$overlay" \
    >"$work/runtime-$overlay.yaml"
done

# All-reduce (gloo) from the lockstep-allreduce runtime: the workers reach
# each other at their pod IPs (loopback here); rank 0 holds the model.
job_out="$work/out-ar" job_worker_args="--max_steps=60"
start_job lockstep-ci-ar "$work/runtime-allreduce.yaml" \
  deploy/k8s/trainjobs/trainjob-mlp-allreduce.yaml
finish_job lockstep-ci-ar --no-accuracy
same_as_launcher lockstep-ci-ar 2 --sync=allreduce --allreduce=gloo
job_out="" job_worker_args=""

# Mutual TLS: the two Secrets the mTLS runtime mounts, from throwaway
# certificates, readable by the images' user.
"$root/deploy/tls/make_certs.sh" "$work/certs" --server-san=DNS:lockstep-server >/dev/null
for s in ps:server worker:worker; do
  d="$work/lockstep-${s%%:*}-tls"
  mkdir -p "$d"
  cp "$work/certs/${s#*:}.pem" "$d/tls.crt"
  cp "$work/certs/${s#*:}.key" "$d/tls.key"
  cp "$work/certs/ca.pem" "$d/ca.crt"
  chown -R 10001:10001 "$d"
  chmod 0500 "$d" && chmod 0400 "$d"/*
done
start_job lockstep-ci-mtls "$work/runtime-mtls.yaml" \
  deploy/k8s/trainjobs/trainjob-mlp-mtls.yaml \
  "lockstep-ps-tls=$work/lockstep-ps-tls" "lockstep-worker-tls=$work/lockstep-worker-tls"
# While the job runs: lockstep_ctl with the admin certificate reads the
# server's status; without a certificate it is refused.
ps_host=lockstep-ci-mtls-ps-0-0.lockstep-ci-mtls
ctl() {
  "$docker_bin" run --rm --network host --add-host "$ps_host:127.0.0.1" \
    -v "$work/certs:/certs:ro" --entrypoint lockstep_ctl "lockstep-server:$version" \
    status "$ps_host:$job_port" "$@"
}
chmod 0755 "$work/certs" && chmod 0644 "$work/certs/"*
admin_rc=1
for _ in $(seq 1 20); do
  if ctl --tls_cert=/certs/admin.pem --tls_key=/certs/admin.key --tls_ca=/certs/ca.pem \
      --tls_server_name=lockstep-server >"$work/ctl-admin.out" 2>&1 &&
     grep -q "SERVING" "$work/ctl-admin.out"; then
    admin_rc=0
    break
  fi
  sleep 0.5
done
cat "$work/ctl-admin.out"
check $admin_rc "lockstep-ci-mtls: lockstep_ctl with the admin certificate sees the shard SERVING"
plain_rc=0
ctl >"$work/ctl-plain.out" 2>&1 || plain_rc=$?
check $([[ $admin_rc -eq 0 && $plain_rc -ne 0 ]]; echo $?) \
  "lockstep-ci-mtls: lockstep_ctl without a certificate is refused (exit $plain_rc)"
finish_job lockstep-ci-mtls
server_log="$work/lockstep-ci-mtls-ps-0-0.log"
check $(grep -q "(mutual TLS)" "$server_log"; echo $?) \
  "lockstep-ci-mtls: the server listens with mutual TLS"
plain_log="$work/lockstep-ci-ps-0-0.log"
check $(grep -q "(plaintext)" "$plain_log"; echo $?) \
  "lockstep-ci: the plaintext job's server says plaintext"

if [[ $with_python -eq 1 ]]; then
  start_job lockstep-ci-py deploy/k8s/trainer/cluster-training-runtime.yaml \
    deploy/k8s/trainjobs/trainjob-python.yaml
  finish_job lockstep-ci-py
fi

echo "docker_job_test: $failures failed"
[[ $failures -eq 0 ]]
