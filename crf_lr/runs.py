"""``crf_lr.runs`` was split into :mod:`crf_lr.training.loop`, :mod:`crf_lr.training.run_folder`,
:mod:`crf_lr.serving.model_folder`; this name re-exports their public names (the README's
imports keep working). New code imports from the wing.
"""
from crf_lr.training.loop import *  # noqa: F401,F403
from crf_lr.training.run_folder import *  # noqa: F401,F403
from crf_lr.serving.model_folder import *  # noqa: F401,F403
