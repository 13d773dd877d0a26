"""A compiled model reloads with ``load_model(path, compile=True)`` and no ``custom_objects`` in
every format, predicts the same and keeps learning: for each head (CRF, GlobalPointer, Efficient
GlobalPointer, softmax) x each format (.h5, SavedModel, .keras). The oracle is the uninterrupted
run of the saving model (where the format keeps the optimizer state) or a run restarted from the
saved weights with a fresh optimizer (.keras, which keeps none and warns)."""
import os
import warnings

import numpy as np
import pytest

from bert4keras.layers import FeedForward

from crf_lr.compat import keras, tf
from crf_lr.model.crf import ConditionalRandomField
from crf_lr.model.global_pointer import EfficientGlobalPointer, GlobalPointer
from crf_lr.model import losses
from crf_lr.model.losses import sparse_global_pointer_crossentropy, sparse_global_pointer_f1
from crf_lr.training.optimizers import LayerwiseAdam
from crf_lr.model.serialization import LayerMethod, OptimizerStateWarning
from helpers.paths import FIXTURES

HEADS = ('crf', 'global_pointer', 'efficient_global_pointer', 'softmax')
FORMATS = {'h5': 'model.h5', 'savedmodel': 'savedmodel', 'keras': 'model.keras'}
X = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 1, 2, 0], [11, 12, 0, 0, 0, 0], [5, 5, 6, 7, 8, 9],
              [2, 3, 4, 0, 0, 0], [9, 8, 7, 6, 5, 4], [1, 13, 14, 15, 0, 0], [6, 2, 0, 0, 0, 0]])
TAGS = X % 3
SPANS = np.full((len(X), 2, 2, 2), -1)                     # (batch, types, entities, start/end)
for b, row in enumerate(X):
    length = int((row > 0).sum())
    SPANS[b, 0, 0] = (0, 1)
    SPANS[b, 1, 0] = (length - 1, length - 1)


def build(head):
    """Embedding (mask_zero) -> Dense -> head, compiled as the README shows; the head's layer."""
    keras.utils.set_random_seed(0)
    token_ids = keras.Input((None,), dtype='int32')
    hidden = keras.layers.Embedding(16, 8, mask_zero=True)(token_ids)
    hidden = keras.layers.Dense(8, activation='tanh', name='Encoder')(hidden)
    hidden = FeedForward(8, name='Feed-Forward')(hidden)   # builds two unnamed Dense of its own
    metrics = [sparse_global_pointer_f1]
    if head == 'crf':
        layer = ConditionalRandomField(lr_multiplier=10, name='CRF')
        output = layer(keras.layers.Dense(3, name='Tag-Scores')(hidden))
        loss, metrics = layer.sparse_loss, [layer.sparse_accuracy]
    elif head == 'softmax':
        layer = keras.layers.Dense(3, activation='softmax', name='Tag-Scores')
        output = layer(hidden)
        loss, metrics = 'sparse_categorical_crossentropy', ['sparse_categorical_accuracy']
    else:
        cls = GlobalPointer if head == 'global_pointer' else EfficientGlobalPointer
        layer = cls(2, 4, name='Span-Scores')
        output, loss = layer(hidden), sparse_global_pointer_crossentropy
    model = keras.Model(token_ids, output)
    model.compile(LayerwiseAdam(1e-2, lr_multipliers={'Tag-|Span-|CRF': 2.0}, warmup_steps=1,
                                total_steps=20, weight_decay_rate=0.01), loss=loss,
                  metrics=metrics)
    return model, layer


def targets(head):
    return TAGS if head in ('crf', 'softmax') else SPANS


def fit_epoch(model, head):
    """One epoch: two batches of four, in order; the last batch's loss."""
    history = model.fit(X, targets(head), batch_size=4, epochs=1, shuffle=False, verbose=0)
    return history.history['loss'][-1]


def head_weights(model, head):
    name = {'crf': 'CRF', 'softmax': 'Tag-Scores'}.get(head, 'Span-Scores')
    return [w.numpy() for w in model.get_layer(name).trainable_weights]


@pytest.fixture(scope='module', params=HEADS)
def saved(request, tmp_path_factory):
    """A model trained one epoch and saved in every format; its predictions then; its weights
    after one more epoch (uninterrupted) and after one epoch from the saved weights with a fresh
    optimizer (restarted)."""
    head = request.param
    folder = tmp_path_factory.mktemp(head)
    model, _ = build(head)
    fit_epoch(model, head)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for filename in FORMATS.values():
            model.save(os.path.join(folder, filename))
    weights, predictions = model.get_weights(), model.predict(X, verbose=0)
    fit_epoch(model, head)
    restarted, _ = build(head)
    restarted.set_weights(weights)
    fit_epoch(restarted, head)
    return dict(head=head, folder=folder, predictions=predictions, model=model,
                uninterrupted=model.get_weights(), restarted=restarted.get_weights(),
                save_warnings=[w for w in caught if w.category is OptimizerStateWarning])


