"""The benchmark harness's correctness checks and bookkeeping, on tiny cases (no timing here).

Oracles: bert4keras's CRF loss and ViterbiDecoder, brute-force path enumeration, and the kernels
of a real bert4keras ALBERT model for the FLOP count.
"""
import os
import sys

import numpy as np
import pytest

from helpers.paths import FIXTURES, REPO  # noqa: E402

sys.path.insert(0, str(REPO / 'benchmarks'))

import cases  # noqa: E402
import models  # noqa: E402
import peers  # noqa: E402
from crf_lr.compat import keras, tf  # noqa: E402


@pytest.fixture(scope='module')
def crf_results():
    """(results by implementation, lengths) of every exact CRF loss on a tiny padded batch."""
    emissions, tags, lengths, transitions = cases.crf_inputs(np.random.default_rng(3), 4, 6, 3)
    implementations = cases.crf_loss_implementations(tf, None, transitions)
    args = (tf.constant(emissions), tf.constant(tags), tf.constant(lengths))
    results = {}
    for name, implementation in implementations.items():
        if implementation.exact:
            loss, grads = cases.loss_and_gradient(tf, implementation)(*args)
            results[name] = (loss.numpy(), [g.numpy() for g in grads])
    return results, lengths


def test_crf_check_passes_on_crf_lr_and_bert4keras(crf_results):
    results, lengths = crf_results
    assert {'crf_lr sparse_loss', 'bert4keras sparse_loss', 'bert4keras dense_loss'} <= set(results)
    errors = cases.check_crf_losses(results, lengths)
    assert set(errors) == set(results) - {'crf_lr sparse_loss'}
    assert max(e['loss_rel_err'] for e in errors.values()) < 1e-5


@pytest.mark.parametrize('part', ['loss', 'transition gradient', 'emission gradient'])
def test_crf_check_rejects_a_wrong_implementation(crf_results, part):
    results, lengths = crf_results
    loss, grads = results['bert4keras sparse_loss']
    grads = [g.copy() for g in grads]
    if part == 'loss':
        loss = loss + 0.01 * max(1.0, abs(loss))
    elif part == 'transition gradient':
        grads[1][0, 0] += 0.01
    else:
        grads[0][0, 0, 0] += 0.01         # a real position (the first sequence has full length)
    with pytest.raises(AssertionError, match='bert4keras sparse_loss'):
        cases.check_crf_losses(dict(results, **{'bert4keras sparse_loss': (loss, grads)}), lengths)


def test_crf_check_ignores_emission_gradients_at_padding(crf_results):
    results, lengths = crf_results
    assert lengths.min() < 6, 'the fixture must contain padding'
    loss, grads = results['bert4keras sparse_loss']
    grads = [g.copy() for g in grads]
    row = int(np.argmin(lengths))
    grads[0][row, lengths[row]:] += 5.0
    cases.check_crf_losses(dict(results, **{'bert4keras sparse_loss': (loss, grads)}), lengths)


def test_viterbi_check_against_brute_force_and_a_wrong_decoder():
    rng = np.random.default_rng(4)
    emissions = rng.normal(size=(6, 4, 3)).astype(np.float32)
    lengths = np.array([4, 1, 2, 3, 4, 2], dtype=np.int32)
    transitions = rng.normal(size=(3, 3)).astype(np.float32)
    decoders = cases.viterbi_decoders(tf, None, transitions)
    oracle = peers.brute_force_paths(emissions, transitions, lengths)
    assert cases.check_viterbi(decoders, emissions, lengths, oracle=oracle) == 6
    decoders['reversed'] = lambda e, lens: [p[::-1] for p in decoders['crf_lr NumPy'](e, lens)]
    with pytest.raises(AssertionError, match='reversed'):
        cases.check_viterbi(decoders, emissions, lengths, oracle=oracle)


