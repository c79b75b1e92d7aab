"""Object storage: one contract, run against a real S3 endpoint on loopback (moto's server) and
against the embedded default's folder store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from gymctl.clock import FixedClock
from gymctl.config import ConfigError
from gymctl.providers.storage import (
    FolderObjectStore,
    ObjectInfo,
    ObjectStore,
    S3ObjectStore,
    StorageError,
    storage_from_url,
    validate_key,
)
from tests.conftest import NOW

BUCKET = "gymctl-test-assets"
SECRET = b"folder-store-signing-secret-for-tests"
URL_BASE = "http://127.0.0.1:8000/storage"
HOUR = timedelta(hours=1)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4

INVALID_KEYS = [
    "",
    "/orgs/1/icon.png",
    "orgs//icon.png",
    "orgs/1/",
    "../etc/passwd",
    "orgs/../../etc/passwd",
    "orgs/./icon.png",
    "..",
    "orgs/1/icon\n.png",
    "orgs/1/icon\x00.png",
    "orgs/1/\x7f",
    "x" * 1025,
    "é" * 513,  # 513 characters, 1026 UTF-8 bytes
    "orgs/" + "x" * 251,
    ".meta/objects/a.json",
]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on a free loopback port, with dummy credentials and one bucket."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.setenv("NO_PROXY", "127.0.0.1,localhost")
        # A developer's own AWS profile or config must not leak into the tests.
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        try:
            yield endpoint
        finally:
            server.stop()


@pytest.fixture(scope="module")
def s3_store(s3_endpoint: str) -> S3ObjectStore:
    return S3ObjectStore(BUCKET, endpoint_url=s3_endpoint, region="us-east-1")


@pytest.fixture
def folder_store(tmp_path: Path, clock: FixedClock) -> FolderObjectStore:
    return FolderObjectStore(tmp_path / "store", url_base=URL_BASE, secret=SECRET, clock=clock)


@pytest.fixture(params=["s3", "folder"])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    return request.getfixturevalue(f"{request.param}_store")


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test alone: the S3 bucket is shared by the whole module."""
    return f"orgs/{uuid.uuid4().hex}"


def fetch_presigned(store: ObjectStore, url: str, clock: FixedClock) -> bytes | None:
    """What a browser gets from the URL: over HTTP from S3, through the signed route's check
    (verify_signature, then the file) from the folder store."""
    if isinstance(store, S3ObjectStore):
        response = httpx.get(url, trust_env=False, timeout=5)
        return response.content if response.status_code == 200 else None
    assert isinstance(store, FolderObjectStore)
    parts = urlsplit(url)
    assert url.startswith(URL_BASE + "/")
    key = unquote(parts.path.removeprefix(urlsplit(URL_BASE).path + "/"))
    query = parse_qs(parts.query)
    if not store.verify_signature(key, query["expires"][0], query["signature"][0], clock.now()):
        return None
    return store.path_of(key).read_bytes()


# -- the contract, on both stores


def test_put_get_head_round_trip(store: ObjectStore, prefix: str) -> None:
    key = f"{prefix}/branding/icon-1.png"
    store.put(key, PNG, content_type="image/png")
    assert store.get(key) == PNG
    assert store.head(key) == ObjectInfo(key=key, size=len(PNG), content_type="image/png")


def test_empty_object_and_overwrite(store: ObjectStore, prefix: str) -> None:
    key = f"{prefix}/empty.json"
    store.put(key, b"", content_type="application/json")
    assert store.get(key) == b""
    assert store.head(key) == ObjectInfo(key=key, size=0, content_type="application/json")
    store.put(key, b"{}", content_type="application/json; charset=utf-8")
    assert store.get(key) == b"{}"
    info = store.head(key)
    assert info is not None
    assert info.content_type == "application/json; charset=utf-8"


def test_missing_key_is_none(store: ObjectStore, prefix: str) -> None:
    assert store.get(f"{prefix}/missing.png") is None
    assert store.head(f"{prefix}/missing.png") is None


def test_a_prefix_is_not_an_object(store: ObjectStore, prefix: str) -> None:
    store.put(f"{prefix}/dir/file.txt", b"x", content_type="text/plain")
    assert store.get(f"{prefix}/dir") is None
    assert store.head(f"{prefix}/dir") is None
    store.delete(f"{prefix}/dir")  # nothing to delete; the object below it stays
    assert store.get(f"{prefix}/dir/file.txt") == b"x"


