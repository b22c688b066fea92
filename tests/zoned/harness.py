"""Run the zoned-device tests on real Linux zoned block devices inside QEMU (`make test-zoned`).

The host's kernel has no zoned-device support, so we boot Debian's stock kernel under QEMU
(TCG; KVM only when the CPU advertises vmx/svm) with a tiny busybox initramfs that loads the
virtio/9p modules, mounts the host's `/` read-only and this checkout read-write at the same path
over virtio-9p, chroots into it, loads null_blk as an SMR-like zoned device (conventional zones
first) and finds QEMU's emulated NVMe ZNS namespace (and a plain namespace, to check that it is
refused), then runs pytest `-m zoned` on the `tests/zonestore/test_zbd*.py` files against /dev/nvme0n1 and
/dev/nullb0 with the host venv's Python.
The guest writes its exit status to a file in a third, host-visible 9p share.

Exit status: the guest pytest's own (0 passed, 1 failed, 2-5 pytest errors);
77 skipped (QEMU, a kernel or busybox cannot be had; message starts with "skipped:");
124 the guest timed out; 125 the guest crashed or QEMU died without a status;
126 the guest booted but could not set up the devices.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

EXIT_SKIP = 77
EXIT_TIMEOUT = 124
EXIT_CRASH = 125
EXIT_GUEST_SETUP = 126
GUEST_SETUP_STATUS = 99  # what guest.sh exits with when modules or devices are missing

PACKAGES = ["qemu-system-x86", "qemu-utils", "linux-image-amd64", "busybox-static",
            "zbd-utils", "libzbd2", "kmod"]
REPO = Path(__file__).resolve().parents[2]
TEST_FILES = "tests/zonestore/test_zbd*.py"

ZNS_ZONE = "8M"
ZNS_GEOMETRY = (f"zoned=true,zoned.zone_size={ZNS_ZONE},zoned.zone_capacity=6M,"
                "zoned.max_open=8,zoned.max_active=12")
ZNS_IMAGE_BYTES = 64 * 8 * 1024 * 1024
PLAIN_IMAGE_BYTES = 64 * 1024 * 1024  # a second, ordinary (not zoned) namespace: /dev/nvme0n2
NULLB_PARAMS = ("nr_devices=1 zoned=1 zone_size=8 zone_nr_conv=2 gb=1 bs=4096 memory_backed=1 "
                "zone_max_open=6 zone_max_active=8")
INIT_MODULES = ["virtio_pci", "9pnet_virtio", "9p"]


def log(msg: str) -> None:
    print(f"[test-zoned] {msg}", flush=True)


class Skip(Exception):
    """QEMU, a kernel or busybox cannot be had here."""


# ------------------------------------------------------------------ what we need on the host


def _kernels() -> list[tuple[str, Path]]:
    """(version, vmlinuz) of installed kernels with their modules, newest first."""
    found = []
    for vmlinuz in Path("/boot").glob("vmlinuz-*"):
        ver = vmlinuz.name[len("vmlinuz-"):]
        mod = Path("/lib/modules") / ver
        if (mod / "modules.dep").exists() and os.access(vmlinuz, os.R_OK):
            found.append((ver, vmlinuz))

    def key(item: tuple[str, Path]) -> list[int]:
        return [int(x) for x in re.findall(r"\d+", item[0])]

    return sorted(found, key=key, reverse=True)


def _static_busybox() -> str | None:
    for cand in ("/bin/busybox", "/usr/bin/busybox", shutil.which("busybox")):
        if cand and os.path.exists(cand):
            with open(cand, "rb") as f:
                head = f.read(4096)
            if b"ld-linux" not in head:  # a static binary has no ELF interpreter
                return cand
    return None


def _missing() -> list[str]:
    missing = []
    if not shutil.which("qemu-system-x86_64"):
        missing.append("qemu-system-x86")
    if not _kernels():
        unreadable = [str(p) for p in Path("/boot").glob("vmlinuz-*") if not os.access(p, os.R_OK)]
        missing.append(f"a readable kernel ({', '.join(unreadable)} not readable)" if unreadable
                       else "linux-image-amd64")
    if not _static_busybox():
        missing.append("busybox-static")
    if not shutil.which("modprobe"):
        missing.append("kmod")
    try:
        sys.path.insert(0, str(REPO))
        from zonestore import pyzbd

        if not pyzbd.available():
            missing.append("libzbd2")
    finally:
        sys.path.pop(0)
    return missing


def ensure_packages(install: bool) -> None:
    missing = _missing()
    if not missing:
        return
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        log(f"installing {' '.join(PACKAGES)} with apt-get (missing: {', '.join(missing)})")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        try:
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env,
                           stdout=subprocess.DEVNULL, timeout=600)
            subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], check=True, env=env,
                           stdout=subprocess.DEVNULL, timeout=1200)
        except (subprocess.SubprocessError, OSError) as e:
            raise Skip(f"apt-get install failed ({e})") from e
        missing = _missing()
    if missing:
        how = "" if os.geteuid() == 0 else " (not root: cannot apt-get install)"
        raise Skip(f"missing {', '.join(missing)}{how}; apt-get install {' '.join(PACKAGES)}")


def use_kvm() -> bool:
    # /dev/kvm can exist on machines whose KVM cannot run a stock kernel: trust only the CPU flags.
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(vmx|svm)\b", flags)) and os.access("/dev/kvm", os.R_OK | os.W_OK)


# ------------------------------------------------------------------ the initramfs


def _cpio_entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0),
                ino: int = 0) -> bytes:
    """One entry of a `newc` cpio archive (the format the kernel unpacks into its rootfs)."""
    namez = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(namez), 0]
    hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = hdr + namez
    out += b"\0" * (-len(out) % 4)
    out += data
    out += b"\0" * (-len(data) % 4)
    return out


def module_order(kver: str) -> list[Path]:
    """insmod order of the modules /init needs, as modprobe resolves their dependencies."""
    order: list[Path] = []
    for mod in INIT_MODULES:
        res = subprocess.run(["modprobe", "-S", kver, "--show-depends", mod],
                             capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise Skip(f"kernel {kver} has no module {mod}: {res.stderr.strip()}")
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "insmod":
                p = Path(parts[1])
                if p not in order:
                    order.append(p)
    return order


INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod /modules/$m || echo "init: insmod $m failed"; done
ip link set lo up  # tests talk to servers on 127.0.0.1
opts=trans=virtio,version=9p2000.L,msize=262144
# The guest caches the host root and the checkout (cache=loose): uncached 9p costs seconds per
# Python start. Neither is written by the host during a run; results go to the uncached /out.
if mount -t 9p -o $opts,ro,cache=loose hostroot /newroot && mount -t 9p -o $opts out /out; then
    mount -t proc proc /newroot/proc
    mount -t sysfs sys /newroot/sys
    mount -t devtmpfs dev /newroot/dev
    mount -t tmpfs tmp /newroot/tmp
    mount -t tmpfs run /newroot/run
    # After the tmpfs mounts, so that a checkout under /tmp is not hidden by them.
    mkdir -p /newroot@CHECKOUT@ /newroot/tmp/zg-out
    mount -t 9p -o $opts,cache=loose checkout /newroot@CHECKOUT@ || echo "init: mounting the checkout failed"
    mount --bind /out /newroot/tmp/zg-out
    chroot /newroot /bin/sh /tmp/zg-out/guest.sh
    echo $? > /out/status.tmp && mv /out/status.tmp /out/status
else
    echo "init: mounting the host over 9p failed"
    echo @SETUP@ > /out/status
fi
sync
poweroff -f
"""