def test_encoder_flops_count_the_kernels_of_a_real_albert():
    from bert4keras.models import build_transformer_model
    size = dict(hidden=16, intermediate=40, embedding=8)
    encoder = build_transformer_model(model='albert', **dict(
        models.ALBERT_TINY, vocab_size=50, hidden_size=16, intermediate_size=40, embedding_size=8,
        num_attention_heads=2, num_hidden_layers=3, max_position_embeddings=32))
    kernels = {w.name.split('/')[0]: 0 for w in encoder.trainable_weights}
    for w in encoder.trainable_weights:
        if w.name.endswith('kernel:0'):
            kernels[w.name.split('/')[0]] += int(np.prod(w.shape))
    # ALBERT shares one layer's weights across depth; each of the 3 layers computes with them
    layer = kernels['Transformer-MultiHeadSelfAttention'] + kernels['Transformer-FeedForward']
    params = 3 * layer + kernels['Embedding-Mapping'] + 16 * models.NUM_TAGS
    batch, n = 2, 5
    expected = 6 * params * batch * n + 12 * 3 * 16 * n * batch * n
    assert models.encoder_flops(3, batch, n, **size) == expected


@pytest.mark.parametrize('layers,batch,n', [(4, 32, 128), (1, 3, 7), (2, 16, 64)])
def test_matmul_floor_runs_the_products_of_the_counted_flops(layers, batch, n):
    """benchmarks/matmul_floor.py's products: the arithmetic models.encoder_flops counts."""
    from matmul_floor import product_flops, step_products
    assert product_flops(step_products(layers, batch, n)) == models.encoder_flops(layers, batch, n)


def test_random_batch_targets_describe_the_same_entities():
    data = models.random_batch(np.random.default_rng(5), 3, 40)
    lengths = (data['token_ids'] > 0).sum(1)
    assert lengths[0] == 40 and lengths.min() >= 20
    for b in range(3):
        pairs = {(t, int(i), int(j)) for t in range(models.NUM_TYPES)
                 for i, j in data['sparse'][b, t] if i >= 0}
        assert pairs == {tuple(int(x) for x in cell) for cell in np.argwhere(data['dense'][b])}
        for kind, i, j in pairs:
            assert j < lengths[b]
            assert list(data['tags'][b, i:j + 1]) == [1 + 2 * kind] + [2 + 2 * kind] * (j - i)
        assert (data['tags'][b] > 0).sum() == sum(j - i + 1 for _, i, j in pairs)


def test_synthetic_epoch_items_are_sentences_with_cls_sep_and_tags():
    import epochs
    items = epochs.synthetic_items(300, 128)
    lengths = np.array([len(item.token_ids) for item in items])
    assert lengths.min() >= 8 and lengths.max() <= 128 and np.median(lengths) < 80
    assert all(item.token_ids[0] == 2 and item.token_ids[-1] == 3 and
               len(item.labels) == len(item.token_ids) and max(item.labels) < models.NUM_TAGS
               for item in items)


def test_matmul_rate_of_each_dtype():
    from timing import matmul_gflops
    for dtype in ('float32', 'bfloat16'):
        rate = matmul_gflops(tf, size=64, rounds=3, dtype=dtype)
        assert rate['dtype'] == dtype and rate['gflops'] >= rate['gflops_median'] > 0


def test_matmul_call_times_the_whole_product_and_returns_one_element_of_it():
    from timing import matmul_call
    tf.random.set_seed(0)                   # the same inputs as matmul_call draws after it
    a = tf.random.normal([64, 64], seed=1).numpy()
    b = tf.random.normal([64, 64], seed=2).numpy()
    tf.random.set_seed(0)
    assert np.isclose(matmul_call(tf, size=64)(), (a @ b)[0, 0], rtol=1e-4)


def test_machine_names_the_native_bf16_units_and_the_cpus_allowed():
    from timing import machine
    facts = machine()
    assert set(facts['bf16_units']) <= {'avx512_bf16', 'amx_bf16'}
    assert 1 <= facts['cpus_allowed'] <= facts['nproc']


def test_reports_name_the_cpu_family_where_the_results_file_has_it():
    from timing import cpu_name
    assert cpu_name({'cpu_model': 'AMD EPYC', 'cpu_family': '25'}) == 'AMD EPYC (family 25)'
    assert cpu_name({'cpu_model': 'AMD EPYC', 'cpu_family': None}) == 'AMD EPYC'


