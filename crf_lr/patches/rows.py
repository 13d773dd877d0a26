"""The registry's rows: each replacement crf_lr makes in another library, where, and how to
switch it off.

    >>> ROWS['attention'].targets
    ('bert4keras.layers.MultiHeadAttention.pay_attention_to',)
"""
import dataclasses

# The versions every row was checked on (tests/patches/test_patches.py; the suite passes on them).
VERIFIED = {'tensorflow': ('2.21.0',), 'tf-keras': ('2.21.0',), 'bert4keras': ('0.11.5',)}
KINDS = {'fix': 'bert4keras or tf-keras needs it on TensorFlow >= 2.11',
         'speed': 'the same values, faster; off with CRF_LR_SPEED_PATCHES=0'}


@dataclasses.dataclass(frozen=True)
class Row:
    """One replacement: its ``targets`` (dotted names, a dict's key in ``['...']``: what
    :func:`crf_lr.patches.patching.resolve` reads), ``kind`` (a key of :data:`KINDS`), the
    ``switch`` that turns it off besides ``CRF_LR_SPEED_PATCHES=0``, the ``site`` module that
    applies it and the versions it was ``verified`` on."""
    name: str
    kind: str
    targets: tuple
    switch: str
    site: str
    verified: dict = dataclasses.field(default_factory=lambda: VERIFIED)


_TF_KERAS_SAVING = 'tf_keras.src.saving'
_CUSTOM_OBJECTS = f'{_TF_KERAS_SAVING}.object_registration._GLOBAL_CUSTOM_OBJECTS'
_FUSED = 'fused_kernels(False), CRF_LR_FUSED_KERNELS=0'

ROWS = {row.name: row for row in (
    # while bert4keras.optimizers is imported, the public name holds the legacy class
    Row('optimizer base class', 'fix', ('bert4keras.backend.keras.optimizers.Optimizer',
                                        'bert4keras.backend.keras.optimizers.legacy.Optimizer'),
        '-', 'crf_lr.compat'),
    Row('checkpoint saving', 'fix', ('bert4keras.models.Transformer.save_weights_as_checkpoint',),
        '-', 'crf_lr.compat'),
    Row('feed-forward config', 'fix', ('bert4keras.layers.FeedForward.get_config',), '-',
        'crf_lr.compat'),
    Row('registering loaders', 'fix', (f'{_TF_KERAS_SAVING}.legacy.save.load_model',
                                       f'{_TF_KERAS_SAVING}.saving_lib.load_model'),
        '-', 'crf_lr.model.autoregister'),
    Row('SavedModel optimizer state', 'fix', (f'{_TF_KERAS_SAVING}.legacy.saved_model.load.load',),
        '-', 'crf_lr.model.serialization'),
    Row('.keras save warning', 'fix', (f'{_TF_KERAS_SAVING}.saving_lib.save_model',), '-',
        'crf_lr.model.serialization'),
    Row('.keras load warning', 'fix', (f'{_TF_KERAS_SAVING}.saving_lib.load_model',), '-',
        'crf_lr.model.serialization'),
    Row('.keras variable names', 'fix', ('tf_keras.src.engine.base_layer.Layer.build_from_config',),
        '-', 'crf_lr.model.serialization'),
    # bert4keras's layers that hand their one kernel initializer to several Dense layers
    Row('initial draws', 'fix', tuple(f'bert4keras.layers.{layer}.build' for layer in (
        'MultiHeadAttention', 'FeedForward', 'GatedAttentionUnit', 'EfficientGlobalPointer')),
        '-', 'crf_lr.compat'),
    Row('attention', 'speed', ('bert4keras.layers.MultiHeadAttention.pay_attention_to',),
        'batched_attention(False)', 'crf_lr.speed.attention'),
    Row('shared layer traces', 'speed', ('bert4keras.layers.MultiHeadAttention.call',
                                         'bert4keras.layers.FeedForward.call'),
        'shared_layer_traces(False), CRF_LR_SHARED_LAYER_TRACES=0', 'crf_lr.speed.shared_layers'),
    Row('layer norm', 'speed', ('bert4keras.layers.LayerNormalization.call',),
        'closed_form_layer_norm(False)', 'crf_lr.speed.layer_norm'),
    Row('GELU', 'speed', (f"{_CUSTOM_OBJECTS}['gelu']", f"{_CUSTOM_OBJECTS}['gelu_erf']"), _FUSED,
        'crf_lr.speed.fused_kernels'),
    Row('bias gradient', 'speed',
        ("tensorflow.python.framework.ops._gradient_registry._registry['BiasAdd']['type']",),
        f'fused_bias_gradient(False), {_FUSED}', 'crf_lr.speed.fused_kernels'),
    Row('flat Dense', 'speed', ('tf_keras.src.layers.core.dense.Dense.call',),
        'off outside flat_dense()', 'crf_lr.compat'),
    Row('one-batch datasets', 'speed', ('tf_keras.src.engine.data_adapter.single_batch_iterator',),
        '-', 'crf_lr.compat'),
    # crf_lr's own Adam and training loop: no function replaced, TensorFlow's kernel / options
    Row('Adam kernel', 'speed', ('tensorflow.raw_ops.ResourceApplyAdam',), 'fused_adam(False)',
        'crf_lr.training.optimizers'),
    Row('graph options', 'speed',
        ('tensorflow.python.eager.context.Context.function_call_options',),
        'light_graph_optimisation(False)', 'crf_lr.speed.graph_optimisation'),
)}
