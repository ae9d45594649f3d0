"""Files one process writes and another reads, through Django's storage API, so that web
and workers need no common directory.

Three named storages (``settings.STORAGES``): ``uploads`` (dashboard uploads and their
import's progress), ``snapshots`` (the remote snapshot store's archives) and ``exports``
(snapshots exported on the server). The embedded default is a local directory
(``FileSystemStorage`` on ``MEMORYUI_UPLOAD_DIR``, ``MEMORYUI_REMOTE_STORE_DIR`` and
``MEMORYUI_SNAPSHOT_BASE_PATH``), used exactly as before: files are renamed into place and
the database records their paths. With ``MEMORYUI_STORAGE=s3`` they are objects in an
S3-compatible bucket (django-storages), recorded as ``storage://<alias>/<name>``.

Memory stays bounded both ways: a file reaches storage from a local file (multipart,
chunk by chunk), and a process that must seek in an archive (tarfile) reads a temporary
copy of its own, streamed in chunks and deleted afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages
from storages.utils import clean_name

UPLOADS, SNAPSHOTS, EXPORTS = "uploads", "snapshots", "exports"
PREFIX = "storage://"
CHUNK = 1024 * 1024

# The directory each storage uses when it is the local default (read live, so that a
# setting changed at run time, as tests do, moves it).
LOCAL_ROOT_SETTINGS = {
    UPLOADS: "MEMORYUI_UPLOAD_DIR",
    SNAPSHOTS: "MEMORYUI_REMOTE_STORE_DIR",
    EXPORTS: "MEMORYUI_SNAPSHOT_BASE_PATH",
}


def storage(alias: str) -> Storage:
    return storages[alias]


def local_root(alias: str) -> Path | None:
    """The local directory that holds ``alias``'s files, or None when they live in
    object storage."""
    if not isinstance(storage(alias), FileSystemStorage):
        return None
    return Path(getattr(settings, LOCAL_ROOT_SETTINGS[alias])).resolve()


def is_stored(locator: str) -> bool:
    """Whether a recorded source is an object in storage (not a local path)."""
    return locator.startswith(PREFIX)


def locator_of(alias: str, name: str) -> str:
    return f"{PREFIX}{alias}/{name}"


def parse(locator: str) -> tuple[str, str]:
    alias, _, name = locator.removeprefix(PREFIX).partition("/")
    if alias not in LOCAL_ROOT_SETTINGS or not name:
        raise ValueError(f"{locator} names no storage")
    return alias, name


def put_file(alias: str, name: str, source: Path) -> str:
    """Move the finished local file ``source`` into ``alias`` as ``name`` (replacing a
    file of that name) and answer what the database records: the file's path in a local
    directory (a rename, atomic and fsync'd, as ``source`` is beside it), else its
    locator. ``source`` is gone afterwards."""
    root = local_root(alias)
    if root is not None:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
        _fsync_directory(target.parent)
        return str(target)
    stored: Any = storage(alias)
    try:
        if hasattr(stored, "bucket") and hasattr(stored, "transfer_config"):
            _upload_file(stored, name, source)
        else:
            with source.open("rb") as fh:
                name = stored.save(name, File(fh, name=PurePosixPath(name).name))
    finally:
        source.unlink(missing_ok=True)
    return locator_of(alias, name)


class StoreError(OSError):
    """The object store refused or failed a write (unreachable, a server error)."""


def put_new(alias: str, name: str, source: Path) -> str:
    """Move the finished local file ``source`` into the object storage ``alias`` as
    ``name``, never over an existing object: FileExistsError when ``name`` exists, even
    if it appeared a moment ago (a multipart upload that completes only if no object has
    the key, ``If-None-Match: *``; until it completes there is no object at all).
    StoreError when the store fails. Answers the locator; ``source`` is gone afterwards
    in every case. (A local directory has its own journalled publish: ``snapshots``.)"""
    stored: Any = storage(alias)
    try:
        if hasattr(stored, "bucket") and hasattr(stored, "connection"):
            _upload_new(stored, name, source)
        elif stored.exists(name):  # a storage without conditional writes: best effort
            raise FileExistsError(name)
        else:
            with source.open("rb") as fh:
                name = stored.save(name, File(fh, name=PurePosixPath(name).name))
        return locator_of(alias, name)
    finally:
        source.unlink(missing_ok=True)


PART = 5 * 1024 * 1024  # S3's least part size (but for the last): the least memory


def _upload_new(stored: Any, name: str, source: Path) -> None:
    """Upload ``source`` part by part (one part in memory at a time) and complete the
    object only if its key is free; an upload that fails or loses is aborted."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 (heavy: used with object storage only)

    key = stored._normalize_name(clean_name(name))
    client = stored.connection.meta.client
    where = {"Bucket": stored.bucket_name, "Key": key}
    upload_id = ""
    try:
        upload_id = client.create_multipart_upload(**where, **stored._get_write_parameters(key))[
            "UploadId"
        ]
        parts: list[dict[str, Any]] = []
        with source.open("rb") as fh:
            while True:
                body = fh.read(PART)
                number = len(parts) + 1
                sent = client.upload_part(**where, UploadId=upload_id, PartNumber=number, Body=body)
                parts.append({"ETag": sent["ETag"], "PartNumber": number})
                if len(body) < PART:
                    break
        client.complete_multipart_upload(
            **where, UploadId=upload_id, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )
    except BaseException as exc:
        if upload_id:
            with suppress(BotoCoreError, ClientError):
                client.abort_multipart_upload(**where, UploadId=upload_id)
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise FileExistsError(name) from exc
            raise StoreError(f"the object store answered {code or exc}") from exc
        if isinstance(exc, BotoCoreError):
            raise StoreError(str(exc)) from exc
        raise


def _upload_file(stored: Any, name: str, source: Path) -> None:
    """``S3Storage.save`` as boto3's file upload: ``save`` hands boto3 an open file,
    whose multipart upload reads every part into memory ahead of sending it (100 MiB
    held for a 100 MiB archive); from a file name it reads each part as it is sent.
    The key and parameters are the ones ``save`` would use (django-storages' own)."""

    key = stored._normalize_name(clean_name(name))
    stored.bucket.Object(key).upload_file(
        str(source),
        ExtraArgs=stored._get_write_parameters(key),
        Config=stored.transfer_config,
    )


def delete(locator: str) -> None:
    """Remove a recorded file, wherever it is; nothing when it is gone already."""
    if is_stored(locator):
        alias, name = parse(locator)
        storage(alias).delete(name)
    else:
        Path(locator).unlink(missing_ok=True)


def open_stored(locator: str) -> tuple[IO[bytes], int]:
    """A recorded file opened for reading as a stream, and its size. From object
    storage it is the object's body as it arrives (``storage.open`` would first copy
    the whole object into memory)."""
    if not is_stored(locator):
        path = Path(locator)
        return path.open("rb"), path.stat().st_size
    alias, name = parse(locator)
    stored = storage(alias).open(name, "rb")
    obj = getattr(stored, "obj", None)  # S3Storage's file: its boto3 object
    if obj is None:
        return stored, stored.size
    return obj.get()["Body"], int(obj.content_length)


class _Ranged:
    """A stored object read by ranged requests: ``seek``, then ``read`` a member's
    bytes, without fetching the rest of the object."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.position = 0

    def seek(self, offset: int) -> None:
        self.position = offset

    def read(self, size: int) -> bytes:
        if size <= 0:
            return b""
        last = self.position + size - 1
        data = bytes(self.obj.get(Range=f"bytes={self.position}-{last}")["Body"].read())
        self.position += len(data)
        return data

    def close(self) -> None:
        pass


def open_ranged(locator: str) -> Any:
    """A recorded file opened to read a few parts of it (``seek`` and ``read``): the
    file itself on this machine; from S3, each read a ranged request."""
    if not is_stored(locator):
        return Path(locator).open("rb")
    alias, name = parse(locator)
    stored = storage(alias).open(name, "rb")
    obj = getattr(stored, "obj", None)  # S3Storage's file: its boto3 object
    return stored if obj is None else _Ranged(obj)


# --- scratch folders ------------------------------------------------------------------
#
# Temporary copies live under MEMORYUI_VAR_DIR/scratch, never in the system's temporary
# directory, so that what a killed process left can be found and removed: an import job's
# folder (``import-<id>``) by the worker that takes the job over, a process's own
# (``proc-<host>-<pid>-...``) by the next worker started on that host once the process is
# gone (``sweep_scratch``).


def scratch_root() -> Path:
    return Path(settings.VAR_DIR) / "scratch"


def job_folder(job_id: int) -> Path:
    return scratch_root() / f"import-{job_id}"


def _process_prefix() -> str:
    return f"proc-{socket.gethostname()}-{os.getpid()}-"


@contextmanager
def scratch(folder: Path | None = None) -> Iterator[Path]:
    """A temporary folder, removed on leaving: ``folder`` (emptied first: what a dead
    holder of the same job left), else a new one of this process's."""
    scratch_root().mkdir(parents=True, exist_ok=True)
    if folder is None:
        made = Path(tempfile.mkdtemp(prefix=_process_prefix(), dir=scratch_root()))
    else:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        made = folder
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_scratch(held_jobs: set[int]) -> list[str]:
    """Remove what dead processes left in the scratch folder: job folders but those of
    ``held_jobs`` (running under a lease that has not run out), and the folders of
    processes of this host that are gone. Returns the names removed."""
    root = scratch_root()
    if not root.is_dir():
        return []
    host = f"proc-{socket.gethostname()}-"
    removed = []
    for entry in root.iterdir():
        name = entry.name
        if name.startswith("import-"):
            job = name.removeprefix("import-")
            if job.isdigit() and int(job) in held_jobs:
                continue
        elif name.startswith(host):
            pid = name.removeprefix(host).partition("-")[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
        else:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(name)
    return removed


@contextmanager
def local_copy(locator: str, folder: Path | None = None) -> Iterator[Path]:
    """A local path to read a recorded file from (tarfile seeks): the file itself when
    it is on this machine, else a temporary copy of it, streamed from storage in chunks
    into ``folder`` (an import job's, see ``scratch``) or a scratch folder of this
    process's, and deleted on leaving. The copy keeps the file's name (its suffix names
    its compression). FileNotFoundError when it is gone."""
    if not is_stored(locator):
        yield Path(locator)
        return
    alias, name = parse(locator)
    if not storage(alias).exists(name):
        raise FileNotFoundError(f"{locator} is not in the object store")
    with scratch(folder) as made:
        copy = made / PurePosixPath(name).name
        stored = storage(alias).open(name, "rb")
        with copy.open("xb") as target:
            obj = getattr(stored, "obj", None)
            if obj is not None:  # ranged GETs in parallel, each written as it comes
                config = getattr(storage(alias), "transfer_config", None)
                obj.download_fileobj(target, Config=config)
            else:
                with stored:
                    shutil.copyfileobj(stored, target, CHUNK)
        yield copy


def stored_exists(alias: str, name: str) -> bool:
    root = local_root(alias)
    return (root / name).exists() if root is not None else storage(alias).exists(name)


# --- small files that change (an import's progress) ---------------------------------


def write_small(alias: str, name: str, data: bytes) -> None:
    """Replace a small file whole: readers see the old or the new bytes, never a part."""
    root = local_root(alias)
    if root is None:
        storage(alias).save(name, ContentFile(data))  # an object PUT replaces it whole
        return
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_bytes(data)
    os.replace(temp, path)


def read_small(alias: str, name: str) -> bytes | None:
    """The file's bytes; None when there is none (not written yet, or removed meanwhile:
    a worker removes a job's progress file while a page may be reading it)."""
    root = local_root(alias)
    try:
        if root is not None:
            return (root / name).read_bytes()
        with storage(alias).open(name, "rb") as fh:
            return bytes(fh.read())
    except OSError:  # FileNotFoundError: none written yet, or removed
        return None
    except Exception as exc:  # S3: the object went between the client's HEAD and its GET
        if _no_such_object(exc):
            return None
        raise


def _no_such_object(exc: Exception) -> bool:
    """botocore's ClientError for a missing key (read off the error, so that the web
    process does not import botocore to name it)."""
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code in ("404", "NoSuchKey")


def delete_small(alias: str, name: str) -> None:
    root = local_root(alias)
    if root is None:
        with suppress(OSError):
            storage(alias).delete(name)
        return
    (root / name).unlink(missing_ok=True)
    (root / name).with_suffix(".tmp").unlink(missing_ok=True)


def _fsync_directory(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
