"""Where the ledger's records are kept: one store per kind of checkpoint location.

The ledger needs four things of a store: read a small record, list a folder, delete a
record, and *create a record at most once* (the second writer of a name is told it lost).
Only stores that really have the last one are accepted; a location twopc cannot write
safely is refused, never guessed at:

- a local path, or ``file:`` URI (:class:`LocalStore`): a temporary file, fsync, an
  exclusive hard link to the final name, an fsync of the folder. A network or FUSE
  filesystem mounted there must support hard links (NFS does; a mount that does not makes
  every write fail with a clear error).
- ``s3://``, ``s3a://``, ``s3n://`` (:class:`S3Store`, the ``pyspark-twopc[s3]`` extra): PutObject
  with ``If-None-Match: *``, which S3 evaluates atomically. The first use of a bucket in a
  process checks that the server honours it (some S3-compatible servers ignore the header):
  one that does not is refused. The endpoint, region and credentials come from boto3's usual
  sources (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_REGION``, the credentials
  chain); Hadoop's ``fs.s3a.*`` settings are not visible to Python.
- a store opened ``read_only`` (``twopc status``, a metrics scrape) refuses every write
  (:class:`ReadOnlyStore`) and, on S3, skips the first use's check (which writes a probe):
  a reader never creates a folder, a record or a ledger.
- everything else with a scheme (``dbfs:/x``, ``hdfs:/x``, ``hdfs://``, ``gs://``,
  ``abfs(s)://``, ``wasb(s)://``...) is refused with the reason and the alternative: a
  ``scheme:`` path is never a local folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._errors import ConfigurationError, LedgerError
from ._extras import require
from ._folders import file_in_the_way, make_folder

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["LocalStore", "ReadOnlyStore", "S3Store", "Store", "open_store"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
#: Why each scheme is refused, and what to use instead.
_REFUSED: dict[str, str] = {
    "dbfs": "is Databricks' file system, which twopc cannot reach from Python. Give the cloud storage "
            "location behind it (s3://bucket/path), or a /dbfs/... path on a cluster whose /dbfs mount "
            "supports hard links",
    "hdfs": "cannot be written at most once through pyarrow's HadoopFileSystem (its output streams "
            "overwrite; HDFS's create-if-absent is not exposed). Use an s3:// location or a local path "
            "on a shared filesystem with hard links (NFS)",
    "gs": "has create-only preconditions (ifGenerationMatch=0) that twopc does not implement yet. Use an "
          "s3:// location or a local path on a shared filesystem with hard links",
    "abfs": "has conditional creates (If-None-Match) that twopc does not implement yet. Use an s3:// "
            "location or a local path on a shared filesystem with hard links",
}
for _alias, _target in (("viewfs", "hdfs"), ("gcs", "gs"), ("abfss", "abfs"), ("wasb", "abfs"), ("wasbs", "abfs"),
                        ("adl", "abfs")):
    _REFUSED[_alias] = _REFUSED[_target]


class Store(Protocol):
    """The record store the ledger writes to (see the module docstring)."""

    root: str

    def path(self, *parts: str) -> str:
        """The store's name for *parts* under the root (for messages)."""

    def makedirs(self, rel: str) -> None:
        """Make folder *rel* (a no-op where folders are not real)."""

    def read(self, rel: str) -> str | None:
        """The record's text, or None if absent. Raises :class:`LedgerError`."""

    def create(self, rel: str, text: str, *, exclusive: bool) -> bool:
        """Write *rel* whole; with *exclusive*, only if absent (False when it exists).
        Raises :class:`LedgerError`."""

    def replace(self, rel: str, text: str) -> None:
        """Replace *rel* atomically (a reader sees the old or the new text, never a torn one),
        without forcing it to disk: a crash may lose the last update. For records outside the
        protocol (metrics). Raises :class:`LedgerError`."""

    def list(self, rel: str) -> list[str]:
        """Names of the records in folder *rel* (not hidden ones). Raises :class:`LedgerError`."""

    def delete(self, rel: str) -> None:
        """Delete *rel* if present. Raises :class:`LedgerError`."""


def open_store(location: str, filesystem: pafs.FileSystem | None = None, *, read_only: bool = False) -> Store:
    """The store for *location* (see the module docstring); with *read_only*, one that
    refuses every write (:class:`ReadOnlyStore`).

    Raises:
        ConfigurationError: the location is one the ledger cannot write at most once.
        MissingExtraError: an ``s3://`` location without boto3 (``pyspark-twopc[s3]``).
    """
    store = _open(location, filesystem, read_only)
    return ReadOnlyStore(store) if read_only else store


