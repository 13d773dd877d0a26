"""Truncation, hidden states, re-initialisation and layer-wise decay on tiny bert4keras models.

Oracles: the full model's own layer-k output (same checkpoint) for truncation; a snapshot of
every weight before/after for re-initialisation; the variable names parsed independently of
crf_lr for the decay multipliers.
"""
import json
import re

import numpy as np
import pytest

from crf_lr.compat import keras, K
from crf_lr.model.finetune import (build_encoder, hidden_states_model, layerwise_decay,
                                   num_transformer_layers, reinitialize_top_layers)
from crf_lr.training.optimizers import match_multiplier

TINY_ALBERT_CONFIG = dict(vocab_size=64, hidden_size=16, embedding_size=8, num_hidden_layers=3,
                          num_attention_heads=2, intermediate_size=32, hidden_act='gelu',
                          max_position_embeddings=64, type_vocab_size=2)


@pytest.fixture(scope='module')
def inputs():
    rng = np.random.RandomState(0)
    ids = rng.randint(1, 64, (2, 7))
    ids[1, 5:] = 0                                  # padding
    return [ids, rng.randint(0, 2, (2, 7))]


def _saved_checkpoint(tmp_path_factory, config_path, model):
    """A random-initialised bert4keras model saved as a checkpoint: (checkpoint path, model)."""
    from bert4keras.models import build_transformer_model
    transformer = build_transformer_model(config_path, model=model, return_keras_model=False)
    path = str(tmp_path_factory.mktemp(f'{model}_ckpt') / 'model.ckpt')
    transformer.save_weights_as_checkpoint(path)
    return path, transformer.model


@pytest.fixture(scope='module')
def tiny_albert_config_path(tmp_path_factory):
    path = tmp_path_factory.mktemp('tiny_albert') / 'albert_config.json'
    path.write_text(json.dumps(TINY_ALBERT_CONFIG))
    return str(path)


@pytest.mark.parametrize('model', ['bert', 'albert'])
def test_first_k_layers_give_the_full_models_layer_k(model, tiny_bert_config_path,
                                                     tiny_albert_config_path, tmp_path_factory,
                                                     inputs):
    config_path = tiny_bert_config_path if model == 'bert' else tiny_albert_config_path
    checkpoint, full = _saved_checkpoint(tmp_path_factory, config_path, model)
    states = [np.asarray(s) for s in hidden_states_model(full)(inputs, training=False)]
    total = num_transformer_layers(full)
    assert len(states) == total + 1
    np.testing.assert_allclose(states[-1], full(inputs, training=False), atol=1e-6)
    for k in range(1, total + 1):
        encoder = build_encoder(config_path, checkpoint, model=model, num_layers=k)
        assert num_transformer_layers(encoder) == k
        np.testing.assert_allclose(encoder(inputs, training=False), states[k], atol=1e-5,
                                   err_msg=f'{model} truncated to {k} layers')
    for bad in (0, total + 1, 1.5):
        with pytest.raises(ValueError, match=f'num_layers must be an int in \\[1, {total}\\]'):
            build_encoder(config_path, checkpoint, model=model, num_layers=bad)


@pytest.fixture
def bert_with_head(tiny_bert_config_path):
    """Tiny BERT (2 layers, pooler) + a Dense head on the pooled output."""
    from bert4keras.models import build_transformer_model
    bert = build_transformer_model(tiny_bert_config_path, with_pool=True)
    output = keras.layers.Dense(3, name='Head')(bert.output)
    return keras.Model(bert.inputs, output)


def _snapshot(model):
    return {w.name: K.get_value(w).copy() for w in model.weights}


def test_reinitialize_changes_exactly_the_top_layers_and_pooler(bert_with_head):
    model = bert_with_head
    for weight in model.weights:                  # a pretrained-looking state: nothing at init
        K.set_value(weight, np.full(weight.shape, 0.5, weight.dtype.as_numpy_dtype))
    before = _snapshot(model)
    changed = reinitialize_top_layers(model, 1, seed=3)
    after = _snapshot(model)
    chosen = {n for n in before if n.startswith(('Transformer-1-', 'Pooler-Dense/'))}
    assert set(changed) == chosen
    assert {n for n in before if not np.array_equal(before[n], after[n])} == chosen
    stddev = 0.02
    for name in chosen:
        kind = name.split(':')[0].rsplit('/', 1)[-1]
        if kind == 'kernel':
            assert np.abs(after[name]).max() <= 2 * stddev
            assert 0.6 * stddev < after[name].std() < 1.1 * stddev, name
        else:
            np.testing.assert_array_equal(after[name], 1.0 if kind == 'gamma' else 0.0)
    reinitialize_top_layers(model, 1, seed=3)     # the seed makes it reproducible
    again = _snapshot(model)
    assert all(np.array_equal(again[n], after[n]) for n in before)
    assert reinitialize_top_layers(model, 0, pooler=False) == []


def test_reinitialize_rejects_bad_arguments(bert_with_head, tiny_albert_config_path):
    from bert4keras.models import build_transformer_model
    with pytest.raises(ValueError, match=r'num_layers must be an int in \[0, 2\]'):
        reinitialize_top_layers(bert_with_head, 3)
    albert = build_transformer_model(tiny_albert_config_path, model='albert')
    with pytest.raises(ValueError, match='shares one transformer layer'):
        reinitialize_top_layers(albert, 1)
    with pytest.raises(ValueError, match='shares one transformer layer'):
        layerwise_decay(albert, 0.9)
    head_only = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))], name='head_only')
    with pytest.raises(ValueError, match="no bert4keras Transformer-.*'head_only'"):
        reinitialize_top_layers(head_only, 1)


def test_layerwise_decay_multipliers_reach_the_right_variables(bert_with_head):
    decay, head = 0.5, 10.0
    multipliers = layerwise_decay(bert_with_head, decay, head_multiplier=head)
    expected_by_layer = {'Embedding': decay ** 2, '0': decay, '1': 1.0}
    seen = set()
    for weight in bert_with_head.trainable_weights:
        layer = weight.name.split('/')[0]
        found = re.fullmatch(r'Transformer-(\d)-.*', layer)
        key = found.group(1) if found else 'Embedding' if layer.startswith('Embedding-') else None
        expected = expected_by_layer[key] if key else head      # Pooler-Dense, Head
        assert match_multiplier(weight.name, multipliers) == expected, weight.name
        seen.add(key)
    assert seen == {'Embedding', '0', '1', None}
