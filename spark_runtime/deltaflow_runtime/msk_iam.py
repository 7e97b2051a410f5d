"""Amazon MSK IAM for the driver's own Kafka client (librdkafka): MSK accepts OAUTHBEARER with a
token that is a SigV4-presigned ``kafka-cluster:Connect`` URL, as AWS's
aws-msk-iam-sasl-signer-python makes it (tests hold this module to that library's output).

Written here on the standard library because that library needs botocore, and every botocore
release pins python-dateutil below 3 while the kubernetes client (37) needs 3 or later. The
credentials come from the pods' workload identity, the way the AWS SDKs look for it: the
environment's keys, then EKS Pod Identity (the container credentials endpoint), then IRSA (a
web identity token exchanged at STS); with ``roleArn``, those credentials assume that role.
Instance metadata is not asked: a stream's pods should not act as their node.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

log = logging.getLogger(__name__)

TOKEN_SECONDS = 900
USER_AGENT = "aws-msk-iam-sasl-signer-python/1.0.2"  # the token format this one reproduces
_MSK_HOST = re.compile(
    r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-[a-z]+)+-[0-9]{1,2})\.amazonaws\.com(?:\.cn)?(?::\d+)?$"
)
_STS_VERSION = "2011-06-15"
_HTTP_TIMEOUT = 10.0


class MskIamError(Exception):
    """No credentials or region to sign with, or STS refused: the message says which."""


@dataclass(frozen=True)
class AwsCredentials:
    access_key: str
    secret_key: str
    session_token: str | None = None
    expires_at: float | None = None  # epoch seconds; None: does not expire


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="-_.~")


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    key = _hmac(f"AWS4{secret}".encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return key


def _signature(creds: AwsCredentials, stamp: str, region: str, service: str, canonical: str) -> str:
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _signing_key(creds.secret_key, stamp[:8], region, service)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _canonical_query(params: Mapping[str, str]) -> str:
    return "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(params.items()))


def auth_token(region: str, creds: AwsCredentials, now: datetime) -> tuple[str, float]:
    """The MSK token (base64url of the presigned URL, no padding) and its expiry (epoch s)."""
    host = f"kafka.{region}.amazonaws.com"
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    params = {
        "Action": "kafka-cluster:Connect",
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": f"{creds.access_key}/{stamp[:8]}/{region}/kafka-cluster/aws4_request",
        "X-Amz-Date": stamp,
        "X-Amz-Expires": str(TOKEN_SECONDS),
        "X-Amz-SignedHeaders": "host",
    }
    if creds.session_token:
        params["X-Amz-Security-Token"] = creds.session_token
    query = _canonical_query(params)
    empty = hashlib.sha256(b"").hexdigest()
    canonical = "\n".join(["GET", "/", query, f"host:{host}", "", "host", empty])
    signature = _signature(creds, stamp, region, "kafka-cluster", canonical)
    # In the order the AWS signer writes them (the signature covers them sorted).
    written = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in params.items())
    url = f"https://{host}/?{written}&X-Amz-Signature={signature}&User-Agent={_quote(USER_AGENT)}"
    token = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return token, now.timestamp() + TOKEN_SECONDS


def signed_headers(
    creds: AwsCredentials, scope: tuple[str, str], url: str, body: str, now: datetime
) -> dict[str, str]:
    """SigV4 headers for a form POST (STS AssumeRole); ``scope``: (region, service)."""
    region, service = scope
    host = urllib.parse.urlsplit(url).netloc
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    headers = {
        "content-type": "application/x-www-form-urlencoded; charset=utf-8",
        "host": host,
        "x-amz-date": stamp,
    }
    if creds.session_token:
        headers["x-amz-security-token"] = creds.session_token
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            "POST",
            "/",
            "",
            "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
            names,
            hashlib.sha256(body.encode()).hexdigest(),
        ]
    )
    signature = _signature(creds, stamp, region, service, canonical)
    credential = f"{creds.access_key}/{stamp[:8]}/{region}/{service}/aws4_request"
    out = {k: v for k, v in headers.items() if k != "host"}
    out["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders={names}, Signature={signature}"
    )
    return out


def signing_region(bootstrap_servers: str, env: Mapping[str, str]) -> str:
    """MSK's region: from the brokers' host names (``b-1.<cluster>...kafka.<region>.
    amazonaws.com``, as aws-msk-iam-auth reads it), else AWS_REGION / AWS_DEFAULT_REGION."""
    for server in bootstrap_servers.split(","):
        found = _MSK_HOST.search(server.strip())
        if found:
            return found.group(1)
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if not region:
        raise MskIamError(
            "no AWS region: the brokers' names are not MSK's (kafka.<region>.amazonaws.com) "
            "and AWS_REGION is not set in the pods"
        )
    return region


def _sts_credentials(xml_text: str, result: str) -> AwsCredentials:
    root = ET.fromstring(xml_text)
    node = next((n for n in root.iter() if n.tag.endswith("Credentials")), None)
    if node is None:
        raise MskIamError(f"STS {result}: no credentials in its answer")

    def text(name: str) -> str:
        found = next((n.text for n in node.iter() if n.tag.endswith(name)), None)
        return found or ""

    expires = datetime.fromisoformat(text("Expiration").replace("Z", "+00:00")).timestamp()
    return AwsCredentials(
        text("AccessKeyId"), text("SecretAccessKey"), text("SessionToken"), expires
    )


def _read(request: urllib.request.Request, what: str) -> str:
    try:
        with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT) as answer:
            return str(answer.read().decode())
    except OSError as e:
        detail = e.read().decode(errors="replace")[:300] if hasattr(e, "read") else str(e)
        raise MskIamError(f"{what}: {detail}") from e


def _sts_url(region: str) -> str:
    return f"https://sts.{region}.amazonaws.com/"


def workload_credentials(env: Mapping[str, str], region: str) -> AwsCredentials:
    """The pods' own credentials, in the AWS Java SDK's order (the login module's): the
    environment, IRSA's web identity, then the container endpoint of EKS Pod Identity."""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return AwsCredentials(
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env.get("AWS_SESSION_TOKEN")
        )
    token_file, role = env.get("AWS_WEB_IDENTITY_TOKEN_FILE"), env.get("AWS_ROLE_ARN")
    if token_file and role:
        with open(token_file) as f:
            identity = f.read().strip()
        form = urllib.parse.urlencode(
            {
                "Action": "AssumeRoleWithWebIdentity",
                "RoleArn": role,
                "RoleSessionName": env.get("AWS_ROLE_SESSION_NAME") or "deltaflow",
                "WebIdentityToken": identity,
                "Version": _STS_VERSION,
            }
        )
        sts_region = env.get("AWS_REGION") or region
        request = urllib.request.Request(
            _sts_url(sts_region),
            data=form.encode(),
            headers={"content-type": "application/x-www-form-urlencoded; charset=utf-8"},
            method="POST",
        )
        answer = _read(request, "STS AssumeRoleWithWebIdentity (IRSA)")
        return _sts_credentials(answer, "AssumeRoleWithWebIdentity")
    full = env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    relative = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    if full or relative:
        url = full or f"http://169.254.170.2{relative}"
        request = urllib.request.Request(url)
        token_file = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
        token = env.get("AWS_CONTAINER_AUTHORIZATION_TOKEN")
        if token_file:
            with open(token_file) as f:
                token = f.read().strip()
        if token:
            request.add_header("Authorization", token)
        body = json.loads(_read(request, "EKS Pod Identity credentials endpoint"))
        expiration = body.get("Expiration")
        expires = (
            datetime.fromisoformat(str(expiration).replace("Z", "+00:00")).timestamp()
            if expiration
            else None
        )
        return AwsCredentials(
            body["AccessKeyId"], body["SecretAccessKey"], body.get("Token"), expires
        )
    raise MskIamError(
        "no workload identity in the pods: no AWS_ACCESS_KEY_ID, no EKS Pod Identity "
        "(AWS_CONTAINER_CREDENTIALS_FULL_URI) and no IRSA (AWS_WEB_IDENTITY_TOKEN_FILE with "
        "AWS_ROLE_ARN); give the stream's ServiceAccount a role"
    )


