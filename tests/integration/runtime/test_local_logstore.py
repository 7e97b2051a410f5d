"""file:// tables: a commit is published with link(2), so of several processes writing the same
version exactly one creates it (Delta's own local stores check, then rename: two processes can
both pass the check, and the second replaces the first one's commit)."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from devstack.spark import spark_jars

pytestmark = [pytest.mark.spark]

# One writer: says it is ready, waits for the go file (the start time, epoch ms, in it), then
# writes each round's version at that round's time.
RACE = """
import io.deltaflow.storage.LocalLinkLogStore;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class Race {
  public static void main(String[] args) throws Exception {
    java.nio.file.Path go = java.nio.file.Path.of(args[0]);
    int rounds = Integer.parseInt(args[2]);
    Configuration conf = new Configuration();
    LocalLinkLogStore store = new LocalLinkLogStore(conf);
    System.out.println("ready");
    System.out.flush();
    while (!Files.exists(go)) {
      Thread.sleep(5);
    }
    long start = Long.parseLong(Files.readString(go).trim());
    if (System.currentTimeMillis() >= start) {
      System.out.println("late");
    }
    for (int round = 0; round < rounds; round++) {
      while (System.currentTimeMillis() < start + round * 200L) {
        Thread.onSpinWait();
      }
      Path path = new Path(args[1], String.format("%020d.json", round));
      String line = "{\\"writer\\": \\"" + args[3] + "\\"}";
      try {
        store.write(path, List.of(line).iterator(), false, conf);
        System.out.println(round + " created");
      } catch (FileAlreadyExistsException lost) {
        System.out.println(round + " exists");
      }
    }
  }
}
"""


def _classpath() -> str:
    import pyspark

    shipped = Path(pyspark.__file__).parent / "jars"
    return ":".join([str(shipped / "*"), *(str(j) for j in spark_jars())])


def test_of_several_processes_committing_one_version_exactly_one_wins(tmp_path: Path) -> None:
    source = tmp_path / "Race.java"
    source.write_text(RACE)
    log = tmp_path / "table" / "_delta_log"
    go = tmp_path / "go"
    writers, rounds = 6, 15
    # Compiled once (javac), so each writer's JVM only starts; all ready, then released together.
    classes = tmp_path / "classes"
    subprocess.run(
        ["javac", "-cp", _classpath(), "-d", str(classes), str(source)], check=True, timeout=120
    )
    argv = ["java", "-cp", f"{classes}:{_classpath()}", "Race", str(go), f"file://{log}"]
    procs = [
        subprocess.Popen(
            [*argv, str(rounds), f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    ready = tmp_path / "go.partial"
    ready.write_text(str(int((time.time() + 0.5) * 1000)))
    ready.rename(go)  # whole, at once: a writer never reads half a start time
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
        outputs.append(out.split("\n"))
    assert "late" not in {line for out in outputs for line in out}, "a writer started too late"
    for round_ in range(rounds):
        outcomes = Counter(
            line.split()[1] for out in outputs for line in out if line.startswith(f"{round_} ")
        )
        assert outcomes == {"created": 1, "exists": writers - 1}, (round_, outcomes)
        (winner,) = (f"w{i}" for i, out in enumerate(outputs) if f"{round_} created" in out)
        commit = log / f"{round_:020d}.json"
        assert json.loads(commit.read_text()) == {"writer": winner}
    # Nothing but the commits is left (the temporary files are gone).
    assert sorted(p.name for p in log.iterdir()) == [f"{r:020d}.json" for r in range(rounds)]
