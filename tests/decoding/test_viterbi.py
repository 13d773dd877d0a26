"""Viterbi decoders (NumPy and in-graph) against brute-force enumeration and bert4keras's decoder.

The oracle, ``path_scores`` (tests/helpers/crf_oracles.py), scores every label path of one
sequence with plain Python loops, constraints included.
"""
import numpy as np
import pytest

from crf_lr.decoding.viterbi import viterbi_decode, viterbi_decode_tf
from helpers.crf_oracles import brute_force_paths, path_probabilities, random_case, stable_seed


SHAPES = [(6, 5, 3), (5, 4, 4), (6, 6, 2), (3, 1, 5)]


@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('boundary', [False, True])
@pytest.mark.parametrize('constrained', [False, True])
def test_numpy_and_graph_decoders_equal_brute_force(shape, boundary, constrained):
    rng = np.random.default_rng(hash((shape, boundary, constrained)) % 2**32)
    case = random_case(rng, *shape, boundary=boundary, constrained=constrained)
    expected = brute_force_paths(case)
    decoded = viterbi_decode(**case)
    assert [tuple(p) for p in decoded] == expected
    assert all(p.dtype == np.int64 for p in decoded)
    in_graph = viterbi_decode_tf(**case).numpy()
    for b, path in enumerate(expected):
        assert in_graph[b].tolist() == list(path) + [-1] * (shape[1] - len(path))


@pytest.mark.parametrize('shape', [(5, 4, 3), (4, 3, 4), (3, 1, 5)])
@pytest.mark.parametrize('constrained', [False, True])
def test_top_k_paths_and_probabilities_equal_brute_force(shape, constrained):
    rng = np.random.default_rng(stable_seed(shape, constrained, 'top_k'))
    case = random_case(rng, *shape, boundary=True, constrained=constrained)
    k = 7
    found = viterbi_decode(**case, top_k=k)
    best = viterbi_decode(**case)
    for row, length in enumerate(case['lengths']):
        if length == 0:
            assert [(len(p), q) for p, q in found[row]] == [(0, 1.0)]
            continue
        table = path_probabilities(case, row)
        expected = sorted(table.items(), key=lambda item: -item[1])[:k]
        assert len(found[row]) == min(k, len(table))
        assert tuple(found[row][0][0]) == tuple(best[row])
        # the k best probabilities, each that of its path (ties: disallowed paths, all ~0)
        assert len({tuple(path) for path, _ in found[row]}) == len(found[row])
        for (path, p), (_, expected_p) in zip(found[row], expected):
            assert path.dtype == np.int64
            np.testing.assert_allclose([p, p], [table[tuple(path)], expected_p], rtol=1e-9,
                                       atol=1e-12)
    with pytest.raises(ValueError, match='top_k must be an int >= 1'):
        viterbi_decode(**case, top_k=0)


def test_constrained_paths_are_legal():
    rng = np.random.default_rng(1)
    case = random_case(rng, 6, 6, 4, boundary=True, constrained=True)
    for path in viterbi_decode(**case):
        if len(path):
            assert case['allowed_starts'][path[0]] and case['allowed_ends'][path[-1]]
            assert case['allowed_transitions'][path[:-1], path[1:]].all()


def test_constraints_leave_the_caller_s_arrays_unchanged():
    """The constraints apply to copies: float64 transitions, start and end scores passed in are
    not set to -1e4 where disallowed (they were, in place, before 2026-11-26)."""
    rng = np.random.default_rng(2)
    case = random_case(rng, 3, 4, 4, boundary=True, constrained=True)
    before = {name: case[name].copy() for name in ('emissions', 'transitions', 'start', 'end')}
    viterbi_decode(**case)
    for name, array in before.items():
        np.testing.assert_array_equal(case[name], array, err_msg=name)


