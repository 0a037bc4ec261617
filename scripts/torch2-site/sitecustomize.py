"""Loaded by scripts/torch2-python into the torch 2.6 chroot's Python (via PYTHONPATH).

Debian built its torch 2.6 without libuv, and `USE_LIBUV=0` is honoured by torch's env:// and
tcp:// store paths but not by the agent-store path (TORCHELASTIC_USE_AGENT_STORE=True), which
creates its TCPStore client with the default use_libuv=True and so fails on this build with
"use_libuv was requested but PyTorch was build without libuv support". That is the path every
worker under a launcher takes. This hook makes that path honour USE_LIBUV=0 too, so unmodified
training scripts run here as they do on a torch 2.x with libuv. Real torch 2.x wheels need nothing.

Every TCPStore defaults to use_libuv=False: torch.distributed.TCPStore is replaced by a subclass
with that default when torch.distributed is imported, and so are the names that
torch.distributed.rendezvous and torch.distributed.distributed_c10d bound to the original before
(they import it from torch._C._distributed_c10d), so that torch 2.6's own torchrun runs too.
Python programs that never import torch.distributed pay nothing.

Then the sitecustomize this file shadows (ddprun's stack hook, Debian's) is loaded as if this file
were not on the path: its directory is taken off sys.path, it leaves sys.modules, and
`sitecustomize` is imported again.
"""
import importlib.abc
import importlib.util
import os
import sys

_TARGET = "torch.distributed"
_BOUND_BEFORE = ("torch.distributed.rendezvous", "torch.distributed.distributed_c10d")


def _patch(module):
    original = module.TCPStore

    class TCPStore(original):  # a subclass: isinstance(store, TCPStore) keeps working
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    TCPStore.__name__ = TCPStore.__qualname__ = "TCPStore"
    module.TCPStore = TCPStore
    for name in _BOUND_BEFORE:
        bound = sys.modules.get(name)
        if bound is not None and getattr(bound, "TCPStore", None) is original:
            bound.TCPStore = TCPStore


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


if os.environ.get("USE_LIBUV") == "0":
    sys.meta_path.insert(0, _PatchOnImport())


def _load_shadowed_sitecustomize():
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    this = sys.modules.get("sitecustomize")
    sys.path[:] = [p for p in sys.path if not (p and os.path.realpath(p) == here)]
    sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  the next one on the path
    except ImportError:
        sys.modules["sitecustomize"] = this  # none: this one stands


_load_shadowed_sitecustomize()
