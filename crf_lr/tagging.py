"""``crf_lr.tagging`` was split into :mod:`crf_lr.data.tagging`, :mod:`crf_lr.data.alignment`,
:mod:`crf_lr.data.windows`; this name re-exports their public names (the README's imports keep
working). New code imports from the wing.
"""
from crf_lr.data.tagging import *  # noqa: F401,F403
from crf_lr.data.alignment import *  # noqa: F401,F403
from crf_lr.data.windows import *  # noqa: F401,F403
