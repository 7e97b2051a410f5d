#!/usr/bin/env bash
# Creates the project's Python environment (.venv in the clone) exactly as uv.lock says.
# uv is installed into the cache from PyPI; its own download/build cache is there too, so a fresh
# clone on a warm machine links packages instead of downloading them (pyspark is a 450 MB sdist).
STEP_NAME=python
RERUN="stack/install/python.sh"
source "$(dirname "$0")/lib.sh"

UV_HOME="$(cache_entry tools "uv-$UV_VERSION")"
export UV_CACHE_DIR="$DELTAFLOW_CACHE/uv"
export UV_PYTHON_DOWNLOADS=never
export UV_LINK_MODE="${UV_LINK_MODE:-hardlink}"

install_uv() {
  log "installing uv $UV_VERSION from PyPI"
  python3 -m venv "$1/venv" && "$1/venv/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
}
if ! is_complete "$UV_HOME"; then build_entry "$UV_HOME" install_uv; fi
UV="$UV_HOME/venv/bin/uv"

py=$(command -v python3.11 || command -v python3)
"$py" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null ||
  die "Python 3.11 is required (found $("$py" --version 2>&1)); install python3.11"
# The interpreter itself, not a launcher such as pyenv's shim: given the shim, uv does not
# recognise .venv's interpreter and recreates the whole environment on every run (pulling
# pyspark's jars from under any driver running from it).
py=$("$py" -c 'import sys; print(sys.executable)')

cd "$REPO_ROOT"
# An environment already in sync is left untouched (no file rewritten): a demo started next to a
# running test suite must not pull pyspark's jars from under its drivers.
if "$UV" sync --frozen --python "$py" --check --quiet 2>/dev/null; then
  log ".venv already matches uv.lock"
else
  log "syncing .venv from uv.lock (first run downloads and builds pyspark: a few minutes)"
  # --frozen: the lock file is the truth; a pyproject change without `uv lock` fails here, loudly.
  "$UV" sync --frozen --python "$py" --quiet || die "uv sync failed"
fi
log "python environment ready: $("$REPO_ROOT/.venv/bin/python" --version), $("$UV" pip list --quiet 2>/dev/null | wc -l) packages"
echo "$REPO_ROOT/.venv"
