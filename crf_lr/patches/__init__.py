"""Every replacement crf_lr makes in tf-keras, bert4keras and TensorFlow, and the helper that
makes it.

    >>> from crf_lr.patches.patching import patch
"""
