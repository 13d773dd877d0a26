"""Adam for fine-tuning, composed bert4keras style: a base ``Adam`` with a bias-correction switch,
extensions that wrap any legacy optimizer class, a warmup + linear-decay schedule, and
``LayerwiseAdam``, the ready-made combination.

    >>> from crf_lr.training.optimizers import LayerwiseAdam, layerwise_decay_multipliers
    >>> multipliers = {**layerwise_decay_multipliers(4, 0.9), 'CRF': 100}  # layer named 'CRF'
    >>> opt = LayerwiseAdam(2e-5, lr_multipliers=multipliers, warmup_steps=100, total_steps=1000)

is the same optimizer as

    >>> AdamLW = extend_with_layerwise_lr(extend_with_weight_decay(Adam))
    >>> opt = AdamLW(WarmupLinearDecay(2e-5, 100, 1000), lr_multipliers=multipliers)

The update of a variable ``w`` with gradient ``g`` at step ``t = k + 1`` (``k`` = updates done)::

    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g**2
    m_hat, v_hat = m / (1 - beta_1**t), v / (1 - beta_2**t)   # bias_correction=True
    m_hat, v_hat = m, v                                        # bias_correction=False (BERT)
    u = m_hat / (sqrt(v_hat) + epsilon) + weight_decay_rate * w  # decay only where not excluded
    w = w - learning_rate(k) * mu(w) * u

``learning_rate(k)`` is the rate or its schedule (``WarmupLinearDecay``) and ``mu(w)`` the
variable's multiplier (``extend_with_layerwise_lr``). The extensions pass the rate down through
the ``apply_state`` coefficients ``'lr_t'`` / ``'lr'`` that every tf-keras legacy optimizer reads,
so they wrap ``keras.optimizers.legacy.SGD`` as well as ``Adam``; put the weight decay inside the
multipliers, as above, so that a multiplier scales the decay too.

Every class is an OptimizerV2 (``keras.optimizers.legacy.Optimizer``), as bert4keras's optimizers
are, and is registered with Keras (``crf_lr.model.serialization.register``), so a compiled model
reloads with ``keras.models.load_model(path)``; an optimizer class made by calling an extension
yourself must be made again, by the same call, before loading. The state (step count, moments)
comes back from ``.h5`` files and SavedModels; ``.keras`` files of tf-keras keep none (a warning
says so).

Each variable is updated, with both its moments, by one TensorFlow kernel (``ResourceApplyAdam``,
the one Keras's own Adam runs), given the coefficients that make its "epsilon hat" form compute
the rule above; a sparse gradient (an embedding's) is made dense first, with zero rows where no
id was looked up, which is the rule's own reading of it. :func:`fused_adam` ``(False)`` traces the
rule as separate ops instead (to compare).
"""
import functools
import inspect
import re
import warnings

import numpy as np

from crf_lr import patches
from crf_lr.model.checks import (check_adam, check_learning_rate, check_lr_multipliers,
                                 check_schedule, check_weight_decay, schedule_factor)
from crf_lr.model.multipliers import match_multiplier as match_name
from crf_lr.compat import tf, keras
from crf_lr.model.serialization import register, restore_optimizer_state
from crf_lr.speed.switches import ThreadSwitch

# read when an update is traced: fused_adam; off with the speed patches (row 'Adam kernel')
_FUSED = ThreadSwitch(default=patches.apply('Adam kernel'))

_VARIABLE_SUFFIX = re.compile(r'(/replica_\d+)?(:\d+)?$')


def variable_base_name(variable):
    """Name a pattern is matched against: ``variable.name`` without the ``:0`` suffix and the
    ``/replica_k`` suffix MirroredStrategy gives its copies (e.g. ``'CRF/trans'``).

    Args:
        variable: a ``tf.Variable`` or a str.
    Returns:
        str.

    >>> variable_base_name('Transformer-0-FeedForward/dense/kernel:0')
    'Transformer-0-FeedForward/dense/kernel'
    """
    name = variable if isinstance(variable, str) else variable.name
    return _VARIABLE_SUFFIX.sub('', name)