@pytest.mark.parametrize('fmt', sorted(FORMATS))
def test_reloads_compiled_predicts_the_same_and_keeps_learning(saved, fmt):
    head, path = saved['head'], os.path.join(saved['folder'], FORMATS[fmt])
    keras.layers.Dense(1)    # a layer of the process's own, named 'dense_N' before loading
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        model = keras.models.load_model(path, compile=True)
    load_warnings = [str(w.message) for w in caught if w.category is OptimizerStateWarning]
    assert type(model.optimizer) is LayerwiseAdam
    assert model.optimizer.get_config() == saved['model'].optimizer.get_config()
    np.testing.assert_array_equal(model.predict(X, verbose=0), saved['predictions'])
    # the variables keep their names, so the optimizer's name patterns still match them
    assert [w.name for w in model.weights] == [w.name for w in saved['model'].weights]
    assert 'Feed-Forward/dense/kernel:0' in [w.name for w in model.weights]
    before = head_weights(model, head)
    assert np.isfinite(fit_epoch(model, head))
    for old, new in zip(before, head_weights(model, head)):   # the loaded model's own head
        assert np.abs(new - old).max() > 1e-3
    if fmt == 'keras':   # tf-keras's .keras keeps no legacy optimizer state: warned, restarted
        assert len(load_warnings) == 1 and 'save as .h5 or as a SavedModel' in load_warnings[0]
        assert [str(path) in str(w.message) for w in saved['save_warnings']] == [True]
        expected, iterations = saved['restarted'], 2
    else:
        assert load_warnings == []
        expected, iterations = saved['uninterrupted'], 4
    assert int(model.optimizer.iterations.numpy()) == iterations
    moved = max(np.abs(a - b).max() for a, b in zip(saved['restarted'], saved['uninterrupted']))
    assert moved > 1e-4                  # the two oracles differ: the comparison can fail
    for ours, theirs in zip(model.get_weights(), expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('saved', ['crf'], indirect=True)
def test_crf_losses_and_metrics_are_saved_as_layer_methods(saved):
    model = keras.models.load_model(os.path.join(saved['folder'], FORMATS['h5']))
    assert isinstance(model.loss, LayerMethod) and model.loss.get_config() == {
        'method': 'sparse_loss', 'layer': 'CRF'}
    assert model.loss.layer is None          # loaded: finds the layer through its output
    scores = model.evaluate(X, TAGS, return_dict=True, verbose=0)
    assert set(scores) == {'loss', 'sparse_accuracy'}    # the names of the methods, as before


@pytest.mark.parametrize('habit', [True, False])
def test_old_h5_loads_and_the_bert4keras_habit_trains_the_loaded_crf(habit):
    """An .h5 written by the code before registration ('LayerwiseAdam', loss 'sparse_loss',
    tests/fixtures/make_old_crf_model.py) loads with no custom_objects, or with the bert4keras
    habit of naming another model's CRF methods there; the loaded CRF is trained, the other one
    is not, and the update equals the saving process's own next update (state restored)."""
    fixtures = str(FIXTURES)
    old = np.load(os.path.join(fixtures, 'old_crf_model.npz'))
    other = ConditionalRandomField(lr_multiplier=10, name='CRF')
    other.build((None, None, 3))
    other_before = other.trans.numpy()
    model = keras.models.load_model(
        os.path.join(fixtures, 'old_crf_model.h5'),
        custom_objects={'sparse_loss': other.sparse_loss, 'sparse_accuracy': other.sparse_accuracy}
        if habit else None)
    assert isinstance(model.loss, LayerMethod) and model.loss.method == 'sparse_loss'
    assert type(model.optimizer) is LayerwiseAdam
    assert model.optimizer.lr_multipliers == {'Tag-': 2.0}
    for i, weight in enumerate(model.get_weights()):
        np.testing.assert_array_equal(weight, old[f'saved_{i}'])
    crf = model.get_layer('CRF')
    assert crf is not other
    before = crf.trans.numpy()
    model.train_on_batch(old['x'], old['y'])
    assert np.abs(crf.trans.numpy() - before).max() > 1e-2
    np.testing.assert_array_equal(other.trans.numpy(), other_before)
    assert int(model.optimizer.iterations.numpy()) == 3
    for i, weight in enumerate(model.get_weights()):
        np.testing.assert_allclose(weight, old[f'next_{i}'], rtol=1e-6, atol=1e-7)


def test_a_loaded_layer_method_finds_its_layer_through_casts_or_says_what_is_wrong():
    crf = ConditionalRandomField(name='CRF')
    loaded = LayerMethod.from_config(crf.sparse_accuracy.get_config())   # bound to no layer
    tags = np.array([[0, 1, 2]])
    emissions = tf.constant([[[5., 0, 0], [0, 5, 0], [0, 0, -5]]])

    @tf.function
    def accuracy(emissions):          # Keras's metric wrapper casts y_pred
        return loaded(tags, tf.cast(tf.cast(crf(emissions), 'float64'), 'float32'))

    assert float(accuracy(emissions)) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match=r"sparse_accuracy \(saved for layer 'CRF'\): y_pred "
                                         r"must be the output of a layer"):
        loaded(tags, emissions)


