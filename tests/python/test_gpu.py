# SPDX-License-Identifier: MPL-2.0
"""Runs gpu_check.py: the cuda transport with CuPy where there is a GPU;
it prints SKIPPED otherwise (and fails with CUDAIPC_REQUIRE_GPU=1)."""

import subprocess
import sys
from pathlib import Path

from glib_checks import assert_no_glib_complaints, checked_env


def test_gpu_check():
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("gpu_check.py"))],
                          capture_output=True, text=True, timeout=600, env=checked_env())
    sys.stdout.write(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_no_glib_complaints("gpu_check.py", done.stderr)
    assert "SKIPPED: no CUDA device" in done.stdout or "all passed" in done.stdout
