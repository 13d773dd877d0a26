"""BERT-family encoders for the task scripts: packaged, converted, or randomly initialised.

    >>> encoder, vocab_path, info = load_encoder('albert-tiny-zh', layers=1)
    >>> encoder.output.shape                      # (None, None, 312)
"""
import json
import os
import shutil
import tempfile

from crf_lr.compat import tf
from crf_lr.model.pretrained import PACKAGED, packaged_checkpoint, packaged_source

# Main learning rate of each packaged encoder when --lr is not given, from docs/results.md:
# ALBERT-tiny fine-tunes best at 1e-4..3e-4 on 400-3,000 sentences (experiments 2 and 3), and its
# single first layer at 1e-3 (experiment 1); MiniLM best at 1e-4 with bias correction (experiment
# 3).
DEFAULT_LR = {'albert-tiny-zh': 2e-4, 'minilm-en': 1e-4}
DEFAULT_LR_ONE_LAYER = 1e-3
DEFAULT_LR_OTHER = 1e-4


def default_learning_rate(spec, layers=None):
    """The main learning rate for an encoder when the user gives none (see ``DEFAULT_LR``).

        >>> default_learning_rate('albert-tiny-zh', layers=1)
        0.001
    """
    if layers == 1:
        return DEFAULT_LR_ONE_LAYER
    return DEFAULT_LR.get(spec, DEFAULT_LR_OTHER)


def _config_in(folder):
    for name in ('bert_config.json', 'albert_config.json', 'config.json'):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(f'{folder}: no bert_config.json / albert_config.json / config.json')


def _model_type(config_path):
    with open(config_path, encoding='utf-8') as f:
        config = json.load(f)
    albert = 'albert' in os.path.basename(config_path) or config.get('model_type') == 'albert'
    return 'albert' if albert or 'embedding_size' in config else 'bert'


def random_config(layers, hidden, vocab_size, heads=None):
    """A BERT config dict for a randomly initialised encoder (intermediate size 4 x hidden).

    ``heads`` defaults to the first of 12, 8, 4, 2, 1 that divides ``hidden`` into heads of >= 8.
    """
    if heads is None:
        heads = next(h for h in (12, 8, 4, 2, 1) if hidden % h == 0 and hidden // h >= 8
                     or h == 1)
    if hidden % heads:
        raise ValueError(f'hidden size {hidden} is not divisible by {heads} attention heads')
    return dict(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden, hidden_act='gelu',
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02)


def _vocab_size(path):
    with open(path, encoding='utf-8') as f:
        return sum(1 for _ in f)


def load_encoder(spec, layers=None, vocab=None):
    """Build a bert4keras encoder from a specification (see ``--encoder`` of the task scripts).

    Args:
        spec: 'albert-tiny-zh' / 'minilm-en' (packaged, converted once into a cache), a folder
            with a converted checkpoint (config JSON, TF checkpoint, vocab.txt), a config JSON
            (random initialisation), or 'random:LAYERS:HIDDEN[:HEADS]' (random BERT).
        layers: int or None, keep only the first k transformer layers.
        vocab: vocab.txt for a random encoder (default: beside the config, else ALBERT-tiny's).
    Returns:
        ``(encoder, vocab_path, info)``: a keras.Model with inputs ``[token_ids, segment_ids]``
        and output ``(batch, n, hidden)``; the vocabulary path; a dict describing the encoder.

        >>> encoder, vocab_path, info = load_encoder('random:1:312')
    """
    from crf_lr.model.finetune import build_encoder
    checkpoint, scratch = None, None
    if spec in PACKAGED:
        converted = packaged_checkpoint(spec)
        config_path, checkpoint, vocab_path = converted[:3]
        model_type = converted.model_type
    elif isinstance(spec, str) and spec.startswith('random:'):
        try:
            sizes = [int(part) for part in spec.split(':')[1:]]
            if len(sizes) not in (2, 3) or min(sizes) < 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"--encoder {spec!r}: expected 'random:LAYERS:HIDDEN' or "
                             f"'random:LAYERS:HIDDEN:HEADS' with positive integers") from None
        vocab_path = vocab or os.path.join(packaged_source('albert-tiny-zh'), 'vocab.txt')
        scratch = tempfile.mkdtemp(prefix='crf_lr-config-')
        config_path = os.path.join(scratch, 'bert_config.json')
        with open(config_path, 'w', encoding='utf-8') as f:
            json.dump(random_config(*sizes[:2], _vocab_size(vocab_path), *sizes[2:]), f)
        model_type = 'bert'
    elif isinstance(spec, str) and os.path.isdir(spec):
        config_path = _config_in(spec)
        checkpoint = tf.train.latest_checkpoint(spec)
        if checkpoint is None:
            indexes = sorted(f for f in os.listdir(spec) if f.endswith('.index'))
            if not indexes:
                raise FileNotFoundError(f'{spec}: no TF checkpoint (*.index); to train from a '
                                        f'random initialisation pass the config JSON instead')
            checkpoint = os.path.join(spec, indexes[0][:-len('.index')])
        vocab_path = vocab or os.path.join(spec, 'vocab.txt')
        model_type = _model_type(config_path)
    elif isinstance(spec, str) and spec.endswith('.json') and os.path.isfile(spec):
        config_path = spec
        vocab_path = vocab or os.path.join(os.path.dirname(spec), 'vocab.txt')
        model_type = _model_type(config_path)
    else:
        raise ValueError(f'--encoder {spec!r}: expected one of {sorted(PACKAGED)}, a converted '
                         f"checkpoint folder, a config .json, or 'random:LAYERS:HIDDEN' "
                         f'(no such file or folder)')
    if not os.path.isfile(vocab_path):
        raise FileNotFoundError(f'vocabulary not found: {vocab_path} (pass --vocab)')
    try:
        encoder = build_encoder(config_path, checkpoint, model=model_type, num_layers=layers)
        with open(config_path, encoding='utf-8') as f:
            config = json.load(f)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    info = dict(encoder=spec, model_type=model_type, pretrained=checkpoint is not None,
                layers=layers or config['num_hidden_layers'], hidden=config['hidden_size'],
                parameters=int(encoder.count_params()))
    return encoder, vocab_path, info


def position_limit(encoder):
    """The most tokens ``encoder`` (a bert4keras model) has learned positions for: its
    ``max_position_embeddings`` (squared for bert4keras's hierarchical positions); None where
    nothing limits them (no absolute positions).

        >>> position_limit(load_encoder('random:1:312')[0])       # 512
    """
    from bert4keras.layers import PositionEmbedding
    limits = [layer.input_dim ** (2 if layer.hierarchical else 1) for layer in encoder.layers
              if isinstance(layer, PositionEmbedding)]
    return min(limits) if limits else None


def check_maxlen(encoder, maxlen, name):
    """ValueError, in one line, where windows of ``maxlen`` tokens would run past the positions
    ``encoder`` (called ``name``) learned: TensorFlow would stop at the first such window.

        >>> check_maxlen(load_encoder('random:1:312')[0], 1200, 'random:1:312')   # ValueError
    """
    limit = position_limit(encoder)
    if limit is not None and maxlen > limit:
        raise ValueError(f"--maxlen {maxlen} is longer than the {limit} positions {name} has "
                         f"learned (its max_position_embeddings): use --maxlen {limit} or less")