def assume_role(base: AwsCredentials, role_arn: str, region: str, now: datetime) -> AwsCredentials:
    """``role_arn``'s credentials, assumed with ``base`` at ``region``'s STS."""
    body = urllib.parse.urlencode(
        {
            "Action": "AssumeRole",
            "RoleArn": role_arn,
            "RoleSessionName": "deltaflow",
            "Version": _STS_VERSION,
        }
    )
    url = _sts_url(region)
    headers = signed_headers(base, (region, "sts"), url, body, now)
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    return _sts_credentials(_read(request, f"STS AssumeRole {role_arn}"), "AssumeRole")


class MskTokenProvider:
    """librdkafka's ``oauth_cb`` for MSK: a fresh token from cached, refreshed credentials."""

    def __init__(
        self,
        bootstrap_servers: str,
        role_arn: str | None = None,
        sts_region: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._env = dict(os.environ if env is None else env)
        self.region = signing_region(bootstrap_servers, self._env)
        self._role_arn = role_arn
        self._sts_region = sts_region or self.region
        self._creds: AwsCredentials | None = None
        self._lock = threading.Lock()

    def credentials(self) -> AwsCredentials:
        with self._lock:
            fresh = self._creds is not None and (
                self._creds.expires_at is None or self._creds.expires_at - time.time() > 300
            )
            if not fresh:
                base = workload_credentials(self._env, self.region)
                if self._role_arn:
                    base = assume_role(base, self._role_arn, self._sts_region, datetime.now(UTC))
                self._creds = base
            assert self._creds is not None
            return self._creds

    def __call__(self, _config: str | None = None) -> tuple[str, float]:
        try:
            return auth_token(self.region, self.credentials(), datetime.now(UTC))
        except MskIamError as e:
            # librdkafka keeps only "OAuth callback raised exception": say why here.
            log.error("no MSK IAM token: %s", e)
            raise
        except Exception as e:  # a file, an answer or a date that was not as expected
            log.error("no MSK IAM token: %s: %s", type(e).__name__, e)
            raise MskIamError(f"{type(e).__name__}: {e}") from e
