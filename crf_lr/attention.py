"""``crf_lr.attention`` is :mod:`crf_lr.speed.attention` (moved there; this name stays for the
README). Importing it gives the module itself, so its attributes, monkeypatching and
``mock.patch`` reach the real one.
"""
import sys

from crf_lr.speed import attention as _moved

sys.modules[__name__] = _moved
