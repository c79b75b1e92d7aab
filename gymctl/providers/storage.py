"""Object storage: S3 / R2 through boto3 in production, a local folder in the embedded default.

GYMCTL_STORAGE_URL picks one (`s3://bucket?endpoint_url=...&region=...` or `file:///abs/path`).
Both honour the same contract, so code written against the folder passes against S3:

- keys are checked by `validate_key` on every call, the same way for both stores, so a key that
  works on a laptop works in production;
- keys are immutable by convention (each stored asset gets a new key); `put` overwrites anyway,
  as S3 does, and returns only once the object is durable;
- `presign_get` gives a URL a browser can fetch until it expires; callers sign afresh on every
  read (spec A 2.11: draft previews are signed per read, valid one hour), never store the URL.

Folder layout: key `a/b.json` is the file `<root>/a/b.json` (DESIGN 3). Its content type lives in a
sidecar `<root>/.meta/objects/a/b.json.json`; temp files are made under `<root>/.meta/tmp/`. The
first key segment `.meta` is therefore reserved, and refused by both stores. The folder store's URLs
point at a signed route of the API (`{url_base}/{key}?expires=..&signature=..`) that checks them
with `FolderObjectStore.verify_signature` before serving the file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import math
import os
import stat
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, quote, unquote, urlsplit

from gymctl import clock as default_clock
from gymctl.clock import Clock, ensure_utc
from gymctl.errors import ConfigError
from gymctl.numerals import whole_number

if TYPE_CHECKING:
    from gymctl.config import Settings  # config's production check loads this module

MAX_KEY_BYTES = 1024  # S3's own limit on a key, in UTF-8 bytes
# A segment becomes a file name (and its sidecar `<segment>.json`): stay within NAME_MAX (255).
MAX_SEGMENT_BYTES = 250
RESERVED_SEGMENT = ".meta"
# SigV4 presigned URLs live at most seven days; the folder store keeps the same bound.
MAX_PRESIGN = timedelta(days=7)
DEFAULT_CONTENT_TYPE = "application/octet-stream"


class StorageError(RuntimeError):
    """The store failed (unreachable, refused, disk error). The message names the store and the
    cause, never credentials, so it is safe to log."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    content_type: str


class ObjectStore(Protocol):
    def put(self, key: str, data: bytes, *, content_type: str) -> None:
        """Store the bytes under the key; returns once the object is durable."""
        ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such key."""
        ...

    def head(self, key: str) -> ObjectInfo | None:
        """Size and content type without the body, or None when there is no such key."""
        ...

    def presign_get(self, key: str, *, expires: timedelta) -> str:
        """A URL a browser can fetch the object from until `expires` has passed."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error (as on S3)."""
        ...


def validate_key(key: str) -> str:
    """Return the key if every store can hold it safely; raise ValueError otherwise.

    Refused: empty, a leading "/", empty segments ("a//b", "a/"), "." or ".." segments (path
    traversal in the folder store), non-printable characters, more than 1024 UTF-8 bytes, a
    segment over 250 bytes, and the reserved first segment ".meta".
    """
    if not isinstance(key, str) or not key:
        raise ValueError("object key must be a non-empty string")
    if not key.isprintable():
        raise ValueError("object key contains non-printable characters")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"object key longer than {MAX_KEY_BYTES} bytes")
    if key.startswith("/"):
        raise ValueError("object key must not start with '/'")
    segments = key.split("/")
    if any(segment == "" for segment in segments):
        raise ValueError("object key has an empty segment")
    if any(segment in (".", "..") for segment in segments):
        raise ValueError("object key has a '.' or '..' segment")
    if any(len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES for segment in segments):
        raise ValueError(f"object key has a segment longer than {MAX_SEGMENT_BYTES} bytes")
    if segments[0] == RESERVED_SEGMENT:
        raise ValueError(f"object keys under {RESERVED_SEGMENT}/ are reserved")
    return key


