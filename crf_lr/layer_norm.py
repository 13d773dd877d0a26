"""``crf_lr.layer_norm`` is :mod:`crf_lr.speed.layer_norm` (moved there; this name stays for the
README). Importing it gives the module itself, so its attributes, monkeypatching and
``mock.patch`` reach the real one.
"""
import sys

from crf_lr.speed import layer_norm as _moved

sys.modules[__name__] = _moved