@pytest.mark.parametrize('arguments, message', [
    (['--heads', 'softmax'], '--heads and --variants narrow --part precision or --part step'),
    (['--part', 'step', '--variants', 'bf16'], '--variants needs float32'),
])
def test_run_rejects_a_narrowing_it_cannot_honour(monkeypatch, capsys, arguments, message):
    import run
    monkeypatch.setattr(sys, 'argv', ['run.py', *arguments])
    with pytest.raises(SystemExit):
        run.main()
    assert message in capsys.readouterr().err


def test_precision_report_quotes_median_min_max_and_ratios():
    import run
    timing = dict(median_ms=200.0, min_ms=180.0, max_ms=260.0, times_ms=[200.0, 180.0, 260.0])
    results = dict(date_utc='2026-11-23 10:00', load_average_start=[1, 1, 1],
                   machine=dict(cpu_model='AMD EPYC', cpu_family='26'),
                   load_average_end=[2, 2, 2], matmul=[dict(gflops=100.0)],
                   matmul_bf16=dict(gflops=200.0, calls=5),
                   precision_step=[dict(shape=dict(layers=4, batch=16, n=128), heads={
                       'softmax': {'float32 / bf16': 2.0, 'float32 step / limit': 1.5,
                                   'float32 step / limit, same rounds': dict(
                                       median=1.45, min=1.4, max=1.52),
                                   'bf16 step / limit': 1.2}},
                       timings={'softmax | float32': timing,
                                'softmax | bf16': dict(timing, median_ms=100.0,
                                                       times_ms=[100.0, 120.0, 90.0])})],
                   first_epoch=[dict(head='crf', layers=4, sentences=1000, batch=16, maxlen=128,
                                     length_multiple=32, shapes=5, epoch_s=[38.5, 30.0],
                                     ratio=1.283, first_steps_s=[6.1, 4.0, 0.3])])
    text = run.report(results)
    assert '(2026-11-23 10:00 UTC, AMD EPYC (family 26), load average 1.0/1.0/1.0' in text
    # per-round float32 / bf16 ratios: 200/100, 180/120, 260/90 = 2.0, 1.5, 2.89
    assert ('| 4 | 16 | 128 | softmax | 200 [180–260] (reference, 1.5× limit; same rounds '
            '1.45 [1.40–1.52]×) |  | '
            '100 [180–260] (2.00 [1.50–2.89]× fp32, 1.2× limit) |') in text
    assert ('| crf | train_on_batch | 4 | 1000 | 16 | 128 | 32 | 5 |  | 38.5 / 30.0 | 1.283 | '
            '6.1, 4.0, 0.3 |') in text


def test_step_over_limit_in_the_same_rounds_scales_each_round_by_its_matmul():
    from precision_steps import _over_limit_per_round
    # a 2048^3 product is 17.18 GFLOP; at 10 ms per product a 171.8 GFLOP step's limit is 100 ms
    timings = {'step': {'times_ms': [150.0, 300.0, 140.0]},
               'matmul': {'times_ms': [10.0, 20.0, 10.0]}}
    summary = _over_limit_per_round(timings, 'step', 'matmul', 2 * 2048 ** 3 / 1e9 * 10)
    assert (summary['median'], summary['min'], summary['max']) == (1.5, 1.4, 1.5)


def test_paired_ratios_are_per_round_median_min_max_and_quartiles():
    from timing import paired_ratios
    # per-round ratios x / ref: 3/2, 4/4, 10/5, 5/10 = 1.5, 1.0, 2.0, 0.5; sorted 0.5, 1, 1.5, 2
    timings = {'ref': {'times_ms': [2.0, 4.0, 5.0, 10.0]}, 'x': {'times_ms': [3.0, 4.0, 10.0, 5.0]}}
    assert paired_ratios(timings, 'ref') == {
        'x': {'median': 1.25, 'min': 0.5, 'max': 2.0, 'q1': 0.875, 'q3': 1.625}}


