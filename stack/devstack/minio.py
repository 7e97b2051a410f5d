"""S3-compatible servers for s3a:// tables: MinIO (the one the stack writes to) and S3Proxy (one
that ignores conditional PUTs); one process each, one data folder, credentials made up per run.

MinIO listens on one address: the pod network's gateway when the node runs (host processes reach it
there too, as Kafka's pod listener), else loopback. Path-style access (no bucket DNS names).
"""

from __future__ import annotations

import secrets
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.install import installed_path
from devstack.process import Service, free_port

REGION = "us-east-1"


@dataclass
class ObjectStore:
    """A running MinIO: where it answers and the root credentials of this run."""

    endpoint: str  # http://host:port
    access_key: str
    secret_key: str
    service: Service

    def storage_options(self) -> dict[str, str]:
        """Options for deltalake (delta-rs) to read s3a:// tables of this store."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def env(self) -> dict[str, str]:
        """The variables a local driver reads its keys from (S3A's environment provider)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def storage_spec(self) -> dict[str, object]:
        """``spec.sink.storage`` for this store (the Secret names matter only to the operator)."""
        return {
            "endpoint": self.endpoint,
            "pathStyleAccess": True,
            "accessKeyId": {"name": "lake-creds", "key": "AWS_ACCESS_KEY_ID"},
            "secretAccessKey": {"name": "lake-creds", "key": "AWS_SECRET_ACCESS_KEY"},
        }

    def filesystem(self) -> Any:
        """A pyarrow S3 filesystem on this store (paths are ``bucket/key``)."""
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
        )

    def delta_commits(self, table: str) -> dict[int, list[dict[str, Any]]]:
        """Every commit of the Delta table at ``table`` (s3a://...) as stored in the bucket:
        version -> its actions, read as files (no Delta reader between the test and the log)."""
        import json

        from pyarrow import fs

        s3 = self.filesystem()
        key = table.removeprefix("s3a://") + "/_delta_log"
        commits: dict[int, list[dict[str, Any]]] = {}
        for info in s3.get_file_info(fs.FileSelector(key, allow_not_found=True)):
            name = info.base_name
            if name.endswith(".json") and name[:20].isdigit():
                with s3.open_input_stream(info.path) as stream:
                    lines = stream.read().decode().splitlines()
                commits[int(name[:20])] = [json.loads(line) for line in lines if line]
        return commits

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (an existing one is fine)."""
        self.filesystem().create_dir(name)

    def stop(self) -> None:
        """Stop the server (its data goes with the run's temp dir)."""
        self.service.stop()


def _live(endpoint: str) -> bool:
    with urllib.request.urlopen(f"{endpoint}/minio/health/live", timeout=2) as response:
        return bool(response.status == 200)


def start_minio(work_dir: Path, address: str = "127.0.0.1", timeout: float = 60.0) -> ObjectStore:
    """Start MinIO on ``address`` with fresh root credentials; return once it is live."""
    binary = installed_path("minio") / "minio"
    port = free_port()
    access_key, secret_key = "deltaflow", secrets.token_hex(16)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work_dir),
        "MINIO_ROOT_USER": access_key,
        "MINIO_ROOT_PASSWORD": secret_key,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        "MINIO_REGION": REGION,
    }
    data = work_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    service = Service(
        "minio",
        [str(binary), "server", "--quiet", "--address", f"{address}:{port}", str(data)],
        work_dir / "minio.log",
        env=env,
    )
    service.start()
    endpoint = f"http://{address}:{port}"
    try:
        service.wait_ready(lambda: _live(endpoint), timeout, "live")
    except Exception:
        service.stop()
        raise
    return ObjectStore(endpoint, access_key, secret_key, service)


def _answers(endpoint: str) -> bool:
    """Any HTTP answer (S3Proxy refuses the unsigned request, which is enough)."""
    import urllib.error

    try:
        with urllib.request.urlopen(endpoint, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True


def start_s3proxy(work_dir: Path, address: str = "127.0.0.1", timeout: float = 60.0) -> ObjectStore:
    """Start S3Proxy over a local folder, signed requests only: an S3-compatible server that
    ignores ``If-None-Match`` on PUT (its PutObject never reads the header)."""
    jar = installed_path("s3proxy")
    port = free_port()
    access_key, secret_key = "deltaflow", secrets.token_hex(16)
    data = work_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    properties = work_dir / "s3proxy.conf"
    properties.write_text(
        f"s3proxy.endpoint=http://{address}:{port}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={access_key}\n"
        f"s3proxy.credential={secret_key}\n"
        "jclouds.provider=filesystem\n"
        f"jclouds.filesystem.basedir={data}\n"
    )
    properties.chmod(0o600)
    service = Service(
        "s3proxy",
        ["java", "-Xmx256m", "-jar", str(jar), "--properties", str(properties)],
        work_dir / "s3proxy.log",
    )
    service.start()
    endpoint = f"http://{address}:{port}"
    try:
        service.wait_ready(lambda: _answers(endpoint), timeout, "answering")
    except Exception:
        service.stop()
        raise
    return ObjectStore(endpoint, access_key, secret_key, service)
