"""Tiny models and the files they need: a hidden-16 BERT config and vocabulary over the test
words, a random tagger saved as the task scripts save one, and the task scripts as modules.

    folder = save_random_tagger(tmp_path, 'crf', ['PER', 'LOC'], 'BIO', maxlen=32)
"""
import importlib.util
import json
import os

import numpy as np

from helpers.paths import REPO

TINY_BERT_CONFIG = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, hidden_act='gelu', max_position_embeddings=64,
                        type_vocab_size=2)
WORDS = ['我们', '喜欢', '北京', '的', '天气', '。', '张三', '去', '上海', '工作',
         '，',
         '今天',
         '很', '好']


ENGLISH = ['eu', 'rejects', 'german', 'call', 'to', 'boycott', 'british', 'lamb', '.', 'peter',
           'run', '##s', 'in', 'london']


def load_script(name):
    """An examples/ script as a module (so its ``main(argv)`` runs in this process)."""
    spec = importlib.util.spec_from_file_location(name,
                                                  REPO / 'examples' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_tiny_encoder(folder):
    """A vocab.txt covering the test sentences and a 1-layer, hidden-16 BERT config (no dropout,
    so runs are deterministic). Returns the config path."""
    os.makedirs(folder, exist_ok=True)
    chars = sorted({c for word in WORDS for c in word} | set('张三李四王五赵六市区1a'))
    vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + chars + ENGLISH
    with open(os.path.join(folder, 'vocab.txt'), 'w', encoding='utf-8') as f:
        f.write('\n'.join(vocab) + '\n')
    config = dict(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=32, hidden_act='gelu', max_position_embeddings=64,
                  type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    path = os.path.join(folder, 'bert_config.json')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(config, f)
    return path


def save_random_tagger(folder, head_name, types, scheme, maxlen, crf_scale=None, units='chars',
                       **options):
    """A tiny random model (``write_tiny_encoder``'s) with the named head, saved in
    ``folder/model`` as the task scripts save one; ``crf_scale`` draws a CRF head's transitions
    from N(0, crf_scale) (of the emissions' scale, so that they matter); ``units``: 'chars' or
    'words' (English WordPieces). Returns the folder."""
    from crf_lr.compat import keras
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.serving.tagger import Tagger
    encoder, vocab, _ = load_encoder(write_tiny_encoder(os.path.join(folder, 'encoder')))
    head = make_head(head_name, types, scheme, **options)
    model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
    if crf_scale and hasattr(head, 'crf'):
        head.crf.set_weights([np.random.default_rng(0).normal(0, crf_scale,
                                                               (len(head.labels),) * 2)])
    Tagger(model, UnitEncoder(vocab, units), head, maxlen).save(os.path.join(folder, 'model'))
    return os.path.join(folder, 'model')
