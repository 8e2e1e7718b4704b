"""rewy.patch_fla(): run FLA's own layers and models on rewy's chunk functions.

    import rewy
    undo = rewy.patch_fla()      # FLA's chunk_delta_rule, chunk_gated_delta_rule (chunk_gdn),
    ...                          # chunk_kda and chunk_gdn2 are rewy's from here on
    undo()                       # FLA's own functions again

    with rewy.patch_fla(ops=("kda",)):   # or only some operators, for a block
        loss = model(input_ids, labels=labels).loss

FLA's layers (fla.layers.gated_deltanet and the others) import their chunk function by name
out of the fla.ops packages, so replacing the function there alone would not reach them. patch_fla
replaces every reference to FLA's function held by a loaded module of the fla package (the
fla.ops packages that export it, the module that defines it, the layers that imported it,
under any name). Modules of fla imported later take rewy's function from the patched fla.ops
package, and undo() restores those too. Modules outside fla are left alone.

This is the one change a user makes instead of editing imports: rewy's functions take FLA's
signatures and options (python/README.md lists them), so the layers run unchanged.
"""
import functools
import importlib
import sys

from . import ops as _ops

# operator -> (the fla.ops package that exports it, its public names there, rewy's function)
_FLA_FUNCTIONS = {
    "delta": ("fla.ops.delta_rule", ("chunk_delta_rule",), _ops.chunk_delta_rule),
    "gdn": ("fla.ops.gated_delta_rule", ("chunk_gated_delta_rule", "chunk_gdn"), _ops.chunk_gated_delta_rule),
    "kda": ("fla.ops.kda", ("chunk_kda",), _ops.chunk_kda),
    "gdn2": ("fla.ops.gdn2", ("chunk_gdn2",), _ops.chunk_gdn2),
}


def _fla_modules():
    """The loaded modules of the fla package (a snapshot: imports may add to sys.modules)."""
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name == "fla" or name.startswith("fla."))]


def _swap(old_to_new):
    """In every loaded fla module, replace each attribute that is a key of old_to_new (by
    identity) with its value. Returns the replacements made as (module, name, old, new)."""
    done = []
    for mod in _fla_modules():
        try:
            items = list(vars(mod).items())
        except TypeError:   # a module object without a __dict__
            continue
        for name, value in items:
            new = old_to_new.get(id(value))
            if new is not None and new[0] is value:
                setattr(mod, name, new[1])
                done.append((mod.__name__, name, value, new[1]))
    return done


class FlaPatch:
    """What patch_fla replaced. Call it, call undo(), or leave its `with` block to put FLA's
    functions back (in every fla module, including those imported after the patch)."""

    def __init__(self, pairs, replaced, skipped):
        self._pairs = pairs          # [(FLA's function, its replacement)]
        self.replaced = replaced     # [(module name, attribute name)] changed by the patch
        self.skipped = skipped       # {operator: why} not patched (e.g. this FLA has no gdn2)
        self.active = True

    def undo(self):
        if self.active:
            _swap({id(new): (new, old) for old, new in self._pairs})
            self.active = False

    __call__ = undo

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.undo()
        return False

    def __repr__(self):
        state = "active" if self.active else "undone"
        return f"<rewy FlaPatch {state}: {len(self.replaced)} references replaced, skipped {self.skipped}>"


_OPTIONS = ("disable_recompute", "backward", "chunk_size")   # rewy's keywords that patch_fla may set


def _with_options(fn, options):
    """fn with rewy keyword defaults (a keyword the caller passes wins)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        return fn(*args, **{**options, **kwargs})
    return call


def patch_fla(ops=None, functions=None, options=None):
    """Replace FLA's chunk functions by rewy's in the loaded fla modules; returns a FlaPatch
    (call it, or use it as a context manager, to undo).

    ops: operators to patch, any of "delta", "gdn", "kda", "gdn2"; None means all four, with
        an operator this FLA does not have (gdn2 in older releases) skipped and listed in
        the result's .skipped. An operator named explicitly must exist.
    functions: optional {operator: function} to install instead of rewy's (the same
        signature as FLA's), e.g. another implementation to compare, or a wrapper.
    options: optional rewy keywords for every rewy function installed, any of
        disable_recompute (True: policy A, the chunk states saved, no recompute in the backward,
        more memory), backward ("rewy" or "wy") and chunk_size; e.g. options={"disable_recompute": True}.

    Raises ImportError when FLA (the package fla) cannot be imported, ValueError for an
    unknown operator name.
    """
    options = dict(options or {})
    for name in options:
        if name not in _OPTIONS:
            raise ValueError(f"patch_fla: options takes {', '.join(_OPTIONS)} (got {name!r})")
    explicit = ops is not None
    ops = tuple(_FLA_FUNCTIONS) if ops is None else ((ops,) if isinstance(ops, str) else tuple(ops))
    functions = dict(functions or {})
    for op in (*ops, *functions):
        if op not in _FLA_FUNCTIONS:
            raise ValueError(f"patch_fla: unknown operator {op!r} (expected one of {', '.join(_FLA_FUNCTIONS)})")
        if op not in ops:
            raise ValueError(f"patch_fla: functions names {op!r}, which ops={ops!r} leaves out")
    try:
        importlib.import_module("fla.ops")
    except ImportError as e:
        raise ImportError(f"patch_fla: FLA (the package fla) cannot be imported: {e}") from e

    pairs, skipped = [], {}
    for op in ops:
        package, names, ours = _FLA_FUNCTIONS[op]
        ours = functions[op] if op in functions else _with_options(ours, options) if options else ours
        try:
            pkg = importlib.import_module(package)
        except ImportError as e:
            if explicit:
                raise ImportError(f"patch_fla: {op}: {package} cannot be imported: {e}") from e
            skipped[op] = f"{package} cannot be imported ({e})"
            continue
        for name in names:
            theirs = getattr(pkg, name, None)
            if theirs is None:
                if explicit:
                    raise ImportError(f"patch_fla: {op}: {package} has no {name}")
                skipped.setdefault(op, f"{package} has no {name}")
            elif theirs is not ours and all(theirs is not old for old, _ in pairs):
                pairs.append((theirs, ours))
    done = _swap({id(old): (old, new) for old, new in pairs})
    return FlaPatch(pairs, [(m, n) for m, n, _, _ in done], skipped)
