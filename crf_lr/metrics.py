"""``crf_lr.metrics`` is :mod:`crf_lr.evaluation.metrics` (moved there; this name stays for the
README). Importing it gives the module itself, so its attributes, monkeypatching and
``mock.patch`` reach the real one.
"""
import sys

from crf_lr.evaluation import metrics as _moved

sys.modules[__name__] = _moved
