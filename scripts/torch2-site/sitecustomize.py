"""Loaded by scripts/torch2-python into the torch 2.6 chroot's Python (via PYTHONPATH).

Debian built its torch 2.6 without libuv, and `USE_LIBUV=0` is honoured by torch's env:// and
tcp:// store paths but not by the agent-store path (TORCHELASTIC_USE_AGENT_STORE=True), which
creates its TCPStore client with the default use_libuv=True and so fails on this build with
"use_libuv was requested but PyTorch was build without libuv support". That is the path every
worker under a launcher takes. This hook makes that path honour USE_LIBUV=0 too, so unmodified
training scripts run here as they do on a torch 2.x with libuv. Real torch 2.x wheels need nothing.

The patch is applied when torch.distributed.rendezvous is imported, so Python programs that never
import torch pay nothing.
"""
import importlib.abc
import importlib.util
import os
import sys

_TARGET = "torch.distributed.rendezvous"


def _patch(module):
    original = module.TCPStore

    def tcp_store_without_libuv(*args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        return original(*args, **kwargs)

    module.TCPStore = tcp_store_without_libuv


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
