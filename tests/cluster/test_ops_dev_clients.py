"""What the README promises about `zonegate dev --tls` and `--lifecycle-day-seconds`, with
real clients against a real cluster:

- boto3's CRT transfer client (awscrt, a runtime dependency) and s3torchconnector's client
  (s3torchconnectorclient: the Rust mountpoint-s3-client) trust the dev CA through
  SSL_CERT_FILE; boto3 does not hand `verify=` / AWS_CA_BUNDLE to its CRT client, nor its
  endpoint_url (the CRT client takes AWS_ENDPOINT_URL). Each runs in a fresh process: the CRT
  reads its trust store once per process.
- `--lifecycle-day-seconds 2` is written to the config and makes an expiration rule of one
  "day" remove an object within seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib

import pytest

from tests.support.devcluster import ACCESS_KEY, REGION, SECRET_KEY, DevCluster

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
MiB = 1 << 20


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    cluster = DevCluster(tmp_path_factory.mktemp("devclients") / "data", tls=True, nodes=10,
                         zones=24, zone_size="16M")
    try:
        yield cluster.start(extra=("--lifecycle-day-seconds", "2"))
    finally:
        cluster.stop()


def client_env(dev, tmp_path, **extra: str) -> dict[str, str]:
    """A process environment with the cluster's keys and none of the machine's AWS or TLS
    settings; the CRT client needs path-style addressing for an IP endpoint (config file)."""
    cfg = tmp_path / "aws-config"
    cfg.write_text("[default]\ns3 =\n  addressing_style = path\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "SSL_CERT", "REQUESTS_CA"))}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_DEFAULT_REGION=REGION, AWS_CONFIG_FILE=str(cfg),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-creds"), HOME=str(tmp_path))
    env.update(extra)
    return env


CRT_SCRIPT = """
import sys, boto3, boto3.crt
from botocore.config import Config
from boto3.s3.transfer import TransferConfig
ca, path = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", verify=ca, config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="crt")
crt = TransferConfig(preferred_transfer_client="crt")
s3.upload_file(path, "crt", "blob", Config=crt)
assert boto3.crt.CRT_S3_CLIENT is not None, "boto3 did not use its CRT client"
s3.download_file("crt", "blob", path + ".back", Config=crt)
print("crt ok")
"""


def test_boto3_crt_client_trusts_the_dev_ca_through_ssl_cert_file(dev, tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(9 * MiB))  # two parts of the CRT's 8 MiB
    env = client_env(dev, tmp_path, AWS_ENDPOINT_URL=dev.endpoint, SSL_CERT_FILE=str(dev.ca),
                     AWS_CA_BUNDLE=str(dev.ca))
    p = subprocess.run([sys.executable, "-c", CRT_SCRIPT, str(dev.ca), str(blob)], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0 and "crt ok" in p.stdout, p.stderr[-3000:]
    assert (tmp_path / "blob.back").read_bytes() == blob.read_bytes()


S3T_SCRIPT = """
import os, sys
from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client
client = MountpointS3Client("us-east-1", endpoint=sys.argv[1], force_path_style=True)
stream = client.put_object("s3t", "sample-000.bin")
stream.write(b"torch " * 1000)
stream.close()
assert b"".join(client.get_object("s3t", "sample-000.bin")) == b"torch " * 1000
print("s3torch ok")
"""


def test_s3torchconnector_client_trusts_the_dev_ca_through_ssl_cert_file(dev, tmp_path):
    pytest.importorskip("s3torchconnectorclient")
    dev.client().create_bucket(Bucket="s3t")
    env = client_env(dev, tmp_path, SSL_CERT_FILE=str(dev.ca))
    p = subprocess.run([sys.executable, "-c", S3T_SCRIPT, dev.endpoint], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0 and "s3torch ok" in p.stdout, p.stderr[-3000:]


def test_lifecycle_day_seconds_makes_expiration_watchable(dev):
    with open(dev.config_path, "rb") as f:
        assert tomllib.load(f)["gateway"]["lifecycle_day_seconds"] == 2
    s3 = dev.client()
    s3.create_bucket(Bucket="lcday")
    s3.put_bucket_lifecycle_configuration(Bucket="lcday", LifecycleConfiguration={"Rules": [
        {"ID": "one-day", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
         "Expiration": {"Days": 1}}]})
    s3.put_object(Bucket="lcday", Key="tmp/scratch", Body=b"x")
    s3.put_object(Bucket="lcday", Key="keep/this", Body=b"y")
    deadline = time.monotonic() + 120  # a 2 s day: expected within a few seconds
    while time.monotonic() < deadline:
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lcday").get("Contents", [])]
        if keys == ["keep/this"]:
            break
        time.sleep(0.5)
    assert keys == ["keep/this"]


def test_env_file_of_a_tls_cluster_is_enough_for_the_aws_cli(dev, tmp_path):
    env_file = dev.data / "env.sh"
    text = env_file.read_text()
    assert f"export AWS_CA_BUNDLE={dev.ca}\n" in text
    assert f"# export SSL_CERT_FILE={dev.ca}\n" in text  # offered, not forced on the shell
    dev.client().create_bucket(Bucket="envfile")
    aws = os.path.join(os.path.dirname(sys.executable), "aws")
    p = subprocess.run(["bash", "-c", f". {env_file} && {aws} s3 ls"], env=client_env(dev, tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "envfile" in p.stdout, p.stderr[-2000:]
