"""``crf_lr.optimizers`` is :mod:`crf_lr.training.optimizers` (moved there; this name stays for the
README). Importing it gives the module itself, so its attributes, monkeypatching and
``mock.patch`` reach the real one.
"""
import sys

from crf_lr.training import optimizers as _moved

sys.modules[__name__] = _moved
