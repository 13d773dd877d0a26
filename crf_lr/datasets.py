"""``crf_lr.datasets`` was split into :mod:`crf_lr.data.ner`, :mod:`crf_lr.data.files`,
:mod:`crf_lr.data.segmentation`, :mod:`crf_lr.data.formats`, :mod:`crf_lr.data.benchmarks`; this
name re-exports their public names (the README's imports keep working). New code imports from
the wing.
"""
from crf_lr.data.ner import *  # noqa: F401,F403
from crf_lr.data.files import *  # noqa: F401,F403
from crf_lr.data.segmentation import *  # noqa: F401,F403
from crf_lr.data.formats import *  # noqa: F401,F403
from crf_lr.data.benchmarks import *  # noqa: F401,F403
