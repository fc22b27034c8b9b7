# SPDX-License-Identifier: MPL-2.0
"""What the benchmark's Python processes (bench_consumer.py,
bench_producer.py) share: their CPU clock and their common options."""

import argparse
import resource


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def argument_parser(doc):
    """A parser described by the first line of `doc`, with ``--channel``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--channel", required=True)
    return parser


def add_numpy_option(parser):
    parser.add_argument("--numpy", action="store_true", help="host transport: NumPy, no GPU")
