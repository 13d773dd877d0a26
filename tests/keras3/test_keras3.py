"""crf_lr.keras3 against the tf-keras layers: reference values computed here (the tf-keras side),
checked by tests/keras3/keras3_backend_checks.py in one fresh Keras 3 process per backend; and the
separation of the two sides (neither imports the other's Keras)."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers.paths import REPO

ROOT = str(REPO)


def _environment(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ('TF_USE_LEGACY_KERAS', 'TF_KERAS')}
    env['PYTHONPATH'] = os.pathsep.join([ROOT] + [p for p in [env.get('PYTHONPATH')] if p])
    env.update(extra)
    return env


def _run(args, **extra):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=_environment(**extra),
                          capture_output=True, text=True, timeout=600)


def _crf_reference(rng):
    import tensorflow as tf
    from crf_lr.model.crf import ConditionalRandomField
    from helpers.crf_oracles import random_case
    batch, n, num_labels, multiplier = 6, 7, 4, 10.0
    case = random_case(rng, batch, n, num_labels, boundary=True, constrained=True)
    mask = np.arange(n) < case['lengths'][:, None]
    stored = [case['transitions'] / multiplier, case['start'] / multiplier,
              case['end'] / multiplier]
    crf = ConditionalRandomField(lr_multiplier=multiplier, boundary_scores=True,
                                 allowed_transitions=case['allowed_transitions'],
                                 allowed_starts=case['allowed_starts'],
                                 allowed_ends=case['allowed_ends'])
    crf.build((None, None, num_labels))
    crf.set_weights([w.astype('float32') for w in stored])
    tags = rng.integers(0, num_labels, size=(batch, n))
    emissions = tf.Variable(case['emissions'].astype('float32'))
    with tf.GradientTape() as tape:
        y_pred = crf(emissions, mask=tf.constant(mask))
        sparse = crf.sparse_loss(tags, y_pred)
        total = tf.reduce_sum(sparse)
    gradients = tape.gradient(total, [emissions] + crf.trainable_weights)
    paths = -np.ones((batch, n), dtype=np.int64)
    for b, path in enumerate(crf.decode(y_pred.numpy())):
        paths[b, :len(path)] = path
    return {'crf_emissions': emissions.numpy(), 'crf_mask': mask, 'crf_tags': tags,
            'crf_trans': stored[0], 'crf_start': stored[1], 'crf_end': stored[2],
            'crf_multiplier': multiplier, 'crf_allowed': case['allowed_transitions'],
            'crf_allowed_starts': case['allowed_starts'], 'crf_allowed_ends': case['allowed_ends'],
            'crf_y_pred': y_pred.numpy(), 'crf_sparse_loss': sparse.numpy(),
            'crf_dense_loss': crf.dense_loss(tf.one_hot(tags, num_labels), y_pred).numpy(),
            'crf_accuracy': float(crf.sparse_accuracy(tags, y_pred)),
            'crf_grad_emissions': gradients[0].numpy(), 'crf_grad_trans': gradients[1].numpy(),
            'crf_grad_start': gradients[2].numpy(), 'crf_grad_end': gradients[3].numpy(),
            'crf_paths': paths, 'crf_paths_tf': crf.decode_tf(y_pred).numpy()}


def _pointer_reference(rng):
    import tensorflow as tf
    from crf_lr.model import global_pointer, losses
    batch, n, hidden, heads, size, entities = 3, 6, 8, 2, 4, 3
    lengths = np.array([6, 4, 1])
    mask = np.arange(n) < lengths[:, None]
    sparse = -np.ones((batch, heads, entities, 2), dtype=np.int64)
    dense = np.zeros((batch, heads, n, n), dtype=np.float32)
    for b in range(batch):
        for t in range(heads):
            for e in range(rng.integers(0, entities + 1)):
                start = rng.integers(0, lengths[b])
                end = rng.integers(start, lengths[b])
                if dense[b, t, start, end] == 0:
                    sparse[b, t, e] = start, end
                    dense[b, t, start, end] = 1
    out = {'gp_inputs': rng.normal(size=(batch, n, hidden)).astype('float32'), 'gp_mask': mask,
           'gp_sparse': sparse, 'gp_dense': dense}
    for name in ('GlobalPointer', 'EfficientGlobalPointer'):
        layer = getattr(global_pointer, name)(heads=heads, head_size=size)
        layer.build((None, None, hidden))
        weights = [rng.normal(size=w.shape).astype('float32') * 0.5 for w in layer.get_weights()]
        layer.set_weights(weights)
        inputs = tf.Variable(out['gp_inputs'])
        with tf.GradientTape() as tape:
            scores = layer(inputs, mask=tf.constant(mask))
            loss = losses.sparse_global_pointer_crossentropy(sparse, scores)
            total = tf.reduce_sum(loss)
        gradients = tape.gradient(total, [inputs] + layer.trainable_weights)
        out.update({f'{name}_weight_{i}': w for i, w in enumerate(weights)})
        out.update({f'{name}_grad_{i}': g.numpy() for i, g in enumerate(gradients)})
        out.update({f'{name}_scores': scores.numpy(), f'{name}_sparse_loss': loss.numpy(),
                    f'{name}_dense_loss': losses.global_pointer_crossentropy(dense, scores).numpy(),
                    f'{name}_f1': float(losses.global_pointer_f1(dense, scores)),
                    f'{name}_sparse_f1': float(losses.sparse_global_pointer_f1(sparse, scores))})
    return out


def _mcce_reference(rng):
    import tensorflow as tf
    from crf_lr.model import losses
    logits = rng.normal(size=(4, 9)).astype('float32') * 3
    logits[0, :4] = -np.inf
    logits[1, :] = -np.inf
    labels = (rng.random((4, 9)) < 0.3).astype('float32')
    indices = np.array([[0, 3, -1], [2, -1, -1], [0, 5, 8], [-1, -1, -1]])
    out = {'mcce_logits': logits, 'mcce_labels': labels, 'mcce_indices': indices}
    for name, function in (('dense',
                            lambda x: losses.multilabel_categorical_crossentropy(labels, x)),
                           ('sparse', lambda x: losses.sparse_multilabel_categorical_crossentropy(
                               indices, x)),
                           ('sparse_zero',
                            lambda x: losses.sparse_multilabel_categorical_crossentropy(
                               indices, x, mask_zero=True))):
        x = tf.Variable(logits)
        with tf.GradientTape() as tape:
            value = function(x)
            total = tf.reduce_sum(value)
        out[f'mcce_{name}'] = value.numpy()
        out[f'mcce_{name}_grad'] = tape.gradient(total, x).numpy()
    return out


OPTIMIZER_SETTINGS = [
    dict(learning_rate=0.01, bias_correction=True, lr_multipliers={'CRF': 100.0}),
    dict(learning_rate=0.01, bias_correction=False, lr_multipliers={'CRF': 10.0, 'Dense': 0.5},
         weight_decay_rate=0.1, warmup_steps=2, total_steps=5, min_lr_ratio=0.1),
]


def _optimizer_reference(rng):
    import tensorflow as tf
    from crf_lr.training.optimizers import LayerwiseAdam
    initial = [rng.normal(size=(3, 3)).astype('float32'), rng.normal(size=(4,)).astype('float32')]
    gradients = [[rng.normal(size=w.shape).astype('float32') for w in initial] for _ in range(4)]
    out = {f'adam_initial_{i}': w for i, w in enumerate(initial)}
    out.update({f'adam_gradient_{k}_{i}': g for k, step in enumerate(gradients)
                for i, g in enumerate(step)})
    for s, setting in enumerate(OPTIMIZER_SETTINGS):
        variables = [tf.Variable(initial[0], name='CRF/trans'),
                     tf.Variable(initial[1], name='Dense/kernel')]
        optimizer = LayerwiseAdam(**setting)
        for step in gradients:
            optimizer.apply_gradients(zip([tf.constant(g) for g in step], variables))
        out.update({f'adam_{s}_final_{i}': v.numpy() for i, v in enumerate(variables)})
    return out


def _encoder_reference(config_path, tmp_path):
    import tensorflow as tf
    from bert4keras.models import build_transformer_model
    bert = build_transformer_model(config_path, model='bert', return_keras_model=False)
    prefix = str(tmp_path / 'tiny.ckpt')
    bert.save_weights_as_checkpoint(prefix)
    reader = tf.train.load_checkpoint(prefix)
    token_ids = np.array([[2, 5, 9, 17, 3, 0, 0], [2, 11, 3, 0, 0, 0, 0]])
    segment_ids = np.zeros_like(token_ids)
    out = {'bert_token_ids': token_ids,
           'bert_hidden': bert.model.predict([token_ids, segment_ids], verbose=0),
           'bert_names': np.array(sorted(reader.get_variable_to_shape_map()))}
    out.update({'bert/' + name: reader.get_tensor(name) for name in out['bert_names']})
    return out


def _tokenizer_reference():
    from crf_lr.model.pretrained import packaged_source
    from crf_lr.data.pieces import UnitEncoder
    try:
        vocab_path = os.path.join(packaged_source('minilm-en'), 'vocab.txt')
    except FileNotFoundError:
        return {}
    words = ['Unaffable', 'naïve', 'U.S.', "don't", '北京', 'x\x1cy', 'Ωmega', '\x00', 'ÜNÏCÖDÉ',
             'https://a.b/c?d=1', '123,456.78', 'EU', 'rejects', 'German', 'lamb', '--', 'zzzqqq']
    encoder = UnitEncoder(vocab_path, units='words')
    ids = [encoder.pieces(word) for word in words]
    return {'tok_vocab': vocab_path, 'tok_words': np.array(words, dtype=object),
            'tok_ids': np.array([json.dumps(i) for i in ids])}


@pytest.fixture(scope='module')
def reference(tmp_path_factory, tiny_bert_config_path):
    """The tf-keras layers' values on fixed weights and inputs, saved to an .npz file."""
    tmp_path = tmp_path_factory.mktemp('keras3_reference')
    rng = np.random.default_rng(2024)
    values = {**_crf_reference(rng), **_pointer_reference(rng), **_mcce_reference(rng),
              **_optimizer_reference(rng), **_encoder_reference(tiny_bert_config_path, tmp_path),
              **_tokenizer_reference(),
              'optimizer_settings': json.dumps(OPTIMIZER_SETTINGS),
              'bert_config': open(tiny_bert_config_path).read()}
    path = tmp_path / 'reference.npz'
    np.savez(path, **{k: np.asarray(v) for k, v in values.items()})
    return str(path)


