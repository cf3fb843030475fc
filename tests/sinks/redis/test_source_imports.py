"""What the Redis Stream source costs Spark's driver in imports: a streaming query starts a
fresh Python process for its Python source (PySpark's streaming source runner), which
unpickles the data source and plans every micro-batch. Reading the options (a password
among them), planning and acknowledging import neither SQLAlchemy nor pandas (about 0.15 s
and 0.4 s of that process's start, before the query's first micro-batch)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import urllib.parse
from typing import Any

from tests._paths import REPO_ROOT

DRIVER = """
import json, sys
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType, TimestampType
from twopc.sinks._sources import RedisStreamDataSource

url, stream = sys.argv[1:3]
source = RedisStreamDataSource({"url": url, "streams": stream, "group": "g", "startingPosition": "earliest",
                                "fieldsSchema": "n BIGINT"})
source.schema()
reader = source.streamReader(StructType([
    StructField("stream", StringType()), StructField("id", StringType()), StructField("timestamp", TimestampType()),
    StructField("fields", MapType(StringType(), StringType())), StructField("n", LongType())]))
start = reader.initialOffset()
end = reader.latestOffset(start, ReadMaxRows(10))
planned = len(reader.partitions(start, end))
reader.commit(end)
print(json.dumps({"sqlalchemy": "sqlalchemy" in sys.modules, "pandas": "pandas" in sys.modules,
                  "partitions": planned}))
"""


def test_the_source_on_the_driver_imports_neither_sqlalchemy_nor_pandas(redis_url: str, r: Any) -> None:
    user, password = f"imports-{secrets.token_hex(4)}", f"pw&{secrets.token_hex(8)}"
    stream = f"imports:{secrets.token_hex(4)}"
    r.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    try:
        for n in range(5):
            r.xadd(stream, {"n": str(n)})
        u = urllib.parse.urlsplit(redis_url)
        url = u._replace(netloc=f"{user}:{urllib.parse.quote(password, safe='')}@{u.hostname}:{u.port}").geturl()
        proc = subprocess.run([sys.executable, "-c", DRIVER, url, stream], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"sqlalchemy": False, "pandas": False,
                                                                  "partitions": 1}
        assert [g["last-delivered-id"] for g in r.xinfo_groups(stream)] == [r.xrevrange(stream, count=1)[0][0]]
    finally:
        r.execute_command("ACL", "DELUSER", user)
        r.delete(stream)