def _open(location: str, filesystem: pafs.FileSystem | None, read_only: bool) -> Store:
    if filesystem is not None:
        import pyarrow.fs as pafs  # here, as below: a checkpoint in a local folder never loads pyarrow

        if not isinstance(filesystem, pafs.LocalFileSystem):
            raise ConfigurationError(
                f"the ledger cannot use a {type(filesystem).__name__}: pyarrow filesystems other than the local "
                f"one cannot create a record at most once. Give a local path or an s3:// location instead")
        return LocalStore(location)
    m = _SCHEME.match(location)
    if m is None:
        return LocalStore(location)
    scheme = m.group(1).lower()
    if scheme == "file":
        import pyarrow.fs as pafs

        try:
            _fs, path = pafs.FileSystem.from_uri(location)
        except (ValueError, TypeError, OSError) as exc:
            raise ConfigurationError(f"cannot open checkpoint location {location!r}: {exc}") from exc
        return LocalStore(path)
    if scheme in _S3_SCHEMES:
        return S3Store(location, check=not read_only)
    reason = _REFUSED.get(scheme, "is not a store twopc can record decisions in at most once. Use a local "
                                  "path or an s3:// location")
    raise ConfigurationError(f"checkpoint location {location!r}: {scheme}: {reason}. A {scheme}: location is "
                             f"never taken for a local folder")


class ReadOnlyStore:
    """Another store's records, read only: every write raises, so that a reader (``twopc
    status``, a metrics scrape) can never create a ledger or change one."""

    def __init__(self, store: Store) -> None:
        self.root = store.root
        # the store's own readers, handed out as they are
        self.path: Callable[..., str] = store.path
        self.read: Callable[[str], str | None] = store.read
        self.list: Callable[[str], list[str]] = store.list

    def _refuse(self, rel: str) -> LedgerError:
        return LedgerError(f"the ledger {self.root} was opened to be read only: {self.path(rel)} was not written")

    def makedirs(self, rel: str) -> None:
        raise self._refuse(rel)

    def create(self, rel: str, text: str, *, exclusive: bool) -> bool:
        raise self._refuse(rel)

    def replace(self, rel: str, text: str) -> None:
        raise self._refuse(rel)

    def delete(self, rel: str) -> None:
        raise self._refuse(rel)