def match_multiplier(name, lr_multipliers):
    """The learning-rate multiplier of one variable under the pattern rules of ``LayerwiseAdam``.

    Every pattern is a regular expression searched (``re.search``) in the variable's base name;
    among the patterns that match, the one whose match is longest wins; no match gives 1.0.
    Two patterns matching equally long with different multipliers are an error.

    Args:
        name: str (a variable name, ``:0`` suffix optional) or a ``tf.Variable``.
        lr_multipliers: dict pattern (str) -> multiplier (float).
    Returns:
        float.

    >>> match_multiplier('Transformer-1-FeedForward/dense/kernel:0', {'Transformer-1-': 0.9, '': 2})
    0.9
    """
    return match_name(variable_base_name(name), lr_multipliers)


def warn_unmatched_patterns(lr_multipliers, variables):
    """A warning naming each ``lr_multipliers`` pattern that matches none of ``variables``: a
    misspelt or renamed layer would train at 1x without a word.

        >>> warn_unmatched_patterns({'CFR': 100}, model.trainable_variables)
    """
    names = [variable_base_name(variable) for variable in variables]
    examples = ', '.join(map(repr, dict.fromkeys(names[:1] + names[-1:])))
    for pattern, multiplier in lr_multipliers.items():
        if names and not any(re.search(pattern, name) for name in names):
            warnings.warn(f'lr_multipliers pattern {pattern!r} ({multiplier:g}x) matches none of '
                          f'the {len(names)} trained variables (names such as {examples}): it '
                          f'changes nothing', stacklevel=2)


def layerwise_decay_multipliers(num_layers, decay, embedding_pattern='Embedding-',
                                layer_pattern='Transformer-{i}-', head_multiplier=1.0):
    """Layer-wise learning-rate decay for bert4keras layer names, as in "Revisiting Few-sample
    BERT Fine-tuning" (Zhang et al., 2021): transformer layer ``i`` (0-based, bert4keras's
    ``Transformer-{i}-*``) gets ``decay ** (num_layers - 1 - i)``, so the top layer gets 1; the
    embeddings (``Embedding-*``, including ``Embedding-Norm`` and ALBERT's ``Embedding-Mapping``)
    get ``decay ** num_layers``; everything else (task heads, pooler) gets ``head_multiplier``
    through the empty pattern ``''``, which matches every variable with length 0 and so loses to
    any other matching pattern. (ELECTRA's implementation shifts the exponents by one more,
    giving the top layer ``decay``; use ``head_multiplier=1/decay`` and rescale to mimic it.)

    Combine with your own multipliers by merging dicts; a more specific pattern wins, it does not
    multiply: ``{**layerwise_decay_multipliers(4, 0.9), 'CRF': 100}``. For ALBERT, whose layers
    share one set of weights (``Transformer-*`` without an index), layer-wise decay is undefined;
    give ``'Transformer-'`` one multiplier yourself.

    Args:
        num_layers: int >= 1, number of transformer layers of the model.
        decay: float in (0, 1], the factor per layer going down from the top.
        embedding_pattern: str regex of the embedding variables.
        layer_pattern: str with ``{i}``, the regex of the variables of layer ``i``.
        head_multiplier: float >= 0, the multiplier of all other variables.
    Returns:
        dict str -> float, for ``LayerwiseAdam(lr_multipliers=...)``.

    >>> layerwise_decay_multipliers(2, 0.5)
    {'Embedding-': 0.25, 'Transformer-0-': 0.5, 'Transformer-1-': 1.0, '': 1.0}
    """
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f'num_layers must be an int >= 1, got {num_layers!r}')
    if not 0 < decay <= 1:
        raise ValueError(f'decay must be in (0, 1], got {decay!r}')
    if '{i}' not in layer_pattern:
        raise ValueError(f"layer_pattern must contain '{{i}}', got {layer_pattern!r}")
    if not head_multiplier >= 0:
        raise ValueError(f'head_multiplier must be >= 0, got {head_multiplier!r}')
    multipliers = {embedding_pattern: float(decay ** num_layers)}
    for i in range(num_layers):
        multipliers[layer_pattern.format(i=i)] = float(decay ** (num_layers - 1 - i))
    multipliers[''] = float(head_multiplier)
    return multipliers


def fused_adam(enabled=True):
    """Within the block, :class:`Adam` updates traced run as one ``ResourceApplyAdam`` kernel
    per variable (the default) or, with ``enabled=False``, as the separate ops of the module
    docstring's rule (a sparse gradient's rows scattered into the moments). Both compute the
    same update up to float rounding. Per thread; a traced step keeps the form it was traced
    with.

        >>> with fused_adam(False):
        ...     model.train_on_batch(inputs, labels)     # traced with the separate ops
    """
    return _FUSED.set(enabled)


