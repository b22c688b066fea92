"""`make test-zoned` proves the real zoned-device path: boot QEMU and run the zoned tests in the guest.

Runs `python -m tests.zoned.harness` (what `make test-zoned` runs) when QEMU, a Debian kernel,
busybox-static and libzbd are installed (`.ci/run` installs them), and skips with the harness's
reason otherwise. Also proves the harness tells a crashed or hung guest apart from failing tests.
Under TCG (no KVM) the guest run takes about 3 minutes; the device tests marked soak (minutes
each) run in the soak-marked test (`make soak`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.zoned import harness

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.qemu,
    pytest.mark.skipif(bool(os.environ.get("ZONEGATE_IN_GUEST")), reason="already in the guest"),
]


def run_harness(*args: str, timeout: float = 570) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.zoned.harness", "--no-install", "-q", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="module", autouse=True)
def qemu_available():
    res = run_harness("--check", timeout=60)
    if res.returncode == harness.EXIT_SKIP:
        pytest.skip(res.stdout.strip().splitlines()[-1])
    assert res.returncode == 0, res.stdout + res.stderr


def explain(res: subprocess.CompletedProcess[str]) -> str:
    return f"harness exit {res.returncode}\n{res.stdout[-6000:]}\n{res.stderr[-2000:]}"


def guest_pytest(marks: str) -> list[str]:
    """Harness arguments: the guest's pytest on every tests/zonestore/test_zbd*.py, these marks."""
    files = [str(p.relative_to(REPO)) for p in sorted(REPO.glob("tests/zonestore/test_zbd*.py"))]
    return ["--", "-m", marks, "-q", *files]


@pytest.mark.timeout(780)
def test_zoned_device_tests_pass_inside_qemu_on_zns_and_null_blk():
    # The soak-marked device tests (minutes under TCG) run in the soak test below. The guest
    # takes 5 minutes alone under TCG and 8 beside the other test worker's busiest files.
    res = run_harness("--timeout", "720", *guest_pytest("zoned and not soak"))
    assert res.returncode == 0, explain(res)
    assert "guest tests passed" in res.stdout
    # The devices were really there: the device tests ran rather than skipped.
    passed = re.search(r"(\d+) passed", res.stdout.splitlines()[-1])
    assert passed and int(passed.group(1)) >= 10, explain(res)


def test_failing_guest_tests_crashes_and_timeouts_get_distinct_exit_codes():
    failed = run_harness("--guest-shell", "exit 1", "--timeout", "240")
    assert failed.returncode == 1, explain(failed)
    crashed = run_harness("--guest-shell", "echo c > /proc/sysrq-trigger; sleep 600",
                          "--timeout", "240")
    assert crashed.returncode == harness.EXIT_CRASH, explain(crashed)
    assert "guest crashed" in crashed.stdout
    hung = run_harness("--timeout", "2")
    assert hung.returncode == harness.EXIT_TIMEOUT, explain(hung)
    assert "timed out" in hung.stdout


@pytest.mark.soak
@pytest.mark.timeout(1500)
def test_long_zoned_device_tests_pass_inside_qemu():
    res = run_harness("--timeout", "1200", *guest_pytest("zoned and soak"), timeout=1400)
    assert res.returncode == 0, explain(res)
    passed = re.search(r"(\d+) passed", res.stdout.splitlines()[-1])
    assert passed and int(passed.group(1)) >= 2, explain(res)
