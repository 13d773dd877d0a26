"""crf_lr.speed.graph_optimisation: the lighter options (one round of grappler's passes, no memory
or layout optimiser, explicit settings kept), set for this thread within the block and restored
after it (an exception, the executor type and tf.config changes within it included), off with a
GPU or light_graph_optimisation(False), where runs.fit's loop calls its step (and not where it
traces it), and honoured by TensorFlow itself (grappler's own log, in a fresh process). That the
lightly optimised step computes the same losses: tests/training/test_runs.py (train_steps against
train_on_batch, every head)."""
import os
import subprocess
import sys
import threading
import textwrap

import numpy as np
import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)
from crf_lr.speed.graph_optimisation import (available, light_graph_optimisation, lighter,
                                             optimised_lightly)


def _call_options():
    """This thread's function-call options as a ConfigProto's rewrite options."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context
    serialized = context.context().function_call_options.config_proto_serialized
    return config_pb2.ConfigProto.FromString(serialized).graph_options.rewrite_options


def _is_light(rewrite):
    from tensorflow.core.protobuf import rewriter_config_pb2
    options = rewriter_config_pb2.RewriterConfig
    return (rewrite.meta_optimizer_iterations == options.ONE
            and rewrite.memory_optimization == options.NO_MEM_OPT
            and rewrite.layout_optimizer == options.OFF)


def test_the_pinned_tensorflow_has_the_per_thread_call_options():
    assert available()


def test_lighter_takes_one_round_without_memory_and_layout_and_keeps_explicit_settings():
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    options = rewriter_config_pb2.RewriterConfig
    config = config_pb2.ConfigProto(allow_soft_placement=True)
    config.graph_options.rewrite_options.constant_folding = options.OFF
    light = lighter(config)
    assert _is_light(light.graph_options.rewrite_options)
    assert light.allow_soft_placement
    assert light.graph_options.rewrite_options.constant_folding == options.OFF
    assert not _is_light(config.graph_options.rewrite_options)         # a copy
    explicit = config_pb2.ConfigProto()
    rewrite = explicit.graph_options.rewrite_options
    rewrite.meta_optimizer_iterations = options.TWO
    rewrite.memory_optimization = options.MANUAL
    rewrite.layout_optimizer = options.ON
    assert lighter(explicit) == explicit


def test_the_block_sets_this_threads_options_and_restores_them():
    from tensorflow.python.eager import context
    before = _call_options()
    assert not _is_light(before)
    seen = []
    with optimised_lightly():
        assert _is_light(_call_options())
        thread = threading.Thread(target=lambda: seen.append(_is_light(_call_options())))
        thread.start()
        thread.join()
    assert seen == [False]                               # other threads keep TensorFlow's
    assert _call_options() == before
    with light_graph_optimisation(False), optimised_lightly():
        assert _call_options() == before
    with pytest.raises(RuntimeError), optimised_lightly():
        raise RuntimeError('restored all the same')
    assert _call_options() == before
    with context.function_executor_type('SINGLE_THREADED_EXECUTOR'), optimised_lightly():
        assert context.context().function_call_options.executor_type == 'SINGLE_THREADED_EXECUTOR'
        assert _is_light(_call_options())


def test_a_tf_config_change_within_the_block_stays_after_it():
    from tensorflow.core.protobuf import rewriter_config_pb2
    from crf_lr.compat import tf
    folding = tf.config.optimizer.get_experimental_options().get('constant_folding')
    try:
        with optimised_lightly():
            tf.config.optimizer.set_experimental_options({'constant_folding': False})
        assert _call_options().constant_folding == rewriter_config_pb2.RewriterConfig.OFF
    finally:                                        # None: TensorFlow's default again
        tf.config.optimizer.set_experimental_options({'constant_folding': folding})


def test_with_a_gpu_tensorflows_options_stay(monkeypatch):
    import crf_lr.speed.graph_optimisation as graph_optimisation
    monkeypatch.setattr(graph_optimisation, '_sees_gpu', lambda: True)
    before = _call_options()
    with optimised_lightly():
        assert _call_options() == before


def test_train_steps_trace_the_step_outside_the_block_and_call_it_within(monkeypatch):
    """The trace sees TensorFlow's options (a graph traced within the lighter ones would keep
    them for the functions it calls); every call of the step sees the lighter ones."""
    import crf_lr.training.loop as runs
    from crf_lr.compat import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    model.compile(keras.optimizers.legacy.SGD(0.1), loss='mse')
    x = np.random.default_rng(0).normal(size=(8, 3)).astype('float32')
    batches = [(x, x.sum(1, keepdims=True))] * 3
    seen = []
    trace = runs._traced_without_autograph

    def traced(function, iterator):
        seen.append(('trace', _is_light(_call_options())))
        return trace(function, iterator)
    monkeypatch.setattr(runs, '_traced_without_autograph', traced)
    step = runs.trace_once(model, batches[0])

    def called(iterator):
        seen.append(('call', _is_light(_call_options())))
        return step(iterator)
    called._crf_lr_crf_xla = False                  # trace_once: traced already, keep it
    model.train_function = called
    assert np.isfinite(list(runs.train_steps(model, batches))).all()
    assert seen == [('trace', False)] + [('call', True)] * 3


GRAPPLER_LOG = textwrap.dedent('''
    import crf_lr
    from crf_lr.compat import tf
    from crf_lr.speed.graph_optimisation import optimised_lightly

    def compute(x):
        for _ in range(6):
            x = tf.nn.relu(tf.matmul(x, tf.transpose(x)) + 1.0)
        return tf.reduce_sum(x)
    light, default = tf.function(compute), tf.function(compute)
    x = tf.ones([3, 3])
    for _ in range(2):
        with optimised_lightly():
            light(x)                         # optimised at the first call only
    default(x)
''')


def test_tensorflow_optimises_the_first_call_in_one_round_without_memory_and_layout():
    """Grappler's own log (TF_CPP_VMODULE=meta_optimizer=1): a function first called in the block
    gets one round and neither pass, and a second block optimises nothing again; one called
    outside gets TensorFlow's two rounds."""
    environment = dict(os.environ, TF_CPP_VMODULE='meta_optimizer=1',
                       TF_CPP_MIN_LOG_LEVEL='0')
    run = subprocess.run([sys.executable, '-c', GRAPPLER_LOG], capture_output=True, text=True,
                         timeout=300, env=environment)
    assert run.returncode == 0, run.stderr[-2000:]
    items, passes, current = [], {}, None
    for line in run.stderr.splitlines():
        if 'Starting optimization for grappler item:' in line:
            current = line.rsplit(' ', 1)[-1]
            if current.startswith('__inference_compute'):
                items.append(current)
                passes[current] = []
        elif current in passes and 'Graph size after' in line:
            passes[current].append(line.split('] ', 1)[1].split(':', 1)[0])
    assert len(items) == 2, run.stderr[-2000:]           # each function optimised once
    light, default = (passes[item] for item in items)
    assert light.count('arithmetic_optimizer') == 1 and default.count('arithmetic_optimizer') == 2
    assert 'layout' not in light and 'memory_optimizer' not in light
    assert 'layout' in default and 'memory_optimizer' in default
