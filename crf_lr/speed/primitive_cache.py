"""The size of oneDNN's cache of the kernels it compiles per product shape (its primitives), read
from ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` when the process's first primitive is made.

Training and ``crf_lr.predict`` see the shapes of one corpus: importing crf_lr sets 8,192
(:func:`size_for_training`), so that a bf16 run of many batch lengths keeps its kernels rather
than compiling them again every epoch (oneDNN's default 1,024 holds about 45 lengths' worth;
docs/performance.md, "The first epoch against a steady one"). A server sees shapes without end
(each batch of windows another): ``crf_lr.serve`` keeps oneDNN's 1,024 (:func:`size_for_serving`),
since every cached primitive holds memory: under random request shapes, 8,192 grew a server
from 0.9 to 3.5 GB in 3 minutes where 1,024 levelled off at 1.7 GB (docs/serving.md). A value
the user set is kept in both.

    >>> size_for_serving()        # in a server, before its model's first product
    '1024'
"""
import os

VARIABLE = 'ONEDNN_PRIMITIVE_CACHE_CAPACITY'
SET_BY_CRF_LR = 'CRF_LR_SET_PRIMITIVE_CACHE'    # the value crf_lr set, inherited by children
TRAINING_CAPACITY = 8192
SERVING_CAPACITY = 1024                         # oneDNN's own default


def size_for_training():
    """Set :data:`VARIABLE` to :data:`TRAINING_CAPACITY` where it is unset (importing crf_lr
    calls it before TensorFlow loads), and :data:`SET_BY_CRF_LR` to say so: a process started
    from this one (a server from a notebook) inherits both and knows the value is crf_lr's."""
    if VARIABLE not in os.environ:
        os.environ[VARIABLE] = os.environ[SET_BY_CRF_LR] = str(TRAINING_CAPACITY)


def size_for_serving():
    """:data:`VARIABLE` back to :data:`SERVING_CAPACITY` where it holds what crf_lr set, here or
    in a parent process (a value the user set is kept, unless it equals the one a parent that
    imported crf_lr set: the two cannot be told apart); the value the process will use. Call
    it before the first product."""
    if os.environ.get(VARIABLE) == os.environ.get(SET_BY_CRF_LR, ''):
        os.environ[VARIABLE] = os.environ[SET_BY_CRF_LR] = str(SERVING_CAPACITY)
    return os.environ.get(VARIABLE, str(SERVING_CAPACITY))
