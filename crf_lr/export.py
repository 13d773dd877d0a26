"""``crf_lr.export`` is :mod:`crf_lr.serving.export` (moved there; this name stays for the README
and ``python -m crf_lr.export``). Importing it gives the module itself, so its attributes,
monkeypatching and ``mock.patch`` reach the real one.
"""
import sys

from crf_lr.serving import export as _moved

if __name__ == '__main__':
    sys.exit(_moved.main())
else:
    sys.modules[__name__] = _moved
