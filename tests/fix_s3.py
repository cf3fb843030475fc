"""S3 for the tests (a plug-in listed in conftest's ``pytest_plugins``): ``s3_server``
(session), a moto S3 server on loopback with a ``ckpts`` bucket, started on first use only."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._s3 import aws_config_path


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