def test_probe_fields_quote_each_side_and_the_per_round_ratio(tmp_path):
    from timing import probe_fields, write_lines
    timings = {'before': dict(median_ms=4.0, min_ms=3.0, max_ms=10.0, times_ms=[3.0, 4.0, 10.0]),
               'now': dict(median_ms=4.0, min_ms=2.0, max_ms=5.0, times_ms=[2.0, 4.0, 5.0])}
    fields = probe_fields(timings, 'before', 'now')
    assert fields['before ms'] == [4.0, 3.0, 10.0] and fields['now ms'] == [4.0, 2.0, 5.0]
    assert fields['before_over_now']['median'] == 1.5        # rounds: 1.5, 1.0, 2.0
    write_lines(tmp_path / 'probe.json', ['{"a": 1}', '{"a": 2}'])
    assert (tmp_path / 'probe.json').read_text() == '{"a": 1}\n{"a": 2}\n'


@pytest.mark.skipif(not (REPO / '.git').is_dir(),
                    reason='revision_probe reads old modules from git; no .git here')
def test_revision_probe_loads_the_pointer_layers_of_a_revision_beside_the_current_ones():
    import crf_lr.model.global_pointer as current
    from revision_probe import module_at
    old = module_at('HEAD')
    assert keras.utils.get_registered_object('crf_lr>GlobalPointer') is current.GlobalPointer
    x = tf.constant(np.random.default_rng(5).normal(size=(2, 6, 8)), 'float32')
    theirs, ours = old.GlobalPointer(3, 4), current.GlobalPointer(3, 4)
    theirs(x), ours(x)
    ours.set_weights(theirs.get_weights())
    np.testing.assert_array_equal(theirs(x).numpy(), ours(x).numpy())     # a working copy


def test_cells_quote_median_min_max():
    import run
    assert run.ranged(dict(median_ms=0.8051, min_ms=0.7, max_ms=123.4)) == '0.805 [0.7–123]'
    assert run.ratio_cell(dict(median=1.254, min=0.5, max=12.0)) == '1.25 [0.50–12.00]'
    matmul = dict(size=1000, median_ms=4.0, min_ms=2.0, max_ms=8.0, gflops=1000.0,
                  gflops_median=500.0)
    assert run.gflops_cell(matmul) == '500.0 [250.0–1000.0]'


def test_targets_judge_on_the_per_round_median_and_quote_min_max():
    import run

    def ratio(median, low, high):
        return dict(median=median, min=low, max=high)

    results = dict(
        crf_loss=[dict(shape=dict(n=256, labels=7), ratios={
            'bert4keras sparse / crf_lr sparse': ratio(5.2, 4.0, 6.0),
            'crf_lr sparse / softmax': ratio(3.0, 2.0, 5.0)})],
        viterbi=dict(ratios={}),
        train_step=[dict(shape=dict(layers=1, n=128),
                         ratios={'CRF (crf_lr) / softmax': ratio(1.05, 0.9, 1.3)}),
                    dict(shape=dict(layers=1, n=256),
                         ratios={'CRF (crf_lr) / softmax': ratio(1.2, 1.0, 1.4)})])
    rows = {row['target'].split(':')[0]: row for row in run.targets(results)}
    headline = rows['CRF loss+grad n=256, 7 labels']
    assert (headline['required'], headline['measured'], headline['met']) == (
        '≥ 5', '5.20 [4.00–6.00]', True)
    softmax = [r for r in rows.values() if 'softmax' in r['target'] and 'CRF loss' in r['target']]
    assert softmax[0]['measured'] == '3.00 [2.00–5.00]' and softmax[0]['met']
    step = rows['Training step']
    assert step['measured'] == '1.05 [0.90–1.30], 1.20 [1.00–1.40]' and not step['met']


