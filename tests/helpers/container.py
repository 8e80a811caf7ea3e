"""Boot Debian with systemd as PID 1 in systemd-nspawn and run commands inside it.

Follows ../shared/recipes/real-systemd.md: mmdebstrap a root, boot it with
--register=no, enter the namespaces of the container's PID 1 with nsenter.
"""

import errno
import os
import shutil
import socket
import subprocess
import time

HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # Debian's own tools, not a virtualenv's or pyenv's

# One booted container on the machine at a time, whoever boots it: CI runs the system tier on the host and, at the
# same time, inside a fresh Debian 13 root (.ci/run's two lanes). Booted with --keep-unit, each container's systemd
# manages the cgroup its caller runs in, which both callers share (a unit of one then failed to start "because of
# unavailable resources"), and both share the host's network, where each MTA wants 127.0.0.1:25. An abstract Unix
# socket is the lock: its name is seen by every process of the network namespace (the fresh roots enter no other),
# and it is released by the kernel when its holder dies, so a killed run leaves no stale lock.
MACHINE_LOCK = "\0lms-refresh-tests-booted-container"
MACHINE_LOCK_WAIT = 3 * 3600  # the other holder's whole system tier, on a loaded machine
_held = {"socket": None, "count": 0}


def acquire_machine_lock(wait=MACHINE_LOCK_WAIT, name=MACHINE_LOCK):
    """Hold the machine's container lock (re-entrant within this process), waiting for another holder to let go.
    `name`: the tests of this lock use one of their own, not the one a system tier may be holding meanwhile."""
    if _held["count"]:
        _held["count"] += 1
        return
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + wait
    while True:
        try:
            lock.bind(name)
            break
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                lock.close()
                raise
            if time.monotonic() > deadline:
                lock.close()
                raise AssertionError(f"another test process has held the booted-container lock for {wait} s") from None
            time.sleep(1)
    _held.update(socket=lock, count=1)


def release_machine_lock():
    if _held["count"] > 1:
        _held["count"] -= 1
    elif _held["count"] == 1:
        _held["socket"].close()
        _held.update(socket=None, count=0)


def host(*command, check=True, timeout=900, **kwargs):
    """Run a command on the host with Debian's PATH; return the CompletedProcess."""
    env = dict(os.environ, PATH=HOST_PATH)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


class Container:
    def __init__(self, suite, workdir, binds):
        self.suite = suite
        self.root = os.path.join(workdir, f"root-{suite}")
        self.log = os.path.join(workdir, f"nspawn-{suite}.log")
        self.binds = binds  # {host path: (container path, read_only)}
        self.process = None
        self.leader = None
        self.locked = False  # holds the machine's booted-container lock (acquire_machine_lock)

    def create(self):
        host("mmdebstrap", "--variant=apt",
             "--include=systemd,systemd-sysv,dbus,python3,sudo,ca-certificates,man-db,tzdata",
             self.suite, self.root, timeout=900)

    def boot(self):
        acquire_machine_lock()
        self.locked = True
        command = ["systemd-nspawn", "-D", self.root, "--boot", "--register=no", "--keep-unit",
                   f"--machine=lmsr-{self.suite}-{os.getpid()}"]
        for source, (target, read_only) in self.binds.items():
            command.append(f"--bind{'-ro' if read_only else ''}={source}:{target}")
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=dict(os.environ, PATH=HOST_PATH))
        # A loaded (or nested) machine can take minutes to boot a container.
        deadline = time.monotonic() + 300
        while self.leader is None:
            assert self.process.poll() is None, open(self.log).read()
            assert time.monotonic() < deadline, "the container did not start"
            self.leader = self._container_init()
            time.sleep(0.1)
        while True:
            result = self.run("systemctl", "is-system-running", "--wait", check=False, timeout=300)
            state = result.stdout.strip()
            if state in ("running", "degraded"):
                break
            assert self.process.poll() is None, open(self.log).read()
            assert time.monotonic() < deadline, (
                f"system state {state!r} ({result.returncode}): {result.stderr.strip()}\n{open(self.log).read()}")
            time.sleep(0.5)

    def _container_init(self):
        """The PID of the container's systemd, or None while nspawn is still starting it.

        nspawn forks an intermediate child which clones the container's PID 1 and exits, so
        "the first child of nspawn" can briefly be that intermediate process: entering it
        fails once it is gone. The container's PID 1 is the child in a PID namespace of its own.
        """
        ours = os.readlink("/proc/self/ns/pid")
        children = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True).stdout.split()
        for pid in children:
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") != ours:
                    return pid
            except OSError:  # it just exited
                continue
        return None

    def run(self, *command, check=True, timeout=300, input=None):
        """Run a command inside the container (as root); return the CompletedProcess."""
        result = subprocess.run(["nsenter", "-t", self.leader, "-a", "--", "env", "-i", f"PATH={HOST_PATH}",
                                 "LANG=C.UTF-8", *command], capture_output=True, text=True, timeout=timeout,
                                input=input)
        if check and result.returncode != 0:
            raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def shell(self, script, **kwargs):
        return self.run("sh", "-c", script, **kwargs)

    def show(self, unit, *properties):
        out = self.run("systemctl", "show", unit, *[f"-p{p}" for p in properties]).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait_for(self, predicate, what, seconds=120):
        deadline = time.monotonic() + seconds
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    def reboot(self, between=None):
        """`systemctl reboot` inside, wait for nspawn to end (it exits when its container reboots), run
        `between()` on the host while the container is down, then boot the same root again."""
        self.run("systemctl", "reboot", check=False, timeout=60)
        self.process.wait(timeout=300)
        self.leader = None
        if between is not None:
            between()
        self.boot()

    def destroy(self):
        if self.process is not None and self.process.poll() is None:
            if self.leader:
                self.run("systemctl", "poweroff", check=False, timeout=30)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)
        if self.locked:
            self.locked = False
            release_machine_lock()


def build_in_fresh_root(suite, workdir, source, commands, timeout=1800):
    """Run `commands` (shell) in `source` inside a fresh `suite` root made with apt only; return the output.

    The root has no build tools, so what the commands install is all the build gets: a
    missing Build-Depends fails here rather than on an administrator's machine. `source`'s
    parent directory is bound at /build, so what the build writes next to it stays on the host.
    """
    root = os.path.join(workdir, f"build-root-{suite}")
    host("mmdebstrap", "--variant=apt", suite, root, timeout=900)
    try:
        # An administrator answers apt's questions; here nobody can.
        with open(os.path.join(root, "etc/apt/apt.conf.d/90assume-yes"), "w") as conf:
            conf.write('APT::Get::Assume-Yes "true";\n')
        name = os.path.basename(source)
        result = host("systemd-nspawn", "-q", "-D", root, "--register=no", "--keep-unit",
                      f"--machine=lmsr-build-{suite}-{os.getpid()}",
                      f"--bind={os.path.dirname(source)}:/build", f"--chdir=/build/{name}",
                      "--setenv=DEBIAN_FRONTEND=noninteractive", "--setenv=LANG=C.UTF-8",
                      # not the host's /etc/localtime bound over the root's: tzdata must install its own
                      "--timezone=off",
                      "sh", "-ec", f"apt-get update -qq\n{commands}", timeout=timeout)
        return result.stdout + result.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)
