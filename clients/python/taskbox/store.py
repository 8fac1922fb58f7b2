"""The artifact store (schemas/keys.md), as the C store has it
(common/src/store/; keep the two in step): objects read with their
checksums verified, written create-only with their checksums as
metadata, and shared as signed URLs.

``s3://BUCKET[/PREFIX]`` (Signature V4) and ``s3v2://`` (V2) through
botocore, with the store's endpoint (path style) and region from the
configuration and the keys from the environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), as the command has them;
``dir:///PATH`` from the file system, each object's checksums in
``PATH/.meta/KEY`` ("<sha256> <size> <crc32c>"), as store_dir.c.

Every object carries its SHA-256 and CRC-32C (S3: the metadata
``x-amz-meta-sha256`` and ``x-amz-meta-crc32c``, sent and signed with
the PUT). A read checks what arrived against them at its end: the
SHA-256 always (it also names the content), the CRC-32C where a C
implementation computes it fast (checksums.FAST) or no SHA-256 is
recorded. A put never replaces an object: one already there with the
same content is fine, with other content an error. Objects of 64 MiB
or more go up in parts of 16 MiB, four at a time, as the C store sends
them (each part read into memory as it goes: 64 MiB at most).
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import io
import os
import tempfile
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, Dict, List, Optional

from . import checksums
from .checksums import Sums
from .codec import check_relpath
from .config import Config
from .errors import (ChecksumMismatch, ConfigError, NotFound, StoreError, TaskboxError,
                     UsageError)

MULTIPART_MIN = 64 << 20  # store_s3.c: MULTIPART_MIN, MULTIPART_PART, PARALLEL_PARTS
MULTIPART_PART = 16 << 20
PARALLEL_PARTS = 4
SHARE_MAX_S = 604800
META = ".meta"


@dataclass(frozen=True)
class ObjectInfo:
    """An object's size and the checksums its store records for it ("":
    none recorded)."""

    size: int
    sha256: str = ""
    crc32c: str = ""


def _crc_of(value: Optional[str]) -> str:
    """tb_store_take_crc32c: 8 hex digits, in lower case, else ""."""
    v = (value or "").strip()
    if len(v) == 8 and all(c in "0123456789abcdefABCDEF" for c in v):
        return v.lower()
    return ""


class Reader(io.RawIOBase):
    """An object's bytes as they arrive, checked at their end against the
    store's checksums and ``want_sha256`` (a manifest's): a mismatch
    raises ChecksumMismatch from the read that reaches the end."""

    def __init__(self, store: "Store", key: str, raw: Any, stored: ObjectInfo,
                 want_sha256: Optional[str] = None, what: str = "") -> None:
        super().__init__()
        self.store, self.key, self._raw, self.stored = store, key, raw, stored
        self.want_sha256 = want_sha256
        self.what = what or f"store {store.url}: {key}"
        crc = bool(stored.crc32c) and (bool(checksums.FAST) or not (stored.sha256 or want_sha256))
        self.sums = Sums.start(crc=crc)
        self.done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self.done:
            return 0
        mv = memoryview(b).cast("B")
        try:
            data = self._raw.read(len(mv))
        except Exception as e:  # a broken transfer, whatever raised it
            raise StoreError(f"{self.what}: the transfer broke off: {e}") from None
        if not data:
            self._finish()
            return 0
        n = len(data)
        mv[:n] = data
        self.sums.update(data)
        return n

    def _finish(self) -> None:
        self.done = True
        s = self.sums.finish()
        st, key = self.stored, self.key
        if s.size != st.size:
            raise ChecksumMismatch(f"{self.what}: {s.size} bytes arrived, the store has {st.size}")
        if s.crc32c and st.crc32c and s.crc32c != st.crc32c:
            raise ChecksumMismatch(f"store {self.store.url}: checksum mismatch for {key}: stored "
                                   f"crc32c {st.crc32c}, received {s.crc32c} ({s.size} bytes)")
        if st.sha256 and s.sha256 != st.sha256:
            raise ChecksumMismatch(f"store {self.store.url}: checksum mismatch for {key}: stored "
                                   f"sha256 {st.sha256}, received {s.sha256} ({s.size} bytes)")
        if self.want_sha256 and s.sha256 != self.want_sha256:
            raise ChecksumMismatch(f"{key} has sha256 {s.sha256}, the manifest says "
                                   f"{self.want_sha256}")

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()


class _Exists(Exception):
    """A create-only put found the key taken."""


class Store:
    """One store, as store.url names it."""

    def __init__(self, cfg: Config) -> None:
        url = cfg.store_url
        self.url = url
        self.dir: Optional[str] = None
        self.client: Any = None
        self.session: Any = None
        self.bucket = self.prefix = ""
        self.v2 = False
        self.region = cfg.store_region
        self.endpoint = (cfg.store_endpoint or "").rstrip("/") or None
        if url.startswith("dir://"):
            self.dir = url[len("dir://"):]
            if not self.dir.startswith("/"):
                raise ConfigError(f"store.url '{url}': dir:// takes an absolute path "
                                  "(dir:///var/lib/taskbox/artifacts)")
            return
        scheme, sep, rest = url.partition("://")
        if scheme not in ("s3", "s3v2") or not sep:
            raise ConfigError(f"store.url '{url}': expected dir:///path, s3://bucket[/prefix] "
                              "or s3v2://bucket[/prefix]")
        self.bucket, _, prefix = rest.partition("/")
        if not 3 <= len(self.bucket) <= 63:
            raise ConfigError(f"store.url '{url}': the bucket name must be 3-63 characters")
        # the prefix is a directory: "runs" and "runs/" both mean "runs/"
        self.prefix = prefix + "/" if prefix and not prefix.endswith("/") else prefix
        self.v2 = scheme == "s3v2"
        if self.v2 and not self.endpoint:
            raise ConfigError("s3v2 store: store.endpoint is required (Signature V2 is for "
                              "S3-compatible servers; use s3:// for AWS)")
        import botocore.session
        from botocore.config import Config as BotoConfig

        self.session = botocore.session.get_session()
        conf: Dict[str, Any] = dict(
            signature_version="s3" if self.v2 else "s3v4",
            s3={"addressing_style": "path" if self.endpoint else "auto"},
            connect_timeout=10, read_timeout=60, retries={"max_attempts": 5},
            max_pool_connections=PARALLEL_PARTS + 2)
        try:  # botocore 1.36 and later: checksums as the C store sends them, no others
            boto_conf = BotoConfig(**conf, request_checksum_calculation="when_required",
                                   response_checksum_validation="when_required")
        except TypeError:
            boto_conf = BotoConfig(**conf)
        self.client = self.session.create_client(
            "s3", region_name=self.region, endpoint_url=self.endpoint, config=boto_conf)
        # create-only, in one request (store_s3.c): 412 when the key is taken
        self.client.meta.events.register("before-sign.s3.PutObject", self._create_only)

    @staticmethod
    def _create_only(request: Any, **kwargs: Any) -> None:
        request.headers["If-None-Match"] = "*"

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    # -- keys and errors

    def _check(self, key: str) -> None:
        if len(key.encode()) > 1024:
            raise UsageError(f"store: a key of {len(key.encode())} bytes, over the 1024 an "
                             "object key may have")
        if not key or check_relpath(key) or "\0" in key:
            raise UsageError(f"store: key '{key[:200]}' is not a valid relative path")

    def _full(self, key: str) -> str:
        return self.prefix + key

    def _paths(self, key: str) -> "tuple[str, str]":
        assert self.dir is not None
        return os.path.join(self.dir, key), os.path.join(self.dir, META, key)

    def _fail(self, verb: str, key: str, e: Exception) -> TaskboxError:
        from botocore.exceptions import ClientError, NoCredentialsError

        if isinstance(e, NoCredentialsError):
            return ConfigError(f"store {self.url}: no credentials: set AWS_ACCESS_KEY_ID and "
                               "AWS_SECRET_ACCESS_KEY in the environment, as for the taskbox "
                               "command")

        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchKey", "404", "NotFound") or status == 404:
                return NotFound(f"store {self.url}: no object {key}")
            return StoreError(f"store {self.url}: {verb} {key}: {status} {code}: "
                              f"{err.get('Message', '') or e}")
        return StoreError(f"store {self.url}: {verb} {key}: {e}")

    # -- reading

    def head(self, key: str) -> ObjectInfo:
        """The size and recorded checksums of ``key``; NotFound."""
        self._check(key)
        if self.dir is not None:
            obj, meta = self._paths(key)
            try:
                size = os.stat(obj).st_size
            except FileNotFoundError:
                raise NotFound(f"store {self.url}: no object {key}") from None
            except OSError as e:
                raise StoreError(f"store {self.url}: {key}: {e}") from None
            return self._dir_meta(obj, meta, size)
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            r = self.client.head_object(Bucket=self.bucket, Key=self._full(key))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("HEAD", key, e) from None
        m = {k.lower(): v for k, v in (r.get("Metadata") or {}).items()}
        return ObjectInfo(int(r.get("ContentLength", 0)), str(m.get("sha256", "")),
                          _crc_of(m.get("crc32c")))

    def _dir_meta(self, obj: str, meta: str, size: int) -> ObjectInfo:
        """read_meta: the record, or the object hashed if a crash lost it."""
        try:
            with open(meta, encoding="ascii", errors="replace") as f:
                parts = f.readline().split()
            if len(parts) >= 2 and len(parts[0]) == 64:
                return ObjectInfo(size, parts[0], _crc_of(parts[2] if len(parts) > 2 else ""))
        except OSError:
            pass
        try:
            with open(obj, "rb") as f:
                s = checksums.of_file(f)
        except OSError as e:
            raise StoreError(f"store {self.url}: {obj}: {e}") from None
        return ObjectInfo(size, s.sha256, s.crc32c)

    def open(self, key: str, want_sha256: Optional[str] = None) -> Reader:
        """A stream of the object's bytes, checked at its end (Reader)."""
        self._check(key)
        if self.dir is not None:
            obj, meta = self._paths(key)
            try:
                f = open(obj, "rb")
            except FileNotFoundError:
                raise NotFound(f"store {self.url}: no object {key}") from None
            except OSError as e:
                raise StoreError(f"store {self.url}: {key}: {e}") from None
            try:
                info = self._dir_meta(obj, meta, os.fstat(f.fileno()).st_size)
            except BaseException:
                f.close()
                raise
            return Reader(self, key, f, info, want_sha256)
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            r = self.client.get_object(Bucket=self.bucket, Key=self._full(key))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("GET", key, e) from None
        m = {k.lower(): v for k, v in (r.get("Metadata") or {}).items()}
        info = ObjectInfo(int(r.get("ContentLength", 0)), str(m.get("sha256", "")),
                          _crc_of(m.get("crc32c")))
        return Reader(self, key, r["Body"], info, want_sha256)

    def get(self, key: str, cap: int) -> bytes:
        """The object under ``key``, at most ``cap`` bytes, checked.
        Raises NotFound, or StoreError saying what the store answered."""
        info = self.head(key)
        if info.size > cap:
            raise StoreError(f"store {self.url}: {key}: {info.size} bytes, at most {cap} expected")
        with self.open(key) as r:
            data = r.read(cap + 1) or b""
            if len(data) > cap:
                raise StoreError(f"store {self.url}: {key} is over {cap} bytes")
            r.read()  # its end: the checks
        return bytes(data)

    def download(self, key: str, path: str, want_sha256: Optional[str] = None) -> Sums:
        """``key`` into the file ``path``, which is replaced in one step,
        and only when what arrived matches the store's checksums and
        ``want_sha256``; else nothing is left behind. The sums of what
        arrived."""
        folder = os.path.dirname(os.path.abspath(path))
        try:
            fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".partial-", dir=folder)
        except OSError as e:
            raise StoreError(f"store: cannot write beside {path}: {e}") from None
        ok = False
        try:
            with os.fdopen(fd, "wb") as out, self.open(key, want_sha256) as r:
                while True:
                    chunk = r.read(checksums.CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                r.read()
                sums = r.sums
            if os.path.isdir(path):
                raise StoreError(f"store: {path} is a directory: not replaced")
            os.replace(tmp, path)
            ok = True
            return sums
        except OSError as e:
            raise StoreError(f"store: save {path}: {e}") from None
        finally:
            if not ok:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    # -- writing

    def put_file(self, key: str, f: BinaryIO, sums: Sums) -> bool:
        """The open file ``f`` (read from its start; ``sums`` its
        checksums, CRC-32C included) as ``key``, create-only. True when
        it was put, False when the same content was there; StoreError
        when other content is."""
        self._check(key)
        try:
            if self.dir is not None:
                self._dir_put(key, f, sums)
            elif sums.size >= MULTIPART_MIN:
                self._put_multipart(key, f, sums)
            else:
                self._put_one(key, f, sums)
            return True
        except _Exists:
            pass
        have = self.head(key)
        if have.sha256 != sums.sha256:
            raise StoreError(f"store {self.url}: put {key}: it exists with other content "
                             f"(sha256 {have.sha256 or 'unknown'}, not {sums.sha256})")
        return False

    def put_bytes(self, key: str, data: bytes) -> bool:
        """``data`` as ``key``, as put_file."""
        return self.put_file(key, io.BytesIO(data), checksums.of_bytes(data))

    def _meta(self, sums: Sums) -> Dict[str, str]:
        assert sums.crc32c, "a put carries its CRC-32C"
        return {"sha256": sums.sha256, "crc32c": sums.crc32c}

    def _put_one(self, key: str, f: BinaryIO, sums: Sums) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        f.seek(0)
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._full(key), Body=f,
                                   ContentLength=sums.size, Metadata=self._meta(sums))
        except ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                raise _Exists() from None
            raise self._fail("PUT", key, e) from None
        except BotoCoreError as e:
            raise self._fail("PUT", key, e) from None

    def _put_multipart(self, key: str, f: BinaryIO, sums: Sums) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:  # an existence check costs nothing next to the upload
            self.head(key)
            raise _Exists()
        except NotFound:
            pass
        try:
            up = self.client.create_multipart_upload(Bucket=self.bucket, Key=full,
                                                     Metadata=self._meta(sums))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("POST", key, e) from None
        upload_id = up["UploadId"]
        fd = f.fileno()
        parts = (sums.size + MULTIPART_PART - 1) // MULTIPART_PART
        failed = threading.Event()

        def send(i: int) -> Dict[str, Any]:
            if failed.is_set():
                raise StoreError("stopped: another part failed")
            off = i * MULTIPART_PART
            data = os.pread(fd, min(MULTIPART_PART, sums.size - off), off)
            try:
                r = self.client.upload_part(Bucket=self.bucket, Key=full, UploadId=upload_id,
                                            PartNumber=i + 1, Body=data)
            except (ClientError, BotoCoreError) as e:
                failed.set()
                raise self._fail("PUT", f"{key} (part {i + 1} of {parts})", e) from None
            return {"PartNumber": i + 1, "ETag": r["ETag"]}

        try:
            with ThreadPoolExecutor(PARALLEL_PARTS, thread_name_prefix="taskbox-part") as pool:
                done: List[Dict[str, Any]] = list(pool.map(send, range(parts)))
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=full,
                                                  UploadId=upload_id,
                                                  MultipartUpload={"Parts": done})
        except BaseException as e:
            try:  # leave no half-written upload behind
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=full,
                                                   UploadId=upload_id)
            except Exception:
                pass
            if isinstance(e, (ClientError, BotoCoreError)):
                raise self._fail("POST", key, e) from None
            raise

    def _dir_put(self, key: str, f: BinaryIO, sums: Sums) -> None:
        obj, meta = self._paths(key)
        try:
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            os.makedirs(os.path.dirname(meta), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=os.path.basename(obj) + ".tmp-",
                                       dir=os.path.dirname(obj))
        except OSError as e:
            raise StoreError(f"dir store: mkdir for {key}: {e}") from None
        try:
            with os.fdopen(fd, "wb") as out:
                f.seek(0)
                left = sums.size
                while left > 0:
                    chunk = f.read(min(checksums.CHUNK, left))
                    if not chunk:
                        raise StoreError(f"dir store: write {obj}: the source is shorter "
                                         "than it was")
                    out.write(chunk)
                    left -= len(chunk)
                out.flush()
                os.fsync(out.fileno())
            try:  # the create-only step: fails if the key exists
                os.link(tmp, obj)
            except FileExistsError:
                raise _Exists() from None
            # the record after the object, as store_dir.c
            self._write_atomic(meta, f"{sums.sha256} {sums.size} {sums.crc32c}\n")
        except OSError as e:
            raise StoreError(f"dir store: write {obj}: {e}") from None
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    @staticmethod
    def _write_atomic(path: str, text: str) -> None:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-",
                                   dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "w", encoding="ascii") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.rename(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def delete(self, key: str) -> None:
        """Removes ``key``; what is not there is fine."""
        self._check(key)
        if self.dir is not None:
            for p in self._paths(key):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise StoreError(f"store {self.url}: delete {key}: {e}") from None
            return
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._full(key))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("DELETE", key, e) from None

    # -- shares (schemas/keys.md, "Signed share URLs")

    def share(self, key: str, seconds: int = 3600,
              now: Optional[datetime.datetime] = None) -> str:
        """A URL anyone can GET ``key`` with for ``seconds`` (1..604800),
        as `taskbox artifacts share` makes it. ``now``: the signing time
        (UTC), else the clock's."""
        self._check(key)
        if isinstance(seconds, bool) or not isinstance(seconds, int) or \
                not 1 <= seconds <= SHARE_MAX_S:
            raise UsageError(f"store: a share lasts 1 to {SHARE_MAX_S} seconds, not {seconds}")
        if self.dir is not None:
            raise StoreError(f"store {self.url}: a local directory cannot sign a URL: sharing "
                             "needs an S3 store")
        creds = self.session.get_credentials()
        if creds is None:
            raise ConfigError(f"store {self.url}: no credentials to sign with: set "
                              "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
        c = creds.get_frozen_credentials()
        if self.v2:
            url = self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": self._full(key)},
                ExpiresIn=seconds)
            return str(url)
        return presign_v4(c.access_key, c.secret_key, c.token, self.region, self.endpoint,
                          self.bucket, self._full(key), seconds, now)


