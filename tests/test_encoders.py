"""The defaults a user gets without --encoder / --lr (chosen from docs/results.md's runs)."""
from crf_lr.encoders import DEFAULT_LR, default_encoder, default_learning_rate


def test_word_data_gets_the_english_encoder_and_character_data_the_chinese_one():
    assert default_encoder('words') == 'minilm-en'
    assert default_encoder('chars') == 'albert-tiny-zh'


def test_default_rates_per_packaged_encoder_and_for_a_single_layer():
    assert default_learning_rate('albert-tiny-zh') == 2e-4 == DEFAULT_LR['albert-tiny-zh']
    assert default_learning_rate('minilm-en') == 1e-4
    assert default_learning_rate('albert-tiny-zh', layers=1) == 1e-3     # experiment 1's rate
    assert default_learning_rate('some/converted/folder') == 1e-4