def _validate_content_type(content_type: str) -> str:
    # It ends up in a response header: no line breaks or control characters.
    if not content_type or not content_type.isprintable() or not content_type.isascii():
        raise ValueError("content type must be non-empty printable ASCII")
    return content_type


def _expiry_seconds(expires: timedelta) -> int:
    if expires <= timedelta(0) or expires > MAX_PRESIGN:
        raise ValueError("presign lifetime must be positive and at most 7 days")
    return math.ceil(expires.total_seconds())


class S3ObjectStore:
    """Production: an S3 bucket (AWS, Cloudflare R2, MinIO) through boto3.

    Credentials come from the environment the way boto3 finds them (AWS_ACCESS_KEY_ID, ...);
    nothing here reads or logs them. With `endpoint_url` set, requests use path-style addressing,
    which R2, MinIO and moto all accept and which needs no wildcard DNS.
    """

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any | None = None,
    ) -> None:
        if not bucket:
            raise ValueError("S3 bucket name is empty")
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                signature_version="s3v4",
                connect_timeout=5,
                read_timeout=30,
                retries={"max_attempts": 3, "mode": "standard"},
                s3={"addressing_style": "path" if endpoint_url else "auto"},
            )
            client = boto3.client(
                "s3", endpoint_url=endpoint_url, region_name=region, config=config
            )
        self._client = client

    def put(self, key: str, data: bytes, *, content_type: str) -> None:
        validate_key(key)
        _validate_content_type(content_type)
        # PutObject answers only once S3 has stored the object durably.
        self._call(
            "put",
            self._client.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=data,
            ContentType=content_type,
        )

    def get(self, key: str) -> bytes | None:
        validate_key(key)
        response = self._call(
            "get", self._client.get_object, Bucket=self.bucket, Key=key, missing_ok=True
        )
        if response is None:
            return None
        body = response["Body"]
        try:
            return body.read()
        except Exception as error:  # botocore raises several unrelated types mid-stream
            raise StorageError(f"S3 get from {self.where} failed: {type(error).__name__}") from None
        finally:
            body.close()

    def head(self, key: str) -> ObjectInfo | None:
        validate_key(key)
        response = self._call(
            "head", self._client.head_object, Bucket=self.bucket, Key=key, missing_ok=True
        )
        if response is None:
            return None
        return ObjectInfo(
            key=key,
            size=int(response["ContentLength"]),
            content_type=response.get("ContentType") or DEFAULT_CONTENT_TYPE,
        )

    def presign_get(self, key: str, *, expires: timedelta) -> str:
        validate_key(key)
        seconds = _expiry_seconds(expires)
        # Signed locally with the client's credentials and clock; no request is made.
        return self._call(
            "presign",
            self._client.generate_presigned_url,
            "get_object",
            Params={"Bucket": self.bucket, "Key": key},
            ExpiresIn=seconds,
        )

    def delete(self, key: str) -> None:
        validate_key(key)
        self._call("delete", self._client.delete_object, Bucket=self.bucket, Key=key)

    def _call(
        self, action: str, method: Any, *args: Any, missing_ok: bool = False, **kwargs: Any
    ) -> Any:
        """Run one client call; any failure is a StorageError, except that with `missing_ok` a
        missing key is None (only reads may take "not found" for an answer)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return method(*args, **kwargs)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if missing_ok and code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StorageError(f"S3 {action} on {self.where} failed: {code or 'error'}") from None
        except BotoCoreError as error:
            raise StorageError(
                f"S3 {action} on {self.where} failed: {type(error).__name__}"
            ) from None

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}" + (f" at {self.endpoint_url}" if self.endpoint_url else "")

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.where!r})"


class FolderObjectStore:
    """The embedded default: one file per object under `root`, content types in sidecars.

    Writes are atomic and durable: a temp file under `.meta/tmp/` is fsynced, renamed into place
    with os.replace, and the directory fsynced. The sidecar is written before the object, so a
    visible object always has its content type. Presigned URLs point at the API's signed route;
    the signature is hex HMAC-SHA256(secret, key + "\\n" + expires), expires in unix seconds.
    (The newline keeps key "a1" + "23" apart from "a12" + "3"; keys never contain one.)
    """

    def __init__(
        self,
        root: Path | str,
        *,
        url_base: str,
        secret: bytes,
        clock: Clock = default_clock,
    ) -> None:
        if not secret:
            raise ValueError("the folder store needs a non-empty signing secret")
        self.root = Path(root)
        self.url_base = url_base.rstrip("/")
        self._secret = secret
        self._clock = clock

    # -- paths

    def path_of(self, key: str) -> Path:
        """The file holding the object (for the signed route to send once verified)."""
        return self.root.joinpath(*validate_key(key).split("/"))

    def _meta_path(self, key: str) -> Path:
        segments = key.split("/")
        segments[-1] += ".json"
        return self.root.joinpath(RESERVED_SEGMENT, "objects", *segments)

    # -- the contract

    def put(self, key: str, data: bytes, *, content_type: str) -> None:
        target = self.path_of(key)
        _validate_content_type(content_type)
        meta = json.dumps({"content_type": content_type}).encode()
        try:
            self._write(self._meta_path(key), meta)
            self._write(target, bytes(data))
        except OSError as error:
            raise StorageError(f"write to {self.where} failed: {_reason(error)}") from None

    def get(self, key: str) -> bytes | None:
        path = self.path_of(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as error:
            raise StorageError(f"read from {self.where} failed: {_reason(error)}") from None

    def head(self, key: str) -> ObjectInfo | None:
        path = self.path_of(key)
        try:
            status = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            raise StorageError(f"stat in {self.where} failed: {_reason(error)}") from None
        if not stat.S_ISREG(status.st_mode):
            return None  # a directory: a prefix of other keys, not an object
        return ObjectInfo(key=key, size=status.st_size, content_type=self._content_type(key))

    def presign_get(self, key: str, *, expires: timedelta) -> str:
        validate_key(key)
        deadline = math.ceil(ensure_utc(self._clock.now()).timestamp()) + _expiry_seconds(expires)
        signature = self._sign(key, deadline)
        return f"{self.url_base}/{quote(key, safe='/')}?expires={deadline}&signature={signature}"

    def delete(self, key: str) -> None:
        path = self.path_of(key)
        try:
            # The object first: once it is gone the key is gone, whatever happens to the sidecar.
            path.unlink(missing_ok=True)
            self._meta_path(key).unlink(missing_ok=True)
        except (NotADirectoryError, IsADirectoryError):
            return
        except OSError as error:
            raise StorageError(f"delete in {self.where} failed: {_reason(error)}") from None

    # -- the signed route

    def verify_signature(self, key: str, expires: int | str, signature: str, now: datetime) -> bool:
        """True when `signature` was made by this store for `key` and `expires` has not passed.

        Takes the raw query-string values; anything malformed is False, never an exception, so
        the route can answer 403 on False without parsing anything itself.
        """
        try:
            validate_key(key)
        except ValueError:
            return False
        if isinstance(expires, str):
            expires = whole_number(expires)
        if isinstance(expires, bool) or not isinstance(expires, int):
            return False
        if ensure_utc(now).timestamp() >= expires:
            return False
        if not isinstance(signature, str) or not signature.isascii():
            return False
        return hmac.compare_digest(self._sign(key, expires).encode(), signature.lower().encode())

    def _sign(self, key: str, expires: int) -> str:
        message = f"{key}\n{expires}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    # -- files

    def _content_type(self, key: str) -> str:
        try:
            meta = json.loads(self._meta_path(key).read_bytes())
        except (OSError, ValueError):
            return DEFAULT_CONTENT_TYPE  # a file dropped in by hand has no sidecar
        content_type = meta.get("content_type") if isinstance(meta, dict) else None
        return content_type if isinstance(content_type, str) else DEFAULT_CONTENT_TYPE

    def _write(self, target: Path, data: bytes) -> None:
        tmp_dir = self.root / RESERVED_SEGMENT / "tmp"
        _make_dirs(tmp_dir)
        _make_dirs(target.parent)
        temp = tmp_dir / f"{uuid.uuid4().hex}.tmp"
        try:
            with temp.open("xb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)

    @property
    def where(self) -> str:
        return f"folder store {self.root}"

    def __repr__(self) -> str:
        return f"FolderObjectStore({str(self.root)!r})"


def _make_dirs(path: Path) -> None:
    """mkdir -p, fsyncing each new directory's parent so the new entry survives a crash."""
    if path.is_dir():
        return
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
        _fsync_dir(directory.parent)


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return  # directories cannot be opened for fsync elsewhere
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _reason(error: OSError) -> str:
    if error.errno in (errno.ENOTDIR, errno.EISDIR):
        return "a key is both an object and a prefix of another key"
    return error.strerror or type(error).__name__


