"""``crf_lr.graph_optimisation`` is :mod:`crf_lr.speed.graph_optimisation` (moved there; this name
stays for the README). Importing it gives the module itself, so its attributes, monkeypatching
and ``mock.patch`` reach the real one.
"""
import sys

from crf_lr.speed import graph_optimisation as _moved

sys.modules[__name__] = _moved
