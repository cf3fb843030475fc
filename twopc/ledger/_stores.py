"""Where the ledger's records are kept: a place implementing :class:`Records` (read, list, create
*at most once*, replace, delete, and write a decision, which the target's ledger table refuses
once the writer lost its lease). :class:`FolderRecords` keeps record ``<kind>/<name>`` as a file
of a checkpoint's ``twopc/`` folder; ``twopc.sinks.sql._target_ledger`` keeps rows;
:class:`ReadOnlyRecords` refuses every write (``twopc status``, metrics).

A folder (:data:`Store`) is accepted only where a file can be created at most once; others are
refused, never guessed at:

- a local path or ``file:`` URI (:class:`LocalStore`): temporary file, fsync, exclusive hard
  link, fsync of the folder (a mounted filesystem must support hard links; NFS does).
- ``s3://``, ``s3a://``, ``s3n://`` (:class:`S3Store`, extra ``pyspark-twopc[s3]``): PutObject
  with ``If-None-Match: *``; a bucket's first use in a process checks that the server honours it
  (skipped ``read_only``). Endpoint, region and credentials come from boto3's usual sources
  (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_REGION``), not Hadoop's ``fs.s3a.*``.
- any other scheme (``dbfs:``, ``hdfs:``, ``gs://``, ``abfs(s)://``, ``wasb(s)://``...) is
  refused with the reason and the alternative."""

from __future__ import annotations

import os
import re
import threading
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import ConfigurationError, LedgerError
from .._extras import require
from .._folders import file_in_the_way, make_folder

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["KINDS", "FolderRecords", "LocalStore", "ReadOnlyRecords", "Records", "S3Store", "Store", "open_store"]

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


def open_store(location: str, filesystem: pafs.FileSystem | None = None, *, read_only: bool = False) -> Store:
    """The store for *location*; *read_only* writes nothing (skips S3's first-use check).
    Raises ConfigurationError: the ledger cannot write the location at most once.
    Raises MissingExtraError: an ``s3://`` location without boto3 (``pyspark-twopc[s3]``)."""
    if filesystem is not None:
        import pyarrow.fs as pafs  # here, as below: a checkpoint in a local folder never loads pyarrow
        if not isinstance(filesystem, pafs.LocalFileSystem):
            raise ConfigurationError(
                f"the ledger cannot use a {type(filesystem).__name__}: pyarrow filesystems other than the local "
                f"one cannot create a record at most once. Give a local path or an s3:// location instead")
        return LocalStore(location)
    if (m := _SCHEME.match(location)) is None:
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


class LocalStore:
    """Records in a local (or mounted) folder."""

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

    def create(self, rel: str, text: str, *, exclusive: bool, durable: bool = True) -> bool:
        """Through a temporary file: an exclusive hard link (False: it exists) or a rename; *durable*
        fsyncs the file and the folder."""
        final = self.path(rel)
        folder, _, name = final.rpartition("/")
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                try:
                    os.write(fd, text.encode("utf-8"))
                    if durable:
                        os.fsync(fd)
                finally:
                    os.close(fd)
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
            if durable:
                dfd = os.open(folder, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            return True
        except OSError as exc:
            raise LedgerError(f"cannot write ledger record {final}: {exc}") from exc

    def list(self, rel: str) -> list[str]:
        try:  # the entries' types come with the listing: no stat per record on a commit's path
            with os.scandir(self.path(rel)) as entries:
                return [e.name for e in entries if not e.name.startswith(".") and e.is_file()]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise LedgerError(f"cannot list ledger folder {self.path(rel)}: {exc}") from exc

    def delete(self, rel: str) -> None:
        try:
            os.unlink(self.path(rel))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise LedgerError(f"cannot delete ledger record {self.path(rel)}: {exc}") from exc


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
        ...

    def read(self, rel: str) -> str | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(rel))["Body"]
            return bytes(body.read()).decode("utf-8")
        except self._errors.NoSuchKey:
            return None
        except Exception as exc:  # botocore's errors have no common base worth naming
            raise LedgerError(f"cannot read ledger record {self.path(rel)}: {_what(exc)}") from exc

    def create(self, rel: str, text: str, *, exclusive: bool, durable: bool = True) -> bool:
        """A PutObject, conditional when *exclusive* (False: the object exists); always durable."""
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
        """Refuse a server that ignores ``If-None-Match: *`` (once per bucket and process)."""
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


