#!/usr/bin/env bash
# Builds the class-data archive (AppCDS) local drivers map at start (deltaflow_runtime/jvm_archive.py):
# a training run of Spark and Delta in this machine's JVM writes the classes it loaded. Keyed by
# the JVM, pyspark's jars and the connector jars, so any change of them builds a new one (a stale
# archive would only be ignored by the JVM, with one warning line). The jars are named by inode,
# not path: uv hard-links every clone's .venv to its cache, and Java accepts an archive whose
# class-path entries are the same files (os::same_files), so all clones share one archive. A
# path in the key rebuilt it (~45 s) for every fresh clone, CI's included. Java also checks that
# each class-path entry of the training run still exists, so the training runs from hard links
# of pyspark kept in the cache (SPARK_HOME), not from the clone that built it: an archive trained
# from a clone's .venv went stale for every clone once that one was deleted.
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

SPARK_LINKS="$(cache_entry jvm-archive-spark-home "$KEY")"
link_spark_home() {
  # Hard links share the inode (and size and mtime) of the .venv's jars: what Java matches. Across
  # file systems there are none: the training then runs from this clone (the archive serves
  # until it is deleted).
  cp -al "$(dirname "$PYSPARK_JARS")" "$1/spark-home" 2>/dev/null || rm -rf "$1/spark-home"
}

build() {
  local out=$1 home=()
  is_complete "$SPARK_LINKS" || build_entry "$SPARK_LINKS" link_spark_home
  [ -d "$SPARK_LINKS/spark-home" ] && home=(SPARK_HOME="$SPARK_LINKS/spark-home")
  log "training run of Spark and Delta (~35 s on 2 cores)"
  mkdir -p "$out/.work"
  # Spark's own start-up chatter goes to a log, shown only if the run fails.
  env -u SPARK_CONF_DIR -u SPARK_HOME "${home[@]}" DELTAFLOW_SPARK_JARS="$JARS" \
    "$PYTHON" -m deltaflow_runtime jvm-archive \
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
