"""The Keras model and what it is made of: encoders (`encoders`, the packaged ones in `pretrained`,
HF checkpoints converted by `convert`, `finetune`), the layers (`crf`, `global_pointer`),
`losses`, `heads`, their shared argument checks (`checks`, learning-rate `multipliers` by
regex), NaN checks (`numerics`), precision (`precision`) and saving: `serialization`,
`autoregister` (load_model finds every crf_lr object).
"""