def test_report_restates_a_run_that_predates_min_max():
    """The fixture: benchmarks/results.json of commit 905f04e (ratios of medians, no max_ms),
    trimmed to one CRF shape (256, 7 labels) and the 4-layer steps at n=64 and n=128."""
    import json
    import run
    path = FIXTURES / 'bench_results_before_min_max.json'
    with open(path, encoding='utf-8') as f:
        old = json.load(f)
    assert run.predates_min_max(old) and 'max_ms' not in old['viterbi']['timings']['crf_lr NumPy']
    text = run.report(old)
    assert 'This run predates that quoting' in text
    assert '| crf_lr NumPy | 7.51 [7.14–12] | 34,086 | 1.52 |' in text
    new = run.restated(old)
    assert not run.predates_min_max(new)
    assert run.report(new) == text.replace(' This run predates that quoting: its ratios and '
                                           'targets are restated here from the per-call times '
                                           'it kept.', '')


def test_a_crf_loss_case_checks_the_kernel_and_ops_forms_and_reports_alone():
    import run
    case = cases.crf_loss_case(tf, None, n=16, labels=4, rounds=3)
    assert {'crf_lr sparse_loss [XLA pass]', 'crf_lr sparse_loss [TensorFlow ops]'} <= set(
        case['check'])                                    # checked against crf_lr's loss
    from crf_lr.speed.fused_kernels import status
    assert case['kernels'] == status()                # whether crf_lr's loss ran the kernel
    assert 'crf_lr sparse: XLA pass / one kernel' in case['ratios']
    text = run.report({'crf_loss': [case], 'date_utc': '2026-11-26 17:19',
                       'machine': {'cpu_model': 'a CPU'}})
    assert text.startswith('CRF loss cases (2026-11-26 17:19 UTC, a CPU)')
    assert '| 16 | 4 |' in text and 'TensorFlow ops / one kernel' in text
    assert f'one kernel where it is built ({status()})' in text


def test_confidence_decoding_case_checks_then_times_and_reports():
    import confidence
    import run
    case = confidence.decoding_case(tf, rounds=3)
    assert case['shape']['entities'] > 0
    assert set(case['timings']) >= {'Viterbi (NumPy)', 'marginals (NumPy)',
                                    'entity + path probabilities (NumPy)',
                                    'marginals (in-graph, XLA)'}
    text = confidence.report([case], run.ranged, run.ratio_cell, run.markdown_table)
    assert '| Viterbi (NumPy) | ' in text and 'decode with / without confidences = ' in text
    assert 'decode of words with / without confidences = ' in text
    assert 0 < case['shape']['word_entities'] < case['shape']['entities']   # words: fewer units


def test_step_profile_sorts_a_profiled_step_into_op_kinds():
    """A real profiler trace of a tiny step whose ops are known: a bf16 matmul fed by casts,
    a layer-norm-scoped mean, an element-wise op, an 'Adam' update and a head op."""
    import step_profile
    weights = tf.Variable(tf.ones([64, 64]))

    @tf.function
    def step(x):
        with tf.name_scope('model/Transformer-FeedForward'):
            y = tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(weights, tf.bfloat16)),
                        tf.float32)
            y = tf.exp(-tf.abs(y))
        with tf.name_scope('model/Transformer-FeedForward-Norm'):
            y = y - tf.reduce_mean(y, axis=-1, keepdims=True)
        with tf.name_scope('model/conditional_random_field'):
            loss = tf.reduce_sum(tf.exp(y))
        with tf.name_scope('Adam'):
            weights.assign_sub(tf.fill([64, 64], loss * 1e-9))
        return loss

    x = tf.ones([64, 64])
    step(x).numpy()
    wall, kinds, types, places = step_profile.profile_step(tf, step, (x,), steps=2)
    assert wall > 0 and set(kinds) == set(step_profile.KINDS)
    for kind in ('matmul', 'cast', 'element-wise', 'layer norm', 'head + loss', 'optimizer'):
        assert kinds[kind] > 0, (kind, kinds, types)
    assert kinds['softmax'] == kinds['embedding'] == kinds['xla'] == 0
    assert {'Transformer-FeedForward: _MklMatMul', 'Transformer-FeedForward-Norm: Sub'} <= set(
        places), sorted(places)
    assert any(place.startswith('conditional_random_field: ') for place in places), sorted(places)


