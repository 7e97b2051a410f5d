#!/usr/bin/env bash
# Resolves S3Proxy (an S3 API over a local folder, org.gaul:s3proxy) from Maven Central as its one
# self-contained jar. It stands for the object stores that ignore `If-None-Match: *` on PUT: the
# runtime must refuse them at start (tests/integration/runtime/test_s3a_object_store.py).
STEP_NAME=s3proxy
RERUN="stack/install/s3proxy.sh"
source "$(dirname "$0")/lib.sh"

DEST="$(cache_entry s3proxy "v$S3PROXY_VERSION-$(recipe_hash "$0")")"

build() {
  log "resolving org.gaul:s3proxy:$S3PROXY_VERSION (jar-with-dependencies)"
  mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$MAVEN_REPO" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
    -Dartifact="org.gaul:s3proxy:$S3PROXY_VERSION:jar:jar-with-dependencies" \
    -DoutputDirectory="$1" >&2 || return 1
  [ -f "$1/s3proxy-$S3PROXY_VERSION-jar-with-dependencies.jar" ] || { log "s3proxy jar missing"; return 1; }
}

if is_complete "$DEST"; then
  log "S3Proxy $S3PROXY_VERSION already resolved ($DEST)"
else
  log "resolving S3Proxy $S3PROXY_VERSION into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/s3proxy-$S3PROXY_VERSION-jar-with-dependencies.jar"