def _coefficients(optimizer, var, apply_state):
    """The ``apply_state`` coefficients (``'lr_t'``, ...) of ``var``'s device and dtype."""
    key = (var.device, var.dtype.base_dtype)
    return (apply_state or {}).get(key) or optimizer._fallback_apply_state(*key)


@register
class Adam(keras.optimizers.legacy.Optimizer):
    """Adam with a bias-correction switch (update rule in the module docstring, with ``mu = 1``
    and no weight decay).

    Args:
        learning_rate: float > 0 or ``LearningRateSchedule`` (e.g. ``WarmupLinearDecay``).
        beta_1, beta_2: floats in [0, 1), moment decay rates.
        epsilon: float > 0, added to ``sqrt(v_hat)``. Default 1e-6 as in BERT (Keras uses 1e-7).
            It is added after the bias correction (Kingma & Ba, Algorithm 1), unlike Keras's Adam,
            which adds it to ``sqrt(v)`` before correcting ("epsilon hat").
        bias_correction: True = Adam as published; False = BERT's ``AdamWeightDecayOptimizer``
            (no correction: the first steps are ``1/(1-beta_1)`` times smaller in ``m`` but
            ``sqrt(1/(1-beta_2))`` times smaller in ``sqrt(v)``, i.e. about 3x larger at t=1).
        name: str.
        **kwargs: the OptimizerV2 arguments (``clipnorm``, ``clipvalue``, ``global_clipnorm``).

    Sparse gradients (``tf.IndexedSlices``, e.g. from embedding lookups) give the same update as
    the dense gradient with zeros in the rows not looked up (moments decay in every row).

        >>> opt = Adam(1e-3, bias_correction=False)
        >>> model.compile(optimizer=opt, loss=crf.sparse_loss)
    """

    _HAS_AGGREGATE_GRAD = True

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 bias_correction=True, name='Adam', **kwargs):
        learning_rate = kwargs.pop('lr', learning_rate)
        super().__init__(name, **kwargs)
        check_adam(learning_rate, beta_1, beta_2, epsilon)
        self._set_hyper('learning_rate', learning_rate)
        self._set_hyper('decay', self._initial_decay)
        self._set_hyper('beta_1', beta_1)
        self._set_hyper('beta_2', beta_2)
        self.epsilon = float(epsilon)
        if not isinstance(bias_correction, (bool, np.bool_)):
            raise TypeError(f'bias_correction must be True or False, got {bias_correction!r}')
        self.bias_correction = bool(bias_correction)

    def _create_slots(self, var_list):
        for var in var_list:
            self.add_slot(var, 'm')
        for var in var_list:
            self.add_slot(var, 'v')

    def _prepare_local(self, var_device, var_dtype, apply_state):
        super()._prepare_local(var_device, var_dtype, apply_state)   # lr_t, with the schedule
        local_step = tf.cast(self.iterations + 1, var_dtype)
        beta_1_t = tf.identity(self._get_hyper('beta_1', var_dtype))
        beta_2_t = tf.identity(self._get_hyper('beta_2', var_dtype))
        beta_1_power, beta_2_power = tf.pow(beta_1_t, local_step), tf.pow(beta_2_t, local_step)
        epsilon = tf.convert_to_tensor(self.epsilon, var_dtype)
        # ResourceApplyAdam: w -= lr sqrt(1 - p2) / (1 - p1) m / (sqrt(v) + e). With p1, p2 the
        # beta powers and e = epsilon sqrt(1 - p2) that is lr m_hat / (sqrt(v_hat) + epsilon);
        # with p1 = p2 = 0 and e = epsilon, the uncorrected rule.
        corrected = self.bias_correction
        apply_state[(var_device, var_dtype)].update(
            epsilon=epsilon,
            beta_1_t=beta_1_t,
            beta_2_t=beta_2_t,
            one_minus_beta_1_power=1 - beta_1_power,
            one_minus_beta_2_power=1 - beta_2_power,
            kernel_beta_1_power=beta_1_power if corrected else tf.zeros([], var_dtype),
            kernel_beta_2_power=beta_2_power if corrected else tf.zeros([], var_dtype),
            kernel_epsilon=epsilon * tf.sqrt(1 - beta_2_power) if corrected else epsilon,
        )

    def _fused_update(self, grad, var, apply_state):
        """The whole update of ``var`` for a dense ``grad``, in one ``ResourceApplyAdam``."""
        c = _coefficients(self, var, apply_state)
        m, v = self.get_slot(var, 'm'), self.get_slot(var, 'v')
        return tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=m.handle, v=v.handle, beta1_power=c['kernel_beta_1_power'],
            beta2_power=c['kernel_beta_2_power'], lr=c['lr_t'], beta1=c['beta_1_t'],
            beta2=c['beta_2_t'], epsilon=c['kernel_epsilon'], grad=grad,
            use_locking=self._use_locking)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        if _FUSED.enabled:
            return self._fused_update(grad, var, apply_state)
        c = _coefficients(self, var, apply_state)
        m, v = self.get_slot(var, 'm'), self.get_slot(var, 'v')
        m_t = tf.compat.v1.assign(m, c['beta_1_t'] * m + (1 - c['beta_1_t']) * grad,
                                  use_locking=self._use_locking)
        v_t = tf.compat.v1.assign(v, c['beta_2_t'] * v + (1 - c['beta_2_t']) * tf.square(grad),
                                  use_locking=self._use_locking)
        return self._apply_moments(var, m_t, v_t, c)

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
        if not _FUSED.enabled:
            return super()._resource_apply_sparse_duplicate_indices(grad, handle, indices,
                                                                    **kwargs)
        # the update of the dense gradient with zero rows elsewhere (the moments decay in every
        # row either way): one pass over the table instead of one per separate op
        dense = tf.math.unsorted_segment_sum(grad, indices, tf.shape(handle)[0])
        return self._fused_update(dense, handle, kwargs.get('apply_state'))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        c = _coefficients(self, var, apply_state)
        m, v = self.get_slot(var, 'm'), self.get_slot(var, 'v')
        m_decayed = tf.compat.v1.assign(m, c['beta_1_t'] * m, use_locking=self._use_locking)
        with tf.control_dependencies([m_decayed]):
            m_t = self._resource_scatter_add(m, indices, (1 - c['beta_1_t']) * grad)
        v_decayed = tf.compat.v1.assign(v, c['beta_2_t'] * v, use_locking=self._use_locking)
        with tf.control_dependencies([v_decayed]):
            v_t = self._resource_scatter_add(v, indices, (1 - c['beta_2_t']) * tf.square(grad))
        return self._apply_moments(var, m_t, v_t, c)

    def _apply_moments(self, var, m_t, v_t, c):
        """``w -= lr_t * m_hat / (sqrt(v_hat) + eps)`` from the new moments."""
        if self.bias_correction:
            m_t, v_t = m_t / c['one_minus_beta_1_power'], v_t / c['one_minus_beta_2_power']
        update = c['lr_t'] * m_t / (tf.sqrt(v_t) + c['epsilon'])
        var_update = tf.compat.v1.assign_sub(var, update, use_locking=self._use_locking)
        return tf.group(var_update, m_t, v_t)

    def get_config(self):
        config = super().get_config()
        learning_rate = self._serialize_hyperparameter('learning_rate')
        if not isinstance(learning_rate, dict):  # a dict is a serialised LearningRateSchedule
            learning_rate = float(learning_rate)
        config.update(
            learning_rate=learning_rate,
            decay=float(self._initial_decay),
            beta_1=float(self._serialize_hyperparameter('beta_1')),
            beta_2=float(self._serialize_hyperparameter('beta_2')),
            epsilon=self.epsilon,
            bias_correction=self.bias_correction,
        )
        return config


