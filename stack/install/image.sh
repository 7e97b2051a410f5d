#!/usr/bin/env bash
# Builds the project's image from its own Dockerfile, with no container registry:
#   1. the base image debian:bookworm-slim, made here with debootstrap from Debian's mirror
#      (the one apt's sources name), pruned like Docker's slim images; cached as a tarball;
#   2. the pause image for containerd's pod sandboxes: a static C program, packed by hand;
#   3. deltaflow.local/deltaflow:<tag>, built by a dockerd started only for the build (own data
#      root in the cache, own sockets, no network setup, stopped at the end) and saved as a tar.
# The tag is a hash of the build context (every file the Dockerfile reads) and of the base image
# recipe, so a pod spec with imagePullPolicy IfNotPresent always runs the image just built. When
# the cache already holds that tag, dockerd is not started at all.
# Prints the folder holding deltaflow.tar, pause.tar and image.env (DELTAFLOW_IMAGE=...,
# PAUSE_IMAGE=...). Root only (debootstrap, dockerd). `image.sh --print-tag` prints the image name
# the current sources would get, without building anything.
STEP_NAME=image
RERUN="stack/install/image.sh"
source "$(dirname "$0")/lib.sh"
shopt -s extglob

# Debian's docker CLI (docker.io 20.10, like the daemon): a newer CLI elsewhere on PATH would want
# the buildx plugin for BuildKit builds.
DOCKER=${DELTAFLOW_DOCKER_CLI:-/usr/bin/docker}
CA_BUNDLE=${DELTAFLOW_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
ARCH=$(dpkg --print-architecture)
SUITE=bookworm
PAUSE_IMAGE=deltaflow.local/pause:3.10
DATA_ROOT="$DELTAFLOW_CACHE/docker"
# What the Dockerfile reads from the build context. Only these files are sent to the build, and
# the image tag hashes exactly them (tests/unit/test_image.py checks the Dockerfile reads nothing
# else).
CONTEXT_PATHS=(Dockerfile .dockerignore pyproject.toml uv.lock README.md api operator spark_runtime cli
  image stack/install/versions.env stack/install/maven/spark-jars.pom.xml)

# apt_uri SUITE: the first URI apt's sources give for SUITE (one-line .list or deb822 .sources).
apt_uri() {
  local f
  {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      awk -v s="$1" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == s) { print $i; exit } }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      awk -v s="$1" 'BEGIN { RS = ""; FS = "\n" } {
        uri = ""; suite = 0; deb = 0
        for (i = 1; i <= NF; i++) {
          n = split($i, w, /[ \t]+/)
          if (w[1] == "URIs:") uri = w[2]
          for (j = 2; j <= n; j++) { if (w[1] == "Suites:" && w[j] == s) suite = 1; if (w[1] == "Types:" && w[j] == "deb") deb = 1 }
        }
        if (uri != "" && suite && deb) { print uri; exit } }' "$f"
    done
  } | head -n 1
}
MIRROR=${DELTAFLOW_DEBIAN_MIRROR:-$(apt_uri "$SUITE")}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DELTAFLOW_DEBIAN_SECURITY_MIRROR:-$(apt_uri "$SUITE-security")}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# unmount_under DIR: unmounts whatever is still mounted at or below DIR, deepest first.
unmount_under() {
  local m
  findmnt -rn -o TARGET | awk -v d="$1" '$0 == d || index($0, d "/") == 1' | sort -r |
    while read -r m; do
      log "unmounting leftover mount $m"
      umount "$m" 2>/dev/null || umount -l "$m"
    done
}

