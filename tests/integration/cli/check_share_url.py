#!/usr/bin/env python3
"""Checks a `taskbox artifacts share` URL against schemas/keys.md ("Signed
share URLs"), as a client in another language would: the parameters in
the documented order, the path-style PATH of an endpoint store, and the
Signature V4 recomputed from the secret key with nothing but hashlib.

    check_share_url.py URL ENDPOINT BUCKET KEY REGION EXPIRES
    (the secret key from AWS_SECRET_ACCESS_KEY; exit 0 when it holds)
"""
import hashlib
import hmac
import os
import sys
import urllib.parse


def hmac256(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def main():
    url, endpoint, bucket, key, region, expires = sys.argv[1:7]
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    base, _, query = url.partition("?")
    want_base = endpoint.rstrip("/") + "/" + bucket + "/" + urllib.parse.quote(key, safe="/-_.~")
    if base != want_base:
        sys.exit(f"the URL's origin and path are {base}, keys.md says {want_base}")
    pairs = [p.split("=", 1) for p in query.split("&")]
    names = [n for n, _ in pairs]
    order = ["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
             "X-Amz-SignedHeaders", "X-Amz-Signature"]
    if [n for n in names if n != "X-Amz-Security-Token"] != order:
        sys.exit(f"parameters {names}, keys.md says {order}")
    got = dict(pairs)
    cred = urllib.parse.unquote(got["X-Amz-Credential"]).split("/")
    date = got["X-Amz-Date"]
    if got["X-Amz-Algorithm"] != "AWS4-HMAC-SHA256" or len(cred) != 5 or \
            cred[1:] != [date[:8], region, "s3", "aws4_request"] or \
            got["X-Amz-Expires"] != expires or got["X-Amz-SignedHeaders"] != "host":
        sys.exit(f"the parameters are not as keys.md says: {got}")
    host = urllib.parse.urlsplit(endpoint).netloc
    unsigned = "&".join(f"{n}={v}" for n, v in pairs if n != "X-Amz-Signature")
    path = urllib.parse.urlsplit(base).path
    canonical = f"GET\n{path}\n{unsigned}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD"
    scope = "/".join(cred[1:])
    to_sign = "AWS4-HMAC-SHA256\n{}\n{}\n{}".format(
        date, scope, hashlib.sha256(canonical.encode()).hexdigest())
    k = hmac256(("AWS4" + secret).encode(), date[:8])
    for part in (region, "s3", "aws4_request"):
        k = hmac256(k, part)
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if signature != got["X-Amz-Signature"]:
        sys.exit("the signature is not the one keys.md's recipe gives")


if __name__ == "__main__":
    main()