def _check_extensible(BaseOptimizer, extension):
    """The extensions hand the rate down in ``apply_state``: the base must take it."""
    if not (isinstance(BaseOptimizer, type)
            and issubclass(BaseOptimizer, keras.optimizers.legacy.Optimizer)):
        raise TypeError(f'{extension}: BaseOptimizer must be a legacy (OptimizerV2) optimizer '
                        f'class, e.g. keras.optimizers.legacy.SGD; got {BaseOptimizer!r}')
    for method in ('_resource_apply_dense', '_resource_apply_sparse'):
        if 'apply_state' not in inspect.signature(getattr(BaseOptimizer, method)).parameters:
            raise TypeError(f'{extension}: {BaseOptimizer.__name__}.{method} takes no '
                            'apply_state, so it cannot be handed a per-variable rate '
                            '(bert4keras\'s optimizers read theirs elsewhere); extend '
                            'crf_lr.training.optimizers.Adam or a keras.optimizers.legacy '
                            'optimizer')


_EXTENSIONS = {}          # 'WeightDecay' -> extend_with_weight_decay, ...: what _extension made


def _extension(name):
    """Register the class an ``extend_with_*`` factory returns, under a name that says its
    base, e.g. ``'crf_lr>WeightDecay(crf_lr>Adam)'``; one class per base (cached). The factory
    is kept under ``name`` in :data:`_EXTENSIONS`, for :func:`extension_class`."""
    def decorate(factory):
        @functools.lru_cache(maxsize=None)
        @functools.wraps(factory)
        def extend(BaseOptimizer):
            _check_extensible(BaseOptimizer, factory.__name__)
            cls = factory(BaseOptimizer)
            cls.__name__ = cls.__qualname__ = f'{BaseOptimizer.__name__}With{name}'
            base_name = keras.utils.get_registered_name(BaseOptimizer)
            return register(cls, name=f'{name}({base_name})')
        _EXTENSIONS[name] = extend
        return extend
    return decorate


