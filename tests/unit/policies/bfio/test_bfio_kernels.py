"""The compiled solver kernels leave the process fit for a vLLM CPU worker to start in."""

from __future__ import annotations

import sys

from policies.bfio import kernels


def test_every_attribute_of_numba_and_llvmlite_with_a_dict_answers_vars_with_a_mapping() -> None:
    """vLLM's CPU platform calls ``vars(value).get(...)`` on every module attribute that has a ``__dict__``
    when a worker starts; with numba loaded, llvmlite's FFI library object answered with a C function
    wrapper and the worker failed (kernels._answer_vllm_module_scan). Only the modules the kernels bring
    in are scanned: what other libraries hold is theirs to answer."""
    kernels.warm_up()
    assert "llvmlite.binding.ffi" in sys.modules
    odd = []
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in {"numba", "llvmlite"}:
            continue
        namespace = getattr(module, "__dict__", None)
        for attr, value in list((namespace or {}).items()):
            if hasattr(value, "__dict__"):
                try:
                    found = vars(value)
                except TypeError:
                    continue
                if not hasattr(found, "get"):
                    odd.append(f"{name}.{attr}")
    assert odd == []