BACKENDS = [('tensorflow', 'tensorflow'), ('jax', 'jax'), ('torch', 'torch')]


@pytest.mark.slow
@pytest.mark.parametrize('backend, module', BACKENDS, ids=[b for b, _ in BACKENDS])
def test_keras3_backend_matches_tf_keras_and_oracles(backend, module, reference):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f'the {backend} backend is not installed ({module} is not importable); '
                    f'`make install` installs jax, PyTorch is optional (see docs/keras3.md)')
    result = _run(['-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-x',
                   os.path.join('tests', 'keras3', 'keras3_backend_checks.py')],
                  KERAS_BACKEND=backend, CRF_LR_KERAS3_REFERENCE=reference)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert ' passed' in result.stdout and ' skipped' not in result.stdout, result.stdout[-3000:]


SEPARATION = r'''
import sys
side = sys.argv[1]
if side == 'tf-keras':
    import crf_lr.layers
    import crf_lr.model.crf
    import crf_lr.model.global_pointer
    import crf_lr.model.losses
    import crf_lr.training.optimizers
    forbidden = ('crf_lr.keras3', 'keras.src')     # jax itself: TensorFlow 2.21 may import it
    assert sys.modules['keras'].__name__.startswith('tf_keras') or \
        getattr(sys.modules['keras'], '__version__', '3')[0] == '2', sys.modules['keras']
else:
    import crf_lr.keras3, crf_lr.keras3.encoder, crf_lr.keras3.tokenizer, keras
    assert keras.__version__.startswith('3.'), keras.__version__
    forbidden = ('tf_keras', 'bert4keras', 'crf_lr.compat', 'crf_lr.model.crf',
                 'crf_lr.model.losses', 'crf_lr.training.optimizers', 'crf_lr.model.global_pointer')
    if side == 'jax':
        forbidden += ('tensorflow',)
loaded = sorted(m for m in sys.modules if m.split('.')[0] in {f.split('.')[0] for f in forbidden}
                and any(m == f or m.startswith(f + '.') for f in forbidden))
print('FORBIDDEN', loaded)
assert not loaded, loaded
'''




