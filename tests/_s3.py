"""Where the S3 server of fix_s3.py (the ledger's S3 store's tests) writes its address: moto's
``ThreadedMotoServer`` (HTTP, S3 REST API, honours ``If-None-Match: *`` on PutObject).

boto3 finds it through the AWS config file named by ``AWS_CONFIG_FILE`` (endpoint, region,
test credentials), which the ``spark`` fixture sets before the JVM starts so that Spark's
Python processes find it too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["aws_config_path"]


def aws_config_path() -> str:
    """The AWS config file of this test run (a per-process temporary path)."""
    return str(Path(tempfile.gettempdir()) / f"twopc-tests-aws-{os.getpid()}" / "config")
