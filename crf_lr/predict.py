"""``crf_lr.predict`` is :mod:`crf_lr.serving.predict` (moved there; this name stays for the README
and ``python -m crf_lr.predict``). Importing it gives the module itself, so its attributes,
monkeypatching and ``mock.patch`` reach the real one.
"""
import sys

from crf_lr.serving import predict as _moved

if __name__ == '__main__':
    _moved.main()            # returns the records it wrote (for tests), not an exit status
else:
    sys.modules[__name__] = _moved
