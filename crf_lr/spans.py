"""``crf_lr.spans`` is :mod:`crf_lr.decoding.spans` (moved there; this name stays for the README).
Importing it gives the module itself, so its attributes, monkeypatching and ``mock.patch`` reach
the real one.
"""
import sys

from crf_lr.decoding import spans as _moved

sys.modules[__name__] = _moved