@pytest.mark.parametrize('side', ['tf-keras', 'tensorflow', 'jax'])
def test_each_side_imports_only_its_own_keras(side):
    if side == 'jax' and importlib.util.find_spec('jax') is None:
        pytest.skip('jax is not installed')
    extra = {} if side == 'tf-keras' else {'KERAS_BACKEND': side}
    result = _run(['-c', SEPARATION, side], **extra)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert 'FORBIDDEN []' in result.stdout


def test_docs_example_imports_in_their_order_on_tensorflow():
    """docs/keras3.md's example imports, in its order, run on the TensorFlow backend (where
    ``import keras`` before crf_lr raised ImportError) and keep tf_keras out."""
    text = (REPO / 'docs' / 'keras3.md').read_text(encoding='utf-8')
    example = text.split('```python\n', 1)[1].split('```', 1)[0]
    imports = [line for line in example.splitlines() if line.startswith(('import ', 'from '))]
    assert 'import keras' in imports, imports
    code = '\n'.join(imports + ["import sys; assert keras.__version__.startswith('3.'); "
                                 "assert 'tf_keras' not in sys.modules"])
    result = _run(['-c', code], KERAS_BACKEND='tensorflow')
    assert result.returncode == 0, result.stderr[-3000:]


CONLL_SAMPLE = [[('EU', 'B-ORG'), ('rejects', 'O'), ('German', 'B-MISC'), ('lamb', 'O')],
                [('Peter', 'B-PER'), ('runs', 'O'), ('in', 'O'), ('London', 'B-LOC')],
                [('German', 'B-MISC'), ('Peter', 'B-PER'), ('rejects', 'O'), ('EU', 'B-ORG')],
                [('London', 'B-LOC'), ('lamb', 'O'), ('runs', 'O')]]