_S3_PARAMS = frozenset({"endpoint_url", "region"})


def storage_from_url(
    url: str, *, url_base: str, secret: bytes, clock: Clock = default_clock
) -> ObjectStore:
    """The store GYMCTL_STORAGE_URL names.

    `s3://bucket?endpoint_url=https://...&region=...` (both parameters optional) is an
    S3ObjectStore; `file:///abs/path` a FolderObjectStore, which signs with `secret` and points
    its URLs at `url_base`. Anything else is a ConfigError naming the setting.
    """
    parts = urlsplit(url or "")
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError("GYMCTL_STORAGE_URL: no bucket (s3://bucket?endpoint_url=...)")
        if parts.path not in ("", "/"):
            raise ConfigError("GYMCTL_STORAGE_URL: s3://bucket takes no path")
        try:
            query = parse_qs(parts.query, strict_parsing=bool(parts.query))
        except ValueError:
            raise ConfigError("GYMCTL_STORAGE_URL: malformed query string") from None
        unknown = sorted(set(query) - _S3_PARAMS)
        if unknown:
            # A misspelt endpoint_url would otherwise send the app's objects to AWS.
            raise ConfigError(f"GYMCTL_STORAGE_URL: unknown parameter(s) {', '.join(unknown)}")
        endpoint_url = query.get("endpoint_url", [None])[-1]
        if endpoint_url is not None:
            endpoint = urlsplit(endpoint_url)
            if endpoint.scheme not in ("http", "https") or not endpoint.hostname:
                raise ConfigError("GYMCTL_STORAGE_URL: endpoint_url must be an http(s) URL")
        region = query.get("region", [None])[-1]
        return S3ObjectStore(parts.netloc, endpoint_url=endpoint_url, region=region)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError("GYMCTL_STORAGE_URL: file URLs name a local folder (file:///path)")
        if parts.query or parts.fragment:
            raise ConfigError("GYMCTL_STORAGE_URL: file:///path takes no parameters")
        path = Path(unquote(parts.path))
        if not path.is_absolute():
            raise ConfigError("GYMCTL_STORAGE_URL: the folder must be an absolute path")
        try:
            return FolderObjectStore(path, url_base=url_base, secret=secret, clock=clock)
        except ValueError as error:
            raise ConfigError(f"GYMCTL_STORAGE_URL: {error}") from None
    raise ConfigError(
        f"GYMCTL_STORAGE_URL: unsupported scheme {parts.scheme or '(none)'!r}; "
        "use s3://bucket?endpoint_url=... or file:///absolute/path"
    )


def storage_from_settings(settings: Settings, *, clock: Clock = default_clock) -> ObjectStore:
    """GYMCTL_STORAGE_URL (default: a folder under GYMCTL_HOME). The folder store signs its links
    with GYMCTL_STORAGE_SIGNING_SECRET and they are served by the API at GYMCTL_PUBLIC_URL."""
    url = settings.resolved_storage_url
    secret = (
        b""
        if url.startswith("s3:")
        else settings.home_secret("GYMCTL_STORAGE_SIGNING_SECRET", settings.storage_signing_secret)
    )
    return storage_from_url(
        url, url_base=settings.public_url.rstrip("/") + "/storage", secret=secret, clock=clock
    )
