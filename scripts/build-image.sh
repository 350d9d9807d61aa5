#!/usr/bin/env bash
# Builds halo's container image from the Dockerfile at the repository root,
# with podman if it is installed, else docker (docs/deploy.md).
#
#   scripts/build-image.sh [options] [-- extra build arguments...]
#
# Options:
#   --target T    runtime (default: `halo serve` on 8000) or sagemaker (`serve` on 8080)
#   --tag T       image name (default halo:dev for runtime, halo:dev-sagemaker for sagemaker)
#   --base IMAGE  Debian 12 base image (default debian:12; e.g. localhost/debian:12)
#   --jobs N      parallel compile jobs in the build stage (default: ninja's)
#   --network N   build network mode, e.g. host (default: the engine's)
#   -h, --help    this text
#
# Environment:
#   CONTAINER_ENGINE  the command to run instead of podman/docker, words split
#                     on spaces, e.g. "podman --runtime runc --cgroup-manager=cgroupfs"
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "build-image.sh: $*" >&2; exit 2; }

target=runtime tag="" base="" jobs="" network=""
extra=()
while (($#)); do
  case "$1" in
    --target) target=${2:?--target needs a value}; shift 2 ;;
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --base) base=${2:?--base needs a value}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a value}; shift 2 ;;
    --network) network=${2:?--network needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case "$target" in
  runtime) : "${tag:=halo:dev}" ;;
  sagemaker) : "${tag:=halo:dev-sagemaker}" ;;
  *) die "--target must be runtime or sagemaker, not '$target'" ;;
esac

if [[ -n "${CONTAINER_ENGINE:-}" ]]; then
  read -r -a engine <<<"$CONTAINER_ENGINE"
elif command -v podman >/dev/null; then
  engine=(podman)
elif command -v docker >/dev/null; then
  engine=(docker)
else
  die "neither podman nor docker found (apt-get install podman)"
fi

args=(build --target "$target" -t "$tag" -f "$repo/Dockerfile")
[[ -n "$base" ]] && args+=(--build-arg "BASE=$base")
[[ -n "$jobs" ]] && args+=(--build-arg "JOBS=$jobs")
[[ -n "$network" ]] && args+=(--network "$network")
args+=("${extra[@]}" "$repo")

echo "build-image.sh: ${engine[*]} ${args[*]}"
"${engine[@]}" "${args[@]}"
echo "build-image.sh: built $tag (target $target)"
