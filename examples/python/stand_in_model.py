# SPDX-License-Identifier: MPL-2.0
"""What the batching examples (batching_consumer.py, many_cameras.py) share:
PyTorch, or NumPy on the host transport, to take frames and stack them, and
a stand-in model (each frame's mean value)."""

import sys


def backend(name, transport, program):
    """(from_dlpack, stack, model) of PyTorch or NumPy; `name` is auto, torch
    or numpy, `program` names the caller in the exit message when the cuda
    transport has no PyTorch with CUDA."""
    if name in ("auto", "torch"):
        try:
            import torch

            if transport == "host" or torch.cuda.is_available():
                return (torch.from_dlpack, torch.stack,
                        lambda batch: batch.flatten(1).float().mean(dim=1).tolist())
        except ImportError:
            if name == "torch":
                raise
    if transport != "host":
        sys.exit(f"{program}: frames on the cuda transport need PyTorch with CUDA")
    import numpy as np

    return np.from_dlpack, np.stack, lambda batch: batch.reshape(len(batch), -1).mean(axis=1).tolist()
