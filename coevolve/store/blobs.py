"""Immutable blobs of a store: `objects/ab/<sha256>`, named by the sha256 of their bytes, written
atomically (temp file + fsync + `os.replace`) and verified on every read; encoded values over them.

Two processes writing the same blob write the same bytes and either rename wins; re-putting the same
content repairs a corrupt object.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from contextlib import suppress
from pathlib import Path
from typing import Any

from coevolve.codec import CodecError, decode, encode
from coevolve.store.db import Database, StoreError

_HEX64 = re.compile(r"[0-9a-f]{64}")


class Blobs(Database):
    """The blob part of `HarnessStore`."""

    def _object_path(self, digest: str) -> Path:
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise StoreError(f"{digest!r} is not a sha256 digest")
        return self.objects / digest[:2] / digest

    def put_blob(self, data: bytes) -> str:
        """Store bytes under their sha256; an existing file is kept only when it holds these very
        bytes (a corrupt one is rewritten). Written to a temp file, fsynced, renamed into place."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise StoreError(f"put_blob takes bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        path = self._object_path(digest)
        if _holds(path, data):
            return digest
        self._require_writable(f"write object {digest[:12]}")
        parent = path.parent
        tmp = parent / f".tmp-{digest[:12]}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            if not parent.is_dir():
                parent.mkdir(parents=True, exist_ok=True)
                _fsync_dir(parent.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(parent)
        except OSError as e:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise StoreError(
                f"cannot write object {digest[:12]} under {str(parent)!r}: {e.strerror or e}"
            ) from None
        return digest

    def get_blob(self, digest: str) -> bytes:
        path = self._object_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"no object {digest}") from None
        except OSError as e:
            raise StoreError(f"cannot read object {digest}: {e.strerror or e}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(
                f"object {digest} is corrupt (its content does not match its name): {path};"
                " putting the same value again rewrites it (coevolve store check lists all)"
            )
        return data

    def put_value(self, value: Any) -> str:
        try:
            data = encode(value)
        except (CodecError, TypeError, OverflowError) as e:
            raise StoreError(f"cannot encode {type(value).__name__}: {e}") from None
        return self.put_blob(data)

    def get_value(self, digest: str) -> Any:
        data = self.get_blob(digest)
        try:
            return decode(data)
        except (CodecError, ValueError) as e:
            raise StoreError(f"object {digest[:12]} does not decode: {e}") from None


def _holds(path: Path, data: bytes) -> bool:
    """Does the file at `path` hold exactly `data`? (False when absent, unreadable or different.)"""
    try:
        if path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False


def _fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in `path` durable (best effort: not every platform allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