def write_tiny_hf_bert(folder, words):
    """A Hugging Face BERT folder (config.json, vocab.txt, model.safetensors): 1 layer, hidden
    16, random weights of every tensor crf_lr.model.convert expects."""
    from crf_lr.model.convert import _variable_table, google_config
    from helpers.checkpoint_files import write_safetensors
    os.makedirs(folder)
    vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + sorted({w.lower() for w in words})
    with open(os.path.join(folder, 'vocab.txt'), 'w') as f:
        f.write('\n'.join(vocab) + '\n')
    hf_config = dict(model_type='bert', vocab_size=len(vocab), hidden_size=16,
                     num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     hidden_act='gelu', max_position_embeddings=32, type_vocab_size=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    with open(os.path.join(folder, 'config.json'), 'w') as f:
        json.dump(hf_config, f)
    rng, tensors = np.random.default_rng(0), {}
    for hf, _, kind, shape, optional in _variable_table('bert', google_config(hf_config)[1]):
        if optional:
            continue
        weight = rng.normal(scale=0.1, size=shape[::-1] if kind == 'dense' else shape)
        tensors[f'bert.{hf}.weight'] = (np.ones(shape, 'float32') if kind == 'norm'
                                        else weight.astype('float32'), None)
        if kind != 'embedding':
            tensors[f'bert.{hf}.bias'] = (np.zeros(shape[-1:], 'float32'), None)
    write_safetensors(os.path.join(folder, 'model.safetensors'), tensors)


@pytest.mark.slow
def test_ner_example_learns_a_tiny_sample_on_jax(tmp_path):
    if importlib.util.find_spec('jax') is None:
        pytest.skip('jax is not installed: `make install` installs it')
    sample = tmp_path / 'sample.txt'
    sample.write_text('\n\n'.join('\n'.join(f'{w} X {t}' for w, t in s) for s in CONLL_SAMPLE * 4)
                      + '\n')
    write_tiny_hf_bert(str(tmp_path / 'bert'), [w for s in CONLL_SAMPLE for w, _ in s])
    output = tmp_path / 'results.json'
    result = _run([os.path.join('examples', 'task_ner_keras3.py'), '--train-file', str(sample),
                   '--test-file', str(sample), '--encoder', str(tmp_path / 'bert'),
                   '--maxlen', '12', '--batch-size', '4', '--epochs', '6', '--lr', '1e-2',
                   '--output', str(output)])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report['backend'] == 'jax' and report['test_sentences'] == 16
    assert report['epochs'][-1]['loss'] < report['epochs'][0]['loss'], report['epochs']
    assert report['test_f1'] >= 0.9, report['epochs']          # the training sentences themselves
