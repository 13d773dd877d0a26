"""The learning rates a user gets without --lr (chosen from docs/results.md's runs); the encoder
chosen without --encoder is tested in test_first_try.py."""
from crf_lr.model.encoders import DEFAULT_LR, default_learning_rate


def test_default_rates_per_packaged_encoder_and_for_a_single_layer():
    assert default_learning_rate('albert-tiny-zh') == 2e-4 == DEFAULT_LR['albert-tiny-zh']
    assert default_learning_rate('minilm-en') == 1e-4
    assert default_learning_rate('albert-tiny-zh', layers=1) == 1e-3     # experiment 1's rate
    assert default_learning_rate('some/converted/folder') == 1e-4
