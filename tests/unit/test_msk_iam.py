"""MSK IAM tokens for librdkafka, held to the output of AWS's own signer
(aws-msk-iam-sasl-signer-python 1.0.2 on botocore, run once with these fixed credentials and
time: its token and the STS AssumeRole signature are the golden values below)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from deltaflow_runtime.msk_iam import (
    AwsCredentials,
    MskIamError,
    _sts_credentials,
    auth_token,
    signed_headers,
    signing_region,
    workload_credentials,
)

CREDS = AwsCredentials(
    "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "FwoGZXIvYXdzEXAMPLE"
)
NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
GOLDEN_TOKEN = (
    "aHR0cHM6Ly9rYWZrYS5ldS13ZXN0LTEuYW1hem9uYXdzLmNvbS8_QWN0aW9uPWthZmthLWNsdXN0ZXIlM0FDb25uZWN0"
    "JlgtQW16LUFsZ29yaXRobT1BV1M0LUhNQUMtU0hBMjU2JlgtQW16LUNyZWRlbnRpYWw9QUtJREVYQU1QTEUlMkYyMDI2"
    "MTIwNSUyRmV1LXdlc3QtMSUyRmthZmthLWNsdXN0ZXIlMkZhd3M0X3JlcXVlc3QmWC1BbXotRGF0ZT0yMDI2MTIwNVQx"
    "MjAwMDBaJlgtQW16LUV4cGlyZXM9OTAwJlgtQW16LVNpZ25lZEhlYWRlcnM9aG9zdCZYLUFtei1TZWN1cml0eS1Ub2tl"
    "bj1Gd29HWlhJdllYZHpFWEFNUExFJlgtQW16LVNpZ25hdHVyZT01NWRjNDIzYzc2YWMyYzQzNWI0MGY0MTIxNThjNDUy"
    "ZjNkNzU1NzMwYmQ1ZTM1NjRjZmUxODA1NDM5ODRjMWVlJlVzZXItQWdlbnQ9YXdzLW1zay1pYW0tc2FzbC1zaWduZXIt"
    "cHl0aG9uJTJGMS4wLjI"
)


def test_the_token_is_byte_for_byte_the_aws_signer_s() -> None:
    token, expires = auth_token("eu-west-1", CREDS, NOW)
    assert token == GOLDEN_TOKEN
    assert expires * 1000 == 1796472900000  # the signer's expiry: 900 s after signing
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    assert url.startswith("https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect")


def test_sts_assume_role_is_signed_as_botocore_signs_it() -> None:
    body = (
        "Action=AssumeRole&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fmsk-reader"
        "&RoleSessionName=deltaflow&Version=2011-06-15"
    )
    headers = signed_headers(
        CREDS, ("eu-west-1", "sts"), "https://sts.eu-west-1.amazonaws.com/", body, NOW
    )
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261205/eu-west-1/sts/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, "
        "Signature=1bc632ddcbf393c70dac282592fbbfb97ee65f26fde58c220627d7924dd924ac"
    )
    assert headers["x-amz-security-token"] == "FwoGZXIvYXdzEXAMPLE"


@pytest.mark.parametrize(
    ("bootstrap", "env", "region"),
    [
        ("b-1.lake.abc123.c2.kafka.eu-west-1.amazonaws.com:9098", {}, "eu-west-1"),
        (
            "b-1.x.kafka.us-gov-west-1.amazonaws.com:9098,b-2.x.kafka.us-gov-west-1.amazonaws.com:9098",
            {"AWS_REGION": "eu-central-1"},
            "us-gov-west-1",
        ),
        ("kafka.internal:9098", {"AWS_REGION": "ap-south-1"}, "ap-south-1"),
        ("kafka.internal:9098", {"AWS_DEFAULT_REGION": "sa-east-1"}, "sa-east-1"),
    ],
)
def test_the_signing_region_comes_from_the_brokers_names_then_the_environment(
    bootstrap: str, env: dict[str, str], region: str
) -> None:
    assert signing_region(bootstrap, env) == region


def test_no_region_and_no_identity_say_what_is_missing() -> None:
    with pytest.raises(MskIamError, match="AWS_REGION"):
        signing_region("kafka.internal:9098", {})
    with pytest.raises(MskIamError, match="no workload identity"):
        workload_credentials({}, "eu-west-1")
    keys = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s"}
    assert workload_credentials(keys, "eu-west-1") == AwsCredentials("AKID", "s", None)


def test_sts_answers_become_expiring_credentials() -> None:
    answer = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
      <AssumeRoleWithWebIdentityResult>
        <Credentials>
          <SessionToken>IQoJb3JpZ2luEXAMPLE</SessionToken>
          <SecretAccessKey>secretEXAMPLE</SecretAccessKey>
          <Expiration>2026-12-05T13:00:00Z</Expiration>
          <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
        </Credentials>
      </AssumeRoleWithWebIdentityResult>
    </AssumeRoleWithWebIdentityResponse>"""
    creds = _sts_credentials(answer, "AssumeRoleWithWebIdentity")
    assert creds == AwsCredentials(
        "ASIAEXAMPLE", "secretEXAMPLE", "IQoJb3JpZ2luEXAMPLE", NOW.timestamp() + 3600
    )