@pytest.mark.parametrize('name, place', [
    ('gradient_tape/model_1/Transformer-3-FeedForward/dense_1/mul_2',
     'Transformer-FeedForward/dense (gradient)'),
    ('model/Transformer-FeedForward/dense/Erf', 'Transformer-FeedForward/dense'),
    ('model/Transformer-MultiHeadSelfAttention-Norm/mul/Mul',
     'Transformer-MultiHeadSelfAttention-Norm/mul'),
    ('model/conditional_random_field/Sum', 'conditional_random_field'),
    ('LayerwiseAdam/update_4/ResourceApplyAdam', 'LayerwiseAdam'),
    ('AddN_3', 'AddN'),
])
def test_op_place_names_the_block_and_sublayer_without_layer_numbers(name, place):
    from step_profile import op_place
    assert op_place(name) == place


def test_op_kind_of_the_encoder_head_and_optimizer_ops():
    from step_profile import op_kind
    assert op_kind('gradient_tape/model_1/Transformer-FeedForward/dense/Tensordot/MatMul',
                   '_MklMatMul') == 'matmul'
    assert op_kind('model_1/Transformer-MultiHeadSelfAttention/Softmax', '_MklSoftmax') == 'softmax'
    assert op_kind('gradient_tape/model_1/Transformer-FeedForward-Norm/mul', 'Mul') == 'layer norm'
    assert op_kind('model_1/Transformer-FeedForward/dense/Cast', 'Cast') == 'cast'
    assert op_kind('model_1/Embedding-Token/embedding_lookup', 'ResourceGather') == 'embedding'
    assert op_kind('Adam/Cast_3', 'Cast') == 'optimizer'
    assert op_kind('model_1/conditional_random_field/Reshape', 'Reshape') == 'head + loss'
    assert op_kind('AddN_3', 'AddN') == 'element-wise'
    assert op_kind('model_1/conditional_random_field/StatefulPartitionedCall',
                   '_XlaRun') == 'xla'


