# Shared helpers for the installers: the cache layout, progress lines with timings, and
# all-or-nothing cache entries. Sourced, never run.
# shellcheck shell=bash
set -euo pipefail

INSTALL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$INSTALL_DIR/../.." && pwd)"
# shellcheck source=/dev/null
# DELTAFLOW_VERSIONS_FILE lets the installer tests point a step at a version that does not exist.
source "${DELTAFLOW_VERSIONS_FILE:-$INSTALL_DIR/versions.env}"

# Downloads and builds live outside the clone, so a fresh clone on the same machine reuses them.
DELTAFLOW_CACHE="${DELTAFLOW_CACHE:-$HOME/.cache/deltaflow}"
export DELTAFLOW_CACHE
mkdir -p "$DELTAFLOW_CACHE"

# Go and Maven keep their own caches inside ours: a second build compiles and downloads nothing.
export GOMODCACHE="$DELTAFLOW_CACHE/go/mod"
export GOCACHE="$DELTAFLOW_CACHE/go/build"
export GOFLAGS="-buildvcs=false"
export GOTOOLCHAIN=local
MAVEN_REPO="${DELTAFLOW_MAVEN_REPO:-$DELTAFLOW_CACHE/maven/repository}"

_t0=$SECONDS
log() { printf '[%s %4ds] %s\n' "${STEP_NAME:-install}" "$((SECONDS - _t0))" "$*" >&2; }
die() {
  printf '[%s] FAILED: %s\n' "${STEP_NAME:-install}" "$1" >&2
  printf '[%s] rerun this step with: bash %s\n' "${STEP_NAME:-install}" "${RERUN:-$0}" >&2
  exit 1
}

# A short hash of the given files and strings: part of a cache entry's name, so a changed recipe or
# version gets a new entry instead of reusing a stale one.
recipe_hash() {
  { for a in "$@"; do if [ -f "$a" ]; then cat "$a"; else printf '%s\n' "$a"; fi; done; } |
    sha256sum | cut -c1-12
}

# cache_entry NAME KEY -> prints the final directory of a cache entry.
cache_entry() { printf '%s/%s/%s' "$DELTAFLOW_CACHE" "$1" "$2"; }

# is_complete DIR: an entry counts only once its builder finished and wrote the marker; a
# half-written entry from an interrupted run has no marker and is rebuilt.
is_complete() { [ -f "$1/.complete" ]; }

# build_entry DIR FUNCTION: runs FUNCTION with a fresh staging dir as $1, then moves it into place
# and marks it complete. Older entries of the same part are removed (a version change rebuilds).
build_entry() {
  local dest=$1 fn=$2 stage
  stage="$(dirname "$dest")/.staging-$(basename "$dest")-$$"
  rm -rf "$stage" "$dest"
  mkdir -p "$stage"
  "$fn" "$stage" || { rm -rf "$stage"; die "$fn did not finish (see the output above)"; }
  date -u +%FT%TZ >"$stage/.complete"
  mv "$stage" "$dest"
  # Prune entries of other versions and leftovers of interrupted runs.
  find "$(dirname "$dest")" -mindepth 1 -maxdepth 1 ! -path "$dest" -exec rm -rf {} +
}

# maven_copy POM DEST [-Dprop=value ...]: resolves POM's dependencies (runtime scope, transitive)
# from Maven Central into DEST as plain jars. Maven's output goes to stderr: even with -B -q and
# style.color=never, Maven 3.8 writes ANSI resets to stdout, and an install script's stdout is the
# path it reports (its last line).
maven_copy() {
  local pom=$1 dest=$2
  shift 2
  mvn -B -q -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$MAVEN_REPO" "$@" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DoutputDirectory="$dest" -DincludeScope=runtime -DexcludeTransitive=false >&2
}
