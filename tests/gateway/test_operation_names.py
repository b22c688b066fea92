"""Every S3 operation the app routes has its own name in the metrics and the console: a walk
over every method x addressing (service, bucket, object) x subresource x copy header asks
`route()` for its handler, and each handler must be named in routes.OPERATION_NAMES (a new
route without a name fails here, rather than being counted as `Unknown`)."""

from __future__ import annotations

from types import SimpleNamespace

from starlette.requests import Request

from gateway.s3.errors import S3Error
from gateway.server import routes as gwapp
from gateway.server.metrics import OPERATION_NAMES, UNKNOWN_OPERATION, operation_of

METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH")
TARGETS = (("", ""), ("bkt", ""), ("bkt", "some/key"))
EXTRA_QUERIES = ({}, {"list-type": "2"}, {"partNumber": "1"}, {"versionId": "v1"})


def routed_handlers() -> dict[tuple[str, str], object]:
    """(module, name) -> handler, for every handler route() returns for some request."""
    subsets = [frozenset()] + [frozenset({s}) for s in sorted(gwapp.SUBRESOURCES)]
    found: dict[tuple[str, str], object] = {}
    for method in METHODS:
        for bucket, key in TARGETS:
            for subs in subsets:
                for extra in EXTRA_QUERIES:
                    for headers in ({}, {"x-amz-copy-source": "/src/obj"}):
                        req = SimpleNamespace(method=method, bucket=bucket, key=key,
                                              query={**dict.fromkeys(subs, ""), **extra},
                                              headers=headers)
                        try:
                            h = gwapp.route(req)  # type: ignore[arg-type]
                        except S3Error:
                            continue
                        found[(h.__module__, h.__name__)] = h
    return found


def test_every_routed_operation_has_a_name():
    handlers = routed_handlers()
    assert len(handlers) >= 50  # the walk reaches the whole table, not a corner of it
    missing = sorted(f"{m}.{n}" for m, n in handlers if n not in OPERATION_NAMES)
    assert not missing, f"handlers counted as {UNKNOWN_OPERATION}: {missing}"
    # names are keyed by function name: two routed handlers must not share one
    names = [n for _, n in handlers]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    # one operation name per handler, and none is the placeholder
    assert len(set(OPERATION_NAMES[n] for n in names)) == len(names)
    assert UNKNOWN_OPERATION not in OPERATION_NAMES.values()


def test_operation_of_a_request_names_policy_acl_tagging_calls():
    class FakeApp:
        state = SimpleNamespace(gateway=SimpleNamespace(domains=["localhost"]))

    def scope(method: str, path: str, query: bytes) -> dict:
        return {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
                "query_string": query, "headers": [(b"host", b"127.0.0.1:9000")],
                "app": FakeApp()}
    cases = {("PUT", "/b", b"policy"): "PutBucketPolicy",
             ("GET", "/b", b"acl"): "GetBucketAcl",
             ("DELETE", "/b/k", b"tagging"): "DeleteObjectTagging",
             ("PUT", "/b", b"lifecycle"): "PutBucketLifecycleConfiguration",
             ("DELETE", "/b", b"publicAccessBlock"): "DeletePublicAccessBlock",
             ("GET", "/b", b"ownershipControls"): "GetBucketOwnershipControls",
             ("GET", "/b", b"website"): UNKNOWN_OPERATION}  # not implemented: no operation
    for (method, path, query), want in cases.items():
        sc = scope(method, path, query)
        assert Request(sc).method == method
        assert operation_of(sc) == want, (method, path, query)
