"""The README's commands paste and run. Every ```sh and ```python block after the quick
start's `make run` block runs, in order, in one bash shell, as a user's second shell would run
them: in a directory whose `./data` is a real `zonegate dev` cluster (the stand-in for `make
run`) and whose `.venv` is this venv, with no AWS setting and no venv on PATH from outside. What
the blocks need (endpoint, keys, region, the aws cli) they must get the way the README says.

The python blocks run through the venv's `python` (the README activates it first)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.devcluster import DevCluster

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.M | re.S)
RUNNABLE = ("sh", "python")


def readme_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number, language, body) of every fenced block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2))
            for m in FENCE.finditer(text)]


def runnable_blocks(text: str) -> list[tuple[int, str, str]]:
    blocks = readme_blocks(text)
    start = next(i for i, (_, lang, body) in enumerate(blocks)
                 if lang == "sh" and body.strip() == "make run")
    return [b for b in blocks[start + 1:] if b[1] in RUNNABLE]


def shell_script(blocks: list[tuple[int, str, str]]) -> str:
    parts = ["set -eo pipefail"]
    for line, lang, body in blocks:
        parts.append(f"echo '### README.md line {line}' >&2")
        if lang == "python":
            parts.append(f"python - <<'README_PY'\n{body}README_PY")
        else:
            parts.append(body)
    return "\n".join(parts) + "\n"


def test_readme_runnable_blocks_are_marked_and_complete():
    """The quick start is where the runnable blocks begin, and they carry what a newcomer
    needs: the environment file, the venv, the buckets the examples use, a boto3 client."""
    text = README.read_text()
    blocks = runnable_blocks(text)
    assert len(blocks) >= 5
    first = blocks[0][2]
    assert ". data/env.sh" in first and ".venv/bin/activate" in first
    bodies = "".join(b[2] for b in blocks)
    for needle in ("aws s3 mb s3://ckpt", "aws s3 mb s3://tokens", "endpoint_url="):
        assert needle in bodies, needle
    # no command points at a config file that `make run` does not write
    assert not re.search(r"--config\s+zonegate\.toml", text)
    assert "data/zonegate.toml" in text


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_readme_commands_run_against_a_dev_cluster(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix))
    home = tmp_path / "home"
    home.mkdir()
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "/usr/bin:/bin")
                                  .split(os.pathsep) if p and p != venv_bin)
    env["HOME"] = str(home)  # no ~/.aws of the machine's user
    cluster = DevCluster(work / "data")
    cluster.start()
    try:
        # what `make run` prints is what data/env.sh holds, and the file keeps its secret
        env_file = work / "data" / "env.sh"
        assert f"export AWS_ENDPOINT_URL={cluster.endpoint}\n" in cluster.output()
        assert f"export AWS_ENDPOINT_URL={cluster.endpoint}\n" in env_file.read_text()
        assert env_file.stat().st_mode & 0o077 == 0
        blocks = runnable_blocks(README.read_text())
        proc = subprocess.run(["bash", "-c", shell_script(blocks)], cwd=work, env=env,
                              capture_output=True, text=True, timeout=480)
        assert proc.returncode == 0, (
            f"README block failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}\n"
            f"stdout:\n{proc.stdout[-2000:]}")
        out = proc.stdout
        assert "run1/step1000.txt" in out  # the quick start's listing
        assert "\n1024\n" in out  # the boto3 snippet read back what it wrote
        assert "shard-000.bin" in out  # the anonymous listing of the public bucket
        assert "evalteam" in out  # zonegate user list found ./data/zonegate.toml itself
    finally:
        cluster.stop()
