"""Checkpoints a training script saves on its own (no SDK): what ``ckptwatch`` needs, no I/O loop.

- ``recognize``: which files and directories under a watched folder are checkpoints (single
  files, Hugging Face ``checkpoint-*/`` dirs, Lightning names, DeepSpeed shard dirs), with
  the step and epoch they tell;
- ``stability``: the sans-io rule that says when one is complete (size and mtime stable for
  a window, not open for writing by the job);
- ``files``: what a pass reads of a candidate (size, mtime, its files), its fingerprint, the
  full hash, and which files a job's processes hold open for writing.

Everything here only reads: a model file is never opened for writing, moved or rewritten.
"""
