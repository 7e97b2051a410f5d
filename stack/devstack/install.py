"""Locate the installed parts by asking their (idempotent, cached) install scripts."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

INSTALL_DIR = Path(__file__).resolve().parent.parent / "install"
REPO_ROOT = INSTALL_DIR.parent.parent


class InstallError(RuntimeError):
    """An install script failed; the message holds its output and the command to rerun."""


@functools.cache
def installed_path(part: str) -> Path:
    """Run ``stack/install/<part>.sh`` (a no-op when cached) and return the path it prints last.

    Scripts print progress on stderr and the installed location as the last line of stdout.
    """
    script = INSTALL_DIR / f"{part}.sh"
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, check=False, cwd=REPO_ROOT
    )
    if proc.returncode != 0:
        raise InstallError(
            f"installing {part} failed; rerun `bash stack/install/{part}.sh`:\n"
            f"{proc.stderr[-4000:]}"
        )
    path = Path(proc.stdout.strip().splitlines()[-1])
    if not path.exists():
        raise InstallError(f"{script} reported {path}, which does not exist")
    return path
