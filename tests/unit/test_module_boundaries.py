"""Boundaries the import contracts cannot see: PySpark's private handles into the JVM are read
in one runtime module only, as the Kubernetes client is called from one operator module."""

from __future__ import annotations

import re
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "spark_runtime" / "deltaflow_runtime"
# PySpark's private attributes that lead into py4j.
PRIVATE_HANDLE = re.compile(r"\._(jvm|jsc|gateway|jsparkSession|jc|jo|jdf|jsqlContext)\b")


def test_only_jvm_py_reaches_through_pyspark_into_the_jvm() -> None:
    offenders = {
        f"{path.name}:{number}: {line.strip()}"
        for path in RUNTIME.glob("*.py")
        if path.name != "jvm.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE_HANDLE.search(line)
    }
    assert offenders == set()
    # The check sees what it looks for: jvm.py itself holds the handles.
    assert PRIVATE_HANDLE.search((RUNTIME / "jvm.py").read_text())
