"""``crf_lr.losses`` is :mod:`crf_lr.model.losses` (moved there; this name stays for the README).
Importing it gives the module itself, so its attributes, monkeypatching and ``mock.patch`` reach
the real one.
"""
import sys

from crf_lr.model import losses as _moved

sys.modules[__name__] = _moved
