"""The Keras layers of crf_lr, under one name as in bert4keras:

    >>> from crf_lr.layers import ConditionalRandomField, EfficientGlobalPointer
"""
from crf_lr.model.crf import ConditionalRandomField
from crf_lr.model.global_pointer import EfficientGlobalPointer, GlobalPointer

__all__ = ['ConditionalRandomField', 'GlobalPointer', 'EfficientGlobalPointer']
