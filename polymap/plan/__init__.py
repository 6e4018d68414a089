"""Tiling and fusion of einsum chains under an on-chip capacity (issue 11's planner).

The package is callable as its planner: ``polymap.plan(program, "16K", links=...)`` is
``polymap.plan.planner.plan`` (the API issue 11 names), while its modules stay importable
as ``polymap.plan.planner``, ``polymap.plan.frontier`` and so on."""

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from polymap.plan.planner import plan

        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
