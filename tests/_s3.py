"""A real S3-compatible server on loopback for the ledger's S3 store: moto's
``ThreadedMotoServer`` (HTTP, S3 REST API, honours ``If-None-Match: *`` on PutObject).

boto3 finds it through the AWS config file named by ``AWS_CONFIG_FILE`` (endpoint, region,
test credentials), which the ``spark`` fixture sets before the JVM starts so that Spark's
Python processes find it too.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["aws_config_path", "s3_server"]


def aws_config_path() -> str:
    """The AWS config file of this test run (a per-process temporary path)."""
    return str(Path(tempfile.gettempdir()) / f"twopc-tests-aws-{os.getpid()}" / "config")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server on 127.0.0.1, with a ``ckpts`` bucket."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        pytest.fail(f"the S3 tests need moto's server (pip install 'moto[server]', in twopc's test extra): {exc}")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    config = Path(os.environ.setdefault("AWS_CONFIG_FILE", aws_config_path()))
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[default]\nregion = us-east-1\naws_access_key_id = twopc-test\n"
                      f"aws_secret_access_key = twopc-test\nendpoint_url = {endpoint}\n")
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket="ckpts")
        yield endpoint
    finally:
        server.stop()
        config.unlink(missing_ok=True)
