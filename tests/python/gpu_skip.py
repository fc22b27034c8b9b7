# SPDX-License-Identifier: MPL-2.0
"""The GPU checks' way out where there is no GPU: SKIPPED (exit 0), or a
failure when CUDAIPC_REQUIRE_GPU=1 says a GPU must be there (exit 1)."""

import os
import sys


def skip(why):
    if os.environ.get("CUDAIPC_REQUIRE_GPU") == "1":
        print(f"FAILED: CUDAIPC_REQUIRE_GPU=1 but {why}", file=sys.stderr)
        sys.exit(1)
    print(f"SKIPPED: no CUDA device ({why})")
    sys.exit(0)
