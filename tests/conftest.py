"""Shared fixtures: tiny bert4keras models built once per session, and the real-data folder."""
import json
import os

import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)


@pytest.fixture(scope='session')
def data_dir():
    """The shared benchmark folder (``CRF_LR_DATA``); tests that need it skip when it is absent."""
    path = os.environ.get('CRF_LR_DATA')
    if not path or not os.path.isdir(path):
        pytest.skip('real benchmark data not available: set CRF_LR_DATA to the shared data folder')
    return path


TINY_BERT_CONFIG = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, hidden_act='gelu', max_position_embeddings=64,
                        type_vocab_size=2)


@pytest.fixture(scope='session')
def tiny_bert_config_path(tmp_path_factory):
    """Path of a ``bert_config.json`` for a 2-layer, hidden-16 BERT (random init)."""
    path = tmp_path_factory.mktemp('tiny_bert') / 'bert_config.json'
    path.write_text(json.dumps(TINY_BERT_CONFIG))
    return str(path)
