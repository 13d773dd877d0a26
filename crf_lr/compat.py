"""TensorFlow and bert4keras, loaded together and fixed for TF >= 2.11 (tested on TF 2.21).

Every module of crf_lr that needs TensorFlow imports it from here, so the fixes
(:mod:`crf_lr.patches.fixes`) and the speed patches (:mod:`crf_lr.speed.attention`,
:mod:`crf_lr.speed.layer_norm`, :mod:`crf_lr.speed.fused_kernels`) are applied once, before any
user code touches bert4keras (``python -m crf_lr.patches`` lists them):

    >>> from crf_lr.compat import tf, keras, K
    >>> from bert4keras.models import build_transformer_model   # now works on TF 2.21
"""
import importlib.util

import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)

if crf_lr.keras3_came_first():
    raise ImportError('crf_lr must be imported before TensorFlow loads Keras 3: its tf-keras side '
                      '(bert4keras, crf_lr.layers, the task scripts) needs TF_USE_LEGACY_KERAS=1 '
                      'when TensorFlow starts. Import crf_lr before keras and tensorflow, or set '
                      'TF_KERAS=1 and TF_USE_LEGACY_KERAS=1 before starting Python; with Keras 3 '
                      'use crf_lr.keras3 alone.')

# Installed with --no-deps: their declared requirements (bert4keras: keras<=2.3.1; tf-keras: the
# tensorflow wheel) conflict with tensorflow-cpu (setup.py's TensorFlow on x86-64), so setup.py
# cannot list them.
NO_DEPS_REQUIREMENTS = {'tf_keras': 'tf-keras==2.21.0', 'bert4keras': 'bert4keras==0.11.5'}


def check_no_deps_requirements(requirements=NO_DEPS_REQUIREMENTS):
    """Raise one ImportError sentence saying how to install what pip could not.

        >>> check_no_deps_requirements()          # silent when tf-keras and bert4keras are there
    """
    missing = [pin for module, pin in requirements.items()
               if importlib.util.find_spec(module) is None]
    if missing:
        raise ImportError(f'crf_lr needs {" and ".join(missing)}, which pip cannot install as '
                          f'dependencies (their declared requirements conflict with '
                          f'tensorflow-cpu): run pip install --no-deps {" ".join(missing)}, or '
                          f'make install')


check_no_deps_requirements()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import bert4keras.backend  # noqa: F401,E402  (points sys.modules['keras'] at tf.keras)
from bert4keras.backend import K, keras  # noqa: E402
from crf_lr.patches.fixes import flat_dense, without_autotune  # noqa: E402
from crf_lr.patches.fixes import install as _install_fixes  # noqa: E402
from crf_lr.speed.attention import install as _install_batched_attention  # noqa: E402
from crf_lr.speed.fused_kernels import install as _install_fused_kernels  # noqa: E402
from crf_lr.speed.layer_norm import install as _install_closed_form_layer_norm  # noqa: E402
from crf_lr.speed.shared_layers import install as _install_shared_layer_traces  # noqa: E402

_install_fixes()
_install_batched_attention()
_install_closed_form_layer_norm()
_install_shared_layer_traces()
_install_fused_kernels()

__all__ = ['tf', 'keras', 'K', 'np', 'without_autotune', 'flat_dense']