GUEST = r"""set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp TMPDIR=/tmp PYTHONDONTWRITEBYTECODE=1 ZONEGATE_IN_GUEST=1
cd @CHECKOUT@ || exit @SETUP@
fail() { echo "guest: $*"; exit @SETUP@; }
modprobe nvme || fail "modprobe nvme failed"
modprobe null_blk @NULLB@ || fail "modprobe null_blk failed"
for i in $(seq 1 100); do [ -b /dev/nvme0n1 ] && [ -b /dev/nullb0 ] && break; sleep 0.1; done
for i in $(seq 1 50); do [ -b /dev/nvme0n2 ] && break; sleep 0.1; done
[ -b /dev/nvme0n1 ] || fail "no /dev/nvme0n1 (NVMe ZNS namespace)"
[ -b /dev/nvme0n2 ] || fail "no /dev/nvme0n2 (plain NVMe namespace)"
[ -b /dev/nullb0 ] || fail "no /dev/nullb0 (null_blk)"
for d in nvme0n1 nullb0; do
    q=/sys/block/$d/queue
    echo "guest: $d zoned=$(cat $q/zoned) zones=$(cat $q/nr_zones)" \
         "zone=$(( $(cat $q/chunk_sectors) / 2048 ))MiB max_open=$(cat $q/max_open_zones)" \
         "max_active=$(cat $q/max_active_zones) scheduler=$(cat $q/scheduler)"
done
export ZONEGATE_ZONED_DEVICES="/dev/nvme0n1 /dev/nullb0" ZONEGATE_PLAIN_DEVICE=/dev/nvme0n2
@RUN@
"""


