"""Layer-wise Adam for Keras 3: learning-rate multipliers by variable path, a bias-correction
switch, decoupled weight decay and a warmup + linear-decay schedule.

The update of ``crf_lr.training.optimizers.LayerwiseAdam`` (tf-keras), for Keras 3 on any backend. A
variable ``w`` with gradient ``g`` at step ``t = iterations + 1``::

    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g**2
    m_hat, v_hat = m / (1 - beta_1**t), v / (1 - beta_2**t)   # bias_correction=True
    m_hat, v_hat = m, v                                        # bias_correction=False (BERT)
    u = m_hat / (sqrt(v_hat) + epsilon) + weight_decay_rate * w  # decay only where not excluded
    w = w - learning_rate * s(t) * mu(w) * u

``mu(w)`` is the multiplier of the longest pattern match in the variable's path (Keras 3 paths
read ``<layer name>/<weight name>``, e.g. ``'CRF/trans'``, ``'Transformer-0-FeedForward/kernel'``).

    >>> opt = LayerwiseAdam(1e-3, lr_multipliers={'CRF': 100}, bias_correction=False)
    >>> model.compile(optimizer=opt, loss=crf.sparse_loss)
"""
import re

import keras
from keras import ops

from crf_lr.model.checks import (check_adam, check_lr_multipliers, check_schedule,
                                 check_weight_decay, schedule_factor)
from crf_lr.model.multipliers import match_multiplier


@keras.saving.register_keras_serializable(package='crf_lr')
class LayerwiseAdam(keras.optimizers.Adam):
    """Adam with per-variable learning-rate multipliers, a bias-correction switch, decoupled
    weight decay and an optional warmup + linear-decay schedule (update in the module docstring).

    Args:
        learning_rate: float or ``keras.optimizers.schedules.LearningRateSchedule``.
        beta_1, beta_2: floats in [0, 1). epsilon: float > 0, added after the bias correction
            (Kingma & Ba), default 1e-6 as in BERT.
        bias_correction: True = Adam as published; False = BERT's AdamWeightDecayOptimizer.
        lr_multipliers: dict regex -> float >= 0, matched in variable paths (longest match wins).
        weight_decay_rate: float >= 0, decoupled weight decay (added to the Adam direction).
        exclude_from_weight_decay: regexes of paths not decayed (default norms and biases).
        warmup_steps: int >= 0: the factor is ``k / warmup_steps`` at the ``k``-th update.
        total_steps: None or int > warmup_steps: then the factor falls linearly to
            ``min_lr_ratio`` at ``k = total_steps``.
        min_lr_ratio: float in [0, 1].
        name, **kwargs: Keras 3 optimizer arguments (``clipnorm``, ``global_clipnorm``, ...).

    >>> opt = LayerwiseAdam(2e-5, lr_multipliers={'CRF': 100}, bias_correction=False)
    >>> opt.multiplier('CRF/trans')                                     # 100.0
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 bias_correction=True, lr_multipliers=None, weight_decay_rate=0.0,
                 exclude_from_weight_decay=('LayerNorm', 'Norm', 'bias'), warmup_steps=0,
                 total_steps=None, min_lr_ratio=0.0, name='LayerwiseAdam', **kwargs):
        for ignored in ('amsgrad', 'weight_decay'):      # Adam's own; ours replace them
            if kwargs.pop(ignored, None):
                raise ValueError(f'LayerwiseAdam has no {ignored}; use weight_decay_rate for '
                                 f'decoupled weight decay')
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                         epsilon=epsilon, name=name, **kwargs)
        check_adam(learning_rate, beta_1, beta_2, epsilon)
        self.warmup_steps, self.total_steps, self.min_lr_ratio = check_schedule(
            warmup_steps, total_steps, min_lr_ratio)
        self.lr_multipliers = check_lr_multipliers(lr_multipliers)
        # not ``exclude_from_weight_decay``: that name is a method of Keras's Optimizer
        self.weight_decay_rate, self.weight_decay_exclusions = check_weight_decay(
            weight_decay_rate, exclude_from_weight_decay)
        self.bias_correction = bool(bias_correction)

    def multiplier(self, variable):
        """Learning-rate multiplier (float) of a variable or a variable path (str)."""
        return match_multiplier(variable if isinstance(variable, str) else variable.path,
                                self.lr_multipliers)

    def decays(self, variable):
        """Whether weight decay applies to a variable or a variable path (str): bool."""
        path = variable if isinstance(variable, str) else variable.path
        return self.weight_decay_rate > 0 and not any(
            re.search(pattern, path) for pattern in self.weight_decay_exclusions)

    def schedule_factor(self, step):
        """The schedule factor after ``step`` completed updates: float32 scalar tensor.

        >>> opt = LayerwiseAdam(warmup_steps=10, total_steps=20, min_lr_ratio=0.1)
        >>> [round(float(opt.schedule_factor(k)), 2) for k in (0, 5, 10, 15, 20, 30)]
        [0.0, 0.5, 1.0, 0.55, 0.1, 0.1]
        """
        return schedule_factor(ops.cast(step, 'float32'), self.warmup_steps, self.total_steps,
                               self.min_lr_ratio, ops)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        # per variable, in Keras's order: update_step may get the backend's variable, no path
        self._rules = [(self.multiplier(v), self.decays(v)) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        gradient = ops.cast(gradient, dtype)
        index = self._get_variable_index(variable)
        multiplier, decays = self._rules[index]
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        m_hat, v_hat = ops.convert_to_tensor(m), ops.convert_to_tensor(v)
        if self.bias_correction:
            step = ops.cast(self.iterations + 1, dtype)
            m_hat = m_hat / (1 - ops.power(ops.cast(self.beta_1, dtype), step))
            v_hat = v_hat / (1 - ops.power(ops.cast(self.beta_2, dtype), step))
        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if decays:
            update = update + self.weight_decay_rate * ops.convert_to_tensor(variable)
        rate = (ops.cast(learning_rate, dtype) * multiplier
                * ops.cast(self.schedule_factor(self.iterations), dtype))
        self.assign_sub(variable, ops.multiply(rate, update))

    def get_config(self):
        config = super().get_config()
        del config['amsgrad'], config['weight_decay']
        config.update(bias_correction=self.bias_correction,
                      lr_multipliers=dict(self.lr_multipliers),
                      weight_decay_rate=self.weight_decay_rate,
                      exclude_from_weight_decay=list(self.weight_decay_exclusions),
                      warmup_steps=self.warmup_steps, total_steps=self.total_steps,
                      min_lr_ratio=self.min_lr_ratio)
        return config
