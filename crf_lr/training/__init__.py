"""Training a model: the optimizer (`optimizers`), the run folder (`run_folder`), samples, the
resumable fit loop and its traced step (`loop`), distribution strategies (`distribute`), the
task scripts' model (`task_model`). Nothing under serving/ imports this wing.
"""
