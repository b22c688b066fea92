"""SIGKILL a process writing to a drive at random moments, many times: every acknowledged
record reads back intact, nothing partial is ever returned, and the drive takes writes again."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.crash_writer import TUNING, blob
from tests.support.zonelog_helpers import make_drive, open_device, read_all
from zonestore.errors import RecordNotFound
from zonestore.fsck import fsck
from zonestore.zonelog import ZoneLog

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 15
ABSENT = None


def run_round(drive: Path, round_: int, kill_after: float) -> list[list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.crash_writer", str(drive), str(round_)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[list[str]] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if not raw.endswith(b"\n"):
                break  # cut by the kill
            words = raw.decode().split()
            if words == ["READY"]:
                ready.set()
            lines.append(words)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    try:
        if not ready.wait(30):
            raise AssertionError(f"writer did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(kill_after)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        t.join(10)
        proc.stderr.close()
    return lines


def apply_log(state: dict[str, set], lines: list[list[str]]) -> None:
    """Per id, the set of states it may be in: a version number, or ABSENT."""
    for w in lines:
        if w[0] == "PUTTING":
            state.setdefault(w[1], {ABSENT}).add((int(w[2]), int(w[3])))
        elif w[0] == "PUT":
            state[w[1]] = {(int(w[2]), int(w[3]))}
        elif w[0] == "DELETING":
            state[w[1]].add(ABSENT)
        elif w[0] == "DELETED":
            state[w[1]] = {ABSENT}


async def check_and_settle(drive: Path, state: dict[str, set], rnd: random.Random) -> None:
    log = await ZoneLog.open_path(drive, **TUNING)
    try:
        seen = {r.id: r for r in log.scan(limit=100_000)}
        assert set(seen) <= set(state), set(seen) - set(state)
        for rid, options in state.items():
            if rid not in seen:
                assert ABSENT in options, f"acknowledged record {rid} is missing"
                with_get = None
                try:
                    with_get = await read_all(log, rid)
                except RecordNotFound:
                    pass
                assert with_get is None
                state[rid] = {ABSENT}
                continue
            data = await read_all(log, rid)
            ver = int(data[:48].split(b":")[1]) if len(data) >= 48 else None
            match = [o for o in options if o is not ABSENT and o[1] == len(data)
                     and (ver is None or o[0] == ver)]
            assert match, f"{rid}: {len(data)} bytes match none of {options}"
            assert data == blob(rid, match[0][0], match[0][1]), f"{rid}: content differs"
            state[rid] = {match[0]}
        # Keep the drive from filling up over the rounds: delete some, reclaim.
        live = [rid for rid, o in state.items() if o != {ABSENT}]
        for rid in rnd.sample(live, len(live) // 2):
            assert await log.delete(rid)
            state[rid] = {ABSENT}
        await log.reclaim(min_garbage=0.2)
        await log.put("probe", b"the drive takes writes", stream="probe")
        assert await read_all(log, "probe") == b"the drive takes writes"
        assert await log.delete("probe")
    finally:
        await log.close()


async def test_acknowledged_records_survive_sigkill_at_random_moments(tmp_path):
    drive = make_drive(tmp_path, zones=96, max_open=6, max_active=8)
    rnd = random.Random(2024)
    state: dict[str, set] = {}
    acked_total = 0
    for r in range(ROUNDS):
        lines = run_round(drive, r, rnd.uniform(0.05, 0.8))
        acked_total += sum(1 for w in lines if w[0] == "PUT")
        apply_log(state, lines)
        await check_and_settle(drive, state, rnd)
    assert acked_total >= ROUNDS  # the writer did get work acknowledged
    with open_device(drive) as dev:
        assert fsck(dev, drive / "index.sqlite")[0] == []