def test_delete(store: ObjectStore, prefix: str) -> None:
    key = f"{prefix}/logo.png"
    other = f"{prefix}/wordmark.png"
    store.put(key, PNG, content_type="image/png")
    store.put(other, b"other", content_type="image/png")
    store.delete(key)
    assert store.get(key) is None
    assert store.head(key) is None
    assert store.get(other) == b"other"
    store.delete(key)  # deleting again is not an error, as on S3
    store.put(key, b"again", content_type="text/plain")
    assert store.head(key) == ObjectInfo(key=key, size=5, content_type="text/plain")


@pytest.mark.parametrize("name", ["icon.png", "splash logo (1).png", "ícone-ü.png", "a+b=c&d?.png"])
def test_presigned_url_serves_the_bytes(
    store: ObjectStore, prefix: str, clock: FixedClock, name: str
) -> None:
    key = f"{prefix}/drafts/{name}"
    store.put(key, PNG, content_type="image/png")
    url = store.presign_get(key, expires=HOUR)
    assert fetch_presigned(store, url, clock) == PNG


def test_presign_lifetime_is_bounded(store: ObjectStore, prefix: str) -> None:
    for expires in (timedelta(0), timedelta(seconds=-1), timedelta(days=7, seconds=1)):
        with pytest.raises(ValueError, match="lifetime"):
            store.presign_get(f"{prefix}/a.png", expires=expires)


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_invalid_keys_are_refused(store: ObjectStore, key: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.put(key, b"x", content_type="text/plain"),
        lambda: store.get(key),
        lambda: store.head(key),
        lambda: store.presign_get(key, expires=HOUR),
        lambda: store.delete(key),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="key"):
            call()


def test_longest_valid_key(store: ObjectStore) -> None:
    key = "/".join(["k" * 250] * 4) + "/" + "v" * 20
    assert len(key.encode()) == 1024
    store.put(key, b"long", content_type="text/plain")
    assert store.get(key) == b"long"


def test_content_type_cannot_inject_headers(store: ObjectStore, prefix: str) -> None:
    for content_type in ("", "text/plain\r\nX-Evil: 1", "text/plain\x00"):
        with pytest.raises(ValueError, match="content type"):
            store.put(f"{prefix}/a.txt", b"x", content_type=content_type)


# -- key validation


def test_validate_key_returns_valid_keys() -> None:
    assert validate_key("orgs/1/branding/icon.png") == "orgs/1/branding/icon.png"
    assert validate_key("a") == "a"
    assert validate_key("orgs/1/.well-known/x..y") == "orgs/1/.well-known/x..y"


# -- S3 specifics


def test_s3_object_carries_its_content_type(s3_store: S3ObjectStore, prefix: str) -> None:
    key = f"{prefix}/icon.png"
    s3_store.put(key, PNG, content_type="image/png")
    response = httpx.get(s3_store.presign_get(key, expires=HOUR), trust_env=False, timeout=5)
    assert response.headers["content-type"] == "image/png"
    query = parse_qs(urlsplit(s3_store.presign_get(key, expires=HOUR)).query)
    assert query["X-Amz-Expires"] == ["3600"]


def test_s3_failures_are_storage_errors(s3_endpoint: str) -> None:
    store = S3ObjectStore("no-such-bucket", endpoint_url=s3_endpoint, region="us-east-1")
    with pytest.raises(StorageError, match="no-such-bucket") as caught:
        store.put("a.txt", b"x", content_type="text/plain")
    assert "testing" not in str(caught.value)


# -- folder store specifics


def test_folder_layout(folder_store: FolderObjectStore, tmp_path: Path) -> None:
    folder_store.put("a/b.json", b'{"x": 1}', content_type="application/json")
    root = tmp_path / "store"
    assert (root / "a" / "b.json").read_bytes() == b'{"x": 1}'
    assert folder_store.path_of("a/b.json") == root / "a" / "b.json"
    assert (root / ".meta" / "objects" / "a" / "b.json.json").is_file()
    assert list((root / ".meta" / "tmp").iterdir()) == []  # no temp file left behind
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == [".meta/objects/a/b.json.json", "a/b.json"]


def test_folder_file_without_sidecar_is_octet_stream(
    folder_store: FolderObjectStore, tmp_path: Path
) -> None:
    (tmp_path / "store" / "seed").mkdir(parents=True)
    (tmp_path / "store" / "seed" / "by-hand.bin").write_bytes(b"abc")
    assert folder_store.head("seed/by-hand.bin") == ObjectInfo(
        key="seed/by-hand.bin", size=3, content_type="application/octet-stream"
    )


def test_folder_key_that_is_also_a_prefix(folder_store: FolderObjectStore) -> None:
    folder_store.put("a/b", b"x", content_type="text/plain")
    with pytest.raises(StorageError, match="prefix"):
        folder_store.put("a/b/c", b"y", content_type="text/plain")
    with pytest.raises(StorageError, match="prefix"):
        folder_store.put("a", b"y", content_type="text/plain")
    assert folder_store.get("a/b") == b"x"


