"""Shared by the tagging and lifecycle tests: one small cluster per module, boto3 and the aws
cli (`aws s3api`) pointed at it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.gwcluster import ACCESS_KEY, SECRET_KEY, Gateway, serving

AWS = str(Path(sys.executable).with_name("aws"))


def start(tmp_path_factory: Any, name: str, **gateway_options: Any) -> Any:
    with serving(Gateway(tmp_path_factory.mktemp(name), gateway_options=gateway_options)) as g:
        yield g


def aws_runner(g: Gateway, home: Path) -> Any:
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "config"
    cfg.write_text("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_CONFIG_FILE=str(cfg), AWS_SHARED_CREDENTIALS_FILE=str(home / "none"),
               AWS_EC2_METADATA_DISABLED="true", NO_PROXY="*", no_proxy="*")

    def s3api(*args: str, check: bool = True) -> Any:
        p = subprocess.run([AWS, "--endpoint-url", g.endpoint, "s3api", *args, "--output",
                            "json"], env=env, capture_output=True, text=True, timeout=120)
        if not check:
            return p
        if p.returncode != 0:
            raise AssertionError(f"aws s3api {' '.join(args)} -> {p.returncode}\n{p.stderr}")
        return json.loads(p.stdout) if p.stdout.strip() else {}

    return s3api


def code(exc: pytest.ExceptionInfo) -> str:
    return exc.value.response["Error"]["Code"]
