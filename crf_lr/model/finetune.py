"""Fine-tuning tools for bert4keras encoders: keep the first k layers, read every hidden state,
re-initialise the top L layers, and layer-wise learning-rate decay for a built model.

    >>> bert = build_encoder(config_path, checkpoint_path, model='bert', num_layers=1)  # "layer 1"
    >>> reinitialize_top_layers(full_bert, 2, seed=0)        # "Revisiting Few-sample BERT
    Fine-tuning"

Layer names are bert4keras's (no ``prefix``): ``Embedding-*``, ``Transformer-{i}-*`` (BERT) or the
shared ``Transformer-*`` layers applied once per layer (ALBERT), ``Pooler-Dense``.
"""
import json
import re

import numpy as np

from crf_lr.compat import keras, K
from crf_lr.training.optimizers import layerwise_decay_multipliers

_LAYER_INDEX = re.compile(r'^Transformer-(\d+)-')
_SHARED_OUTPUT = 'Transformer-FeedForward-Norm'


def build_encoder(config_path, checkpoint_path=None, model='bert', num_layers=None, **kwargs):
    """A bert4keras encoder whose output is layer ``num_layers`` (1-based) of the pretrained model.

    Only the first ``num_layers`` layers are built, and bert4keras loads exactly their weights
    from the checkpoint (its variable mapping covers ``range(num_hidden_layers)``); for ALBERT the
    shared layer is applied ``num_layers`` times. The output equals the full model's layer
    ``num_layers`` (tested).

    Args:
        config_path: str, ``bert_config.json`` / ``albert_config.json``.
        checkpoint_path: str or None (random initialisation).
        model: str, bert4keras model type ('bert', 'albert', ...).
        num_layers: int in [1, config num_hidden_layers], or None for all layers.
        **kwargs: passed to ``build_transformer_model`` (e.g. ``with_pool``).
    Returns:
        keras.Model: inputs [token_ids int (batch, seq), segment_ids int (batch, seq)],
        output float32 (batch, seq, hidden_size).

    >>> encoder = build_encoder('albert_config.json', 'model.ckpt', model='albert', num_layers=1)
    >>> encoder.predict([token_ids, segment_ids]).shape      # (batch, seq, hidden)
    """
    from bert4keras.models import build_transformer_model
    with open(config_path, encoding='utf-8') as f:
        total = json.load(f)['num_hidden_layers']
    if num_layers is None:
        num_layers = total
    if not isinstance(num_layers, int) or not 1 <= num_layers <= total:
        raise ValueError(f'num_layers must be an int in [1, {total}] (num_hidden_layers of '
                         f'{config_path}), got {num_layers!r}')
    return build_transformer_model(config_path, checkpoint_path, model=model,
                                   num_hidden_layers=num_layers, **kwargs)


def _layer_indices(model):
    """{transformer layer index: [keras layers]} of a BERT-style (unshared) bert4keras model."""
    indices = {}
    for layer in model.layers:
        found = _LAYER_INDEX.match(layer.name)
        if found:
            indices.setdefault(int(found.group(1)), []).append(layer)
    return indices


def _is_shared(model):
    return any(layer.name == _SHARED_OUTPUT for layer in model.layers)


def _per_depth_layers(model, why_shared_fails):
    """{index: [layers]} of a model with one set of weights per depth, else a ValueError."""
    if _is_shared(model):
        raise ValueError(f'the model shares one transformer layer across depths (ALBERT); '
                         f'{why_shared_fails}')
    indices = _layer_indices(model)
    if not indices:
        raise ValueError(f'no bert4keras Transformer-{{i}}-* layers in model {model.name!r}; pass '
                         f'the model built by bert4keras or one using its layers directly')
    return indices


def num_transformer_layers(model):
    """Number of transformer layers a bert4keras model applies (ALBERT: applications of the
    shared layer).

    Args:
        model: keras.Model built by bert4keras (or a model containing its layers).
    Returns:
        int.

    >>> num_transformer_layers(build_transformer_model('bert_config.json'))   # e.g. 12
    """
    if _is_shared(model):
        return len(model.get_layer(_SHARED_OUTPUT).inbound_nodes)
    return len(_layer_indices(model))