def test_folder_presigned_url_shape(folder_store: FolderObjectStore) -> None:
    url = folder_store.presign_get("orgs/1/icon 1.png", expires=HOUR)
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{URL_BASE}/orgs/1/icon%201.png"
    query = parse_qs(parts.query)
    assert query["expires"] == [str(int((NOW + HOUR).timestamp()))]
    assert len(query["signature"][0]) == 64


def test_folder_signature_refuses_expired_and_tampered(
    folder_store: FolderObjectStore, clock: FixedClock
) -> None:
    key = "orgs/1/drafts/icon.png"
    query = parse_qs(urlsplit(folder_store.presign_get(key, expires=HOUR)).query)
    expires, signature = query["expires"][0], query["signature"][0]
    verify = folder_store.verify_signature

    assert verify(key, expires, signature, NOW)
    assert verify(key, int(expires), signature, NOW + HOUR - timedelta(seconds=1))
    assert not verify(key, expires, signature, NOW + HOUR)  # expired
    assert not verify(key, expires, signature, NOW + timedelta(days=2))
    assert not verify("orgs/2/drafts/icon.png", expires, signature, NOW)  # another key
    assert not verify(key, str(int(expires) + 3600), signature, NOW)  # extended expiry
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]
    assert not verify(key, expires, flipped, NOW)
    assert not verify(key, expires, "", NOW)
    assert not verify(key, expires, "é" * 64, NOW)
    assert not verify(key, "-1", signature, NOW)
    assert not verify(key, "soon", signature, NOW)
    assert not verify(key, "9" * 4301, signature, NOW)  # int() raised past 4,300 digits
    assert not verify("../etc/passwd", expires, signature, NOW)

    other = FolderObjectStore(folder_store.root, url_base=URL_BASE, secret=b"other", clock=clock)
    assert not other.verify_signature(key, expires, signature, NOW)


def test_folder_signature_binds_key_and_expiry_apart(folder_store: FolderObjectStore) -> None:
    """Key "a1" expiring at 23 and key "a12" expiring at 3 must not share a signature."""
    clock = FixedClock(NOW)
    store = FolderObjectStore(folder_store.root, url_base=URL_BASE, secret=SECRET, clock=clock)
    query = parse_qs(urlsplit(store.presign_get("a1", expires=HOUR)).query)
    expires, signature = query["expires"][0], query["signature"][0]
    assert not store.verify_signature("a" + "1" + expires[0], expires[1:], signature, NOW)


def test_folder_store_needs_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="secret"):
        FolderObjectStore(tmp_path, url_base=URL_BASE, secret=b"", clock=FixedClock(NOW))


# -- storage_from_url


def test_storage_from_url_s3(s3_endpoint: str, prefix: str) -> None:
    store = storage_from_url(
        f"s3://{BUCKET}?endpoint_url={s3_endpoint}&region=us-east-1",
        url_base=URL_BASE,
        secret=SECRET,
        clock=FixedClock(NOW),
    )
    assert isinstance(store, S3ObjectStore)
    assert store.bucket == BUCKET
    store.put(f"{prefix}/x.txt", b"via url", content_type="text/plain")
    assert store.get(f"{prefix}/x.txt") == b"via url"


def test_storage_from_url_folder(tmp_path: Path) -> None:
    store = storage_from_url(
        (tmp_path / "my store").as_uri(), url_base=URL_BASE, secret=SECRET, clock=FixedClock(NOW)
    )
    assert isinstance(store, FolderObjectStore)
    assert store.root == tmp_path / "my store"
    store.put("a/b.json", b"{}", content_type="application/json")
    assert (tmp_path / "my store" / "a" / "b.json").read_bytes() == b"{}"


@pytest.mark.parametrize(
    "url",
    [
        "",
        "/var/lib/gymctl",
        "gs://bucket",
        "http://127.0.0.1:9000/bucket",
        "s3://",
        "s3:///?endpoint_url=http://127.0.0.1:9000",
        "s3://bucket/prefix",
        "s3://bucket?endpoint=http://127.0.0.1:9000",  # misspelt: would silently reach AWS
        "s3://bucket?endpoint_url=127.0.0.1:9000",
        "file://relative/path",
        "file:relative",
        "file:///srv/store?x=1",
    ],
)
def test_storage_from_url_refuses(url: str) -> None:
    with pytest.raises(ConfigError, match="GYMCTL_STORAGE_URL"):
        storage_from_url(url, url_base=URL_BASE, secret=SECRET, clock=FixedClock(NOW))
