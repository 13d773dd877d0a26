"""Shared fixtures: tiny bert4keras models built once per session, the real-data folder and
crf_lr's op library."""
import json
import os
import sys

import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)
from helpers.tiny_models import TINY_BERT_CONFIG


@pytest.fixture(autouse=True)
def _process_switches_restored():
    """Every test starts with the process-wide switches the scripts set as their defaults, so
    that a script run in-process (by a test or by a session fixture, set up before this one)
    leaves nothing to the next test of its worker: the numerics checks as the test before found
    them (a check traced into a graph hides static shapes), and Keras's global precision policy
    at float32 (``--precision auto``, the scripts' default, sets mixed_bfloat16 on a CPU with
    native bf16)."""
    from crf_lr.model.numerics import check_numerics_enabled, set_check_numerics
    numerics = check_numerics_enabled()
    compat = sys.modules.get('crf_lr.compat')   # tf-keras, where loaded (not in the Keras 3 checks)
    if compat:
        compat.keras.mixed_precision.set_global_policy('float32')
    yield
    set_check_numerics(numerics)


@pytest.fixture(scope='session')
def data_dir():
    """The shared benchmark folder (``CRF_LR_DATA``); tests that need it skip when it is absent."""
    path = os.environ.get('CRF_LR_DATA')
    if not path or not os.path.isdir(path):
        pytest.skip('real benchmark data not available: set CRF_LR_DATA to the shared data folder')
    return path


@pytest.fixture(scope='session')
def tiny_bert_config_path(tmp_path_factory):
    """Path of a ``bert_config.json`` for a 2-layer, hidden-16 BERT (random init)."""
    path = tmp_path_factory.mktemp('tiny_bert') / 'bert_config.json'
    path.write_text(json.dumps(TINY_BERT_CONFIG))
    return str(path)


@pytest.fixture(scope='session')
def trained_ner_dir(tmp_path_factory):
    """A tiny CRF NER model (1 layer, hidden 16) trained until it finds 张三 (PER) and 北京, 上海
    (LOC) in sentences of the test words, saved as the task scripts save a model."""
    import numpy as np

    from crf_lr.compat import keras
    from crf_lr.model.encoders import load_encoder
    from crf_lr.model.heads import make_head, piece_states
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.training.loop import epoch_batches, make_samples
    from crf_lr.serving.tagger import Tagger
    from crf_lr.data.tagging import spans_to_tags
    from helpers.tiny_models import WORDS, write_tiny_encoder
    root = tmp_path_factory.mktemp('trained_ner')
    kinds = {'张三': 'PER', '北京': 'LOC', '上海': 'LOC'}
    rng = np.random.default_rng(0)
    examples = []
    for _ in range(128):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), 6)]
        ends = np.cumsum([len(word) for word in words]).tolist()
        spans = [(end - len(word), end, kinds[word]) for word, end in zip(words, ends)
                 if word in kinds]
        examples.append((''.join(words), spans_to_tags(spans, ends[-1]), spans))
    keras.utils.set_random_seed(0)
    encoder, vocab, _ = load_encoder(write_tiny_encoder(str(root / 'encoder')))
    head = make_head('crf', ['LOC', 'PER'], 'BIO', lr_multiplier=10)
    model = keras.Model(encoder.inputs, head.build(piece_states(encoder)))
    model.compile(keras.optimizers.Adam(1e-2), loss=head.loss)
    unit_encoder = UnitEncoder(vocab)
    samples = make_samples(examples, unit_encoder, 32, head)
    (inputs, targets), = epoch_batches(samples, len(samples), 0, 0, head)
    model.fit(inputs, targets, batch_size=16, epochs=20, verbose=0)
    Tagger(model, unit_encoder, head, 32).save(str(root / 'model'))
    return str(root / 'model')


@pytest.fixture(scope='session')
def fused_ops():
    """crf_lr's op library (crf_lr.speed.fused_kernels), built where needed. Where it cannot be, the
    test skips if there is no C++ compiler or a GPU is visible, and fails otherwise: a compiler
    that cannot build the kernels is a failure, not a reason to skip."""
    from crf_lr.speed import fused_kernels, native_build
    from crf_lr.compat import tf
    library = fused_kernels._ops()
    if library is None:
        if native_build.compiler() is None or tf.config.list_logical_devices('GPU'):
            pytest.skip(fused_kernels.status())
        pytest.fail(f'{native_build.compiler()} is on the PATH but {fused_kernels.status()}',
                    pytrace=False)
    return library


# The fast tier (`make test-fast`, `pytest -m fast`): the test files that need no TensorFlow. A
# file is named here, not marked in itself, so that the list stands in one place; the hooks below
# keep it honest: a name that matches no file stops the run, and under `-m fast` a test after
# which TensorFlow is in the process fails.
FAST_FILES = frozenset({
    'test_datasets.py', 'test_diagnostics.py', 'test_doc_references.py', 'test_experiments.py',
    'test_house.py', 'test_packaging.py',
    'test_corpus_tail.py', 'test_metrics.py', 'test_posteriors.py', 'test_spans.py',
    'test_splits.py', 'test_user_files.py',
})
_TESTS_ROOT = os.path.dirname(os.path.abspath(__file__))


def _fast_only(config):
    return (config.getoption('markexpr') or '').strip() == 'fast'


def pytest_configure(config):
    present = {name for _, _, names in os.walk(_TESTS_ROOT) for name in names}
    missing = sorted(FAST_FILES - present)
    if missing:
        raise pytest.UsageError(f'tests/conftest.py FAST_FILES names files that are not under '
                                f'tests/: {", ".join(missing)}')


def pytest_ignore_collect(collection_path, config):
    """Under `-m fast`, the other test files are not even imported (importing them would load
    TensorFlow, which is most of their cost)."""
    if (_fast_only(config) and collection_path.suffix == '.py'
            and collection_path.name.startswith('test_')
            and collection_path.name not in FAST_FILES):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in FAST_FILES:
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True)
def _fast_tests_stay_without_tensorflow(request):
    yield
    if (_fast_only(request.config) and request.node.get_closest_marker('fast')
            and 'tensorflow' in sys.modules):
        pytest.fail('TensorFlow is loaded after this test of the fast tier: this test (or one '
                    'before it in its process) imported it; take its file out of FAST_FILES in '
                    'tests/conftest.py or keep TensorFlow out of it', pytrace=False)