_EXTENSION_NAME = re.compile(r'crf_lr>(\w+)\((.+)\)')


def extension_class(name):
    """The optimizer class a registered extension name stands for, made as its ``extend_with_*``
    factory makes it, or None where ``name`` is no such name: ``'crf_lr>LayerwiseLR(SGD)'`` ->
    ``extend_with_layerwise_lr(keras.optimizers.legacy.SGD)``. A saved model names its
    optimizer so; a process that has not made the class yet loads it through this.

        >>> extension_class('crf_lr>LayerwiseLR(crf_lr>WeightDecay(RMSprop))')
    """
    registered = keras.utils.get_registered_object(name)
    if registered is not None:
        return registered
    found = _EXTENSION_NAME.fullmatch(name)
    factory = found and _EXTENSIONS.get(found.group(1))
    if not factory:
        return getattr(keras.optimizers.legacy, name, None) if name.isidentifier() else None
    base = extension_class(found.group(2))
    return None if base is None else factory(base)


@_extension('WeightDecay')
def extend_with_weight_decay(BaseOptimizer):
    """A subclass of ``BaseOptimizer`` with decoupled weight decay, as in BERT's AdamW.

    After the base update, ``w -= lr_t * weight_decay_rate * w`` (``w`` before the update), with
    the rate ``lr_t`` the base uses (schedule included; the multiplier too when
    ``extend_with_layerwise_lr`` wraps this class). For Adam this is ``wd * w`` added to the Adam
    direction before the multiplication by the learning rate. Sparse gradients decay every row.

    Args:
        BaseOptimizer: a legacy optimizer class that reads its rate from ``apply_state``
            (``crf_lr.training.optimizers.Adam``, ``keras.optimizers.legacy.SGD``, ...).
    Returns:
        The class, whose ``__init__`` takes the base's arguments and:

        weight_decay_rate: float >= 0.
        exclude_from_weight_decay: regexes; a variable whose name any of them matches
            (``re.search``) is not decayed. Default: LayerNorm / Norm layers and biases.

        >>> AdamW = extend_with_weight_decay(Adam)
        >>> opt = AdamW(1e-3, weight_decay_rate=0.01, exclude_from_weight_decay=['Norm', 'bias'])
    """

    class Extended(BaseOptimizer):

        def __init__(self, *args, weight_decay_rate=0.0,
                     exclude_from_weight_decay=('LayerNorm', 'Norm', 'bias'), **kwargs):
            super().__init__(*args, **kwargs)
            self.weight_decay_rate, self.exclude_from_weight_decay = check_weight_decay(
                weight_decay_rate, exclude_from_weight_decay)

        def decays(self, variable):
            """Whether weight decay applies to ``variable`` (a ``tf.Variable`` or its name)."""
            name = variable_base_name(variable)
            return self.weight_decay_rate > 0 and not any(
                re.search(pattern, name) for pattern in self.exclude_from_weight_decay)

        def _decayed(self, var, apply_state, apply):
            """Run ``apply()`` (the base update), then decay ``var`` from its value before."""
            if not self.decays(var):
                return apply()
            rate = _coefficients(self, var, apply_state)['lr_t']
            decay = rate * tf.cast(self.weight_decay_rate, rate.dtype) * tf.identity(var)
            with tf.control_dependencies([decay]):
                update = apply()
            with tf.control_dependencies([update]):
                return tf.compat.v1.assign_sub(var, decay, use_locking=self._use_locking)

        def _resource_apply_dense(self, grad, var, apply_state=None):
            return self._decayed(var, apply_state, functools.partial(
                super()._resource_apply_dense, grad, var, apply_state=apply_state))

        def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
            return self._decayed(handle, kwargs.get('apply_state'), functools.partial(
                super()._resource_apply_sparse_duplicate_indices, grad, handle, indices,
                **kwargs))

        def get_config(self):
            return dict(super().get_config(), weight_decay_rate=self.weight_decay_rate,
                        exclude_from_weight_decay=list(self.exclude_from_weight_decay))

    return Extended


