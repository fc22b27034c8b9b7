# SPDX-License-Identifier: MPL-2.0
"""Helpers for the Python package's tests: gst-launch-1.0 pipelines and
the example programs in child processes (each stopped by its pid at the
end; a critical of GLib or GStreamer in one fails the test:
glib_checks.py), unique channel names, reference checksums."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from glib_checks import assert_no_glib_complaints, checked_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
LIMIT = 60


def unique_channel(tag):
    return f"py-{tag}-{os.getpid()}-{secrets.token_hex(4)}"


class Child:
    """A child process whose output is collected; killed (by its pid) if it
    is still running when the test ends."""

    def __init__(self, argv, env=None):
        self.argv = argv
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=checked_env(env))
        self.stdout = self.stderr = ""

    def finish(self, timeout=LIMIT):
        self.stdout, self.stderr = self.process.communicate(timeout=timeout)
        assert_no_glib_complaints(" ".join(self.argv), self.stderr)
        return self

    @property
    def code(self):
        return self.process.returncode

    def assert_success(self, what):
        assert self.code == 0, f"{what} failed ({self.code}):\n{self.stdout}\n{self.stderr}"

    def checksums(self):
        """The SHA-1s checksumsink or the examples printed, in order."""
        sums = []
        for line in self.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and ":" in parts[0] and len(parts[1]) == 40:
                sums.append(parts[1])
            else:
                sums += [p[5:] for p in parts if p.startswith("sha1=")]
        return sums

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def children():
    started = []

    def start(argv, env=None):
        child = Child(argv, env)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()


def channels_tool():
    """The cudaipc-channels command: $CUDAIPC_CHANNELS, else the one cargo
    built beside the plugin (scripts/python-tests.sh builds it)."""
    return os.environ.get("CUDAIPC_CHANNELS") or str(ROOT / "target" / "debug" / "cudaipc-channels")


def remove_stale(channel):
    """Removes what a process killed by a signal left of `channel` in the
    shm folder (`cudaipc-channels remove-stale CHANNEL`), so that a test
    leaves no file behind; fails if nothing stale of it was there."""
    done = subprocess.run([channels_tool(), "remove-stale", channel], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=checked_env(), timeout=LIMIT)
    assert done.returncode == 0 and f"removed stale channel '{channel}'" in done.stdout, \
        f"cudaipc-channels remove-stale {channel} ({done.returncode}):\n{done.stdout}\n{done.stderr}"


def gst(pipeline, prefix=()):
    return [*prefix, "gst-launch-1.0", "-q", *pipeline.split()]


def example(name, *args):
    return [sys.executable, str(EXAMPLES / name), *args]


def reference_checksums(source):
    done = Child(gst(f"{source} ! checksumsink")).finish()
    done.assert_success("reference pipeline")
    return done.checksums()