@pytest.mark.parametrize('name', ['multilabel_categorical_crossentropy',
                                  'sparse_multilabel_categorical_crossentropy',
                                  'global_pointer_crossentropy',
                                  'sparse_global_pointer_crossentropy',
                                  'global_pointer_f1', 'sparse_global_pointer_f1'])
def test_losses_are_found_under_their_registered_and_their_old_names(name):
    function = getattr(losses, name)
    assert keras.utils.get_registered_name(function) == f'crf_lr>{name}'
    for saved_as in (f'crf_lr>{name}', name):      # the name before registration: the bare one
        assert keras.losses.get(saved_as) is function


# ------------------------------------------------------------------------------------------
# A fresh process that imports only what the README's save / reload snippet imports

PREAMBLES = {
    # the README's snippet ("Save, reload and keep training") and its Usage line for keras
    'readme': """
from crf_lr.compat import keras
from crf_lr.layers import ConditionalRandomField      # registers crf_lr's layers, losses,
from crf_lr.training.optimizers import LayerwiseAdam           # metrics and optimizers
""",
    # the least: the package alone, Keras from TensorFlow
    'import crf_lr': """
import crf_lr
import tensorflow as tf
keras = tf.keras
"""}
RELOAD_AND_TRAIN = """
import json, os, sys
import numpy as np
folder, filename, heads = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
found = {}
for head in heads:
    x, y = (np.load(os.path.join(folder, f'{head}-{name}.npy')) for name in ('x', 'y'))
    try:
        model = keras.models.load_model(os.path.join(folder, f'{head}-{filename}'))
        same = bool(np.array_equal(model.predict(x, verbose=0),
                                   np.load(os.path.join(folder, f'{head}-predictions.npy'))))
        before = [w.numpy() for w in model.trainable_weights]
        loss = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0).history['loss']
        moved = max(float(np.abs(w.numpy() - b).max())
                    for w, b in zip(model.trainable_weights, before))
        found[head] = dict(optimizer=type(model.optimizer).__name__, same=same, loss=loss[-1],
                           moved=moved)
    except Exception as error:
        found[head] = dict(error=f'{type(error).__name__}: {str(error)[:300]}')
print('RESULT ' + json.dumps(found))
"""


def test_every_head_reloads_compiled_in_a_fresh_process_importing_what_the_readme_shows(
        tmp_path):
    """Every head saved in every format here; per format, a fresh process reloads each compiled,
    predicts as saved and trains two steps: with the README's imports (SavedModel, .keras), and
    with ``import crf_lr`` alone, Keras from TensorFlow (.h5). Before, ``crf_lr.layers`` did not
    register the GlobalPointer losses: all three formats failed for the Efficient GlobalPointer."""
    import json
    import subprocess
    import sys
    for head in HEADS:
        model, _ = build(head)
        fit_epoch(model, head)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')              # .keras: the optimizer-state warning
            for filename in FORMATS.values():
                model.save(str(tmp_path / f'{head}-{filename}'))
        for name, array in (('x', X), ('y', targets(head)),
                            ('predictions', model.predict(X, verbose=0))):
            np.save(tmp_path / f'{head}-{name}.npy', array)
    preamble = {'h5': 'import crf_lr', 'savedmodel': 'readme', 'keras': 'readme'}
    runs = {fmt: subprocess.Popen(
        [sys.executable, '-c', PREAMBLES[preamble[fmt]] + RELOAD_AND_TRAIN, str(tmp_path),
         filename, json.dumps(HEADS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for fmt, filename in FORMATS.items()}
    for fmt, process in runs.items():
        out, err = process.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.startswith('RESULT ')]
        assert process.returncode == 0 and lines, err[-3000:]
        for head, result in json.loads(lines[0][len('RESULT '):]).items():
            assert 'error' not in result, (fmt, head, result)
            assert result['optimizer'] == 'LayerwiseAdam' and result['same'], (fmt, head, result)
            assert np.isfinite(result['loss']) and result['moved'] > 1e-4, (fmt, head, result)