# --- 1. the base image ------------------------------------------------------------------------
# debootstrap's minbase, pruned like Docker's debian:*-slim: no apt lists or caches, no docs (but
# the copyright files), man pages or translations, and dpkg told to keep it that way for what the
# Dockerfile installs. apt's sources: the suite, its updates and security, from the mirrors apt
# uses here.
prune_rootfs() {
  local root=${1:?}
  rm -rf "${root:?}"/var/lib/apt/lists/* "${root:?}"/var/cache/apt/* "${root:?}"/var/cache/debconf/*-old \
    "${root:?}"/var/lib/dpkg/*-old "${root:?}"/var/log/* "${root:?}"/tmp/* "${root:?}"/var/tmp/* \
    "${root:?}"/usr/share/man/* "${root:?}"/usr/share/info/* "${root:?}"/usr/share/locale/* \
    "${root:?}"/usr/share/groff/* "${root:?}"/usr/share/lintian/* "${root:?}"/usr/share/linda/* \
    "${root:?}"/dev/* "${root:?}"/proc/* "${root:?}"/sys/* "${root:?}"/run/* "${root:?}"/etc/machine-id \
    "${root:?}"/etc/apt/sources.list
  find "$root"/usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
  find "$root"/usr/share/doc -mindepth 1 -type d -empty -delete
  : >"$root"/etc/resolv.conf
  : >"$root"/etc/hostname
  cat >"$root"/etc/dpkg/dpkg.cfg.d/slim <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
  printf 'Acquire::Languages "none";\n' >"$root"/etc/apt/apt.conf.d/no-languages
  cat >"$root"/etc/apt/sources.list.d/debian.sources <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
}

build_base() {
  local out=$1 root=$1/rootfs rc=0
  log "debootstrap --variant=minbase $SUITE from $MIRROR (~30 s)"
  debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$out/debootstrap.log" 2>&1 || rc=$?
  # debootstrap mounts /proc and /sys (in some containers /dev nodes too) in the target while it
  # works; never leave them behind, and never delete files through one.
  unmount_under "$root"
  if findmnt -rn -o TARGET | grep -q "^$root/"; then
    die "mounts left under $root after debootstrap: unmount them, then rerun"
  fi
  if [ "$rc" -ne 0 ]; then
    tail -n 20 "$out/debootstrap.log" >&2
    log "debootstrap failed"
    return 1
  fi
  prune_rootfs "$root"
  tar --numeric-owner --xattrs --xattrs-include='*' --sort=name -C "$root" -cf "$out/rootfs.tar" . ||
    return 1
  rm -rf "$root" "$out/debootstrap.log"
  log "base rootfs: $(du -h "$out/rootfs.tar" | cut -f1)"
}

# --- 2. the pause image -----------------------------------------------------------------------
# The process holding a pod's namespaces: sleeps until SIGINT/SIGTERM (then exits 0) and reaps the
# children it inherits as PID 1 of a shared PID namespace. Static, so the image is this one file.
write_pause_c() {
  cat <<'EOF'
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_stop;
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) return 1;
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &sa, NULL) != 0) return 2;
  for (;;) pause();
}
EOF
}

# reproducible_tar DIR OUT FILE...: a tar of FILEs under DIR, byte-identical on every run.
reproducible_tar() {
  local dir=$1 out=$2
  shift 2
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=ustar \
    -C "$dir" -cf "$out" "$@"
}

# A docker-save archive (manifest.json + config + one layer), which `docker load` and
# `ctr image import` both read. The config names os/architecture: containerd ignores images
# without a platform.
build_pause() {
  local out=$1 w=$1/work layer_sha config config_sha
  mkdir -p "$w/rootfs" "$w/archive"
  write_pause_c >"$w/pause.c"
  gcc -Os -static -s -o "$w/rootfs/pause" "$w/pause.c" || { log "gcc -static failed (libc6-dev installed? stack/install/node-packages.sh)"; return 1; }
  # It must stop on SIGTERM with status 0.
  "$w/rootfs/pause" &
  local pid=$!
  sleep 0.2
  if ! kill -TERM "$pid" || ! wait "$pid"; then
    log "the pause binary did not exit 0 on SIGTERM"
    return 1
  fi
  reproducible_tar "$w/rootfs" "$w/layer.tar" pause || return 1
  layer_sha=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
  config=$(printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z",%s,%s,%s}' \
    "$ARCH" \
    '"config":{"Entrypoint":["/pause"],"User":"65535:65535","WorkingDir":"/"}' \
    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer_sha\"]}" \
    '"history":[{"created":"1970-01-01T00:00:00Z","created_by":"stack/install/image.sh: gcc -static pause.c"}]')
  config_sha=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
  printf '%s' "$config" >"$w/archive/$config_sha.json"
  mkdir "$w/archive/$layer_sha"
  mv "$w/layer.tar" "$w/archive/$layer_sha/layer.tar"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]\n' \
    "$config_sha" "$PAUSE_IMAGE" "$layer_sha" >"$w/archive/manifest.json"
  reproducible_tar "$w/archive" "$out/pause.tar" manifest.json "$config_sha.json" \
    "$layer_sha/layer.tar" || return 1
  rm -rf "$w"
}

# --- 3. the project's image -------------------------------------------------------------------
# stage_context DIR: copies the build context into DIR: the files of CONTEXT_PATHS that git tracks
# or would track (untracked but not ignored), as they are in the working tree.
stage_context() {
  local dir=$1 f
  (cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard -- "${CONTEXT_PATHS[@]}") |
    while IFS= read -r -d '' f; do
      [ -f "$REPO_ROOT/$f" ] && printf '%s\0' "$f"
    done | (cd "$REPO_ROOT" && xargs -0 -r cp --parents -p -t "$dir")
  [ -f "$dir/Dockerfile" ] || die "no Dockerfile in the build context (is $REPO_ROOT a git checkout?)"
}

# context_hash DIR: a hash of every file's path, mode and content.
context_hash() {
  (
    cd "$1" || exit 1
    find . -type f -printf '%m %p\n' | LC_ALL=C sort
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  ) | sha256sum | cut -c1-12
}

# The dockerd of this script: started for the build only, its layers and BuildKit cache in
# $DATA_ROOT (kept between runs), everything else (exec root, sockets, pid file, log) in a temp
# dir. No TCP socket, no bridge, no iptables: the build uses the host's network.
DOCKERD_TMP=""
DOCKERD_PID=""
CONTAINERD_PID=""
KEY_JSON_CREATED=""
docker() { DOCKER_HOST="unix://$DOCKERD_TMP/docker.sock" DOCKER_CONFIG="$DOCKERD_TMP/client" "$DOCKER" "$@"; }

# A dockerd on our data root while we hold the lock was left by a run that was killed (no EXIT
# trap on SIGKILL): stop it, its containerd and its mounts like our own.
stop_stale_dockerd() {
  local pid exec_root
  for pid in $(pgrep -f -- "^dockerd .*--data-root $DATA_ROOT " || true); do
    exec_root=$(tr '\0' '\n' <"/proc/$pid/cmdline" | grep -A1 -x -- --exec-root | tail -n 1)
    log "stopping dockerd $pid, left by an interrupted run"
    if [[ ! $exec_root =~ ^/tmp/deltaflow-dockerd\.[A-Za-z0-9]+/exec$ ]]; then
      stop_pid "$pid" 30
      continue
    fi
    DOCKERD_TMP=$(dirname "$exec_root") DOCKERD_PID=$pid CONTAINERD_PID="" KEY_JSON_CREATED=""
    stop_dockerd
  done
}

start_dockerd() {
  stop_stale_dockerd
  DOCKERD_TMP=$(mktemp -d /tmp/deltaflow-dockerd.XXXXXX)
  mkdir -p "$DATA_ROOT" "$DOCKERD_TMP/client"
  # dockerd 20.10 always writes a (here unused) trust key to /etc/docker/key.json; removed again
  # at the end if it was not there before.
  [ -e /etc/docker/key.json ] || KEY_JSON_CREATED=1
  # BuildKit's cache (layers, apt/uv/maven cache mounts) is garbage-collected past this size.
  printf '{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "%s"}}}\n' \
    "${DELTAFLOW_DOCKER_KEEP_STORAGE:-20GB}" >"$DOCKERD_TMP/daemon.json"
  log "starting dockerd (data root $DATA_ROOT)"
  setsid dockerd --config-file "$DOCKERD_TMP/daemon.json" --data-root "$DATA_ROOT" \
    --exec-root "$DOCKERD_TMP/exec" --pidfile "$DOCKERD_TMP/dockerd.pid" \
    --host "unix://$DOCKERD_TMP/docker.sock" --bridge=none --iptables=false --ip-forward=false \
    --ip-masq=false --userland-proxy=false >"$DOCKERD_TMP/dockerd.log" 2>&1 </dev/null 9>&- &
  DOCKERD_PID=$!
  local i
  for i in $(seq 120); do
    docker version >/dev/null 2>&1 && break
    if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
      tail -n 20 "$DOCKERD_TMP/dockerd.log" >&2
      die "dockerd exited at start (log above)"
    fi
    [ "$i" -lt 120 ] || { tail -n 20 "$DOCKERD_TMP/dockerd.log" >&2; die "dockerd did not answer in 60 s"; }
    sleep 0.5
  done
  # dockerd runs its own containerd, in a session of its own: remember it to stop it by pid.
  CONTAINERD_PID=$(cat "$DOCKERD_TMP/exec/containerd/containerd.pid" 2>/dev/null || true)
  log "dockerd $(docker version -f '{{.Server.Version}}') ready (pid $DOCKERD_PID, containerd ${CONTAINERD_PID:-?})"
}

# stop_pid PID SECONDS: SIGTERM, then SIGKILL if it is still there after SECONDS.
stop_pid() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq $(($2 * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) ignored SIGTERM for $2 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.2
}

stop_dockerd() {
  [ -n "$DOCKERD_TMP" ] || return 0
  local pid
  if [ -n "$DOCKERD_PID" ]; then
    stop_pid "$DOCKERD_PID" 30
    # Its process group, if anything is left in it.
    if pgrep -g "$DOCKERD_PID" >/dev/null; then kill -KILL -- "-$DOCKERD_PID" 2>/dev/null || true; fi
  fi
  [ -n "$CONTAINERD_PID" ] || CONTAINERD_PID=$(cat "$DOCKERD_TMP/exec/containerd/containerd.pid" 2>/dev/null || true)
  if [ -n "$CONTAINERD_PID" ] && grep -qF "$DOCKERD_TMP" "/proc/$CONTAINERD_PID/cmdline" 2>/dev/null; then
    stop_pid "$CONTAINERD_PID" 10
  fi
  # Anything else started with our dirs in its command line (runc of build steps, shims).
  local ours="$DOCKERD_TMP/|$DATA_ROOT/buildkit/"
  for pid in $(pgrep -f -- "$ours" || true); do
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] || stop_pid "$pid" 5
  done
  if pgrep -f -- "$ours" >/dev/null; then
    die "processes of dockerd survived SIGKILL: $(pgrep -a -f -- "$ours" | tr '\n' ';')"
  fi
  unmount_under "$DOCKERD_TMP"
  unmount_under "$DATA_ROOT"
  rm -rf "$DOCKERD_TMP"
  if [ -n "$KEY_JSON_CREATED" ]; then
    rm -f /etc/docker/key.json
    rmdir /etc/docker 2>/dev/null || true
  fi
  DOCKERD_TMP=""
  log "dockerd stopped"
}

# The base image, imported into dockerd under a name that says it is local: a build never asks a
# registry for it. BuildKit (dockerd 20.10) uses a local image for FROM when its platform matches
# the build's (else it goes to the registry): docker import records the daemon's os/architecture,
# checked here.
import_base() {
  if ! docker image inspect "$BASE_REF" >/dev/null 2>&1; then
    log "importing the base image $BASE_REF"
    docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["bash"]' "$BASE_DIR/rootfs.tar" "$BASE_REF" >/dev/null || die "docker import of $BASE_DIR/rootfs.tar failed"
  fi
  local platform
  platform=$(docker image inspect -f '{{.Os}}/{{.Architecture}}' "$BASE_REF")
  [ "$platform" = "linux/$ARCH" ] || die "the base image $BASE_REF is $platform, not linux/$ARCH"
}

# Removes what older builds left in the data root: other tags of our images, then dangling images.
prune_docker() {
  local ref
  for ref in $(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^deltaflow\.local/(deltaflow|debian):' || true); do
    [ "$ref" = "$IMAGE" ] || [ "$ref" = "$BASE_REF" ] || docker rmi "$ref" >/dev/null || true
  done
  docker image prune -f >/dev/null || true
}

build_image() {
  local out=$1 blog=$1/build.log secret=() line steps=()
  start_dockerd
  import_base
  [ -f "$CA_BUNDLE" ] && secret=(--secret "id=ca-bundle,src=$CA_BUNDLE")
  log "docker build $IMAGE (cold: ~1 min of downloads, apt, uv, Maven; after a code change: seconds)"
  # --network host: the build's RUN steps use the host's network (dockerd has no bridge). Step
  # headers go to the progress output, the whole log to build.log (its tail on failure).
  if ! DOCKER_BUILDKIT=1 docker build --network host --progress plain "${secret[@]}" \
    --build-arg "BASE_IMAGE=$BASE_REF" --tag "$IMAGE" "$CONTEXT" 2>&1 |
    while IFS= read -r line; do
      printf '%s\n' "$line" >>"$blog"
      line=${line//$'\e'\[+([0-9;])m/} # Maven's colour resets, even in batch mode
      if [[ $line =~ ^#([0-9]+)\ (\[[^]]+\])\ (.*) ]]; then
        [ -z "${steps[${BASH_REMATCH[1]}]:-}" ] || continue # a header repeats when output resumes
        steps[BASH_REMATCH[1]]="${BASH_REMATCH[2]} $(sed -E 's/--mount=[^ ]+ +//g; s/  +/ /g' <<<"${BASH_REMATCH[3]}" | cut -c1-80)"
        log "  ${steps[${BASH_REMATCH[1]}]}"
      elif [[ $line =~ \#([0-9]+)\ (DONE\ [0-9.]+s|CACHED)$ ]] &&
        [[ ${steps[${BASH_REMATCH[1]}]:-} == *' RUN '* ]]; then
        log "  ${steps[${BASH_REMATCH[1]}]%% RUN *}: ${BASH_REMATCH[2],,}"
      fi
    done; then
    tail -n 40 "$blog" >&2
    die "docker build failed (log above; full log: $blog)"
  fi
  local cfg
  cfg=$(docker image inspect -f '{{.Os}}/{{.Architecture}} user={{.Config.User}}' "$IMAGE")
  [ "$cfg" = "linux/$ARCH user=185:185" ] || die "unexpected image config: $cfg"
  log "saving $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')) to deltaflow.tar"
  docker save -o "$out/deltaflow.tar" "$IMAGE" || die "docker save failed"
  prune_docker
  stop_dockerd
  ln "$PAUSE_DIR/pause.tar" "$out/pause.tar" 2>/dev/null || cp "$PAUSE_DIR/pause.tar" "$out/pause.tar"
  printf 'DELTAFLOW_IMAGE=%s\nPAUSE_IMAGE=%s\n' "$IMAGE" "$PAUSE_IMAGE" >"$out/image.env"
}

# --- main -------------------------------------------------------------------------------------
CONTEXT=$(mktemp -d /tmp/deltaflow-context.XXXXXX)
cleanup() {
  stop_dockerd
  rm -rf "$CONTEXT"
  # An interrupted debootstrap may have left /proc or /sys mounted in its staging dir.
  [ -d "$DELTAFLOW_CACHE/image-base" ] && unmount_under "$DELTAFLOW_CACHE/image-base"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BASE_KEY=$(recipe_hash "$SUITE $ARCH $MIRROR $SECURITY_MIRROR" "$(declare -f build_base prune_rootfs)")
BASE_DIR=$(cache_entry image-base "$SUITE-$BASE_KEY")
BASE_REF="deltaflow.local/debian:$SUITE-$BASE_KEY"
PAUSE_KEY=$(recipe_hash "$ARCH $PAUSE_IMAGE $(gcc -dumpfullversion 2>/dev/null)" \
  "$(declare -f write_pause_c reproducible_tar build_pause)")
PAUSE_DIR=$(cache_entry image-pause "$PAUSE_KEY")
stage_context "$CONTEXT"
TAG=$(printf 'base %s\nbuild %s\ncontext %s\n' "$BASE_KEY" \
  "$(declare -f build_image | sha256sum | cut -c1-12)" "$(context_hash "$CONTEXT")" |
  sha256sum | cut -c1-12)
IMAGE="deltaflow.local/deltaflow:$TAG"
DEST=$(cache_entry image "$TAG-pause-$PAUSE_KEY")

if [ "${1:-}" = "--print-tag" ]; then
  echo "$IMAGE"
  exit 0
fi

if is_complete "$DEST"; then
  log "$IMAGE already built ($DEST)"
  echo "$DEST"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "building the image needs root (debootstrap, dockerd)"
for bin in debootstrap dockerd containerd runc gcc "$DOCKER"; do
  command -v "$bin" >/dev/null || die "$bin is missing: run stack/install/node-packages.sh"
done
# One build at a time: two dockerds cannot share a data root.
# (dockerd is started without fd 9: a dockerd left by a killed run must not hold the lock.)
exec 9>"$DELTAFLOW_CACHE/.image.lock"
flock -w 3600 9 || die "another image.sh holds $DELTAFLOW_CACHE/.image.lock"
# Build contexts of runs that were killed before their EXIT trap.
find /tmp -maxdepth 1 -name 'deltaflow-context.*' -mmin +60 -exec rm -rf {} + 2>/dev/null || true
if is_complete "$DEST"; then # built by the run we waited for
  log "$IMAGE already built ($DEST)"
  echo "$DEST"
  exit 0
fi

if is_complete "$BASE_DIR"; then
  log "base image rootfs already built ($BASE_DIR)"
else
  build_entry "$BASE_DIR" build_base
fi
if is_complete "$PAUSE_DIR"; then
  log "pause image already built ($PAUSE_DIR)"
else
  log "building the pause image $PAUSE_IMAGE"
  build_entry "$PAUSE_DIR" build_pause
fi
log "building $IMAGE into $DEST"
build_entry "$DEST" build_image
log "image ready: $IMAGE ($(du -h "$DEST/deltaflow.tar" | cut -f1) saved), $PAUSE_IMAGE"
echo "$DEST"
