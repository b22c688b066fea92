"""Every S3 operation the router can pick is checked against an S3 action: a handler missing
from gateway.ops.access.ACTIONS would silently be owner-only (or, worse, skip the policy)."""

import inspect
import re
import types

import gateway.server.routes as routes
from gateway.ops.access import ACTIONS

# CreateBucket has no bucket to consult; ListBuckets lists the requester's own; a CORS
# preflight is answered from the CORS rules alone.
UNCHECKED = {"gateway.ops.buckets.create_bucket", "gateway.ops.service.list_buckets",
             "gateway.ops.cors.preflight"}


def test_every_routed_handler_names_its_s3_action():
    src = inspect.getsource(routes)
    ops = {name for name, v in vars(routes).items()
           if isinstance(v, types.ModuleType) and v.__name__.startswith("gateway.ops.")}
    routed = {f"gateway.ops.{m}.{f}" for m, f in re.findall(r"(?:\):|return) (\w+)\.(\w+)\b", src)
              if m in ops}
    assert {"tagging", "objectlock", "encryption", "attributes", "postobject"} <= ops
    assert len(routed) > 55
    missing = sorted(routed - set(ACTIONS) - UNCHECKED)
    assert not missing, missing