def build_initramfs(kver: str, busybox: str, dest: Path) -> None:
    mods = module_order(kver)
    names = []
    entries = [_cpio_entry(d, 0o40755, ino=i + 1) for i, d in enumerate(
        ["bin", "dev", "proc", "sys", "newroot", "out", "modules"])]
    entries.append(_cpio_entry("dev/console", 0o20600, rdev=(5, 1), ino=20))
    entries.append(_cpio_entry("bin/busybox", 0o100755, Path(busybox).read_bytes(), ino=21))
    for k, m in enumerate(mods):
        data = m.read_bytes()
        name = m.name
        if name.endswith(".xz"):
            import lzma

            data, name = lzma.decompress(data), name[:-3]
        elif not name.endswith(".ko"):
            raise Skip(f"cannot load compressed module {m} from busybox insmod")
        names.append(name)
        entries.append(_cpio_entry(f"modules/{name}", 0o100644, data, ino=100 + k))
    entries.append(_cpio_entry("modules/order", 0o100644, ("\n".join(names) + "\n").encode(),
                               ino=30))
    init = INIT.replace("@CHECKOUT@", str(REPO)).replace("@SETUP@", str(GUEST_SETUP_STATUS))
    entries.append(_cpio_entry("init", 0o100755, init.encode(), ino=31))
    entries.append(_cpio_entry("TRAILER!!!", 0))
    dest.write_bytes(b"".join(entries))


# ------------------------------------------------------------------ running the guest