def hidden_states_model(model):
    """A model with the same inputs whose outputs are every hidden state of a bert4keras encoder.

    Output 0 is the embedding output (``Embedding-Mapping`` if the model has one, as ALBERT does,
    else ``Embedding-Norm``); output ``l`` is the output of transformer layer ``l`` (its
    ``FeedForward-Norm``), the same numbering as Hugging Face's ``hidden_states``.

    Args:
        model: keras.Model built by bert4keras ('bert' or 'albert').
    Returns:
        keras.Model with ``num_transformer_layers(model) + 1`` outputs, each float32
        (batch, seq, hidden).

    >>> states = hidden_states_model(bert).predict([token_ids, segment_ids])
    >>> len(states)                                   # num_hidden_layers + 1
    """
    names = {layer.name for layer in model.layers}
    embedding = model.get_layer('Embedding-Mapping' if 'Embedding-Mapping' in names
                                else 'Embedding-Norm').output
    count = num_transformer_layers(model)
    if _is_shared(model):
        shared = model.get_layer(_SHARED_OUTPUT)
        layers = [shared.get_output_at(i) for i in range(count)]
    else:
        layers = [model.get_layer(f'Transformer-{i}-FeedForward-Norm').output for i in range(count)]
    return keras.Model(model.inputs, [embedding] + layers)


def _truncated_normal(rng, shape, stddev):
    """Normal(0, stddev) samples redrawn until within two standard deviations (as Keras's
    ``TruncatedNormal``, bert4keras's initializer)."""
    values = rng.normal(0.0, stddev, shape)
    outside = np.abs(values) > 2 * stddev
    while outside.any():
        values[outside] = rng.normal(0.0, stddev, int(outside.sum()))
        outside = np.abs(values) > 2 * stddev
    return values


def reinitialize_top_layers(model, num_layers, seed=None, stddev=0.02, pooler=True):
    """Re-initialise the top ``num_layers`` transformer layers (and ``Pooler-Dense``) in place,
    as bert4keras initialises them: kernels truncated normal (stddev ``initializer_range``),
    biases 0, LayerNorm gamma 1 and beta 0. Every other weight is left untouched.

    Args:
        model: keras.Model containing a BERT-style bert4keras encoder (``Transformer-{i}-*``
            layers); ALBERT's shared layers cannot be re-initialised per layer.
        num_layers: int in [0, number of transformer layers].
        seed: int or None, seed of the NumPy generator drawing the kernels.
        stddev: float > 0, the config's ``initializer_range`` (0.02 for BERT and ALBERT).
        pooler: bool, also re-initialise ``Pooler-Dense`` if the model has it.
    Returns:
        list of str, names of the re-initialised variables.

    >>> bert = build_transformer_model('bert_config.json', 'model.ckpt', with_pool=True)
    >>> reinitialize_top_layers(bert, 2, seed=0)        # last 2 layers + pooler back to init
    """
    indices = _per_depth_layers(model, 'its top layers cannot be re-initialised separately')
    total = len(indices)
    if not isinstance(num_layers, int) or not 0 <= num_layers <= total:
        raise ValueError(f'num_layers must be an int in [0, {total}] (the model has {total} '
                         f'transformer layers), got {num_layers!r}')
    if not stddev > 0:
        raise ValueError(f'stddev must be > 0, got {stddev!r}')
    layers = [layer for i in range(total - num_layers, total) for layer in indices[i]]
    if pooler and any(layer.name == 'Pooler-Dense' for layer in model.layers):
        layers.append(model.get_layer('Pooler-Dense'))
    rng = np.random.RandomState(seed)
    pairs = []
    for layer in layers:
        for weight in layer.weights:
            kind = weight.name.split(':')[0].rsplit('/', 1)[-1]
            shape = tuple(weight.shape)
            if kind in ('kernel', 'embeddings'):
                value = _truncated_normal(rng, shape, stddev)
            elif kind in ('bias', 'beta'):
                value = np.zeros(shape)
            elif kind == 'gamma':
                value = np.ones(shape)
            else:
                raise ValueError(f'do not know how to initialise weight {weight.name!r} of layer '
                                 f'{layer.name!r}')
            pairs.append((weight, value.astype(weight.dtype.as_numpy_dtype)))
    K.batch_set_value(pairs)
    return [weight.name for weight, _ in pairs]


def layerwise_decay(model, decay, head_multiplier=1.0):
    """Layer-wise learning-rate decay multipliers for a built BERT-style bert4keras model:
    :func:`crf_lr.training.optimizers.layerwise_decay_multipliers` with the model's number of layers
    (top layer 1, layer ``i`` ``decay ** (N - 1 - i)``, embeddings ``decay ** N``, heads
    ``head_multiplier``).

    Args:
        model: keras.Model containing a bert4keras BERT encoder (not ALBERT: shared layers have
            no depth of their own).
        decay: float in (0, 1].
        head_multiplier: float >= 0, multiplier of every non-encoder variable (pooler, heads).
    Returns:
        dict pattern -> float, for ``LayerwiseAdam(lr_multipliers=...)``.

    >>> optimizer = LayerwiseAdam(2e-5, lr_multipliers={**layerwise_decay(model, 0.9), 'CRF': 100})
    """
    total = len(_per_depth_layers(
        model, 'layer-wise decay is undefined: give \'Transformer-\' one multiplier'))
    return layerwise_decay_multipliers(total, decay, head_multiplier=head_multiplier)
