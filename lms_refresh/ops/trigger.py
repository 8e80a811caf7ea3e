"""Whether this start of the service is a timer's: asked of systemd about this start, never read from $TRIGGER_UNIT.

systemd 252 and 257 set $TRIGGER_UNIT (and $TRIGGER_TIMER_*_USEC) once a timer
has started the service, and keep passing the same values to every later start of
it, a `systemctl start` by hand included, until the unit is unloaded: the
variables name the first timer that started the loaded unit, not this start.
What is true of this start only is in systemd's own timestamps: a timer started
it if one of the timers that trigger it (the unit's TriggeredBy=) last elapsed
after the service's previous activation ended and no later than this one began.
A timer that elapses while a start by hand runs elapses after it began; a start
by hand after a timer's run begins after that run ended.

They are read over the system bus with busctl (the unit's sandbox allows
AF_UNIX, and reading properties needs no privilege). When they cannot be read
— no bus, no busctl, another service manager — the start counts as one by hand:
it fails fast rather than blocking an operator for the retries' length.
"""

import json
import re
import subprocess

_UNITS = "/org/freedesktop/systemd1/unit/"


def bus_path(unit):
    """Return the D-Bus object path of `unit` (systemd escapes every byte but [A-Za-z0-9] as _XX)."""
    return _UNITS + "".join(char if re.fullmatch(r"[A-Za-z0-9]", char) else "".join(f"_{byte:02x}" for byte in
                                                                                   char.encode())
                            for char in unit)


def own_unit(cgroup="/proc/self/cgroup"):
    """Return the name of the service unit this process runs in (its cgroup's last part), or None."""
    try:
        with open(cgroup, encoding="utf-8") as handle:
            for line in handle:
                last = line.rstrip("\n").rsplit("/", 1)[-1]
                if last.endswith(".service"):
                    return last
    except OSError:
        return None
    return None


def busctl_property(path, interface, name, timeout=10):
    """Return the value of systemd's property `name` of `interface` at object `path` (busctl --json), or raise
    OSError/ValueError/subprocess.SubprocessError."""
    done = subprocess.run(["busctl", "--system", "--json=short", "get-property", "org.freedesktop.systemd1", path,
                           interface, name], capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(done.stdout)["data"]


def timer_started(environ, read=busctl_property, unit=None):
    """Return (the name of the timer that started this activation of the service, or None; why it could not be
    told, or None). `read(path, interface, name)` reads one property (busctl_property)."""
    unit = unit or own_unit()
    if unit is None:
        return None, "this process runs in no service unit"
    try:
        path = bus_path(unit)
        invocation = bytes(read(path, "org.freedesktop.systemd1.Unit", "InvocationID")).hex()
        if environ.get("INVOCATION_ID") and invocation != environ["INVOCATION_ID"]:
            return None, f"systemd names another activation of {unit} than this one"
        began = int(read(path, "org.freedesktop.systemd1.Unit", "InactiveExitTimestampMonotonic"))
        previous_end = int(read(path, "org.freedesktop.systemd1.Unit", "InactiveEnterTimestampMonotonic"))
        for timer in read(path, "org.freedesktop.systemd1.Unit", "TriggeredBy"):
            if not timer.endswith(".timer"):
                continue
            elapsed = int(read(bus_path(timer), "org.freedesktop.systemd1.Timer", "LastTriggerUSecMonotonic"))
            # 0: not elapsed since the boot (a Persistent= timer's earlier elapse has no monotonic time).
            if 0 < elapsed and previous_end <= elapsed <= began:
                return timer, None
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as error:
        return None, f"systemd could not be asked over the system bus ({type(error).__name__}: {error})"
    return None, None
