"""The object-storage test support itself, against moto's real S3 server with boto3 only: what the product relies
on (conditional creates, multipart uploads completed with their parts sent in any order), the fault proxy's 503s
and held responses seen through boto3's retries, a server restart, and an environment its children see."""

from __future__ import annotations

import subprocess
import sys

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from support.s3 import FaultProxy, S3Env, S3Server

CHILD_PUT = "import boto3, sys; boto3.client('s3').put_object(Bucket=sys.argv[1], Key='a', Body=b'1', IfNoneMatch='*')"


def status(error: pytest.ExceptionInfo[ClientError]) -> int:
    return int(error.value.response["ResponseMetadata"]["HTTPStatusCode"])


def test_second_conditional_create_is_refused(s3_env: S3Env) -> None:
    """A child configured by the environment alone creates the object; a second create of the key gets 412."""
    subprocess.run([sys.executable, "-c", CHILD_PUT, s3_env.bucket], check=True)
    with pytest.raises(ClientError) as refused:
        boto3.client("s3").put_object(Bucket=s3_env.bucket, Key="a", Body=b"2", IfNoneMatch="*")
    assert status(refused) == 412
    assert s3_env.url("a") == f"s3://{s3_env.bucket}/a"
    assert s3_env.keys() == ["a"]
    assert s3_env.client.get_object(Bucket=s3_env.bucket, Key="a")["Body"].read() == b"1"


def test_multipart_parts_sent_out_of_order(s3_env: S3Env) -> None:
    """The last part is sent first; the object is invisible until completed, then whole, and a second conditional
    completion at that key is refused."""
    client, bucket = s3_env.client, s3_env.bucket
    first, last = b"h" * (5 << 20), b"tail"

    def upload() -> str:
        upload_id: str = client.create_multipart_upload(Bucket=bucket, Key="run/x")["UploadId"]
        parts = []
        for number, body in ((2, last), (1, first)):
            etag = client.upload_part(Bucket=bucket, Key="run/x", UploadId=upload_id, PartNumber=number, Body=body)
            parts.append({"PartNumber": number, "ETag": etag["ETag"]})
        parts.sort(key=lambda part: part["PartNumber"])
        client.complete_multipart_upload(
            Bucket=bucket, Key="run/x", UploadId=upload_id, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )
        return upload_id

    upload()
    assert s3_env.keys("run/") == ["run/x"]
    assert s3_env.uploads() == []
    assert client.get_object(Bucket=bucket, Key="run/x", Range="bytes=-6")["Body"].read() == b"hhtail"

    with pytest.raises(ClientError) as refused:
        upload()
    assert status(refused) == 412
    assert [upload["Key"] for upload in s3_env.uploads("run/")] == ["run/x"]


def test_proxy_503s_and_held_responses_are_retried(s3_server: S3Server, s3_env: S3Env) -> None:
    body = b"x" * 1000
    with FaultProxy(s3_server.endpoint) as proxy:
        proxy.fail(2, method="PUT")
        once = s3_server.client(proxy.endpoint, retries={"mode": "standard", "max_attempts": 1})  # one retry
        with pytest.raises(ClientError) as throttled:
            once.put_object(Bucket=s3_env.bucket, Key="a", Body=body)
        assert throttled.value.response["Error"]["Code"] == "SlowDown"
        assert s3_env.keys() == []

        proxy.fail(2, method="PUT", match="/a")
        retrying = s3_server.client(proxy.endpoint, retries={"mode": "standard", "max_attempts": 5})
        retrying.put_object(Bucket=s3_env.bucket, Key="a", Body=body)
        assert proxy.requests["PUT"] == 5
        assert proxy.sent["PUT"] == 5 * len(body)
        assert retrying.get_object(Bucket=s3_env.bucket, Key="a")["Body"].read() == body
        assert proxy.received["GET"] == len(body)

        proxy.delay(5, method="GET", times=1)
        patient = s3_server.client(proxy.endpoint, retries={"mode": "standard", "max_attempts": 2}, read_timeout=2)
        assert patient.get_object(Bucket=s3_env.bucket, Key="a")["Body"].read() == body
        assert proxy.requests["GET"] == 3


def test_restart_empties_the_server(s3_server: S3Server, s3_env: S3Env) -> None:
    s3_env.client.put_object(Bucket=s3_env.bucket, Key="a", Body=b"1")
    client = s3_server.client(retries={"total_max_attempts": 1})
    s3_server.stop()
    with pytest.raises(EndpointConnectionError):
        client.list_objects_v2(Bucket=s3_env.bucket)
    s3_server.start()
    with pytest.raises(ClientError) as missing:
        client.head_bucket(Bucket=s3_env.bucket)
    assert status(missing) == 404
