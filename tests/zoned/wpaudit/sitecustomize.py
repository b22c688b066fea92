"""Start-up hook for audited test child processes (this directory goes first on PYTHONPATH):
when ZONEGATE_WP_AUDIT names a file, tests/zoned/procaudit.py logs every write the process sends
to a zoned block device there, with the device's write pointer just before it."""

import os

if os.environ.get("ZONEGATE_WP_AUDIT"):
    from tests.zoned import procaudit

    procaudit.install(os.environ["ZONEGATE_WP_AUDIT"])
