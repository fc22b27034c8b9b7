# SPDX-License-Identifier: MPL-2.0
"""Runs gpu_check.py and gpu_copy_check.py: the cuda transport with CuPy
where there is a GPU; they print SKIPPED otherwise (and fail with
CUDAIPC_REQUIRE_GPU=1)."""

import subprocess
import sys
from pathlib import Path

import pytest
from glib_checks import assert_no_glib_complaints, checked_env


@pytest.mark.parametrize("check", ["gpu_check.py", "gpu_copy_check.py"])
def test_gpu_check(check):
    done = subprocess.run([sys.executable, str(Path(__file__).with_name(check))],
                          capture_output=True, text=True, timeout=600, env=checked_env())
    sys.stdout.write(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_no_glib_complaints(check, done.stderr)
    assert "SKIPPED: no CUDA device" in done.stdout or "all passed" in done.stdout