def test_layer_norm_probe_matches_bert4keras_layer_norm_and_its_gradients():
    """The probe's fused layer norm (float32 statistics) against bert4keras's own, same weights."""
    import bert4keras.layers as layers
    from layer_norm_probe import fused_layer_norm

    class Probed(layers.LayerNormalization):
        pass
    fused_layer_norm(Probed, layers.ScaleOffset)
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 5, 8)) * 4 + 1, tf.float32)
    reference, probed = layers.LayerNormalization(), Probed()
    reference.build(x.shape)
    probed.build(x.shape)
    probed.set_weights([w + 0.5 for w in reference.get_weights()])
    reference.set_weights(probed.get_weights())
    probed._fused = True
    graph = tf.function(probed).get_concrete_function(x).graph
    assert 'FusedBatchNormV3' in {op.type for op in graph.get_operations()}
    results = []
    for layer in (reference, probed):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * tf.range(8, dtype=tf.float32))
        results.append([y.numpy()] + [g.numpy() for g in tape.gradient(
            loss, [x] + layer.trainable_weights)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- end to end: crf_lr vs PyTorch

E2E_WORDS = ['john', 'lives', 'in', 'paris', 'new', 'york', 'play', '##ing', 'the', 'game', 'at',
             'mary', 'went', 'to', 'city', '.']


def _tiny_hf_folders(root):
    """A random 2-layer BERT saved by transformers, and the same weights converted by crf_lr."""
    import transformers
    from crf_lr.model.convert import convert_checkpoint
    hf = str(root / 'hf')
    config = transformers.BertConfig(vocab_size=5 + len(E2E_WORDS), hidden_size=16,
                                     num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=128)
    transformers.BertModel(config).save_pretrained(hf)
    with open(os.path.join(hf, 'vocab.txt'), 'w') as f:
        f.write('\n'.join(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + E2E_WORDS) + '\n')
    convert_checkpoint(hf, str(root / 'converted'))
    return hf, str(root / 'converted')


def _sentences(texts):
    """Examples (``.tokens``, ``.tags``, ``.spans``) of 'word/TAG' texts."""
    from types import SimpleNamespace

    from crf_lr.data.tagging import get_scheme
    examples = []
    for text in texts:
        words, tags = zip(*(item.split('/') for item in text.split()))
        examples.append(SimpleNamespace(tokens=list(words), tags=list(tags),
                                        spans=get_scheme('BIO').decode(list(tags), strict=True)))
    return examples


@pytest.fixture(scope='module')
def e2e_job(tmp_path_factory):
    """A tiny end-to-end job: 5 training sentences (a word of two pieces among them), 3 test."""
    import e2e_torch
    absent = e2e_torch.missing()
    if absent:
        pytest.skip(f'the PyTorch peers of benchmarks/end_to_end.py are not installed: '
                    f'{", ".join(absent)} (pip install -e ".[bench]")')
    import e2e_job
    hf, converted = _tiny_hf_folders(tmp_path_factory.mktemp('e2e'))
    train = _sentences(['john/B-PER lives/O in/O paris/B-LOC ./O',
                        'mary/B-PER went/O to/O new/B-LOC york/I-LOC',
                        'playing/O the/O game/O at/O the/O city/O',
                        'john/B-PER mary/B-PER ./O',
                        'the/O new/B-ORG york/I-ORG game/O'])
    test = _sentences(['mary/B-PER lives/O in/O new/B-LOC york/I-LOC',
                       'john/B-PER playing/O', 'paris/B-LOC ./O'])
    return e2e_job.prepare(train, test, ['LOC', 'ORG', 'PER'], 'words', hf, converted, lr=1e-3,
                           epochs=2, seed=0, maxlen=16, batch_size=4, batch1_sentences=2)


@pytest.mark.parametrize('head', ['crf', 'softmax'])
def test_end_to_end_sides_see_the_same_batches_and_start_from_the_same_loss(e2e_job, head):
    from e2e_keras import KerasSide
    from e2e_torch import TorchSide
    ours, theirs = (KerasSide(e2e_job, head, 'float32', None),
                    TorchSide(e2e_job, head, 'float32', None))
    batches = e2e_job['epochs'][0] + e2e_job['epochs'][1]
    assert {inputs[0].shape[0] for inputs, _ in batches} == {1, 4}   # 5 windows: 1 + 4
    entities = 0
    for inputs, labels in batches:
        mask, seen = ours.seen(inputs, labels)
        np.testing.assert_array_equal(mask, theirs.seen(inputs, labels)[0])
        np.testing.assert_array_equal(seen, theirs.seen(inputs, labels)[1])
        assert mask.sum() == (inputs[0] > 3).sum()                   # every piece, no special
        entities += (seen[mask] > 0).sum()
        loss = ours.loss(inputs, labels)
        assert loss > 0.1 and abs(loss - theirs.loss(inputs, labels)) < 1e-4
    assert entities == 2 * 9                  # the 9 entity words (one piece each), 2 epochs
    for inputs in e2e_job['predict'][32] + e2e_job['predict'][1]:
        for a, b in zip(ours.predict(inputs), theirs.predict(inputs)):
            np.testing.assert_array_equal(a, b)


def test_end_to_end_scoring_of_gold_paths_is_one_and_of_all_o_zero(e2e_job):
    from crf_lr.model.heads import make_head
    from crf_lr.data.pieces import UnitEncoder
    from crf_lr.training.loop import make_samples
    from e2e_job import test_f1
    test = _sentences(['mary/B-PER lives/O in/O new/B-LOC york/I-LOC',
                       'john/B-PER playing/O', 'paris/B-LOC ./O'])
    assert [e.tokens for e in test] == e2e_job['test_tokens']
    targets = {tuple(ids): target for ids, target in make_samples(
        [(e.tokens, e.tags, e.spans) for e in test],
        UnitEncoder(e2e_job['vocab'], 'words'), 16, make_head('crf', e2e_job['types'], 'BIO'))}
    gold = [[targets[tuple(row[row > 0])] for row in inputs[0]]
            for inputs in e2e_job['predict'][32]]
    assert test_f1(e2e_job, gold) == 1.0
    assert test_f1(e2e_job, [[[0] * len(path) for path in batch] for batch in gold]) == 0.0
    gold[0][0] = [0] * len(gold[0][0])                 # one window's entities lost: 2 of 4 found
    assert 0 < test_f1(e2e_job, gold) < 1


def test_end_to_end_worker_reports_the_median_of_its_prediction_passes(monkeypatch):
    import e2e_worker

    class ScriptedSide:
        """Yields fixed losses and counts its prediction calls."""
        predictions = 0

        def train(self, batches):
            yield from (1.0 for _ in batches)

        def predict(self, inputs):
            self.predictions += 1
            return [np.zeros(3, int)]

    seconds = iter([4.0, 1.0, 2.0, 10.0, 5.0, 20.0])      # 3 passes at batch 32, then at 1
    monkeypatch.setattr(e2e_worker, 'predict_seconds', lambda side, batches: next(seconds))
    job = dict(epochs=[['a'] * 2, ['b'] * 2], predict={32: ['x', 'y'], 1: ['z']},
               predict_sentences={32: 40, 1: 10}, step_batch='s')
    side = ScriptedSide()
    result = e2e_worker.measure(side, job, step_calls=2, predict_passes=3)
    assert result['predict_passes_sentences_per_s'] == {'32': [10.0, 40.0, 20.0],
                                                       '1': [1.0, 2.0, 0.5]}
    assert result['predict_sentences_per_s'] == {'32': 20.0, '1': 1.0}
    assert side.predictions == 2 + 1 + 1           # the F1's pass, one warm call per size
    assert len(result['step_ms']) == 2 and result['epoch_loss'] == [1.0, 1.0]


def test_end_to_end_ratios_pair_each_stack_with_pytorch_in_the_same_round():
    import end_to_end

    def result(stack, seed, step_ms, predict):
        return dict(corpus='conll2003', head='crf', precision='float32', stack=stack, seed=seed,
                    epoch_s=[10.0, 4.0], step_ms=[step_ms], peak_rss_mb=1.0, test_f1=0.5,
                    predict_sentences_per_s={'32': predict, '1': 1.0})
    ok = [result('PyTorch', 0, 100.0, 50.0), result('PyTorch', 1, 200.0, 100.0),
          result('crf_lr train_steps', 1, 100.0, 150.0),       # round 1: 0.5x the time, 1.5x
          result('crf_lr train_steps', 0, 90.0, 60.0)]         # round 0: 0.9x, 1.2x
    lines = end_to_end.ratio_table(ok)
    assert lines[-1].startswith('| conll2003 | crf | float32 | crf_lr train_steps | ')
    cells = lines[-1].strip('| ').split(' | ')[4:]
    assert cells[0] == '0.70 [0.50–0.90]'              # step: median of 0.5 and 0.9
    assert cells[3] == '1.35 [1.20–1.50]'              # prediction at batch 32: throughputs
    assert end_to_end.ratio_table([r for r in ok if r['stack'] != 'PyTorch']) == []


def test_first_shapes_excess_compares_each_epoch_1_step_with_its_shapes_later_median():
    """epochs.py's later_first_shapes_excess_s: step 1 left out, shapes no later epoch ran left
    out, the median of the later steps of a shape as its steady time."""
    from epochs import first_shapes_excess
    timed = [[((4, 9), 5.0), ((4, 7), 0.9), ((3, 8), 0.4), ((4, 9), 0.2)],   # step 1: the trace
             [((4, 7), 0.5), ((4, 9), 0.3), ((4, 7), 0.7)],
             [((4, 9), 0.1), ((4, 7), 0.6)]]
    # (4, 7): 0.9 - median(0.5, 0.7, 0.6); (3, 8) never again; (4, 9): 0.2 - median(0.3, 0.1)
    assert first_shapes_excess(timed) == pytest.approx(0.3 + 0.0)
    assert first_shapes_excess(timed[:1]) is None