def run(args: argparse.Namespace) -> int:
    ensure_packages(install=not args.no_install)
    if args.check:
        print("ok: QEMU, a kernel, busybox and libzbd are available", flush=True)
        return 0
    kver, vmlinuz = _kernels()[0]
    busybox = _static_busybox()
    assert busybox
    work = Path(tempfile.mkdtemp(prefix="zonegate-qemu-"))
    try:
        return _boot(args, kver, vmlinuz, busybox, work)
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _boot(args: argparse.Namespace, kver: str, vmlinuz: Path, busybox: str, work: Path) -> int:
    out = work / "out"
    out.mkdir()
    initrd = work / "initrd.cpio"
    build_initramfs(kver, busybox, initrd)
    # The default is left unquoted on purpose: the guest's shell expands the glob.
    pytest_args = shlex.join(args.pytest_args) if args.pytest_args else TEST_FILES + " -q"
    guest = (GUEST.replace("@CHECKOUT@", str(REPO))
             .replace("@SETUP@", str(GUEST_SETUP_STATUS))
             .replace("@NULLB@", NULLB_PARAMS)
             .replace("@RUN@", args.guest_shell or
                      f"{args.python} -m pytest -m zoned -p no:cacheprovider -o addopts= "
                      f"--color=no {pytest_args}"))
    (out / "guest.sh").write_text(guest)
    zns, plain = work / "zns.img", work / "plain.img"
    for img, size in ((zns, ZNS_IMAGE_BYTES), (plain, PLAIN_IMAGE_BYTES)):
        with open(img, "wb") as f:
            f.truncate(size)  # sparse
    kvm = use_kvm()
    cmd = [
        "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-machine", "q35", "-m", str(args.memory), "-smp", "1", "-nic", "none",
        *(["-accel", "kvm", "-cpu", "host"] if kvm else ["-accel", "tcg", "-cpu", "max"]),
        "-kernel", str(vmlinuz), "-initrd", str(initrd),
        "-append", "console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init",
        "-serial", "stdio",
        "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,"
                   "multidevs=remap",
        "-virtfs", f"local,path={REPO},mount_tag=checkout,security_model=none,multidevs=remap",
        "-virtfs", f"local,path={out},mount_tag=out,security_model=none",
        "-drive", f"file={zns},id=zns0,format=raw,if=none",
        "-device", "nvme,id=nvme0,serial=zns0001",
        "-device", "nvme-ns,drive=zns0,bus=nvme0,nsid=1,logical_block_size=4096,"
                   f"physical_block_size=4096,{ZNS_GEOMETRY}",
        "-drive", f"file={plain},id=plain0,format=raw,if=none",
        "-device", "nvme-ns,drive=plain0,bus=nvme0,nsid=2,logical_block_size=4096,"
                   "physical_block_size=4096",
    ]
    log(f"booting {vmlinuz.name} under {'KVM' if kvm else 'TCG'} "
        f"(ZNS {ZNS_GEOMETRY}; null_blk {NULLB_PARAMS}); timeout {args.timeout}s")
    tail: deque[str] = deque(maxlen=60)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)

    def pump() -> None:
        assert proc.stdout
        with open(work / "console.log", "wb") as logf:
            for raw in proc.stdout:
                logf.write(raw)
                line = raw.decode(errors="replace").rstrip("\r\n")
                tail.append(line)
                if not args.quiet:
                    print(f"  | {line}", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    reader.join(timeout=5)
    elapsed = time.monotonic() - start
    status_file = out / "status"
    if timed_out:
        _show_tail(args, tail)
        log(f"FAILED: guest timed out after {args.timeout}s (exit {EXIT_TIMEOUT})")
        return EXIT_TIMEOUT
    if not status_file.exists():
        _show_tail(args, tail)
        log(f"FAILED: guest crashed: QEMU exited with {proc.returncode} after {elapsed:.0f}s "
            f"without a test status (exit {EXIT_CRASH})")
        return EXIT_CRASH
    status = int(status_file.read_text().strip() or EXIT_CRASH)
    if status == GUEST_SETUP_STATUS:
        _show_tail(args, tail)
        log(f"FAILED: the guest could not set up the zoned devices (exit {EXIT_GUEST_SETUP})")
        return EXIT_GUEST_SETUP
    verdict = "passed" if status == 0 else "FAILED"
    summary = next((ln.strip("= ") for ln in reversed(tail)
                    if re.search(r"\d+ (passed|failed|error)", ln)), "")
    log(f"guest tests {verdict} (exit {status}) in {elapsed:.0f}s: {summary}")
    if status and args.quiet:
        _show_tail(args, tail)
    return status


def _show_tail(args: argparse.Namespace, tail: deque[str]) -> None:
    if args.quiet:
        print("\n".join(f"  | {line}" for line in tail), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.zoned.harness", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=480, help="seconds before the guest is "
                    "killed (default 480: TCG is slow on a busy machine)")
    ap.add_argument("--memory", type=int, default=1024, help="guest RAM in MiB")
    ap.add_argument("--no-install", action="store_true",
                    help="never apt-get install; skip when something is missing")
    ap.add_argument("--python", default=sys.executable,
                    help="the Python the guest runs (the host venv's, visible over 9p)")
    ap.add_argument("--check", action="store_true",
                    help="only check (and install) what is needed; do not boot")
    ap.add_argument("--guest-shell", metavar="CMD",
                    help="run this shell command in the guest instead of pytest (drills)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("-q", "--quiet", action="store_true",
                    help="show the guest console only when something fails")
    ap.add_argument("pytest_args", nargs="*",
                    help=f"pytest arguments in the guest (default: {TEST_FILES} -q)")
    args = ap.parse_args(argv)
    try:
        return run(args)
    except Skip as e:
        print(f"skipped: {e}", flush=True)
        return EXIT_SKIP


if __name__ == "__main__":
    sys.exit(main())
