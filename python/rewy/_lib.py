"""ctypes binding of librewy (include/rewy.h), nothing else.

The structs below mirror rewy.h field for field; enums are C ints. tests/python/test_abi.py
compares every field's offset, size and kind and every enum value with the C compiler's.
The library never allocates: callers pass workspace and saved buffers (torch uint8 tensors
in this package).
"""
import ctypes
import os
import struct
from ctypes import POINTER, Structure, byref, c_char_p, c_double, c_float, c_int, c_size_t, c_void_p, sizeof

# rewy_status
OK = 0
(ERR_NULL_POINTER, ERR_MISALIGNED, ERR_BAD_SHAPE, ERR_UNSUPPORTED_DIM, ERR_BAD_CHUNK, ERR_BAD_DTYPE,
 ERR_BAD_OP, ERR_BAD_SEQLENS, ERR_BAD_ENUM, ERR_WORKSPACE, ERR_BACKEND, ERR_MISMATCH) = range(1, 13)
# rewy_op
OP_DELTANET, OP_GDN, OP_KDA, OP_GDN2 = 0, 1, 2, 3
# rewy_dtype (F64: CPU backend only; gates and states are double too)
F32, BF16, F16, F64 = 0, 1, 2, 3
# rewy_policy
POLICY_R, POLICY_A = 0, 1
# rewy_bwd_algo
BWD_REWY, BWD_WY = 0, 1
# rewy_backend
BACKEND_CPU, BACKEND_CUDA = 0, 1


class Config(Structure):
    """struct rewy_config"""
    _fields_ = [
        ("op", c_int), ("backend", c_int), ("dtype", c_int),
        ("B", c_int), ("T", c_int), ("H", c_int), ("HV", c_int), ("K", c_int), ("V", c_int),
        ("chunk_size", c_int),
        ("scale", c_float),
        ("cu_seqlens", c_void_p),
        ("cu_seqlens_host", c_void_p),
        ("num_seqs", c_int),
        ("policy", c_int),
        ("bwd_algo", c_int),
        ("state_v_first", c_int),
        ("stream", c_void_p),
    ]


class FwdParams(Structure):
    """struct rewy_fwd_params"""
    _fields_ = [("cfg", Config)] + [(n, c_void_p) for n in (
        "q", "k", "v", "g", "beta", "b", "w", "h0", "o", "ht", "saved", "workspace")] + [
        ("workspace_bytes", c_size_t), ("saved_bytes", c_size_t)]


class BwdParams(Structure):
    """struct rewy_bwd_params"""
    _fields_ = [("cfg", Config)] + [(n, c_void_p) for n in (
        "q", "k", "v", "g", "beta", "b", "w", "h0", "saved")] + [("saved_bytes", c_size_t)] + [
        (n, c_void_p) for n in (
        "do_", "dht", "dq", "dk", "dv", "dg", "dbeta", "db", "dw", "dh0", "workspace")] + [
        ("workspace_bytes", c_size_t)]


def _tail_format(params):
    """The struct-module format of the fields of a params struct after its config: the pointers
    ("P") and sizes ("N") in order, native alignment as the C compiler's (all 8-byte fields)."""
    names, types = zip(*params._fields_[1:])
    fmt = struct.Struct("@" + "".join({c_void_p: "P", c_size_t: "N"}[t] for t in types))
    # the packed tail must lie where ctypes (and so the C compiler) puts those fields
    assert getattr(params, names[0]).offset == sizeof(Config) and sizeof(params) == sizeof(Config) + fmt.size
    return fmt


_FWD_TAIL, _BWD_TAIL = _tail_format(FwdParams), _tail_format(BwdParams)


# The per-call constructors of the params structs. ctypes' own constructor converts and stores
# each of the ~15-20 fields separately (about 2-3 µs a call); packing the fields after the config
# with one struct.pack and copying config + tail into the struct in one go costs a third of that.
def fwd_params(cfg, *fields):
    """FwdParams from the config's bytes (bytes(Config)) and every later field in declaration
    order (q k v g beta b w h0 o ht saved workspace workspace_bytes saved_bytes) as an int,
    0 for NULL; all of them, in order, are required."""
    return FwdParams.from_buffer_copy(cfg + _FWD_TAIL.pack(*fields))