#: A folder of records: a checkpoint's ``twopc/``, an outbox.
Store = LocalStore | S3Store


#: The kinds of records of a ledger besides its own (kind ``""``): a checkpoint's folders.
KINDS = ("decisions", "committed", "owners", "verdicts", "aborted", "running")


class Records(Protocol):
    """The records of one ledger; every method raises :class:`LedgerError` when the place fails."""

    root: str
    """Where the records are, for messages (credential-free)."""

    def where(self, kind: str, name: str) -> str:
        """The record's name in messages."""

    def record(self, kind: str, name: str) -> str | None:
        """The record's text, or None."""

    def names(self, kind: str) -> list[str]:
        """The sorted names of *kind*'s records."""

    def add(self, kind: str, name: str, text: str) -> bool:
        """Create the record durably, only if absent (False: it exists)."""

    def put(self, kind: str, name: str, text: str, *, durable: bool) -> None:
        """Create or replace the record atomically; without *durable* a crash may lose the last update
        (running tasks, metrics)."""

    def remove(self, kind: str, name: str) -> None:
        """Delete the record if present."""

    def write_decision(self, name: str, text: str) -> bool:
        """Create decision *name* durably if absent (False: one exists); :class:`FencedError` when this
        writer may not decide any more."""


def _rel(kind: str, name: str) -> str:
    return f"{kind}/{name}" if kind else name


class FolderRecords:
    """A ledger's records as the files of *store*; *make* creates its folders (a writer's ledger)."""

    def __init__(self, store: Store, *, make: bool = False) -> None:
        self.store = store
        self.root = store.root
        for kind in KINDS if make else ():
            store.makedirs(kind)

    def where(self, kind: str, name: str) -> str:
        return self.store.path(_rel(kind, name))

    def record(self, kind: str, name: str) -> str | None:
        return self.store.read(_rel(kind, name))

    def names(self, kind: str) -> list[str]:
        return sorted(self.store.list(kind))

    def add(self, kind: str, name: str, text: str) -> bool:
        return self.store.create(_rel(kind, name), text, exclusive=True)

    def put(self, kind: str, name: str, text: str, *, durable: bool) -> None:
        self.store.create(_rel(kind, name), text, exclusive=False, durable=durable)

    def remove(self, kind: str, name: str) -> None:
        self.store.delete(_rel(kind, name))

    def write_decision(self, name: str, text: str) -> bool:
        return self.add("decisions", name, text)


class ReadOnlyRecords:
    """Another place's *records*, read only: every write raises."""

    def __init__(self, records: Records) -> None:
        self.root = records.root
        # the place's own readers, handed out as they are
        self.where = records.where
        self.record = records.record
        self.names = records.names

    def _refuse(self, kind: str, name: str) -> LedgerError:
        return LedgerError(f"the ledger {self.root} was opened to be read only: {self.where(kind, name)} was not "
                           f"written")

    def add(self, kind: str, name: str, text: str) -> bool:
        raise self._refuse(kind, name)

    def put(self, kind: str, name: str, text: str, *, durable: bool) -> None:
        raise self._refuse(kind, name)

    def remove(self, kind: str, name: str) -> None:
        raise self._refuse(kind, name)

    def write_decision(self, name: str, text: str) -> bool:
        raise self._refuse("decisions", name)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    return None


def _what(exc: BaseException) -> str:
    """The error's class and message (botocore puts no credentials in them)."""
    return f"{type(exc).__name__}: {exc}"
