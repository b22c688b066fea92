"""Access control on PostgreSQL metadata with two gateway workers: policies, ACLs, the
public access block and store users read through the PostgreSQL store (every worker
answers alike)."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config

from gateway.access.identity import canonical_id
from tests.gateway.test_access_e2e import _zonegate, denied, policy
from tests.support.gwcluster import OTHER_ACCESS, OTHER_SECRET, Gateway
from tests.support.pgserver import PgServer, skip_reason

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    server = PgServer()
    server.start()
    g = Gateway(tmp_path_factory.mktemp("accesspg"), workers=2, gateway_options={
        "metadata": server.new_database("gw"),
        "metadata_password_file": str(server.password_file)})
    try:
        g.start()
        yield g
    finally:
        g.stop()
        server.destroy()


def test_policy_acl_and_users_on_postgresql(gw):
    alice, bob = gw.client(), gw.client(OTHER_ACCESS, OTHER_SECRET)
    anon = boto3.client("s3", endpoint_url=gw.endpoint, region_name="us-east-1",
                        config=Config(signature_version=UNSIGNED,
                                      s3={"addressing_style": "path"}))
    alice.create_bucket(Bucket="pgacl", ObjectOwnership="ObjectWriter")
    alice.put_object(Bucket="pgacl", Key="k", Body=b"v")
    for _ in range(4):  # both workers
        assert denied(bob.get_object, Bucket="pgacl", Key="k") == "AccessDenied"
    alice.put_bucket_policy(Bucket="pgacl", Policy=policy(
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/bob"},
         "Action": "s3:GetObject", "Resource": "arn:aws:s3:::pgacl/*"}))
    for _ in range(4):
        assert bob.get_object(Bucket="pgacl", Key="k")["Body"].read() == b"v"
    alice.delete_public_access_block(Bucket="pgacl")
    alice.put_object_acl(Bucket="pgacl", Key="k", ACL="public-read")
    for _ in range(4):
        assert anon.get_object(Bucket="pgacl", Key="k")["Body"].read() == b"v"
    assert json.loads(alice.get_bucket_policy(Bucket="pgacl")["Policy"])["Version"] == \
        "2012-10-17"
    r = _zonegate(gw, "user", "add", "dave")
    assert r.returncode == 0, r.stderr
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    dave = gw.client(fields["access key"].strip(), fields["secret key"].strip())
    for _ in range(4):
        assert dave.list_buckets()["Owner"]["ID"] == canonical_id("dave")
    assert anon.get_object(Bucket="pgacl", Key="k")["Body"].read() == b"v"
    assert denied(dave.put_object, Bucket="pgacl", Key="d", Body=b"d") == "AccessDenied"
