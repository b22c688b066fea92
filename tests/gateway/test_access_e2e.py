"""Access control end to end, with real clients on a real cluster: bucket policies giving a
second user read-only access, anonymous reads of a public dataset (boto3 UNSIGNED, s3fs
anon=True, curl), ACLs and ownership controls, the public access block, malformed
documents, and users added with `zonegate user add`."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from gateway.access.identity import canonical_id
from tests.support.gwcluster import Gateway, wait_for

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("access")).start()
    yield g
    g.stop()


@pytest.fixture(scope="module")
def alice(gw):
    return gw.client()


@pytest.fixture(scope="module")
def bob(gw):
    from tests.support.gwcluster import OTHER_ACCESS, OTHER_SECRET
    return gw.client(OTHER_ACCESS, OTHER_SECRET)


@pytest.fixture(scope="module")
def anon(gw):
    return boto3.client("s3", endpoint_url=gw.endpoint, region_name="us-east-1",
                        config=Config(signature_version=UNSIGNED,
                                      s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]


def denied(fn, *a, **kw) -> str:
    with pytest.raises(ClientError) as e:
        fn(*a, **kw)
    return code(e)


def policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def bob_arn() -> str:
    return "arn:aws:iam::000000000000:user/bob"


def test_a_policy_gives_a_second_user_read_only_access(alice, bob):
    alice.create_bucket(Bucket="ckpt")
    for k in ("run1/step-1", "run1/step-2", "secret/key"):
        alice.put_object(Bucket="ckpt", Key=k, Body=k.encode())
    # Owner-only by default: bob sees nothing of it.
    assert denied(bob.list_objects_v2, Bucket="ckpt") == "AccessDenied"
    assert denied(bob.get_object, Bucket="ckpt", Key="run1/step-1") == "AccessDenied"
    alice.put_bucket_policy(Bucket="ckpt", Policy=policy(
        {"Sid": "EvalRead", "Effect": "Allow", "Principal": {"AWS": [bob_arn()]},
         "Action": ["s3:GetObject", "s3:ListBucket"],
         "Resource": ["arn:aws:s3:::ckpt", "arn:aws:s3:::ckpt/*"]},
        {"Sid": "NoSecrets", "Effect": "Deny", "Principal": {"AWS": bob_arn()},
         "Action": "s3:GetObject", "Resource": "arn:aws:s3:::ckpt/secret/*"}))
    keys = [o["Key"] for o in bob.list_objects_v2(Bucket="ckpt")["Contents"]]
    assert keys == ["run1/step-1", "run1/step-2", "secret/key"]
    assert bob.get_object(Bucket="ckpt", Key="run1/step-2")["Body"].read() == b"run1/step-2"
    r = bob.get_object(Bucket="ckpt", Key="run1/step-1", Range="bytes=2-4")
    assert r["Body"].read() == b"n1/"
    assert bob.head_object(Bucket="ckpt", Key="run1/step-1")["ContentLength"] == 11
    # Explicit Deny wins over the Allow; writes were never granted.
    assert denied(bob.get_object, Bucket="ckpt", Key="secret/key") == "AccessDenied"
    assert denied(bob.put_object, Bucket="ckpt", Key="run1/x", Body=b"x") == "AccessDenied"
    assert denied(bob.delete_object, Bucket="ckpt", Key="run1/step-1") == "AccessDenied"
    r = bob.delete_objects(Bucket="ckpt", Delete={"Objects": [{"Key": "run1/step-1"}]})
    assert [e["Code"] for e in r["Errors"]] == ["AccessDenied"]
    assert denied(bob.get_bucket_policy, Bucket="ckpt") == "AccessDenied"
    assert denied(bob.put_bucket_policy, Bucket="ckpt", Policy=policy(
        {"Effect": "Allow", "Principal": "*", "Action": "s3:*",
         "Resource": "arn:aws:s3:::ckpt/*"})) == "AccessDenied"
    # A copy needs read access to the source: bob may copy into his own bucket.
    bob.create_bucket(Bucket="bobs")
    bob.copy_object(Bucket="bobs", Key="c", CopySource={"Bucket": "ckpt", "Key": "run1/step-1"})
    assert bob.get_object(Bucket="bobs", Key="c")["Body"].read() == b"run1/step-1"
    assert denied(bob.copy_object, Bucket="bobs", Key="d",
                  CopySource={"Bucket": "ckpt", "Key": "secret/key"}) == "AccessDenied"
    # Without s3:ListBucket a missing key is AccessDenied (which keys exist is not told).
    alice.put_bucket_policy(Bucket="ckpt", Policy=policy(
        {"Effect": "Allow", "Principal": {"AWS": [bob_arn()]}, "Action": "s3:GetObject",
         "Resource": "arn:aws:s3:::ckpt/*"}))
    assert denied(bob.get_object, Bucket="ckpt", Key="run1/none") == "AccessDenied"
    assert denied(alice.get_object, Bucket="ckpt", Key="run1/none") == "NoSuchKey"
    # ListBuckets still lists one's own buckets only.
    assert [b["Name"] for b in bob.list_buckets()["Buckets"]] == ["bobs"]
    # The owner is not bound by the Allow (nor locked out); deleting the policy ends bob's access.
    assert alice.get_object(Bucket="ckpt", Key="secret/key")["Body"].read() == b"secret/key"
    assert json.loads(alice.get_bucket_policy(Bucket="ckpt")["Policy"])["Statement"][0][
        "Action"] == "s3:GetObject"
    assert alice.get_bucket_policy_status(Bucket="ckpt")["PolicyStatus"]["IsPublic"] is False
    alice.delete_bucket_policy(Bucket="ckpt")
    assert denied(bob.get_object, Bucket="ckpt", Key="run1/step-2") == "AccessDenied"
    assert denied(alice.get_bucket_policy, Bucket="ckpt") == "NoSuchBucketPolicy"


def test_a_deny_everything_policy_cannot_lock_the_owner_out(alice):
    alice.create_bucket(Bucket="locked")
    alice.put_object(Bucket="locked", Key="k", Body=b"v")
    alice.put_bucket_policy(Bucket="locked", Policy=policy(
        {"Effect": "Deny", "Principal": "*", "Action": "s3:*",
         "Resource": ["arn:aws:s3:::locked", "arn:aws:s3:::locked/*"]}))
    assert denied(alice.get_object, Bucket="locked", Key="k") == "AccessDenied"
    assert denied(alice.list_objects_v2, Bucket="locked") == "AccessDenied"
    alice.delete_bucket_policy(Bucket="locked")
    assert alice.get_object(Bucket="locked", Key="k")["Body"].read() == b"v"


PUBLIC_READ = {"Sid": "PublicRead", "Effect": "Allow", "Principal": "*",
               "Action": ["s3:GetObject", "s3:ListBucket"],
               "Resource": ["arn:aws:s3:::dataset", "arn:aws:s3:::dataset/*"]}


def test_anonymous_reads_a_public_dataset_with_boto3_s3fs_and_curl(gw, alice, anon):
    alice.create_bucket(Bucket="dataset")
    shard = bytes(range(256)) * 64
    alice.put_object(Bucket="dataset", Key="tokens/shard-000.bin", Body=shard)
    alice.put_object(Bucket="dataset", Key="tokens/shard-001.bin", Body=b"x" * 10)
    assert denied(anon.get_object, Bucket="dataset", Key="tokens/shard-000.bin") == \
        "AccessDenied"
    # A new bucket blocks public policies, as AWS's do since 2023.
    assert denied(alice.put_bucket_policy, Bucket="dataset",
                  Policy=policy(PUBLIC_READ)) == "AccessDenied"
    alice.delete_public_access_block(Bucket="dataset")
    alice.put_bucket_policy(Bucket="dataset", Policy=policy(PUBLIC_READ))
    assert alice.get_bucket_policy_status(Bucket="dataset")["PolicyStatus"]["IsPublic"] is True
    # boto3 unsigned: list, GET, ranged GET, HEAD; writes and other buckets stay refused.
    keys = [o["Key"] for o in anon.list_objects_v2(Bucket="dataset", Prefix="tokens/")
            ["Contents"]]
    assert keys == ["tokens/shard-000.bin", "tokens/shard-001.bin"]
    assert anon.get_object(Bucket="dataset", Key="tokens/shard-000.bin")["Body"].read() == shard
    r = anon.get_object(Bucket="dataset", Key="tokens/shard-000.bin", Range="bytes=256-511")
    assert r["Body"].read() == shard[256:512] and r["ContentRange"] == "bytes 256-511/16384"
    assert anon.head_object(Bucket="dataset", Key="tokens/shard-001.bin")["ContentLength"] == 10
    assert denied(anon.get_object, Bucket="dataset", Key="tokens/none") == "NoSuchKey"
    assert denied(anon.put_object, Bucket="dataset", Key="evil", Body=b"x") == "AccessDenied"
    assert denied(anon.delete_object, Bucket="dataset", Key="tokens/shard-001.bin") == \
        "AccessDenied"
    assert denied(anon.list_buckets) == "AccessDenied"
    assert denied(anon.create_bucket, Bucket="anon-bucket") == "AccessDenied"
    assert denied(anon.list_objects_v2, Bucket="ckpt") == "AccessDenied"
    # curl, no credentials at all.
    out = subprocess.run(["curl", "-sS", "--noproxy", "*", "-o", "-", "-w", "\n%{http_code}",
                          "-r", "0-3", f"{gw.endpoint}/dataset/tokens/shard-000.bin"],
                         capture_output=True, check=True).stdout
    assert out == shard[:4] + b"\n206"
    out = subprocess.run(["curl", "-sS", "--noproxy", "*", "-w", "\n%{http_code}",
                          f"{gw.endpoint}/dataset/tokens/nope"], capture_output=True,
                         check=True).stdout
    assert out.endswith(b"\n404") and b"NoSuchKey" in out
    # The AWS CLI, --no-sign-request.
    import os
    from pathlib import Path
    aws = str(Path(sys.executable).with_name("aws"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
                "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "NO_PROXY": "*"})
    cli = [aws, "--endpoint-url", gw.endpoint, "--no-sign-request", "s3"]
    ls = subprocess.run([*cli, "ls", "s3://dataset/tokens/"], env=env, capture_output=True,
                        text=True, timeout=120)
    assert ls.returncode == 0, ls.stderr
    assert "shard-000.bin" in ls.stdout and "shard-001.bin" in ls.stdout
    cp = subprocess.run([*cli, "cp", "s3://dataset/tokens/shard-001.bin", "-"], env=env,
                        capture_output=True, timeout=120)
    assert cp.returncode == 0 and cp.stdout == b"x" * 10, cp.stderr
    # s3fs anon=True, as a data loader would read it.
    import s3fs
    fs = s3fs.S3FileSystem(anon=True, use_listings_cache=False, skip_instance_cache=True,
                           client_kwargs={"endpoint_url": gw.endpoint,
                                          "region_name": "us-east-1"})
    assert sorted(fs.ls("dataset/tokens", detail=False)) == [
        "dataset/tokens/shard-000.bin", "dataset/tokens/shard-001.bin"]
    with fs.open("dataset/tokens/shard-000.bin", "rb", block_size=4096) as f:
        f.seek(1000)
        assert f.read(100) == shard[1000:1100]
    assert fs.cat("dataset/tokens/shard-001.bin") == b"x" * 10
    # RestrictPublicBuckets: the public policy no longer lets anyone but the owner in.
    alice.put_public_access_block(Bucket="dataset", PublicAccessBlockConfiguration={
        "RestrictPublicBuckets": True})
    assert denied(anon.get_object, Bucket="dataset", Key="tokens/shard-001.bin") == \
        "AccessDenied"
    assert alice.get_public_access_block(Bucket="dataset")[
        "PublicAccessBlockConfiguration"] == {"BlockPublicAcls": False,
                                              "IgnorePublicAcls": False,
                                              "BlockPublicPolicy": False,
                                              "RestrictPublicBuckets": True}
    alice.delete_public_access_block(Bucket="dataset")
    assert denied(alice.get_public_access_block, Bucket="dataset") == \
        "NoSuchPublicAccessBlockConfiguration"
    assert anon.get_object(Bucket="dataset", Key="tokens/shard-001.bin")["Body"].read() == \
        b"x" * 10


def test_operator_endpoints_stay_unsigned_and_signed_paths_stay_s3(gw, alice):
    with _NO_PROXY.open(gw.endpoint + "/health/live", timeout=10) as r:
        assert r.status == 200
    with _NO_PROXY.open(gw.endpoint + "/metrics", timeout=10) as r:
        assert b"zonegate_gateway_requests_total" in r.read()
    # Signed, /metrics is the bucket "metrics": none exists.
    assert denied(alice.list_objects_v2, Bucket="metrics") == "NoSuchBucket"


def test_acls_are_disabled_by_default_and_work_once_enabled(gw, alice, bob, anon):
    alice.create_bucket(Bucket="acls")
    assert alice.get_bucket_ownership_controls(Bucket="acls")["OwnershipControls"][
        "Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    # Tools send these as a matter of course: accepted, since they give the owner alone.
    alice.put_object(Bucket="acls", Key="a", Body=b"a", ACL="private")
    alice.put_object(Bucket="acls", Key="b", Body=b"b", ACL="bucket-owner-full-control")
    alice.put_bucket_acl(Bucket="acls", ACL="private")
    assert denied(alice.put_object, Bucket="acls", Key="c", Body=b"c", ACL="public-read") == \
        "AccessControlListNotSupported"
    assert denied(alice.put_bucket_acl, Bucket="acls", ACL="public-read") == \
        "AccessControlListNotSupported"
    r = alice.get_bucket_acl(Bucket="acls")
    alice_id = canonical_id("alice")
    assert r["Owner"] == {"ID": alice_id, "DisplayName": "alice"}
    assert r["Grants"] == [{"Grantee": {"ID": alice_id, "DisplayName": "alice",
                                        "Type": "CanonicalUser"},
                            "Permission": "FULL_CONTROL"}]
    with pytest.raises(ClientError):
        alice.head_object(Bucket="acls", Key="c")  # the refused PUT stored nothing
    # Owners in listings carry the canonical id too.
    assert alice.list_buckets()["Owner"]["ID"] == alice_id
    # ObjectWriter: ACLs count. Public ACLs need the public access block lifted.
    alice.put_bucket_ownership_controls(Bucket="acls", OwnershipControls={
        "Rules": [{"ObjectOwnership": "ObjectWriter"}]})
    assert denied(alice.put_object, Bucket="acls", Key="c", Body=b"c", ACL="public-read") == \
        "AccessDenied"
    alice.delete_public_access_block(Bucket="acls")
    alice.put_object(Bucket="acls", Key="c", Body=b"c", ACL="public-read")
    assert anon.get_object(Bucket="acls", Key="c")["Body"].read() == b"c"
    assert denied(anon.get_object, Bucket="acls", Key="a") == "AccessDenied"
    # IgnorePublicAcls: the public grant stays but counts for nothing; BlockPublicAcls
    # refuses new ones.
    alice.put_public_access_block(Bucket="acls", PublicAccessBlockConfiguration={
        "IgnorePublicAcls": True, "BlockPublicAcls": True})
    assert denied(anon.get_object, Bucket="acls", Key="c") == "AccessDenied"
    assert denied(alice.put_object_acl, Bucket="acls", Key="a", ACL="public-read") == \
        "AccessDenied"
    alice.delete_public_access_block(Bucket="acls")
    assert anon.get_object(Bucket="acls", Key="c")["Body"].read() == b"c"
    grants = alice.get_object_acl(Bucket="acls", Key="c")["Grants"]
    assert {"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
            "Permission": "READ"} in grants
    alice.put_object_acl(Bucket="acls", Key="c", ACL="private")
    assert denied(anon.get_object, Bucket="acls", Key="c") == "AccessDenied"
    # A grant header to bob: he may list, not write.
    bob_id = canonical_id("bob")
    alice.put_bucket_acl(Bucket="acls", GrantRead=f'id="{bob_id}"')
    assert [o["Key"] for o in bob.list_objects_v2(Bucket="acls")["Contents"]] == ["a", "b", "c"]
    assert denied(bob.put_object, Bucket="acls", Key="z", Body=b"z") == "AccessDenied"
    assert denied(bob.get_object, Bucket="acls", Key="a") == "AccessDenied"
    # The XML form, as GetBucketAcl returned it, with WRITE for bob added.
    acp = alice.get_bucket_acl(Bucket="acls")
    acp.pop("ResponseMetadata")
    acp["Grants"].append({"Grantee": {"ID": bob_id, "Type": "CanonicalUser"},
                          "Permission": "WRITE"})
    alice.put_bucket_acl(Bucket="acls", AccessControlPolicy=acp)
    bob.put_object(Bucket="acls", Key="from-bob", Body=b"hi", ACL="bucket-owner-full-control")
    got = alice.get_object_acl(Bucket="acls", Key="from-bob")
    assert got["Owner"]["ID"] == bob_id  # ObjectWriter: the writer owns it
    assert alice.get_object(Bucket="acls", Key="from-bob")["Body"].read() == b"hi"
    # Turning ACLs off again needs a bucket ACL that gives the owner alone.
    assert denied(alice.put_bucket_ownership_controls, Bucket="acls", OwnershipControls={
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}) == \
        "InvalidBucketAclWithObjectOwnership"
    alice.put_bucket_acl(Bucket="acls", ACL="private")
    alice.put_bucket_ownership_controls(Bucket="acls", OwnershipControls={
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    assert denied(bob.list_objects_v2, Bucket="acls") == "AccessDenied"
    alice.delete_bucket_ownership_controls(Bucket="acls")
    assert denied(alice.get_bucket_ownership_controls, Bucket="acls") == \
        "OwnershipControlsNotFoundError"


def test_canned_acl_on_create_bucket_and_multipart(alice, anon):
    assert denied(alice.create_bucket, Bucket="pubnow", ACL="public-read") == \
        "InvalidBucketAclWithObjectOwnership"
    assert denied(alice.head_bucket, Bucket="pubnow") == "404"
    alice.create_bucket(Bucket="mpacl", ObjectOwnership="ObjectWriter", ACL="private")
    alice.delete_public_access_block(Bucket="mpacl")
    up = alice.create_multipart_upload(Bucket="mpacl", Key="big", ACL="public-read")
    p = alice.upload_part(Bucket="mpacl", Key="big", UploadId=up["UploadId"], PartNumber=1,
                          Body=b"m" * 100)
    alice.complete_multipart_upload(Bucket="mpacl", Key="big", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": [{"PartNumber": 1,
                                                                "ETag": p["ETag"]}]})
    assert anon.get_object(Bucket="mpacl", Key="big")["Body"].read() == b"m" * 100
    h = alice.head_object(Bucket="mpacl", Key="big")
    assert not any(k.startswith("x-zg") for k in h["ResponseMetadata"]["HTTPHeaders"])
    # public-read-write: anyone may write (the bucket's owner owns what they write).
    assert denied(anon.put_object, Bucket="mpacl", Key="drop", Body=b"d") == "AccessDenied"
    alice.put_bucket_acl(Bucket="mpacl", ACL="public-read-write")
    anon.put_object(Bucket="mpacl", Key="drop", Body=b"d")
    assert alice.get_object_acl(Bucket="mpacl", Key="drop")["Owner"]["DisplayName"] == "alice"
    assert [o["Key"] for o in anon.list_objects_v2(Bucket="mpacl")["Contents"]] == \
        ["big", "drop"]
    anon.delete_object(Bucket="mpacl", Key="drop")
    assert denied(anon.put_bucket_acl, Bucket="mpacl", ACL="private") == "AccessDenied"


BAD_POLICIES = [
    (b"not json", "Policies must be valid JSON"),
    (b'{"Statement": [', "invalid Json"),
    (json.dumps({"Version": "2012-10-18", "Statement": [PUBLIC_READ]}), "valid version"),
    (json.dumps({"Version": "2012-10-17"}), "Missing required field Statement"),
    (policy({k: v for k, v in PUBLIC_READ.items() if k != "Effect"}), "Effect"),
    (policy({**PUBLIC_READ, "Effect": "Allowed"}), "Invalid effect"),
    (policy({**PUBLIC_READ, "Action": "s3:GetObjekt"}), "invalid action"),
    (policy({**PUBLIC_READ, "Action": "ec2:*"}), "invalid action"),
    (policy({**PUBLIC_READ, "Resource": "arn:aws:s3:::other/*"}), "invalid resource"),
    (policy({**PUBLIC_READ, "Principal": {"AWS": "arn:aws:iam::000000000000:user/nobody"}}),
     "Invalid principal"),
    (policy({**PUBLIC_READ, "Condition": {"StringEqualz": {"s3:prefix": "a"}}}),
     "Invalid Condition type"),
    (policy({**PUBLIC_READ, "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/99"}}}),
     "Invalid Condition value"),
    (policy({**PUBLIC_READ, "Condition": {"StringEquals": {"aws:Nonsense": "a"}}}),
     "invalid condition key"),
    (policy({**PUBLIC_READ, "Action": "s3:GetObject", "Resource": "arn:aws:s3:::dataset"}),
     "does not apply"),
    (policy({**PUBLIC_READ, "Bogus": 1}), "Unknown field"),
    (policy({**PUBLIC_READ, "Sid": "A"}, {**PUBLIC_READ, "Sid": "A"}), "unique"),
    (policy({**PUBLIC_READ, "Resource": [f"arn:aws:s3:::dataset/{i:0100d}" for i in range(250)]}),
     "smaller than 20 KB"),
]


@pytest.mark.parametrize("doc,reason", BAD_POLICIES, ids=[r for _, r in BAD_POLICIES])
def test_malformed_policies_are_refused_with_the_reason_and_change_nothing(alice, doc, reason):
    try:
        alice.create_bucket(Bucket="badpol")
        alice.put_bucket_policy(Bucket="badpol", Policy=policy(
            {"Effect": "Allow", "Principal": {"AWS": bob_arn()}, "Action": "s3:GetObject",
             "Resource": "arn:aws:s3:::badpol/*"}))
    except ClientError:
        pass
    before = alice.get_bucket_policy(Bucket="badpol")["Policy"]
    text = doc if isinstance(doc, bytes) else doc.replace("dataset", "badpol").encode()
    with pytest.raises(ClientError) as e:
        alice.put_bucket_policy(Bucket="badpol", Policy=text.decode("latin-1"))
    assert code(e) == "MalformedPolicy"
    assert reason.lower() in e.value.response["Error"]["Message"].lower()
    assert alice.get_bucket_policy(Bucket="badpol")["Policy"] == before


def test_malformed_acls_are_refused(alice):
    alice.create_bucket(Bucket="badacl", ObjectOwnership="ObjectWriter")
    assert denied(alice.put_bucket_acl, Bucket="badacl", ACL="world-writable") == \
        "InvalidArgument"
    assert denied(alice.put_bucket_acl, Bucket="badacl",
                  GrantRead='emailAddress="x@example.com"') == \
        "UnresolvableGrantByEmailAddress"
    assert denied(alice.put_bucket_acl, Bucket="badacl", GrantRead='id="' + "0" * 64 + '"') == \
        "InvalidArgument"
    assert denied(alice.put_bucket_acl, Bucket="badacl", AccessControlPolicy={
        "Owner": {"ID": canonical_id("alice")},
        "Grants": [{"Grantee": {"Type": "Group", "URI": "http://example.com/all"},
                    "Permission": "READ"}]}) == "InvalidArgument"
    assert denied(alice.put_bucket_acl, Bucket="badacl", AccessControlPolicy={
        "Owner": {"ID": canonical_id("bob")}, "Grants": []}) == "MalformedACLError"
    assert alice.get_bucket_acl(Bucket="badacl")["Grants"][0]["Permission"] == "FULL_CONTROL"
    assert len(alice.get_bucket_acl(Bucket="badacl")["Grants"]) == 1


def _zonegate(gw: Gateway, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args, "--config",
                           str(gw.config_path)], capture_output=True, text=True, timeout=60)


def test_users_added_with_the_cli_sign_requests_until_removed(gw, alice):
    r = _zonegate(gw, "user", "add", "carol")
    assert r.returncode == 0, r.stderr
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    ak, sk = fields["access key"].strip(), fields["secret key"].strip()
    assert fields["canonical id"].strip() == canonical_id("carol")
    carol = gw.client(ak, sk)
    carol.create_bucket(Bucket="carols")
    assert carol.list_buckets()["Owner"] == {"ID": canonical_id("carol"), "DisplayName": "carol"}
    assert [b["Name"] for b in carol.list_buckets()["Buckets"]] == ["carols"]
    assert denied(carol.list_objects_v2, Bucket="ckpt") == "AccessDenied"
    # Policies may name store users too.
    alice.create_bucket(Bucket="forcarol")
    alice.put_bucket_policy(Bucket="forcarol", Policy=policy(
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/carol"},
         "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::forcarol"}))
    assert carol.list_objects_v2(Bucket="forcarol")["KeyCount"] == 0
    listed = _zonegate(gw, "user", "list")
    assert listed.returncode == 0 and ak in listed.stdout and "carol" in listed.stdout
    assert sk not in listed.stdout and sk not in gw.log_path.read_text()
    assert _zonegate(gw, "user", "add", "carol").returncode == 1  # the name is taken
    assert _zonegate(gw, "user", "add", "alice").returncode == 1  # a config user
    assert _zonegate(gw, "user", "remove", "carol").returncode == 0

    def refused() -> bool:
        try:
            carol.list_buckets()
        except ClientError as e:
            return e.response["Error"]["Code"] == "InvalidAccessKeyId"
        return False
    assert wait_for(refused, timeout=30)
