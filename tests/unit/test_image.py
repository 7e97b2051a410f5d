"""The image's recipe agrees with the local stack, and its tag follows its build context.

stack/install/image.sh builds the Dockerfile for real (see its header); these checks catch, without
a Docker engine, the mistakes a build would only show late or not at all.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()
IMAGE_SH = REPO / "stack/install/image.sh"
# One logical line per Dockerfile instruction (continuations joined).
INSTRUCTIONS = re.sub(r"\\\n", " ", DOCKERFILE).splitlines()


def _context_paths() -> list[str]:
    match = re.search(r"^CONTEXT_PATHS=\(([^)]*)\)", IMAGE_SH.read_text(), re.M)
    assert match, "image.sh defines CONTEXT_PATHS"
    return match.group(1).split()


def _files_read_from_context() -> list[str]:
    """Sources of COPY (not --from) and of bind mounts without from=: what the build reads."""
    sources: list[str] = []
    for line in INSTRUCTIONS:
        words = line.split()
        if words and words[0] == "COPY" and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
        for mount in re.findall(r"--mount=(\S+)", line):
            opts = dict(o.split("=", 1) for o in mount.split(",") if "=" in o)
            if opts.get("type") == "bind" and "from" not in opts:
                sources.append(opts["source"])
    return sources


def test_the_image_tag_hashes_every_file_the_build_reads() -> None:
    # A file the Dockerfile reads but image.sh does not hash would leave the tag unchanged when it
    # changes: pods with imagePullPolicy IfNotPresent would keep running the old image.
    context = _context_paths()
    for source in _files_read_from_context():
        assert any(source == c or source.startswith(c + "/") for c in context), source
    for path in context:
        assert (REPO / path).exists(), path


# Maven property names as the poms spell them (jose4j.version has a digit).
_PROPERTY = r"[a-z][a-z0-9.]*"


def _maven_properties(text: str) -> set[str]:
    return set(re.findall(rf"-D({_PROPERTY})=", text))


@pytest.mark.parametrize(
    "pom_path", ["stack/install/maven/spark-jars.pom.xml", "spark_runtime/jvm/pom.xml"]
)
def test_maven_stage_passes_every_property_the_pom_needs_like_the_local_stack(
    pom_path: str,
) -> None:
    pom = (REPO / pom_path).read_text()
    # Properties the pom sets itself (<properties>) need no -D.
    own = (
        set(
            re.findall(
                rf"<({_PROPERTY})>[^<]*</\1>",
                pom.split("<properties>")[1].split("</properties>")[0],
            )
        )
        if "<properties>" in pom
        else set()
    )
    needed = set(re.findall(r"\$\{([^}]+)\}", pom)) - own - {"project.basedir"}
    local = (REPO / "stack/install/spark-jars.sh").read_text()
    assert needed <= _maven_properties(DOCKERFILE), needed - _maven_properties(DOCKERFILE)
    assert needed <= _maven_properties(local), needed - _maven_properties(local)


def test_maven_properties_come_from_the_stack_pins() -> None:
    # Each -D the image passes is a versions.env pin (or derived from one), as in spark-jars.sh.
    pins = set(
        re.findall(r"^([A-Z0-9_]+)=", (REPO / "stack/install/versions.env").read_text(), re.M)
    )
    for name, value in re.findall(rf'-D({_PROPERTY})="([^"]*)"', DOCKERFILE):
        used = set(re.findall(r"\$\{?([A-Z0-9_]+)", value))
        assert used, (name, value)
        assert used <= pins, (name, value)


def test_image_checks_for_the_same_jars_as_the_local_stack() -> None:
    # The authentication extras (jose4j for OAUTHBEARER, aws-msk-iam-auth) are loaded by name
    # from the client properties: nothing fails at start when one is missing, only the first
    # connection that needs it.
    def checked(text: str) -> list[str]:
        match = re.search(r"for j in ([^;]+); do", text)
        assert match, "the jar check loop"
        return match.group(1).split()

    local = checked((REPO / "stack/install/spark-jars.sh").read_text())
    assert checked(DOCKERFILE) == local
    assert {"jose4j-", "aws-msk-iam-auth-", "spark-sql-kafka-0-10_", "deltaflow-jvm-"} <= set(local)


def test_image_leaves_out_the_jars_pyspark_ships_like_the_local_stack() -> None:
    sed = re.compile(r"sed -E '([^']+)'")
    local = (REPO / "stack/install/spark-jars.sh").read_text()
    assert sed.findall(DOCKERFILE) == sed.findall(local)


def test_image_takes_its_versions_from_the_stack_pins() -> None:
    # uv and the Spark/Delta versions come from versions.env, the Python packages from uv.lock;
    # a version written into the Dockerfile would drift from them.
    assert not re.search(r"uv==\d", DOCKERFILE)
    assert "uv==${UV_VERSION}" in DOCKERFILE
    assert "uv sync --quiet --frozen --no-dev --no-editable" in DOCKERFILE
    # Debian bookworm's python3 is 3.11, the version pyproject.toml requires.
    requires = re.search(r'requires-python = "(.*)"', (REPO / "pyproject.toml").read_text())
    assert requires
    assert requires.group(1) == ">=3.11,<3.12"
    assert "SPARK_HOME=/opt/deltaflow/lib/python3.11/site-packages/pyspark" in DOCKERFILE


def test_image_needs_no_registry_but_for_its_base() -> None:
    # A `# syntax=` line makes BuildKit pull the Dockerfile frontend from a registry.
    assert not re.search(r"^#\s*syntax=", DOCKERFILE, re.M | re.I)
    froms = [line.split()[1] for line in INSTRUCTIONS if line.startswith("FROM ")]
    stages = {line.split()[-1] for line in INSTRUCTIONS if re.match(r"FROM .* AS \w+$", line)}
    assert all(f == "${BASE_IMAGE}" or f in stages for f in froms), froms
    assert "ARG BASE_IMAGE=debian:bookworm-slim" in DOCKERFILE


def test_entrypoint_is_valid_executable_shell() -> None:
    entrypoint = REPO / "image/entrypoint.sh"
    subprocess.run(["sh", "-n", str(entrypoint)], check=True)
    # COPY keeps the mode and the ENTRYPOINT executes the file itself.
    mode = subprocess.run(
        ["git", "ls-files", "-s", "image/entrypoint.sh"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    assert mode == "100755"


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The build context and the installers, in a git work tree of their own."""
    copy = tmp_path / "repo"
    paths = [*_context_paths(), "stack/install"]
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    (copy / "tests").mkdir()
    (copy / "tests/test_x.py").write_text("x = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    return copy


def _tag(repo: Path) -> str:
    proc = subprocess.run(
        ["bash", "stack/install/image.sh", "--print-tag"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(repo),
            "DELTAFLOW_CACHE": str(repo / "cache"),
        },
    )
    name = proc.stdout.strip()
    assert re.fullmatch(r"deltaflow\.local/deltaflow:[0-9a-f]{12}", name), name
    return name


def test_image_tag_changes_with_the_build_context_only(repo_copy: Path) -> None:
    first = _tag(repo_copy)
    assert _tag(repo_copy) == first

    (repo_copy / "tests/test_x.py").write_text("x = 2\n")  # not in the build context
    assert _tag(repo_copy) == first

    code = repo_copy / "cli/deltaflow_cli/main.py"
    original = code.read_text()
    code.write_text(original + "# changed\n")
    assert _tag(repo_copy) != first
    code.write_text(original)
    assert _tag(repo_copy) == first

    new_file = repo_copy / "spark_runtime/deltaflow_runtime/new_module.py"  # untracked, not ignored
    new_file.write_text("")
    assert _tag(repo_copy) != first
    new_file.unlink()

    (repo_copy / "image/entrypoint.sh").chmod(0o644)  # the mode is part of the image too
    assert _tag(repo_copy) != first
