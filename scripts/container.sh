#!/usr/bin/env bash
# make container: builds deploy/Dockerfile into the image pt2serve:<VERSION> with podman, serves the example model
# from it, checks one request per transport against eager PyTorch, and stops it with SIGTERM (exit 0 expected).
# - dist/ comes from make demo (run first when dist/ lacks pt2serve or the example package).
# - The base image debian:12-slim is pulled when a registry answers; offline, it is made from Debian's archive
#   (debootstrap, minbase bookworm) and imported under that name.
# - The build runs its RUN steps with --isolation chroot: no OCI runtime needed.
# - The image runs with `podman run` where this machine can start containers. Where it cannot (crun refuses a host
#   whose cgroups are in hybrid mode, as these VMs), the image's ENTRYPOINT runs from its mounted file system, as
#   its USER, with its ENV, as PID 1 of a private PID and mount namespace: the image's files and settings are
#   checked, not the container runtime's isolation. The script says which ran.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$FLAVOUR" = cpu ] || { echo "error: the image is built from the cpu flavour's dist/" >&2; exit 2; }
ensure_debian_packages podman debootstrap
IMAGE=pt2serve:$(cat "$ROOT/VERSION")
BASE=docker.io/library/debian:12-slim
if [ ! -x "$ROOT/dist/bin/pt2serve" ] || [ ! -f "$ROOT/dist/models/identity_conv_net.pt2" ] \
   || [ ! -f "$ROOT/dist/models/frame.pt" ]; then
  log "dist/ is not complete: make demo"
  "$ROOT/scripts/demo.sh"
fi

if ! podman image exists "$BASE"; then
  log "base image $BASE"
  if ! timeout 120 podman pull -q "$BASE" >/dev/null 2>&1; then
    rootfs=$ROOT/build/container/rootfs
    log "no registry answered: $BASE from Debian's archive (debootstrap --variant=minbase bookworm)"
    rm -rf "$rootfs" && mkdir -p "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$ROOT/build/container/debootstrap.log"
    tar -C "$rootfs" -c . | podman import -q - "$BASE" >/dev/null
    rm -rf "$rootfs"
  fi
fi

log "podman build -f deploy/Dockerfile -t $IMAGE"
podman build -q --isolation chroot --pull=never -f "$ROOT/deploy/Dockerfile" -t "$IMAGE" "$ROOT" >/dev/null
# the images this replaced (untagged now; ~780 MB each)
podman image prune -f --filter label=org.opencontainers.image.title=pt2serve >/dev/null
podman image inspect "$IMAGE" --format 'image {{.Id}}: {{.Size}} bytes, user {{.Config.User}}, entrypoint {{.Config.Entrypoint}}'

read -r http grpc < <("$PYTHON" -c 'import socket
ports = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); s.close()
print(*ports)')
status=0
if podman run --rm "$IMAGE" --version >/dev/null 2>&1; then
  log "podman run $IMAGE (ports 8000, 8001 -> 127.0.0.1:$http, $grpc)"
  podman run -d --name pt2serve-check -p "127.0.0.1:$http:8000" -p "127.0.0.1:$grpc:8001" "$IMAGE" >/dev/null
  "$PYTHON" "$ROOT/scripts/oip_check.py" "$ROOT/dist/models/frame.pt" --http "localhost:$http" --grpc "localhost:$grpc" \
    || status=1
  podman stop -t 30 pt2serve-check >/dev/null
  code=$(podman inspect pt2serve-check --format '{{.State.ExitCode}}')
  podman logs pt2serve-check 2>&1 | tail -2
  podman rm pt2serve-check >/dev/null
else
  log "this machine cannot start containers (podman run fails): the image's entrypoint from its mounted file system"
  mnt=$(podman image mount "$IMAGE")
  user=$(podman image inspect "$IMAGE" --format '{{.Config.User}}')
  mapfile -t entrypoint < <(podman image inspect "$IMAGE" --format '{{range .Config.Entrypoint}}{{println .}}{{end}}' | sed '/^$/d')
  mapfile -t env < <(podman image inspect "$IMAGE" --format '{{range .Config.Env}}{{println .}}{{end}}' | sed '/^$/d')
  args=(--model-repository /models --http-port "$http" --grpc-port "$grpc")  # the image's CMD, other ports
  serve_log=$ROOT/build/container/pt2serve.log
  mkdir -p "$(dirname "$serve_log")"
  # pt2serve is PID 1 in its namespace, as in a container: SIGTERM must still stop it gracefully
  unshare --mount --pid --fork --kill-child=SIGKILL bash -c \
    'mnt=$1; user=$2; shift 2; mount -t proc proc "$mnt/proc" && mount -t tmpfs tmpfs "$mnt/tmp" &&
     exec chroot --userspec="$user:$user" "$mnt" "$@"' _ "$mnt" "$user" env -i "${env[@]}" "${entrypoint[@]}" \
    "${args[@]}" 2>"$serve_log" &
  launcher=$!
  "$PYTHON" "$ROOT/scripts/oip_check.py" "$ROOT/dist/models/frame.pt" --http "localhost:$http" --grpc "localhost:$grpc" \
    || status=1
  server=$(pgrep -P "$launcher" || true)
  [ -n "$server" ] && kill -TERM "$server"
  code=0
  wait "$launcher" || code=$?
  tail -2 "$serve_log"
  podman image umount "$IMAGE" >/dev/null
fi
if [ "$code" -ne 0 ]; then
  echo "error: pt2serve in the image exited $code after SIGTERM (expected 0)" >&2
  status=1
fi
exit $status
