"""``crf_lr.tagger`` is :mod:`crf_lr.serving.tagger` (moved there; this name stays for the README).
Importing it gives the module itself, so its attributes, monkeypatching and ``mock.patch`` reach
the real one.
"""
import sys

from crf_lr.serving import tagger as _moved

sys.modules[__name__] = _moved
