"""Every lazily exported name of ``crf_lr`` resolves, and the data modules and the argument checks
shared with Keras 3 (``crf_lr.model.checks``) stay TensorFlow-free."""
import subprocess
import sys

import crf_lr


def test_every_public_name_resolves():
    for name in crf_lr.__all__:
        assert getattr(crf_lr, name).__name__ == name


def test_data_and_metric_modules_do_not_import_tensorflow():
    code = ('import sys, crf_lr, crf_lr.tagging, crf_lr.evaluation.metrics, crf_lr.datasets, '
            'crf_lr.data.batching, crf_lr.decoding.spans, crf_lr.model.checks, '
            'crf_lr.training.task_model\nprint("tensorflow" in sys.modules)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == 'False', out.stderr
