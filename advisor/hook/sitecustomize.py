"""Loaded by every Python process `oom-doctor run` starts (PYTHONPATH): arm torch when it is imported.

Nothing happens unless the program imports torch itself: this module never imports it. When it
does, memory history is recorded from CUDA's first use and an OOM observer dumps a snapshot — PyTorch's own recipe
(torch.cuda.memory._record_memory_history, torch._C._cuda_attach_out_of_memory_observer, then
_dump_snapshot; docs/source/torch_cuda_memory.md). Any failure here is swallowed: the user's run
must behave exactly as without us. A sitecustomize of the user's own is still run afterwards.
"""

import importlib.abc
import importlib.util
import os
import sys

_TARGET = os.environ.get("OOM_DOCTOR_SNAPSHOT")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _path():
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK")
    root, ext = os.path.splitext(_TARGET)
    return f"{root}.rank{rank}{ext}" if rank not in (None, "") else _TARGET


def _arm(torch):
    """Queue the recording for when the program itself initialises CUDA: we never create a context,
    and processes that multiprocessing started (DataLoader workers) are left alone."""
    try:
        import multiprocessing
        if multiprocessing.parent_process() is None:
            torch.cuda._lazy_call(lambda: _record(torch))
    except Exception:
        pass


def _record(torch):
    try:                                     # an exception here would surface as the program's own
        torch.cuda.memory._record_memory_history(max_entries=int(os.environ.get("OOM_DOCTOR_MAX_ENTRIES", "100000")))

        def observer(device, alloc, device_alloc, device_free):
            try:
                torch.cuda.memory._dump_snapshot(_path())
                sys.stderr.write(f"oom-doctor: memory snapshot written to {_path()}\n")
            except Exception:
                pass
        torch._C._cuda_attach_out_of_memory_observer(observer)
    except Exception:
        pass


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Wraps the loader of `torch` so that _arm runs once the module has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _arm(module)
        spec.loader.exec_module = exec_module
        return spec


if _TARGET:
    sys.meta_path.insert(0, _AfterTorch())


def _chain():
    """Run the next sitecustomize on the path (the user's or the distribution's), as Python would have."""
    me = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    except Exception:
        pass
    finally:
        sys.path[:] = saved
        if me is not None:
            sys.modules["sitecustomize"] = me


_chain()