@_extension('LayerwiseLR')
def extend_with_layerwise_lr(BaseOptimizer):
    """A subclass of ``BaseOptimizer`` whose update of each variable is scaled by a multiplier
    chosen by name patterns (the rate ``lr_t`` / ``lr`` handed to the base is multiplied).

    Args:
        BaseOptimizer: a legacy optimizer class that reads its rate from ``apply_state``
            (``crf_lr.training.optimizers.Adam``, ``keras.optimizers.legacy.SGD``, ...).
    Returns:
        The class, whose ``__init__`` takes the base's arguments and:

        lr_multipliers: dict regex -> float >= 0. The multiplier of a variable is that of the
            pattern whose ``re.search`` match in the variable's name (without ``:0``, e.g.
            ``'CRF/trans'``, ``'Transformer-0-FeedForward/dense/kernel'``) is longest; no match
            = 1. Bert4keras names variables ``<layer name>/<weight>``, so a layer name is a
            pattern. Write ``'Transformer-1-'`` (with the dash) so ``Transformer-10-`` does not
            match. Equally long matches with different multipliers raise ``ValueError``.

        >>> SGDLW = extend_with_layerwise_lr(keras.optimizers.legacy.SGD)
        >>> opt = SGDLW(0.1, momentum=0.9, lr_multipliers={'CRF': 10})
    """

    class Extended(BaseOptimizer):

        def __init__(self, *args, lr_multipliers=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.lr_multipliers = check_lr_multipliers(lr_multipliers)

        def multiplier(self, variable):
            """Learning-rate multiplier of ``variable`` (a ``tf.Variable`` or its name): float."""
            return match_multiplier(variable, self.lr_multipliers)

        def _create_all_weights(self, var_list):
            super()._create_all_weights(var_list)
            if not getattr(self, '_patterns_checked', False):     # once: the first update
                self._patterns_checked = True
                warn_unmatched_patterns(self.lr_multipliers, var_list)

        def _scaled(self, var, apply_state):
            """``apply_state`` with the rates of ``var``'s device and dtype multiplied."""
            multiplier = self.multiplier(var)
            if multiplier == 1:
                return apply_state
            coefficients = dict(_coefficients(self, var, apply_state))
            for name in ('lr_t', 'lr'):
                if name in coefficients:
                    coefficients[name] *= tf.cast(multiplier, coefficients[name].dtype)
            return {**(apply_state or {}), (var.device, var.dtype.base_dtype): coefficients}

        def _resource_apply_dense(self, grad, var, apply_state=None):
            return super()._resource_apply_dense(grad, var,
                                                 apply_state=self._scaled(var, apply_state))

        def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
            kwargs['apply_state'] = self._scaled(handle, kwargs.get('apply_state'))
            return super()._resource_apply_sparse_duplicate_indices(grad, handle, indices,
                                                                    **kwargs)

        def get_config(self):
            return dict(super().get_config(), lr_multipliers=dict(self.lr_multipliers))

    return Extended


@register
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """``learning_rate * s(k)`` after ``k`` completed updates, as BERT and Hugging Face count:
    ``s = k / warmup_steps`` while ``k < warmup_steps`` (so the first update has rate 0); then,
    with ``total_steps``, a linear fall from 1 at ``warmup_steps`` to ``min_lr_ratio`` at
    ``total_steps``, constant afterwards; without it, ``s = 1``.

    Args:
        learning_rate: float > 0, or a ``LearningRateSchedule`` (the two multiply).
        warmup_steps: int >= 0.
        total_steps: int > warmup_steps, or None.
        min_lr_ratio: float in [0, 1], the final factor.
    Call with the step ``k`` (a scalar tensor or int); returns a scalar tensor, float64 for a
    float64 step (Keras passes the step in the variables' dtype), else float32.

        >>> schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=20, min_lr_ratio=0.1)
        >>> opt = Adam(schedule)       # rates 0, 5e-4, 1e-3, 5.5e-4, 1e-4 at k = 0, 5, 10, 15, 20
    """

    def __init__(self, learning_rate, warmup_steps=0, total_steps=None, min_lr_ratio=0.0):
        check_learning_rate(learning_rate)
        self.learning_rate = learning_rate
        self.warmup_steps, self.total_steps, self.min_lr_ratio = check_schedule(
            warmup_steps, total_steps, min_lr_ratio)

    @property
    def constant(self):
        """True when ``s = 1`` at every step (no warmup, no decay)."""
        return self.warmup_steps == 0 and self.total_steps is None

    def __call__(self, step):
        rate = self.learning_rate(step) if callable(self.learning_rate) else self.learning_rate
        step = tf.convert_to_tensor(step)
        dtype = tf.float64 if step.dtype == tf.float64 else tf.float32   # Keras: the variables'
        factor = schedule_factor(tf.cast(step, tf.float32), self.warmup_steps, self.total_steps,
                                 self.min_lr_ratio, tf)
        return tf.cast(rate, dtype) * tf.cast(factor, dtype)

    def get_config(self):
        learning_rate = self.learning_rate
        if isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            learning_rate = keras.optimizers.schedules.serialize(learning_rate)
        return dict(learning_rate=learning_rate, warmup_steps=self.warmup_steps,
                    total_steps=self.total_steps, min_lr_ratio=self.min_lr_ratio)

    @classmethod
    def from_config(cls, config):
        if isinstance(config['learning_rate'], dict):
            config = dict(config, learning_rate=keras.optimizers.schedules.deserialize(
                config['learning_rate']))
        return cls(**config)


@register(aliases=('LayerwiseAdam',))   # the name files written before 'crf_lr>' use
class LayerwiseAdam(extend_with_layerwise_lr(extend_with_weight_decay(Adam))):
    """``Adam`` with per-variable learning-rate multipliers, decoupled weight decay and a
    warmup + linear-decay schedule: ``extend_with_layerwise_lr(extend_with_weight_decay(Adam))``
    with ``WarmupLinearDecay(learning_rate, warmup_steps, total_steps, min_lr_ratio)`` as its rate.

    Args:
        learning_rate, beta_1, beta_2, epsilon, bias_correction: as ``Adam``.
        lr_multipliers: as ``extend_with_layerwise_lr``.
        weight_decay_rate, exclude_from_weight_decay: as ``extend_with_weight_decay``; the decay
            step is ``lr * s(k) * mu(w) * wd * w``.
        warmup_steps, total_steps, min_lr_ratio: as ``WarmupLinearDecay``.
        name: str.
        **kwargs: the OptimizerV2 arguments (``clipnorm``, ``clipvalue``, ``global_clipnorm``).

        >>> opt = LayerwiseAdam(1e-3, lr_multipliers={'CRF': 100}, bias_correction=False)
        >>> model.compile(optimizer=opt, loss=crf.sparse_loss)   # crf named 'CRF'
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 bias_correction=True, lr_multipliers=None, weight_decay_rate=0.0,
                 exclude_from_weight_decay=('LayerNorm', 'Norm', 'bias'), warmup_steps=0,
                 total_steps=None, min_lr_ratio=0.0, name='LayerwiseAdam', **kwargs):
        schedule = WarmupLinearDecay(kwargs.pop('lr', learning_rate), warmup_steps, total_steps,
                                     min_lr_ratio)
        super().__init__(schedule.learning_rate if schedule.constant else schedule, beta_1,
                         beta_2, epsilon, bias_correction, lr_multipliers=lr_multipliers,
                         weight_decay_rate=weight_decay_rate,
                         exclude_from_weight_decay=exclude_from_weight_decay, name=name, **kwargs)
        self.schedule = schedule

    def get_config(self):
        config, schedule = super().get_config(), self.schedule.get_config()
        if self.schedule.constant:   # the rate now: K.set_value and Keras's callbacks change it
            schedule['learning_rate'] = config['learning_rate']
        return dict(config, **schedule)


__all__ = ['Adam', 'LayerwiseAdam', 'WarmupLinearDecay', 'extend_with_layerwise_lr',
           'extend_with_weight_decay', 'fused_adam', 'layerwise_decay_multipliers',
           'match_multiplier', 'restore_optimizer_state', 'variable_base_name']
