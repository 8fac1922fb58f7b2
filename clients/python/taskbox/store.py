"""Reading objects from the artifact store (schemas/keys.md), for what a
result needs: an attempt's manifest and its verdicts.

``s3://BUCKET[/PREFIX]`` (Signature V4) and ``s3v2://`` (V2) through
botocore, with the store's endpoint (path style) and region from the
configuration and the keys from the environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), as the command has them;
``dir:///PATH`` from the file system. Every read has a size cap.
Not here (yet): uploads, downloads of artifacts, shares.
"""
from __future__ import annotations

import os
from typing import Any, Optional

from .config import Config
from .errors import ConfigError, NotFound, StoreError


class Store:
    """One store, as store.url names it."""

    def __init__(self, cfg: Config) -> None:
        url = cfg.store_url
        self.url = url
        self.dir: Optional[str] = None
        self.client: Any = None
        if url.startswith("dir://"):
            self.dir = url[len("dir://"):]
            if not self.dir.startswith("/"):
                raise ConfigError(f"store.url '{url}': dir:// wants an absolute path")
            return
        scheme, sep, rest = url.partition("://")
        if scheme not in ("s3", "s3v2") or not sep:
            raise ConfigError(f"store.url '{url}': expected s3://, s3v2:// or dir://")
        self.bucket, _, prefix = rest.partition("/")
        if not self.bucket:
            raise ConfigError(f"store.url '{url}': no bucket")
        self.prefix = prefix.strip("/")
        import botocore.session
        from botocore.config import Config as BotoConfig

        session = botocore.session.get_session()
        self.client = session.create_client(
            "s3", region_name=cfg.store_region, endpoint_url=cfg.store_endpoint or None,
            config=BotoConfig(signature_version="s3v4" if scheme == "s3" else "s3",
                              s3={"addressing_style": "path" if cfg.store_endpoint else "auto"},
                              connect_timeout=10, read_timeout=60, retries={"max_attempts": 3}))

    def get(self, key: str, cap: int) -> bytes:
        """The object under ``key``, at most ``cap`` bytes. Raises
        NotFound, or StoreError saying what the store answered."""
        if self.dir is not None:
            path = os.path.join(self.dir, key)
            try:
                with open(path, "rb") as f:
                    data = f.read(cap + 1)
            except FileNotFoundError:
                raise NotFound(f"store {self.url}: no object {key}") from None
            except OSError as e:
                raise StoreError(f"store {self.url}: {key}: {e}") from None
        else:
            from botocore.exceptions import BotoCoreError, ClientError

            full = f"{self.prefix}/{key}" if self.prefix else key
            try:
                r = self.client.get_object(Bucket=self.bucket, Key=full)
                data = r["Body"].read(cap + 1)
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                if code in ("NoSuchKey", "404", "NotFound"):
                    raise NotFound(f"store {self.url}: no object {key}") from None
                raise StoreError(f"store {self.url}: GET {key}: {e}") from None
            except BotoCoreError as e:
                raise StoreError(f"store {self.url}: GET {key}: {e}") from None
        if len(data) > cap:
            raise StoreError(f"store {self.url}: {key} is over {cap} bytes")
        return bytes(data)
