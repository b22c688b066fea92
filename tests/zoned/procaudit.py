"""Write-pointer audit for whole child processes (node daemons) on real zoned devices.

`install(log_path)` wraps os.pwrite: every write to a zoned block device appends
`offset length zone_type device_wp` to `log_path`, the WP being what the kernel reports just
before the write. tests/zoned/wpaudit/sitecustomize.py installs it at interpreter start-up when
ZONEGATE_WP_AUDIT is set, so a test can audit a real `python -m zonestore.node` process.
No pytest import here: this runs inside the audited process.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple


class Write(NamedTuple):
    offset: int
    length: int
    zone_type: int  # libzbd numbering: 1 conventional
    device_wp: int


def install(log_path: str) -> None:
    from zonestore import pyzbd

    real = os.pwrite
    report_fds: dict[int, int | None] = {}  # st_rdev -> report fd, None if not zoned
    out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def pwrite(fd: int, data, offset: int) -> int:
        st = os.fstat(fd)
        if stat.S_ISBLK(st.st_mode):
            if st.st_rdev not in report_fds:
                path = os.readlink(f"/proc/self/fd/{fd}")
                report_fds[st.st_rdev] = (pyzbd.open_device(path, os.O_RDONLY)[0]
                                          if pyzbd.device_is_zoned(path) else None)
            rfd = report_fds[st.st_rdev]
            if rfd is not None:
                z = pyzbd.report_zones(rfd, offset, 1, 1)[0]
                os.write(out, f"{offset} {memoryview(data).nbytes} {z.type} {z.wp}\n".encode())
        return real(fd, data, offset)

    os.pwrite = pwrite


def read(log_path: str) -> list[Write]:
    with open(log_path) as f:
        return [Write(*(int(x) for x in line.split())) for line in f if line.strip()]