class LocalStore:
    """Records in a local (or mounted) folder; see the module docstring."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root).rstrip("/") or "/"

    def path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def makedirs(self, rel: str) -> None:
        try:
            make_folder(self.path(rel), LedgerError, needs="the checkpoint (its ledger folder)",
                        fix="give checkpointLocation the path of a folder (new or empty)")
        except OSError as exc:
            raise LedgerError(f"cannot create ledger folder {self.path(rel)}: {exc.strerror or exc}: check that "
                              f"checkpointLocation is a folder this user may write to") from exc

    def read(self, rel: str) -> str | None:
        p = self.path(rel)
        try:
            with open(p, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except NotADirectoryError as exc:
            blocked = file_in_the_way(os.path.dirname(p), needs="the checkpoint (its ledger folder)",
                                      fix="give checkpointLocation the path of a folder (new or empty)")
            raise LedgerError(blocked) from exc
        except OSError as exc:
            raise LedgerError(f"cannot read ledger record {p}: {exc}") from exc

    def create(self, rel: str, text: str, *, exclusive: bool) -> bool:
        final = self.path(rel)
        folder, _, name = final.rpartition("/")
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
        try:
            return _create_local(final, tmp, text.encode("utf-8"), exclusive)
        except OSError as exc:
            raise LedgerError(f"cannot write ledger record {final}: {exc}") from exc

    def replace(self, rel: str, text: str) -> None:
        final = self.path(rel)
        folder, _, name = final.rpartition("/")
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise LedgerError(f"cannot write {final}: {exc}") from exc

    def list(self, rel: str) -> list[str]:
        try:
            names = os.listdir(self.path(rel))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise LedgerError(f"cannot list ledger folder {self.path(rel)}: {exc}") from exc
        return [n for n in names if not n.startswith(".") and os.path.isfile(self.path(rel, n))]

    def delete(self, rel: str) -> None:
        try:
            os.unlink(self.path(rel))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise LedgerError(f"cannot delete ledger record {self.path(rel)}: {exc}") from exc


def _create_local(final: str, tmp: str, data: bytes, exclusive: bool) -> bool:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if exclusive:
            try:
                os.link(tmp, final)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    dfd = os.open(os.path.dirname(final), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return True


#: (endpoint, bucket) pairs whose server was seen to honour If-None-Match in this process.
_CHECKED: set[tuple[str, str]] = set()
_CHECK_LOCK = threading.Lock()


class S3Store:
    """Records as S3 objects, created at most once with ``If-None-Match: *``."""

    def __init__(self, location: str, *, check: bool = True) -> None:
        what = f"an {location.split(':', 1)[0]}:// checkpoint location"
        boto3 = require("boto3", "s3", what)
        import botocore.config  # boto3's own dependency: there when boto3 imports

        config = botocore.config.Config(connect_timeout=10, read_timeout=60,
                                        retries={"max_attempts": 5, "mode": "standard"})
        scheme, _, rest = location.partition("://")
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ConfigurationError(f"checkpoint location {location!r} names no bucket: use s3://bucket/path")
        self.scheme, self.bucket = scheme, bucket
        self.root = prefix.strip("/")
        self.client: Any = boto3.client("s3", config=config)
        self._errors = self.client.exceptions
        if check:  # a reader writes nothing, so it needs no check (which writes a probe)
            self._check_conditional_create()

    def path(self, *parts: str) -> str:
        return f"{self.scheme}://{self.bucket}/" + "/".join(p for p in (self.root, *parts) if p)

    def _key(self, rel: str) -> str:
        return "/".join(p for p in (self.root, rel) if p)

    def makedirs(self, rel: str) -> None:
        """Folders are key prefixes on S3: nothing to make."""

    def read(self, rel: str) -> str | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(rel))["Body"]
            return bytes(body.read()).decode("utf-8")
        except self._errors.NoSuchKey:
            return None
        except Exception as exc:  # botocore's errors have no common base worth naming
            raise LedgerError(f"cannot read ledger record {self.path(rel)}: {_what(exc)}") from exc

    def create(self, rel: str, text: str, *, exclusive: bool) -> bool:
        extra = {"IfNoneMatch": "*"} if exclusive else {}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(rel), Body=text.encode("utf-8"), **extra)
            return True
        except Exception as exc:  # botocore's errors have no common base worth naming
            if exclusive and _status(exc) in (409, 412):
                # 412: the object exists. 409: a concurrent conditional write of the same key is
                # in flight; whichever finishes holds the name, so this one lost either way.
                return False
            raise LedgerError(f"cannot write ledger record {self.path(rel)}: {_what(exc)}") from exc

    def replace(self, rel: str, text: str) -> None:
        self.create(rel, text, exclusive=False)  # a PutObject replaces an object atomically

    def list(self, rel: str) -> list[str]:
        prefix = self._key(rel).rstrip("/") + "/"
        names: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                names += [o["Key"][len(prefix):] for o in page.get("Contents", [])]
        except Exception as exc:  # botocore's errors have no common base worth naming
            raise LedgerError(f"cannot list ledger folder {self.path(rel)}: {_what(exc)}") from exc
        return [n for n in names if n and not n.startswith(".")]

    def delete(self, rel: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(rel))
        except Exception as exc:  # botocore's errors have no common base worth naming
            raise LedgerError(f"cannot delete ledger record {self.path(rel)}: {_what(exc)}") from exc

    def _check_conditional_create(self) -> None:
        """Refuse a server that ignores ``If-None-Match: *`` (checked once per bucket and process)."""
        ident = (str(self.client.meta.endpoint_url), self.bucket)
        with _CHECK_LOCK:
            if ident in _CHECKED:
                return
            probe = f".twopc-probe-{uuid.uuid4().hex}"
            try:
                first = self.create(probe, "probe", exclusive=True)
                second = self.create(probe, "probe", exclusive=True)
            finally:
                self.delete(probe)
            if not (first and not second):
                raise ConfigurationError(
                    f"the S3 server at {ident[0]} ignores If-None-Match on PutObject (bucket {self.bucket}): "
                    f"twopc cannot record a decision at most once there. Use AWS S3 or a server that "
                    f"supports conditional writes, or a local path on a shared filesystem with hard links")
            _CHECKED.add(ident)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    return None


def _what(exc: BaseException) -> str:
    """The error's class and message (botocore never puts credentials in them)."""
    return f"{type(exc).__name__}: {exc}"