def presign_v4(access_key: str, secret_key: str, token: Optional[str], region: str,
               endpoint: Optional[str], bucket: str, key: str, seconds: int,
               now: Optional[datetime.datetime] = None) -> str:
    """tb_sigv4_presign: AWS's query-string authentication of a GET,
    its parameters in the documented (sorted) order, only ``host``
    signed, the payload UNSIGNED-PAYLOAD. With an endpoint, path style
    (ENDPOINT/BUCKET/KEY), else https://BUCKET.s3.REGION.amazonaws.com/KEY."""
    when = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    if endpoint:
        origin = endpoint.rstrip("/")
        host = origin.split("://", 1)[-1].split("/", 1)[0]
        path = f"/{bucket}/{key}"
    else:
        host = f"{bucket}.s3.{region}.amazonaws.com"
        origin = f"https://{host}"
        path = f"/{key}"
    scope = f"{when[:8]}/{region}/s3/aws4_request"
    def q(text: str, safe: str = "-_.~") -> str:
        return urllib.parse.quote(text, safe=safe)

    uri = q(path, "/-_.~")
    query = (f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={q(f'{access_key}/{scope}')}"
             f"&X-Amz-Date={when}&X-Amz-Expires={seconds}")
    if token:
        query += f"&X-Amz-Security-Token={q(token)}"
    query += "&X-Amz-SignedHeaders=host"
    canonical = f"GET\n{uri}\n{query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD"
    to_sign = (f"AWS4-HMAC-SHA256\n{when}\n{scope}\n"
               f"{hashlib.sha256(canonical.encode()).hexdigest()}")
    k = hmac.new(f"AWS4{secret_key}".encode(), when[:8].encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{origin}{uri}?{query}&X-Amz-Signature={signature}"
