"""rewy: delta-rule linear attention with the ReWY backward, a drop-in for FLA's chunk functions.

    from rewy import chunk_gated_delta_rule   # instead of fla.ops.gated_delta_rule
    o, final_state = chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)

CPU tensors run librewy's CPU backend, CUDA tensors its CUDA backend on the current stream.
The extra keyword backward="wy" selects the conventional WY pullback instead of ReWY.
"""
from . import _core  # noqa: F401  (registers the torch.ops.rewy custom ops)
from ._lib import lib as _library
from .ops import chunk_delta_rule, chunk_gated_delta_rule, chunk_gdn, chunk_gdn2, chunk_kda, gate, l2norm
from . import cp  # noqa: F401  (rewy.cp: context parallelism over torch.distributed)
from .fla_patch import patch_fla  # noqa: F401  (FLA's layers and models on rewy: rewy.patch_fla())

__version__ = "0.1.0"
__all__ = ["chunk_delta_rule", "chunk_gated_delta_rule", "chunk_gdn", "chunk_kda", "chunk_gdn2",
           "l2norm", "gate", "library_version", "library_path", "has_cuda"]


def library_version():
    """librewy's version string (loads the library)."""
    return _library().rewy_version().decode()


def library_path():
    return _library().path


def has_cuda():
    """True when the loaded librewy was built with the CUDA backend."""
    return bool(_library().rewy_has_cuda())
