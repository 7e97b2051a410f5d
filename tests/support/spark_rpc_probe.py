"""Knock on a Spark driver's RPC port the way an executor does first, once per case.

Run with the image's Python (pyspark and Java there): ``python spark_rpc_probe.py HOST PORT
ENDPOINT``. An executor's first call is Spark's own: a client-mode RpcEnv asks the driver
whether the endpoint it registers with (``CoarseGrainedScheduler``) exists. Cases:

- ``plain``: no authentication, as any program that connects and sends an RPC;
- ``wrong-secret``: Spark's authentication and encryption as the stream uses them, a made-up
  secret;
- ``right-secret``: the same with the secret in ``PROBE_SECRET``, only when that is set (the
  control: the same client with the application's secret is answered).

Prints one JSON line per case: ``{"case", "answered", "error"}``. Only the check is sent: with the
right secret the probe never registers as an executor, so it gets no task of the stream.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

CRYPTO = {
    "spark.network.crypto.enabled": "true",
    "spark.network.crypto.cipher": "AES/GCM/NoPadding",
    "spark.network.crypto.authEngineVersion": "2",
    "spark.network.crypto.saslFallback": "false",
}
TIMEOUT = {"spark.rpc.askTimeout": "15s", "spark.rpc.lookupTimeout": "15s"}


def attempt(jvm: Any, host: str, port: int, endpoint: str, conf: dict[str, str]) -> str | None:
    """None when the driver answered the existence check, else why not."""
    spark_conf = jvm.org.apache.spark.SparkConf(False)
    for key, value in {**TIMEOUT, **conf}.items():
        spark_conf.set(key, value)
    manager_class = jvm.org.apache.spark.SecurityManager
    manager = manager_class(
        spark_conf,
        getattr(manager_class, "$lessinit$greater$default$2")(),
        getattr(manager_class, "$lessinit$greater$default$3")(),
    )
    env = jvm.org.apache.spark.rpc.RpcEnv.create("probe", "0.0.0.0", 0, spark_conf, manager, True)
    try:
        address = jvm.org.apache.spark.rpc.RpcAddress(host, port)
        env.setupEndpointRef(address, endpoint)
        return None
    except Exception as error:  # py4j's Py4JJavaError: the Java exception and its causes
        return str(error).splitlines()[0][:300] + " | " + _causes(error)
    finally:
        env.shutdown()


def _causes(error: Exception) -> str:
    java = getattr(error, "java_exception", None)
    found = []
    while java is not None and len(found) < 6:
        found.append(f"{java.getClass().getName()}: {java.getMessage()}")
        java = java.getCause()
    return " <- ".join(found)


def main(host: str, port: int, endpoint: str) -> None:
    from pyspark.java_gateway import launch_gateway

    jvm = launch_gateway().jvm
    cases = {
        "plain": {"spark.authenticate": "false"},
        "wrong-secret": {
            "spark.authenticate": "true",
            "spark.authenticate.secret": "not-the-secret",
            **CRYPTO,
        },
    }
    if os.environ.get("PROBE_SECRET"):
        cases["right-secret"] = {
            "spark.authenticate": "true",
            "spark.authenticate.secret": os.environ["PROBE_SECRET"],
            **CRYPTO,
        }
    for case, conf in cases.items():
        error = attempt(jvm, host, port, endpoint, conf)
        print(json.dumps({"case": case, "answered": error is None, "error": error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
