# SPDX-License-Identifier: MPL-2.0
"""What every child process of the Python tests runs with, as the Rust
tests' children do (tests/common/children.rs): GLib aborts it on a critical
(G_DEBUG=fatal-criticals), and its stderr must hold no critical or warning
of GLib or GStreamer."""

import os
import re

_COMPLAINT = re.compile(r"(^|[\s):])(GStreamer|GLib)[-\w]*-(CRITICAL|WARNING) \*\*")


def checked_env(extra=None):
    """The environment of a child: this one, G_DEBUG=fatal-criticals added,
    then `extra`."""
    flags = os.environ.get("G_DEBUG", "")
    env = {**os.environ, "G_DEBUG": f"{flags},fatal-criticals" if flags else "fatal-criticals"}
    env.update(extra or {})
    return env


def glib_complaints(stderr):
    """The lines of `stderr` where GLib or GStreamer logged a critical or a
    warning."""
    return [line for line in (stderr or "").splitlines() if _COMPLAINT.search(line)]


def assert_no_glib_complaints(what, stderr):
    complaints = glib_complaints(stderr)
    assert not complaints, (f"{what}: GLib or GStreamer complained:\n" + "\n".join(complaints)
                            + f"\n--- stderr\n{stderr}")
