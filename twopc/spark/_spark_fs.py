"""Whether Spark itself can keep a streaming checkpoint on S3: twopc's ledger uses boto3, but Spark
writes its own checkpoint through Hadoop, and PySpark ships no S3 file system (``start()`` fails:
``No FileSystem for scheme "s3"``, or ``CANNOT_LOAD_CHECKPOINT_FILE_MANAGER`` for ``s3a://``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from ..ledger._stores import _S3_SCHEMES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_checkpoint_location", "spark_checkpoint_problem"]


def spark_checkpoint_problem(spark: SparkSession, location: str) -> str | None:
    """Why Spark's Hadoop has no file system for S3 *location*, with the fix; ``None`` when it has,
    when *location* is not on S3, or on Spark Connect."""
    scheme, sep, _ = location.lower().partition("://")
    if not sep or scheme not in _S3_SCHEMES:
        return None
    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is None or jsession is None:  # Spark Connect: the server's Hadoop is not visible here
        return None
    try:
        conf = jsession.sessionState().newHadoopConf()
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
        return None
    except Exception as exc:  # noqa: BLE001 - py4j raises Py4JJavaError; any failure means "no file system"
        java = getattr(exc, "java_exception", None)
        why = str(java) if java is not None else str(exc)
        why = why.strip().splitlines()[0] if why.strip() else type(exc).__name__
    version = str(jvm.org.apache.hadoop.util.VersionInfo.getVersion())
    impl = ("" if scheme == "s3a" else
            f", and spark.hadoop.fs.{scheme}.impl=org.apache.hadoop.fs.s3a.S3AFileSystem (or write the location "
            f"as s3a://, the same objects to twopc)")
    return (f"Spark cannot keep a streaming query's checkpoint at {location}: its Hadoop has no file system for "
            f"{scheme}:// ({why}). twopc's ledger reaches S3 through boto3 (pyspark-twopc[s3]), but Spark writes the "
            f"query's offsets and commits there itself, through Hadoop's S3A file system (hadoop-aws), which "
            f"PySpark does not ship. Add it to the session: spark.jars.packages=org.apache.hadoop:hadoop-aws:"
            f"{version} (the version of Spark's Hadoop){impl}, with S3A's credentials and endpoint "
            f"(spark.hadoop.fs.s3a.*) reaching the bucket boto3 reaches; or keep the checkpoint on a local or "
            f"HDFS path")


def check_checkpoint_location(spark: SparkSession, location: str) -> None:
    """Check before ``start()`` that Spark can keep a streaming checkpoint at *location* (a local path,
    or Spark Connect, passes).

    Raises:
        ConfigurationError: *location* is on S3 and Spark has no file system for its scheme; the
            message names what to add."""
    if (problem := spark_checkpoint_problem(spark, location)) is not None:
        raise ConfigurationError(problem)