def test_mask_lengths_and_no_padding_information_agree():
    rng = np.random.default_rng(2)
    case = random_case(rng, 6, 7, 3, boundary=True)
    lengths = case.pop('lengths')
    mask = np.arange(7) < lengths[:, None]
    by_lengths = viterbi_decode(lengths=lengths, **case)
    by_mask = viterbi_decode(mask=mask, **case)
    assert all((a == b).all() for a, b in zip(by_lengths, by_mask))
    assert (viterbi_decode_tf(mask=mask, **case).numpy()
            == viterbi_decode_tf(lengths=lengths, **case).numpy()).all()
    # without lengths or mask every position counts
    full = viterbi_decode(**case)
    assert [len(p) for p in full] == [7] * 6
    assert [tuple(p) for p in full] == brute_force_paths(dict(case, lengths=np.full(6, 7)))


def test_equals_bert4keras_viterbi_decoder_with_starts_and_ends():
    from bert4keras.snippets import ViterbiDecoder
    rng = np.random.default_rng(3)
    case = random_case(rng, 8, 9, 5, constrained=True)
    del case['allowed_transitions']           # bert4keras constrains starts and ends only
    peer = ViterbiDecoder(case['transitions'], starts=np.nonzero(case['allowed_starts'])[0],
                          ends=np.nonzero(case['allowed_ends'])[0])
    ours = viterbi_decode(**case)
    for b, length in enumerate(case['lengths']):
        if length:
            assert (peer.decode(case['emissions'][b, :length].copy()) == ours[b]).all()


def test_graph_decoder_in_tf_function_with_unknown_shapes_and_saved_model(tmp_path):
    import tensorflow as tf
    rng = np.random.default_rng(4)
    case = random_case(rng, 5, 6, 3, boundary=True, constrained=True)

    class Decoder(tf.Module):
        def __init__(self):
            super().__init__()
            self.transitions = tf.Variable(case['transitions'], dtype=tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32),
                                      tf.TensorSpec([None], tf.int32)])
        def __call__(self, emissions, lengths):
            return viterbi_decode_tf(emissions, self.transitions, lengths=lengths,
                                     start=case['start'], end=case['end'],
                                     allowed_transitions=case['allowed_transitions'],
                                     allowed_starts=case['allowed_starts'],
                                     allowed_ends=case['allowed_ends'])
    tf.saved_model.save(Decoder(), str(tmp_path / 'decoder'))
    reloaded = tf.saved_model.load(str(tmp_path / 'decoder'))
    got = reloaded(tf.constant(case['emissions'], tf.float32),
                   tf.constant(case['lengths'], tf.int32)).numpy()
    for b, path in enumerate(brute_force_paths(case)):
        assert got[b].tolist() == list(path) + [-1] * (6 - len(path))


def test_validation_messages():
    emissions, transitions = np.zeros((2, 3, 4)), np.zeros((4, 4))
    with pytest.raises(ValueError, match='left-aligned'):
        viterbi_decode(emissions, transitions, mask=[[1, 0, 1], [1, 1, 0]])
    with pytest.raises(TypeError, match='boolean mask'):
        viterbi_decode(emissions, transitions, allowed_starts=[0, 1, 1, 1])
    with pytest.raises(ValueError, match=r'allowed_transitions must have shape \(4, 4\)'):
        viterbi_decode(emissions, transitions, allowed_transitions=np.ones((3, 3), bool))
    with pytest.raises(ValueError, match='emissions have 4 labels'):
        viterbi_decode(emissions, np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r'lengths must lie in \[0, 3\]'):
        viterbi_decode(emissions, transitions, lengths=[4, 1])
    with pytest.raises(ValueError, match='lengths or mask, not both'):
        viterbi_decode(emissions, transitions, lengths=[1, 1], mask=np.ones((2, 3)))
    with pytest.raises(ValueError, match=r'start must have shape \(4,\)'):
        viterbi_decode_tf(emissions, transitions, start=np.zeros(3))


def test_empty_batches_and_zero_length_sequences():
    transitions = np.zeros((3, 3))
    for shape in [(2, 0, 3), (0, 4, 3)]:
        emissions = np.zeros(shape)
        assert [len(p) for p in viterbi_decode(emissions, transitions)] == [shape[1]] * shape[0]
        assert viterbi_decode_tf(emissions, transitions).shape == shape[:2]
