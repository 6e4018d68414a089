"""SCIP over every model of models/ with its NLP relaxation (Ipopt, CppAD) on and off, RINS
off in both (as polymap ran it from 2026-11-27): 2026-11-27's script
(``2026-11-27-scip-without-rins.py``, loaded from beside this file) with these two settings,
one after the other in alternating rounds so that the host's load falls on both alike.
Run from the repository root: ``python docs/benchmarks/2026-11-29-scip-nlp-off.py [ROUNDS]``.
"""

import importlib.util
from pathlib import Path

path = Path(__file__).with_name("2026-11-27-scip-without-rins.py")
spec = importlib.util.spec_from_file_location("scip_without_rins", path)
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
script.SETTINGS = {
    "nlp off, rins off": {"nlp/disable": True, "heuristics/rins/freq": -1},
    "nlp on, rins off": {"nlp/disable": False, "heuristics/rins/freq": -1},
}

if __name__ == "__main__":
    script.main()
