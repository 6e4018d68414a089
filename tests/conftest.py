"""Test settings shared by the suite.

Hypothesis' per-example deadline (200 ms by default) measures the machine more than the
code: on a loaded 2-core CI machine an isl or SCIP call can pause past it. Correctness is
what the property tests check, so the deadline is off; the suite's total time is watched
by CI instead.
"""

from hypothesis import settings

settings.register_profile("polymap", deadline=None)
settings.load_profile("polymap")