def bwd_params(cfg, *fields):
    """BwdParams as fwd_params: q k v g beta b w h0 saved saved_bytes do_ dht dq dk dv dg dbeta db dw
    dh0 workspace workspace_bytes."""
    return BwdParams.from_buffer_copy(cfg + _BWD_TAIL.pack(*fields))


def _candidates():
    env = os.environ.get("REWY_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "librewy.so"),                              # installed copy
            os.path.join(here, os.pardir, os.pardir, "build", "librewy.so")]  # repo checkout


def _load():
    tried = []
    for path in _candidates():
        path = os.path.normpath(path)
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            break
        tried.append(path)
    else:
        raise OSError("librewy.so not found (tried: %s); run `make lib` in the rewy repository "
                      "or set REWY_LIBRARY to its path" % ", ".join(tried))
    lib.path = path
    st = c_int  # rewy_status
    for name, argtypes in [("rewy_saved_size", [POINTER(Config), POINTER(c_size_t)]),
                           ("rewy_fwd_workspace_size", [POINTER(Config), POINTER(c_size_t)]),
                           ("rewy_bwd_workspace_size", [POINTER(Config), POINTER(c_size_t)]),
                           ("rewy_forward", [POINTER(FwdParams)]),
                           ("rewy_backward", [POINTER(BwdParams)]),
                           ("rewy_validate_fwd", [POINTER(FwdParams), c_char_p, c_size_t]),
                           ("rewy_validate_bwd", [POINTER(BwdParams), c_char_p, c_size_t])]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, st
    lib.rewy_l2norm_forward.argtypes = [c_int, c_int, ctypes.c_int64, c_int, ctypes.c_float] + [c_void_p] * 4
    lib.rewy_l2norm_backward.argtypes = [c_int, c_int, ctypes.c_int64, c_int] + [c_void_p] * 5
    lib.rewy_l2norm_forward.restype = lib.rewy_l2norm_backward.restype = st
    i64 = ctypes.c_int64
    lib.rewy_gate_forward.argtypes = [c_int, c_int, i64, c_int, c_int] + [c_void_p] * 5
    lib.rewy_gate_backward.argtypes = [c_int, c_int, i64, c_int, c_int] + [c_void_p] * 8 + [c_size_t, c_void_p]
    lib.rewy_gate_workspace_size.argtypes = [i64, c_int, c_int, POINTER(c_size_t)]
    lib.rewy_gate_forward.restype = lib.rewy_gate_backward.restype = lib.rewy_gate_workspace_size.restype = st
    lib.rewy_pullback_flops.argtypes, lib.rewy_pullback_flops.restype = [c_int, c_int, c_int, c_int], c_double
    lib.rewy_strerror.argtypes, lib.rewy_strerror.restype = [c_int], c_char_p
    lib.rewy_version.argtypes, lib.rewy_version.restype = [], c_char_p
    lib.rewy_has_cuda.argtypes, lib.rewy_has_cuda.restype = [], c_int
    return lib


_LIB = None


def lib():
    """The loaded library (loaded on first use, so that `import rewy` never fails)."""
    global _LIB
    if _LIB is None:
        _LIB = _load()
    return _LIB


# Arguments the library rejects (its validation names them) raise TypeError for element
# types and ValueError for everything else, a backend the build lacks included. Only a
# call that passed validation and then failed on the device raises RuntimeError.
_TYPE_ERRORS = (ERR_BAD_DTYPE,)


def error(status, message, device_failure=False):
    text = "rewy: %s (%s)" % (message, lib().rewy_strerror(status).decode())
    if device_failure:
        return RuntimeError(text)
    if status in _TYPE_ERRORS:
        return TypeError(text)
    return ValueError(text)


def check(status, params, validate):
    """Raise the library's own one-line message for a failed call on params."""
    if status == OK:
        return
    buf = ctypes.create_string_buffer(512)
    vstatus = validate(byref(params), buf, len(buf))
    if vstatus == OK:  # the arguments are fine: the device failed
        raise error(status, lib().rewy_strerror(status).decode(), device_failure=True)
    raise error(vstatus, buf.value.decode() or lib().rewy_strerror(vstatus).decode())


def size_query(fn, cfg):
    n = c_size_t(0)
    status = fn(byref(cfg), byref(n))
    return status, n.value
