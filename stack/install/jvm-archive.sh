#!/usr/bin/env bash
# Builds the class-data archive (AppCDS) local drivers map at start (deltaflow_runtime/jvm_archive.py):
# a training run of Spark and Delta in this machine's JVM writes the classes it loaded. Keyed by
# the JVM, pyspark's jars and the connector jars, so any change of them builds a new one (a stale
# archive would only be ignored by the JVM, with one warning line). The jars are named by inode,
# not path: uv hard-links every clone's .venv to its cache, and Java accepts an archive whose
# class-path entries are the same files (os::same_files), so all clones share one archive. A
# path in the key rebuilt it (~45 s) for every fresh clone, CI's included.
STEP_NAME=jvm-archive
RERUN="stack/install/jvm-archive.sh"
source "$(dirname "$0")/lib.sh"

PYTHON="$REPO_ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || die "no .venv: run stack/install/python.sh first"
JARS=$(bash "$INSTALL_DIR/spark-jars.sh")
PYSPARK_JARS=$("$PYTHON" -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')
KEY=$(recipe_hash "$0" "$REPO_ROOT/spark_runtime/deltaflow_runtime/jvm_archive.py" \
  "$(java -version 2>&1)" "$(find "$PYSPARK_JARS/" "$JARS/" -name '*.jar' -printf '%f %i %s %T@\n' | sort)")
DEST="$(cache_entry jvm-archive "$KEY")"

build() {
  local out=$1
  log "training run of Spark and Delta (~35 s on 2 cores)"
  mkdir -p "$out/.work"
  # Spark's own start-up chatter goes to a log, shown only if the run fails.
  DELTAFLOW_SPARK_JARS="$JARS" env -u SPARK_CONF_DIR "$PYTHON" -m deltaflow_runtime jvm-archive \
    --output "$out/deltaflow.jsa" --work-dir "$out/.work" >"$out/.work/training.log" 2>&1 || {
    tail -40 "$out/.work/training.log" >&2
    return 1
  }
  log "$(tail -1 "$out/.work/training.log")"
  rm -rf "$out/.work"
}

if is_complete "$DEST"; then
  log "JVM class-data archive already built ($DEST)"
else
  log "building the JVM class-data archive into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/deltaflow.jsa"
